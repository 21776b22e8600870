"""Builds a model set from a teacher and distilled students: each language goes to a student only where FLORES-200
says the student beats the teacher (issue #50; Tatoeba v1 is only reported, never chosen on).

    python training/student_set.py --teacher src/hf_laser/models/laser-mini --student runs/distill-multi7 \
        --out runs/set-multi7 [--half] [--tatoeba-dir ../shared/data/tatoeba/v1]

Every `--student RUN` is a distillation run's `--output-dir` (its `final/` and `config.yaml`); its source languages
are its candidates. For each candidate language with a FLORES-200 file (the run's `validation.path`), the teacher
alone and each student (the student embeds the language, the teacher English, as the set will) are measured as the
run's validation measures (nearest neighbour by cosine, xx→en and en→xx, averaged: `report.model_flores_misses`);
the language goes to the student with the lowest error if its gain over the teacher is beyond FLORES' sampling
noise (a paired bootstrap over the sentences, `evaluation.significance`: the one-sided `--confidence` lower bound of
the gain above 0), else stays with the teacher. A language without FLORES data (Breton) has nothing to choose on
and stays with the teacher: the selection table says so. The set directory gets `laser_model_set.json` (the
teacher by relative path as its default), a copy of each chosen student (`--half`: float16 weights, computed in
float32, as laser-mini ships; with its run's config as `training_config.yaml`), `selection.json`, and `README.md`,
the set's card with the selection table. With `--tatoeba-dir`, every Tatoeba v1 language is evaluated
through the set and with the teacher alone (a language the set routes to the teacher is that very model, so it is
embedded once and the figure is shared), and the means over all languages are written beside the selection.
`--max-megabytes N` bounds the students' copies together (a set that ships inside the package's wheel): while the
chosen ones exceed it, the routing is that of the subset of students whose chosen ones fit with the lowest FLORES
error summed over the languages (every subset is tried; still chosen on FLORES alone).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `training`, `evaluation` (and `hf_laser`) importable
    sys.path.insert(0, str(REPO))
    sys.path.append(str(REPO / "src"))

import yaml  # noqa: E402


def student_runs(runs: list[Path]) -> dict[Path, list[str]]:
    """`{run: its source languages}`, each run checked to be a finished distillation run."""
    out = {}
    for run in runs:
        config_path = run / "config.yaml"
        if not config_path.is_file() or not (run / "final" / "config.json").is_file():
            raise FileNotFoundError(f"{run} is not a finished training run (no config.yaml or final/config.json)")
        config = yaml.safe_load(config_path.read_text())
        if config["training"].get("objective") != "distillation":
            raise ValueError(f"{run} is not a distillation run (objective: {config['training'].get('objective')})")
        out[run] = list(config["data"]["source_languages"])
    return out


def flores_folder(runs: list[Path]) -> Path:
    """The validation folder the runs used (one for all, so that their errors compare)."""
    folders = set()
    for run in runs:
        path = Path(yaml.safe_load((run / "config.yaml").read_text())["validation"]["path"])
        folders.add((path if path.is_absolute() else REPO / path).resolve())
    if len(folders) != 1:
        raise ValueError(f"the students were validated on different folders: {sorted(map(str, folders))}")
    return folders.pop()


# the one-sided confidence with which a student's FLORES gain must exceed zero to route a language to it (fixed
# before the sets it chooses were evaluated on Tatoeba v1)
CONFIDENCE = 0.95

# corpus codes that name no single FLORES-200 language: `ku` names two (the corpora's and FLORES' `ku` are
# Kurmanji in Latin script), Breton is outside FLORES-200
CORPUS_KEYS = {"ku": "kmr_Latn", "br": "bre_Latn"}


def student_key(lang: str) -> str:
    """The set's key of a corpus code: `ta` → `tam_Taml`, `ku` → `kmr_Latn`, `br` → `bre_Latn`."""
    from hf_laser.text.languages import student_code

    return CORPUS_KEYS.get(lang) or student_code(lang)


def measure_flores(teacher: Path, runs: dict[Path, list[str]], folder: Path, *, english: str = "en",
                   confidence: float = CONFIDENCE) -> dict:
    """`{lang: {"teacher": %, "students": {run: %}, "significance": {run: paired_bootstrap(teacher, student)}}}` on
    the languages of `folder` among the runs' languages."""
    from evaluation.significance import paired_bootstrap
    from hf_laser import LaserEncoder
    from hf_laser.model_set import RoutedLaserEncoder
    from training.report import model_flores_misses

    langs = sorted({lang for langs in runs.values() for lang in langs if (folder / f"{lang}.txt").is_file()})
    table = {lang: {"teacher": None, "students": {}, "significance": {}} for lang in langs}
    if not langs:
        return table
    print(f"student_set: FLORES-200 of {len(langs)} languages with the teacher alone ({teacher})", flush=True)
    alone = model_flores_misses(LaserEncoder.from_pretrained(teacher), folder, langs + [english], [english])
    for lang in table:
        table[lang]["teacher"] = round(100 * float(alone[lang].mean()), 2)
    for run, run_langs in runs.items():
        mine = [lang for lang in langs if lang in run_langs]
        print(f"student_set: FLORES-200 of {len(mine)} languages through {run}", flush=True)
        routed = RoutedLaserEncoder(teacher, {student_key(lang): run / "final" for lang in mine},
                                    LaserEncoder.from_pretrained, name=f"{teacher} + {run}")
        for lang, misses in model_flores_misses(routed, folder, mine + [english], [english]).items():
            if lang in table:
                table[lang]["students"][str(run)] = round(100 * float(misses.mean()), 2)
                table[lang]["significance"][str(run)] = paired_bootstrap(alone[lang], misses, confidence=confidence)
    return table


def _route(runs: dict[Path, list[str]], flores: dict, allowed: set) -> dict[str, dict]:
    """The rule without a budget, among the `allowed` runs only."""
    out = {}
    for lang in sorted({lang for langs in runs.values() for lang in langs}):
        row = flores.get(lang)
        if row is None or row["teacher"] is None or not row["students"]:
            out[lang] = {"student": None, "why": "no FLORES-200 data to choose on: stays with the teacher"}
            continue
        errors = {run: error for run, error in row["students"].items() if run in allowed}
        if not errors:
            out[lang] = {"student": None, "why": f"stays with the teacher (FLORES {row['teacher']:.2f} %)"}
            continue
        run, error = min(errors.items(), key=lambda item: item[1])
        test = row["significance"][run]
        bound = f"{test['confidence']:.0%} lower bound of the gain {test['lower']:+.2f}"
        if test["lower"] > 0:
            out[lang] = {"student": run, "why": f"FLORES {row['teacher']:.2f} -> {error:.2f} % ({bound})"}
        else:
            out[lang] = {"student": None, "why": f"the student's FLORES {error:.2f} % vs the teacher's "
                                                 f"{row['teacher']:.2f} %: no gain beyond noise ({bound})"}
    return out


def flores_error(flores: dict, lang: str, student: str | None) -> float:
    row = flores[lang]
    return row["students"][student] if student else row["teacher"]


# the most candidate students a size budget chooses among (every subset is tried: 2 ** 16 routings)
MAX_BUDGET_CANDIDATES = 16


def choose(runs: dict[Path, list[str]], flores: dict, *, sizes: dict | None = None,
           budget: float | None = None) -> dict[str, dict]:
    """`{lang: {"student": run or None, "why": ...}}` for every candidate language: the student with the lowest FLORES
    error when its gain over the teacher is beyond FLORES' sampling noise (the paired bootstrap's one-sided lower
    bound above 0: a gain of a few sentences out of 1,012 routes nothing); the teacher where it is not, or where
    there is no FLORES data.

    With a `budget` (bytes) and the `sizes` of the runs' copies, when the students so chosen exceed it, the routing
    is that of the subset of students, among every subset whose chosen students fit, with the lowest FLORES error
    summed over the languages (ties: the smaller set); a language whose student was left out says so."""
    everyone = {str(run) for run in runs}
    chosen = _route(runs, flores, everyone)
    def used(rows):
        return {row["student"] for row in rows.values() if row["student"]}
    def size(rows):
        return sum(sizes[run] for run in used(rows))
    if budget is None or size(chosen) <= budget:
        return chosen
    if len(everyone) > MAX_BUDGET_CANDIDATES:
        raise ValueError(f"a size budget chooses among at most {MAX_BUDGET_CANDIDATES} students (every subset is "
                         f"tried), not {len(everyone)}: pass fewer --student runs")
    from itertools import combinations

    def total(rows):
        return sum(flores_error(flores, lang, row["student"]) for lang, row in rows.items() if lang in flores
                   and flores[lang]["teacher"] is not None)
    best = None
    for k in range(len(everyone) + 1):
        for subset in combinations(sorted(everyone), k):
            rows = _route(runs, flores, set(subset))
            if size(rows) <= budget:
                key = (round(total(rows), 6), size(rows))
                if best is None or key < best[0]:
                    best = (key, rows)
    within = best[1]
    for run in sorted(used(chosen) - used(within)):
        for lang, row in within.items():
            if chosen[lang]["student"] == run:
                row["why"] += (f"; {Path(run).name} (FLORES {flores_error(flores, lang, run):.2f} %) left out for the "
                               f"{budget / 1e6:g} MB budget ({sizes[run] / 1e6:.1f} MB)")
    return within


def copy_student(run: Path, dest: Path, *, half: bool) -> None:
    """The set's copy of a run's exported student (`--half`: float16 weights) with its run's config."""
    from training.export_default_model import save_half

    if dest.exists():
        shutil.rmtree(dest)
    if half:
        dest.mkdir(parents=True)
        save_half(run, dest)
    else:
        shutil.copytree(run / "final", dest)
    shutil.copy(run / "config.yaml", dest / "training_config.yaml")  # how it was made


def copy_sizes(runs, *, half: bool) -> dict[str, int]:
    """`{run: bytes of its copy in a set}`, measured by writing each copy into a temporary folder."""
    import tempfile

    sizes = {}
    with tempfile.TemporaryDirectory() as scratch:
        for run in runs:
            dest = Path(scratch) / Path(run).name
            copy_student(Path(run), dest, half=half)
            sizes[str(run)] = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    return sizes


def write_set(out: Path, teacher: Path, chosen: dict[str, dict], *, half: bool) -> dict[str, Path]:
    """Copies the chosen students into `out` (one directory per run, named by the run) and writes the set file;
    returns `{set key: student directory}`."""
    from hf_laser.model_set import SET_FILE, read_model_set, write_model_set

    runs = {Path(row["student"]).name for row in chosen.values() if row["student"]}
    if (out / SET_FILE).is_file():  # a member of the set this one replaces that is no member now goes with it
        for old in sorted(set(read_model_set(out)[1].values())):
            if old.parent.resolve() == out.resolve() and old.name not in runs and old.is_dir():
                print(f"student_set: removing {old} (a student of the set it replaces, not of this one)")
                shutil.rmtree(old)
    copies: dict[str, Path] = {}
    for run in sorted({row["student"] for row in chosen.values() if row["student"]}):
        copies[run] = out / Path(run).name
        copy_student(Path(run), copies[run], half=half)
    students = {student_key(lang): copies[row["student"]] for lang, row in chosen.items() if row["student"]}
    write_model_set(out, default=teacher, students=students)
    return students


def tatoeba_through_set(out: Path, teacher: Path, folder: Path, cache_dir: Path | None = None,
                        use_cache: bool = True) -> dict:
    """Tatoeba errors of every language in `folder`, through the set and with the teacher alone: `{"teacher": {...},
    "set": {...}, "member": {lang: "default" or set key}}` (each as `evaluate_tatoeba` returns, with "average").
    Embeddings go through the evaluation cache (`cache_dir`; keyed by the model of each language, so a second set
    or teacher never reuses another's)."""
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import TATOEBA_LANGS, available_languages, average_errors, evaluate_tatoeba
    from hf_laser import LaserEncoder
    from hf_laser.model_set import RoutedLaserEncoder

    routed = RoutedLaserEncoder.from_pretrained(out, LaserEncoder.from_pretrained)
    langs = [lang for lang in available_languages(folder) if lang != "eng"]
    member = {lang: routed.route(TATOEBA_LANGS.get(lang, lang)) for lang in langs}
    quiet = {"show_progress": True, "log": lambda *_: None}  # one bar over the languages
    def cache(encoder):
        return EmbeddingCache(encoder, cache_dir, enabled=use_cache, show_progress=False)

    alone = evaluate_tatoeba(cache(LaserEncoder.from_pretrained(teacher)), langs, folder=folder, **quiet)
    students = [lang for lang in langs if member[lang] != "default"]
    through = evaluate_tatoeba(cache(routed), students, folder=folder, **quiet) if students else {}
    per_set = {lang: (through[lang] if member[lang] != "default" else alone[lang]) for lang in langs}
    return {"teacher": {**{lang: alone[lang] for lang in langs}, "average": average_errors(
                {lang: alone[lang] for lang in langs})},
            "set": {**per_set, "average": average_errors(per_set)}, "member": member}


def markdown(teacher: Path, flores: dict, chosen: dict, tatoeba: dict | None) -> str:
    lines = [f"Default model: `{teacher.name}`. Students chosen on FLORES-200 devtest (xx↔en error, %, the student "
             "embedding the language and the teacher English); Tatoeba v1 only reported.", "",
             "| language | set key | encoder | FLORES teacher | FLORES student | why |", "|---|---|---|---|---|---|"]
    for lang, row in chosen.items():
        f = flores.get(lang, {})
        best = (f["students"][row["student"]] if row["student"]
                else min(f.get("students", {}).values(), default=None))
        lines.append(f"| {lang} | {student_key(lang)} | {Path(row['student']).name if row['student'] else 'teacher'} "
                     f"| {f.get('teacher', '')} | {'' if best is None else best} | {row['why']} |")
    tests = [test for f in flores.values() for test in f.get("significance", {}).values()]
    if tests:
        lines += ["", f"A student takes a language only where its FLORES gain is beyond sampling noise: a paired "
                  f"bootstrap over the {tests[0]['sentences']:,} sentences ({tests[0]['resamples']:,} draws, "
                  "`evaluation/significance.py`) puts the one-sided "
                  f"{tests[0]['confidence']:.0%} lower bound of the gain above 0."]
    if tatoeba:
        lines += ["", "Tatoeba v1, every language through its routed encoder (error %, xx→en / en→xx):", "",
                  "| language | encoder | teacher alone | through the set |", "|---|---|---|---|"]
        for lang, member in tatoeba["member"].items():
            a, s = tatoeba["teacher"][lang], tatoeba["set"][lang]
            lines.append(f"| {lang} | {'teacher' if member == 'default' else member} | {a['xx2en_error']:.2f} / "
                         f"{a['en2xx_error']:.2f} | {s['xx2en_error']:.2f} / {s['en2xx_error']:.2f} |")
        a, s = tatoeba["teacher"]["average"], tatoeba["set"]["average"]
        lines.append(f"| **mean of {len(tatoeba['member'])}** | | {a['xx2en_error']:.2f} / {a['en2xx_error']:.2f} | "
                     f"{s['xx2en_error']:.2f} / {s['en2xx_error']:.2f} |")
        worse = [lang for lang, member in tatoeba["member"].items() if member != "default" and any(
            tatoeba["set"][lang][k] > tatoeba["teacher"][lang][k] for k in ("xx2en_error", "en2xx_error"))]
        lines += ["", f"Worse on Tatoeba v1 than the teacher alone in at least one direction: {', '.join(worse)}."
                  if worse else "No routed language is worse on Tatoeba v1 than the teacher alone."]
    return "\n".join(lines) + "\n"


def trained(run: Path) -> str:
    """One line on how a student was made: its run's exported step, validation error and minutes."""
    from training.report import read_metrics

    best = min((r for r in read_metrics(run) if "valid_error" in r), key=lambda r: r["valid_error"])
    config = yaml.safe_load((run / "config.yaml").read_text())
    sources = config["data"]["source_languages"]
    what, error = ((f"source language {sources[0]}", "FLORES-200 error") if len(sources) == 1
                   else (f"{len(sources)} source languages", "FLORES-200 mean over its languages"))
    return (f"`{run.name}`: `training/train.py`, objective distillation, {what}, targets "
            f"{', '.join(config['data']['target_languages'])}; exported at step {best['step']:,} ({error} "
            f"{best['valid_error']:.2f} %, after {best.get('minutes', 0):.0f} minutes of training, all launches "
            f"together); its training config, as its last launch had it: `{run.name}/training_config.yaml`.")


def card(out: Path, teacher: Path, chosen: dict, selection: str, command: str) -> str:
    """The set's `README.md`: what routes where, its size, how to use it, the selection and how it was made (a set
    the package ships is loaded by its name)."""
    from hf_laser.models import SHIPPED_MODELS

    routed = sorted(student_key(lang) for lang, row in chosen.items() if row["student"])
    students = sorted({Path(row["student"]).name for row in chosen.values() if row["student"]})
    runs = sorted({Path(row["student"]) for row in chosen.values() if row["student"]})
    size = sum(f.stat().st_size for name in students for f in (out / name).rglob("*") if f.is_file())
    return f"""# {out.name}

A LASER model set: `{teacher.name}` embeds every language except the {len(routed)} below, which go to the distilled
student{'s' if len(students) > 1 else ''} {', '.join(f'`{name}`' for name in students) or '(none)'} because
{'they beat' if len(students) > 1 else 'it beats'} the teacher on FLORES-200 devtest: {', '.join(routed) or 'none'}.
The students' files take {size / 1e6:.1f} MB beside the teacher's. A set routes each sentence by the language it is
given (`lang=`, one code for all or one per sentence) and refuses `lang=None` or `"auto"` rather than guess a
student from a language detector's mistake.

```python
from hf_laser import LaserEncoder
encoder = LaserEncoder.from_pretrained("{out.name if out.name in SHIPPED_MODELS else 'path/to/' + out.name}")
vectors = encoder.encode(["Sentence one.", "Sentence two."], lang="en")
```

## Students

{chr(10).join('- ' + trained(run) for run in runs) or 'none'}

## Selection

{selection}
Made with `{command}` (hf_laser's `training/student_set.py`).
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", required=True, type=Path, help="the default model of the set (the teacher)")
    parser.add_argument("--student", required=True, type=Path, action="append",
                        help="a distillation run's --output-dir (repeat for several)")
    parser.add_argument("--out", required=True, type=Path, help="the set directory to write")
    parser.add_argument("--half", action="store_true", help="store the students' weights in float16")
    parser.add_argument("--tatoeba-dir", type=Path, help="also report Tatoeba v1 through the set (never chosen on)")
    parser.add_argument("--cache-dir", type=Path, help="the evaluation cache of the Tatoeba embeddings (default: "
                                                       "evaluation.cache's)")
    parser.add_argument("--no-cache", action="store_true", help="embed Tatoeba again, keep nothing")
    parser.add_argument("--max-megabytes", type=float,
                        help="the most the students' copies may take together (MB): over it, the subset of "
                             "students that fits with the lowest FLORES error summed over the languages is chosen")
    parser.add_argument("--confidence", type=float, default=CONFIDENCE,
                        help="route a language to a student only where the paired bootstrap's one-sided lower bound "
                             f"of its FLORES gain at this confidence is above 0 (default {CONFIDENCE})")
    args = parser.parse_args(argv)
    if args.max_megabytes is not None and args.max_megabytes < 0:
        parser.error(f"--max-megabytes must be 0 or more (0: the teacher alone), not {args.max_megabytes:g}")
    if not (args.teacher / "config.json").is_file():
        parser.error(f"--teacher {args.teacher} is not a model directory (no config.json)")
    runs = student_runs(args.student)
    flores = measure_flores(args.teacher, runs, flores_folder(list(runs)), confidence=args.confidence)
    sizes = copy_sizes(runs, half=args.half) if args.max_megabytes is not None else None
    chosen = choose(runs, flores, sizes=sizes, budget=None if sizes is None else args.max_megabytes * 1e6)
    args.out.mkdir(parents=True, exist_ok=True)
    write_set(args.out, args.teacher, chosen, half=args.half)
    tatoeba = tatoeba_through_set(args.out, args.teacher, args.tatoeba_dir, args.cache_dir,
                                  not args.no_cache) if args.tatoeba_dir else None
    report = {"teacher": str(args.teacher), "students": [str(r) for r in runs], "flores": flores, "chosen": chosen,
              "max_megabytes": args.max_megabytes, "sizes": sizes, "tatoeba": tatoeba}
    (args.out / "selection.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    text = markdown(args.teacher, flores, chosen, tatoeba)
    command = "python training/student_set.py " + " ".join(sys.argv[1:] if argv is None else argv)
    (args.out / "README.md").write_text(card(args.out, args.teacher, chosen, text, command), encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
