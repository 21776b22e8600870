"""Per-language report of a training run: FLORES-200 and Tatoeba similarity-search errors, trained vs untrained.

    python training/report.py --run OUT [--tatoeba-dir ../shared/data/tatoeba/v1] [--device cuda]

- FLORES-200 devtest (or whatever `validation.path` the run used): the run's own validation figures from
  `OUT/metrics.jsonl`, at step 0 (the untrained encoder) and at the step of the exported encoder (`OUT/final`); for
  a run that did not validate (`training.eval_every: 0`, e.g. a GPU session's), `--validation-of RUN` measures both
  encoders here on the validation languages, sets and sentences of RUN, a run that did (the one it continued).
- Tatoeba: `OUT/untrained` (saved by `train.py` at step 0) and `OUT/final` embed every Tatoeba language whose
  preprocessing language is one of the run's source languages; error of nearest-neighbour search by cosine, xx→en
  and en→xx, in percent (the paper's measure, `evaluation/tatoeba.py`).

Options: `--tatoeba-langs all` evaluates all 112 Tatoeba v1 languages (`focus`: the 12 of `FOCUS`; default `run`:
those of the run's source languages); `--bucc-dir ../shared/data/mining` adds BUCC-style mining F1 (de/fr/ru/zh-en:
threshold optimised on the `training` split, F1 on `sample`) for both encoders; `--curve` adds a table of FLORES and
Tatoeba (the 12 languages of `FOCUS`) errors against training minutes, one row per encoder snapshot
(`training.snapshot_encoders`), with the run's held-out validation error (`valid_extra_error`) where it has one;
`--baseline DIR` adds the FLORES and held-out errors (measured as the run's validation, on its languages and sets),
the Tatoeba and the BUCC errors of another encoder, e.g. the model shipped before, as a third column; `--plot`
writes `tatoeba.png` (error per language, sorted). The held-out validation sets of the run
(`validation.extra_path`), if any, get a table of their own.

A full report embeds a lot (all of Tatoeba and BUCC with three encoders: 57 minutes on 2 CPU cores for lever H),
so every finished measurement is kept in `OUT/report_parts/` and an interrupted report resumes where it stopped. A
kept measurement is reused only when what it measured is unchanged (`MeasurementStore`: the bytes of every file of
the model directory and of the data read, the measuring code, the arguments, the versions of torch and of the
libraries that can change a figure, and the device), and
each reuse is printed; `--fresh` measures everything again.

Writes `OUT/report.json` and `OUT/report.md`, and prints the Markdown.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `evaluation` (and, if not installed, `hf_laser`) importable
    sys.path.insert(0, str(REPO))
    sys.path.append(str(REPO / "src"))


# High-resource European languages of the laser-mini target (mean Tatoeba error, both directions)
FOCUS = ["deu", "fra", "spa", "ita", "por", "nld", "pol", "ces", "rus", "tur", "fin", "swe"]
BUCC_PAIRS = ["de-en", "fr-en", "ru-en", "zh-en"]
# a language whose xx→en error is at least this (%) is listed as one the encoder is useless for
USELESS_ERROR = 90.0


def base_language(code: str) -> str:
    """`zh_Hans` → `zh`, `pt_BR` → `pt`: the preprocessing language of a corpus code."""
    return code.split("_")[0]


def files_sha256(paths) -> dict[str, str]:
    """`{path: sha256 of its bytes}` of files and of every file under directories (sorted, recursively)."""
    digests = {}
    for path in map(Path, paths):
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                h = hashlib.sha256()
                with f.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                digests[str(f)] = h.hexdigest()
    return digests


def code_sha256() -> str:
    """One digest of the code a measurement runs: the `hf_laser` package (tokenization, model, encoder), the
    `evaluation` package, and `training/train.py` (its `similarity_misses`)."""
    import hf_laser

    sources = [*sorted(Path(hf_laser.__file__).parent.rglob("*.py")), *sorted((REPO / "evaluation").rglob("*.py")),
               REPO / "training" / "train.py"]
    h = hashlib.sha256()
    for f in sources:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


# libraries whose version can change a figure: tokenization (jieba, MeCab), the tokenizer classes, kNN search
MEASURED_WITH = ["numpy", "transformers", "tokenizers", "jieba", "mecab-python3", "ipadic", "faiss-cpu", "faiss-gpu"]


def package_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in MEASURED_WITH:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


class MeasurementStore:
    """The finished measurements of a report (`OUT/report_parts/NAME.json`), so that an interrupted report resumes.

    `measure(name, function, kwargs, models=[...], data=[...])` returns the kept result of `name` when everything that
    decided it is unchanged: the bytes of every file of the model directories and of the data files or folders, the
    code (`code_sha256` plus `function`'s own source), `kwargs`, the versions of torch and of `MEASURED_WITH`, and the
    device; otherwise (or with
    `enabled=False`) it returns `function(**kwargs)` and keeps it with that record. Each reuse is logged, and so is
    the reason a kept measurement is not reused."""

    def __init__(self, folder: Path, *, device: str | None, enabled: bool = True, log=print):
        self.folder, self.device, self.enabled, self.log = Path(folder), device, enabled, log
        self._code = None

    def _identity(self, function, kwargs, models, data) -> dict:
        import torch

        if self._code is None:
            self._code = code_sha256()
        args = {k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}
        return {"models": files_sha256(models), "data": files_sha256(data), "args": args,
                "code": self._code, "measure": hashlib.sha256(inspect.getsource(function).encode()).hexdigest(),
                "torch": torch.__version__, "packages": package_versions(), "device": self.device or "cpu"}

    def measure(self, name: str, function, kwargs: dict, *, models=(), data=()):
        identity = self._identity(function, kwargs, [Path(m) for m in models], [Path(d) for d in data])
        path = self.folder / f"{name}.json"
        if self.enabled and path.is_file():
            kept = json.loads(path.read_text())
            if kept.get("identity") == identity:
                self.log(f"[report] {name}: reusing the measurement of {kept['measured_at']} ({path}; same model "
                         "files, data, code and arguments)")
                return kept["result"]
            changed = sorted(k for k in identity if kept.get("identity", {}).get(k) != identity[k])
            self.log(f"[report] {name}: measuring again ({', '.join(changed)} changed since {path} was kept)")
        result = function(**kwargs)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"identity": identity, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                   "result": result}, indent=1))
        tmp.replace(path)
        return result


def read_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {run} the --output-dir of a training run?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def flores_errors(rows: list[dict], step: int) -> dict[str, float]:
    """`{lang: error %}` of the validation at `step` (empty when the run did not validate then)."""
    for row in rows:
        if row["step"] == step and "valid_error" in row:
            return {k.removeprefix("valid_error_"): v for k, v in row.items()
                    if k.startswith("valid_error_")}
    return {}


def model_flores_errors(encoder, folder: Path, langs: list[str] | None, targets: list[str], *,
                        max_sentences: int | None = None, pretokenized: bool = False) -> dict[str, float]:
    """`{lang: error %}` of a `LaserEncoder` on a multi-parallel folder, measured as the run's validation does
    (`train.validate`: nearest neighbour by cosine, both directions against each target language, averaged), so
    that another model (`--baseline`) is compared on exactly the run's languages and sentences."""
    return {lang: 100 * float(misses.mean()) for lang, misses in model_flores_misses(
        encoder, folder, langs, targets, max_sentences=max_sentences, pretokenized=pretokenized).items()}


def model_flores_misses(encoder, folder: Path, langs: list[str] | None, targets: list[str], *,
                        max_sentences: int | None = None, pretokenized: bool = False) -> dict:
    """`{lang: (n,) float64}`: for each sentence of a multi-parallel folder, the fraction of its searches that miss
    (both directions against each target language); its mean is `model_flores_errors`' figure / 100, and two
    models' arrays pair sentence by sentence (`evaluation.significance.paired_bootstrap`)."""
    import torch

    from evaluation.cache import EmbeddingCache
    from evaluation.xsim import embed_languages, load_multiparallel
    from training.common import similarity_misses

    data = load_multiparallel(folder, langs, max_sentences=max_sentences, log=lambda *_: None)
    cache = EmbeddingCache(encoder, enabled=False, show_progress=False)
    emb = dict(zip(data.languages, torch.from_numpy(embed_languages(cache, data, pretokenized=pretokenized,
                                                                    show_progress=False))))
    misses = {}
    for lang in data.languages:
        others = [t for t in targets if t in emb and t != lang]
        if others:
            misses[lang] = sum(similarity_misses(emb[lang], emb[t]).double() + similarity_misses(emb[t], emb[lang])
                               .double() for t in others).numpy() / (2 * len(others))
    return misses


def held_out_errors(rows: list[dict], step: int) -> dict[str, float]:
    """`{set: error %}` of the extra validation sets (`validation.extra_path`, e.g. the held-out Tatoeba pairs of
    training/split_tatoeba.py) at `step`."""
    for row in rows:
        if row["step"] == step and "valid_extra_error" in row:
            return {k.removeprefix("valid_extra_error_"): v for k, v in row.items()
                    if k.startswith("valid_extra_error_")}
    return {}


def model_held_out_errors(encoder, folder: Path, sets: list[str], targets: list[str],
                          max_sentences: int | None = None) -> dict[str, float]:
    """`{set: error %}` of a `LaserEncoder` on the extra validation sets, measured as `train.validate_extra` does
    (the mean over each set's non-target languages of `model_flores_errors`)."""
    out = {}
    for name in sets:
        errors = model_flores_errors(encoder, folder / name, None, targets, max_sentences=max_sentences)
        errors = [e for lang, e in errors.items() if lang not in targets]
        if errors:
            out[name] = sum(errors) / len(errors)
    return out


def tatoeba_languages(source_languages, folder: Path) -> list[str]:
    """Tatoeba ISO 639-3 codes whose preprocessing language is a source language of the run."""
    from evaluation.tatoeba import TATOEBA_LANGS, available_languages

    wanted = {base_language(code) for code in source_languages}
    return [lang for lang in available_languages(folder) if lang != "eng" and TATOEBA_LANGS.get(lang) in wanted]


def tatoeba_errors(model_dir: Path, langs: list[str], folder: Path, device: str | None) -> dict:
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import evaluate_tatoeba
    from hf_laser import LaserEncoder

    encoder = LaserEncoder.from_pretrained(model_dir, device=device)
    cache = EmbeddingCache(encoder, enabled=False, show_progress=False)
    return evaluate_tatoeba(cache, langs, folder=folder, show_progress=False, log=lambda *_: None)


def bucc_pair_f1(model_dir: Path, folder: Path, pair: str, device: str | None) -> float:
    """F1 (%) of margin-based mining on `folder/pair` (threshold from the `training` split, F1 on `sample`)."""
    from evaluation.bucc import evaluate_bucc
    from hf_laser import LaserEncoder

    encoder = LaserEncoder.from_pretrained(model_dir, device=device)
    return round(100 * evaluate_bucc(encoder, folder, pair, "training", "sample")["eval"]["f1"], 2)


def bucc_f1(model_dir: Path, folder: Path, device: str | None, store: MeasurementStore, name: str) -> dict:
    """`{pair: F1 %}` for each pair of `BUCC_PAIRS` that `folder` has, each pair kept in `store` as `bucc-NAME-PAIR`."""
    pairs = [pair for pair in BUCC_PAIRS if (folder / pair).is_dir()]
    if not pairs:
        raise FileNotFoundError(f"no BUCC pair folder ({', '.join(BUCC_PAIRS)}) in {folder}")
    return {pair: store.measure(f"bucc-{name}-{pair}", bucc_pair_f1,
                                {"model_dir": model_dir, "folder": folder, "pair": pair, "device": device},
                                models=[model_dir], data=[folder / pair])
            for pair in pairs}


def baseline_validation_errors(model_dir: Path, folder: Path, langs: list[str] | None, targets: list[str],
                               max_sentences: int | None, pretokenized: bool, held_out_sets: list[str] | None,
                               device: str | None) -> dict:
    """`model_flores_errors` of the encoder in `model_dir` (or, with `held_out_sets`, `model_held_out_errors`)."""
    from hf_laser import LaserEncoder

    encoder = LaserEncoder.from_pretrained(model_dir, device=device)
    if held_out_sets is not None:
        return model_held_out_errors(encoder, folder, held_out_sets, targets, max_sentences)
    return model_flores_errors(encoder, folder, langs, targets, max_sentences=max_sentences,
                               pretokenized=pretokenized)


def run_validation(run: Path) -> tuple[dict, list[str], list[str]]:
    """The validation section of `run`'s config and the FLORES languages and held-out sets of its last validation:
    what another encoder is measured on to compare with that run (`--validation-of`, `average_checkpoints.py`)."""
    rows = read_metrics(run)
    validated = [row["step"] for row in rows if "valid_error" in row]
    if not validated:
        raise FileNotFoundError(f"{run}/metrics.jsonl has no validation row to take the languages and sets from")
    vcfg = yaml.safe_load((run / "config.yaml").read_text())["validation"]
    return vcfg, sorted(flores_errors(rows, validated[-1])), sorted(held_out_errors(rows, validated[-1]))


def validation_kwargs(model_dir: Path, vcfg: dict, flores_langs: list[str] | None, targets: list[str],
                      device: str | None, held_out_sets: list[str] | None = None) -> dict:
    """`baseline_validation_errors`' arguments that measure `model_dir` as a run with the validation section `vcfg`
    validates: FLORES on `flores_langs` (the target languages embedded too), or else the `held_out_sets`."""
    resolve = lambda path: Path(path) if Path(path).is_absolute() else REPO / path  # noqa: E731
    if held_out_sets is not None:
        return {"model_dir": model_dir, "folder": resolve(vcfg["extra_path"]), "langs": None, "targets": targets,
                "max_sentences": vcfg.get("extra_max_sentences"), "pretokenized": False,
                "held_out_sets": sorted(held_out_sets), "device": device}
    return {"model_dir": model_dir, "folder": resolve(vcfg["path"]),
            "langs": list(flores_langs) + [t for t in targets if t not in flores_langs], "targets": targets,
            "max_sentences": vcfg.get("max_sentences"), "pretokenized": vcfg.get("pretokenized", False),
            "held_out_sets": None, "device": device}


def focus_mean(tatoeba: dict) -> float | None:
    """Mean Tatoeba error over `FOCUS` and both directions (None unless every FOCUS language was evaluated)."""
    if not all(lang in tatoeba for lang in FOCUS):
        return None
    return round(sum(tatoeba[lang][key] for lang in FOCUS for key in ("xx2en_error", "en2xx_error"))
                 / (2 * len(FOCUS)), 2)


def curve(run: Path, rows: list[dict], tatoeba_dir: Path | None, device: str | None,
          store: MeasurementStore) -> list[dict]:
    """One row per encoder snapshot (`OUT/encoders/step-N`): minutes, FLORES mean, FOCUS Tatoeba mean (each kept in
    `store` as `curve-tatoeba-step-N`)."""
    points = []
    for snapshot in sorted((run / "encoders").glob("step-*")):
        state = json.loads((snapshot / "training_state.json").read_text())
        flores = flores_errors(rows, state["step"])
        held_out = next((r["valid_extra_error"] for r in rows
                         if r["step"] == state["step"] and "valid_extra_error" in r), None)
        point = {"step": state["step"], "minutes": state["minutes"],
                 "flores": round(sum(flores.values()) / len(flores), 2) if flores else None,
                 "held_out": None if held_out is None else round(held_out, 2)}
        if tatoeba_dir is not None:
            point["tatoeba_focus"] = focus_mean(store.measure(
                f"curve-tatoeba-{snapshot.name}", tatoeba_errors,
                {"model_dir": snapshot, "langs": FOCUS, "folder": tatoeba_dir, "device": device},
                models=[snapshot], data=[tatoeba_dir]))
        points.append(point)
    if not points:
        raise FileNotFoundError(f"{run / 'encoders'} has no snapshot: train with training.snapshot_encoders: true")
    return points


def build_report(run: Path, tatoeba_dir: Path | None, device: str | None = None, *, tatoeba_langs: str = "run",
                 bucc_dir: Path | None = None, with_curve: bool = False, baseline: Path | None = None,
                 store: MeasurementStore | None = None, validation_of: Path | None = None) -> dict:
    """The report's figures (see the module's docstring). `store` keeps each finished measurement (default: none
    kept). `validation_of`: a run that validated, for a run that did not (`training.eval_every: 0`, e.g. a GPU
    session's): the FLORES and held-out errors of this run's step-0 and final encoders are measured here, on that
    run's validation languages, sets and sentences."""
    if baseline is not None and not (baseline / "config.json").is_file():
        raise FileNotFoundError(f"--baseline {baseline} is not a model directory (no config.json)")
    for name in ("final", "untrained"):
        if not (run / name / "config.json").is_file():
            raise FileNotFoundError(f"{run / name} is missing: the run has not finished, or predates "
                                    "training.save_untrained")
    store = store or MeasurementStore(run / "report_parts", device=device, enabled=False)
    rows = read_metrics(run)
    state = json.loads((run / "final" / "training_state.json").read_text())
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    directions = json.loads((run / "data_stats.json").read_text())["pairs_per_direction"]
    sources = sorted({direction.split("-")[0] for direction in directions})
    report = {"run": str(run), "exported_step": state["step"], "validation_path": cfg["validation"]["path"],
              # a continued run (training.init_from) starts from a trained encoder: step 0 is that one, not untrained
              "start": cfg["training"].get("init_from"),
              "flores": {"untrained": flores_errors(rows, 0), "trained": flores_errors(rows, state["step"])}}
    vcfg, targets = cfg["validation"], cfg["data"]["target_languages"]
    if validation_of is not None:
        if report["flores"]["untrained"] or report["flores"]["trained"]:
            raise ValueError(f"{run} validated during training (metrics.jsonl): the report takes its own figures; "
                             "--validation-of is for a run that did not validate")
        vcfg, flores_langs, held_out_sets = run_validation(validation_of)
        report["validation_path"], report["validated_as"] = vcfg["path"], str(validation_of)
        for model, folder in (("untrained", "untrained"), ("trained", "final")):
            kwargs = validation_kwargs(run / folder, vcfg, flores_langs, targets, device)
            report["flores"][model] = store.measure(f"flores-{model}", baseline_validation_errors, kwargs,
                                                    models=[run / folder], data=[kwargs["folder"]])
        held_out = {}
        if held_out_sets:
            kwargs = validation_kwargs(run / "final", vcfg, None, targets, device, held_out_sets)
            held_out = store.measure("held-out-trained", baseline_validation_errors, kwargs,
                                     models=[run / "final"], data=[kwargs["folder"]])
    else:
        held_out = held_out_errors(rows, state["step"])
    if baseline is not None and report["flores"]["trained"]:
        kwargs = validation_kwargs(baseline, vcfg, sorted(report["flores"]["trained"]), targets, device)
        report["flores"]["baseline"] = store.measure("flores-baseline", baseline_validation_errors, kwargs,
                                                     models=[baseline], data=[kwargs["folder"]])
    if held_out:
        report["held_out"] = {"path": vcfg["extra_path"], "trained": held_out}
        if baseline is not None:
            kwargs = validation_kwargs(baseline, vcfg, None, targets, device, sorted(held_out))
            report["held_out"]["baseline"] = store.measure("held-out-baseline", baseline_validation_errors, kwargs,
                                                           models=[baseline], data=[kwargs["folder"]])
    if tatoeba_dir is not None:
        from evaluation.tatoeba import available_languages

        if tatoeba_langs == "all":
            langs = [lang for lang in available_languages(tatoeba_dir) if lang != "eng"]
        elif tatoeba_langs == "focus":
            langs = list(FOCUS)
        else:
            langs = tatoeba_languages(sources, tatoeba_dir)
        models = {"untrained": run / "untrained", "trained": run / "final"}
        if baseline is not None:
            report["baseline"] = str(baseline)
            models["baseline"] = baseline
        report["tatoeba"] = {"languages": langs}
        for model, model_dir in models.items():
            report["tatoeba"][model] = store.measure(
                f"tatoeba-{model}", tatoeba_errors,
                {"model_dir": model_dir, "langs": langs, "folder": tatoeba_dir, "device": device},
                models=[model_dir], data=[tatoeba_dir])
        report["tatoeba"]["focus_mean"] = {model: focus_mean(report["tatoeba"][model]) for model in models}
        report["tatoeba"]["useless"] = [lang for lang in langs
                                        if report["tatoeba"]["trained"][lang]["xx2en_error"] >= USELESS_ERROR]
    if bucc_dir is not None:
        report["bucc"] = {model: bucc_f1(run / model, bucc_dir, device, store, model)
                          for model in ("untrained", "final")}
        if baseline is not None:
            report["bucc"]["baseline"] = bucc_f1(baseline, bucc_dir, device, store, "baseline")
    if with_curve:
        report["curve"] = curve(run, rows, tatoeba_dir, device, store)
    return report


def _cell(table: dict, lang: str, key: str | None = None) -> str:
    value = table.get(lang)
    if value is not None and key is not None:
        value = value.get(key)
    return "" if value is None else f"{value:.1f}"


def _label(report: dict, model: str) -> str:
    """Column name of `model`: the step-0 encoder is "start" in a continued run (training.init_from)."""
    return "start" if model == "untrained" and report.get("start") else model.replace("final", "trained")


def to_markdown(report: dict) -> str:
    fl = report["flores"]
    step0 = (f"start (step 0: `{report['start']}`, the encoder this run continued)" if report.get("start")
             else "untrained")
    fl_models = ["untrained", *(["baseline"] if "baseline" in fl else []), "trained"]
    lines = [f"# Training report: {report['run']} (exported encoder: step {report['exported_step']})", "",
             f"Similarity-search error in % (lower is better), {step0} → trained. "
             f"FLORES: `{report['validation_path']}`, both directions against each target language, "
             + (f"measured here as `{report['validated_as']}` validates (the run did not validate)"
                if report.get("validated_as") else "from the run's validation")
             + (" (the baseline measured the same way on the same languages: `model_flores_errors`)"
                if "baseline" in fl else "") + ".", "",
             "| language | " + " | ".join(f"FLORES {_label(report, m)}" for m in fl_models) + " |",
             "|---|" + "---|" * len(fl_models)]
    for lang in sorted(set(fl["untrained"]) | set(fl["trained"])):
        lines.append(f"| {lang} | " + " | ".join(_cell(fl[m], lang) for m in fl_models) + " |")
    means = {k: sum(v.values()) / len(v) for k, v in fl.items() if v}
    lines.append("| average | " + " | ".join(_cell(means, m) for m in fl_models) + " |")
    if "held_out" in report:
        ho = report["held_out"]
        ho_models = [*(["baseline"] if "baseline" in ho else []), "trained"]
        lines += ["", f"Held-out validation pairs (`{ho['path']}`: in neither the training data nor the test set), "
                      "both directions against each target language" + (", the baseline measured the same way"
                                                                        if "baseline" in ho else "") + ":", "",
                  "| set | " + " | ".join(ho_models) + " |", "|---|" + "---|" * len(ho_models)]
        lines += [f"| {name} | " + " | ".join(_cell(ho[m], name) for m in ho_models) + " |" for name in sorted(ho["trained"])]
        means = {m: sum(ho[m].values()) / len(ho[m]) for m in ho_models if ho[m]}
        lines.append("| average | " + " | ".join(_cell(means, m) for m in ho_models) + " |")
    if "tatoeba" in report:
        tat = report["tatoeba"]
        models = ["untrained", *(["baseline"] if "baseline" in tat else []), "trained"]
        lines += ["", "Tatoeba (xx→en / en→xx)" + (f"; baseline: `{report['baseline']}`" if "baseline" in tat else "")
                  + ":", "",
                  "| language | "
                  + " | ".join(f"{d} {_label(report, m)}" for d in ("xx→en", "en→xx") for m in models) + " | pairs |",
                  "|---|" + "---|" * (2 * len(models) + 1)]
        for lang in [*tat["languages"], "average"]:
            cells = [_cell(tat[model], lang, key) for key in ("xx2en_error", "en2xx_error") for model in models]
            lines.append(f"| {lang} | {' | '.join(cells)} | {tat['trained'].get(lang, {}).get('n', '')} |")
        focus = tat.get("focus_mean", {})
        if focus.get("trained") is not None:
            lines += ["", f"Mean Tatoeba error over {', '.join(FOCUS)} (both directions): "
                          + " → ".join(f"{focus[m]:.1f} % {_label(report, m)}" for m in models) + "."]
        if tat.get("useless"):
            lines += ["", f"Languages with an xx→en error of {USELESS_ERROR:.0f} % or more, for which the encoder is "
                          f"useless: {', '.join(tat['useless'])}."]
    if "bucc" in report:
        b = report["bucc"]
        bmodels = ["untrained", *(["baseline"] if "baseline" in b else []), "final"]
        lines += ["", "BUCC-style mining F1 (%) on `mining/` (threshold from `training`, F1 on `sample`):", "",
                  "| pair | " + " | ".join(_label(report, m) for m in bmodels) + " |",
                  "|---|" + "---|" * len(bmodels)]
        lines += [f"| {pair} | " + " | ".join(f"{b[m][pair]:.1f}" for m in bmodels) + " |" for pair in b["final"]]
    if "curve" in report:
        lines += ["", "Error (%) against training time (minutes since the launch, data preparation included):", "",
                  f"| step | minutes | FLORES mean | held-out validation mean | Tatoeba mean ({len(FOCUS)} languages, "
                  "both directions) |", "|---|---|---|---|---|"]
        lines += [f"| {p['step']} | {p['minutes']:.1f} | {_cell(p, 'flores')} | {_cell(p, 'held_out')} | "
                  f"{_cell(p, 'tatoeba_focus')} |" for p in report["curve"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the --output-dir of train.py")
    parser.add_argument("--tatoeba-dir", default=str(REPO.parent / "shared" / "data" / "tatoeba" / "v1"),
                        help="LASER-format Tatoeba folder; 'none' to skip Tatoeba")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cpu)")
    parser.add_argument("--tatoeba-langs", choices=["run", "all", "focus"], default="run",
                        help="run: the Tatoeba languages of the run's source languages (default); all: every one; "
                             "focus: the 12 of FOCUS")
    parser.add_argument("--bucc-dir", default=None, help="BUCC-format mining folder (e.g. ../shared/data/mining)")
    parser.add_argument("--curve", action="store_true", help="errors against minutes, one row per encoder snapshot")
    parser.add_argument("--plot", action="store_true", help="write OUT/tatoeba.png (error per language, sorted)")
    parser.add_argument("--baseline", default=None, help="another encoder directory (e.g. the model shipped before) "
                                                         "whose FLORES, Tatoeba and BUCC errors are reported alongside")
    parser.add_argument("--validation-of", default=None, metavar="RUN",
                        help="for a run that did not validate (training.eval_every: 0, e.g. a GPU session's): "
                             "measure its step-0 and final encoders here on the validation of RUN, a run that did "
                             "(e.g. the one it continued)")
    parser.add_argument("--fresh", action="store_true",
                        help="measure everything again instead of reusing the unchanged measurements kept in "
                             "OUT/report_parts/ by an earlier (e.g. interrupted) report")
    args = parser.parse_args(argv)
    run = Path(args.run)
    tatoeba_dir = None if args.tatoeba_dir == "none" else Path(args.tatoeba_dir)
    if tatoeba_dir is not None and not tatoeba_dir.is_dir():
        parser.error(f"--tatoeba-dir {tatoeba_dir} not found (or pass --tatoeba-dir none)")
    try:
        report = build_report(run, tatoeba_dir, args.device, tatoeba_langs=args.tatoeba_langs,
                              bucc_dir=Path(args.bucc_dir) if args.bucc_dir else None, with_curve=args.curve,
                              baseline=Path(args.baseline) if args.baseline else None,
                              validation_of=Path(args.validation_of) if args.validation_of else None,
                              store=MeasurementStore(run / "report_parts", device=args.device, enabled=not args.fresh,
                                                     log=lambda msg: print(msg, file=sys.stderr, flush=True)))
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    (run / "report.json").write_text(json.dumps(report, indent=1))
    markdown = to_markdown(report)
    (run / "report.md").write_text(markdown)
    if args.plot and "tatoeba" in report:
        from evaluation.report import plot_results

        plot_results({"tatoeba": report["tatoeba"]["trained"]}, run, title=run.resolve().name)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
