r"""Precision and recall of `hf-laser score` as a corpus filter, on a corpus with known noise, beside OpusFilter's own
(non-embedding) filters; throughput in pairs per second.

The corpus (from FLORES-200 devtest in ``../shared/data/parallel/valid``, 1,012 aligned sentences per language; no
hf-laser model was trained on it) holds, shuffled with a fixed seed:

* ``clean``: 600 pairs ``(src[i], en[i])``;
* ``misaligned``: 100 pairs ``(src[i], en[j])``, ``j`` another sentence's (from the rows no other pair uses);
* ``untranslated``: 100 pairs ``(src[i], src[i])``: the source copied as the target;
* ``wrong_language``: 100 pairs ``(src[i], third[i])``: the target is the translation into a third language
  (``--third``, French by default) instead of English;
* ``near_duplicate``: 100 copies of clean pairs with small edits (final punctuation dropped on both sides, the
  target's first letter lower-cased); the copy is the noise, its original stays clean (a filter that removes the
  original instead loses recall).

A pair is relevant when it is clean (the originals of the near duplicates are clean). For each filter: precision
(clean pairs among the kept) and recall (kept clean pairs among the clean), and which share of each noise type it
removes. Filters:

* ``hf-laser score`` at its default threshold (ratio margin >= 1.06, NLLB's), for each ``--model``; and with
  ``--check-lang`` (py3langid);
* OpusFilter 3.3's non-embedding filters at their default parameters, one by one and all together:
  LengthRatioFilter (char, 3), LinguaFilter (lingua, low-accuracy mode, thresholds 0: OpusFilter 3.3.1's langid
  method calls `LanguageIdentifier.from_pickled_model`, which py3langid 0.4.0, hf-laser's pin, no longer has),
  TerminalPunctuationFilter,
  NonZeroNumeralsFilter, SimilarityFilter (char, 0.9: source and target too alike = untranslated),
  AlphabetRatioFilter, RepetitionFilter.

Throughput: the wall time of the whole ``hf-laser score`` command (model loading, embedding both sides, kNN,
margin, writing), on the noisy corpus and, with ``--throughput-pairs N``, on the first N pairs of a larger corpus
(Tatoeba de-en from ``../shared/data/parallel/train``).

    python benchmarks/filter_noise.py --out runs/filter_noise.json
    python benchmarks/filter_noise.py --lang et --model laser-mini --model laser-mini-set   # a student's language
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"
TATOEBA = SHARED / "data" / "parallel" / "train" / "tatoeba"
KINDS = ("clean", "misaligned", "untranslated", "wrong_language", "near_duplicate")


def read(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")


def near_duplicate(text: str, lower: bool) -> str:
    text = text.rstrip().rstrip(".!?。")
    return (text[:1].lower() + text[1:]) if lower else text


def noisy_corpus(lang: str, third: str, seed: int = 0) -> list[tuple[str, str, str]]:
    src, en, other = (read(FLORES / f"{code}.txt")[:1012] for code in (lang, "en", third))
    rng = random.Random(seed)
    rows = [(src[i], en[i], "clean") for i in range(600)]
    targets = list(range(900, 1000))
    rng.shuffle(targets)
    rows += [(src[i], en[j], "misaligned") for i, j in zip(range(600, 700), targets)]
    rows += [(src[i], src[i], "untranslated") for i in range(700, 800)]
    rows += [(src[i], other[i], "wrong_language") for i in range(800, 900)]
    rows += [(near_duplicate(src[i], False), near_duplicate(en[i], True), "near_duplicate") for i in range(100)]
    rng.shuffle(rows)
    return rows


def evaluate(kept: list[bool], kinds: list[str]) -> dict:
    clean = [k == "clean" for k in kinds]
    tp = sum(k and c for k, c in zip(kept, clean))
    out = {"kept": sum(kept), "precision": round(tp / max(1, sum(kept)), 4), "recall": round(tp / sum(clean), 4)}
    out["removed_share"] = {kind: round(sum(not k for k, t in zip(kept, kinds) if t == kind) / kinds.count(kind), 3)
                            for kind in KINDS}
    return out


def hf_laser_score(work: Path, model: str | None, lang: str, extra=()) -> tuple[list[bool], float, str, list]:
    cmd = [sys.executable, "-m", "hf_laser.cli", "score", "c.src", "c.en", "--src-lang", lang, "--tgt-lang", "en",
           "-o", "scores.txt", "--keep", "kept.tsv", "--no-progress", "--overwrite",
           *(["--model", model] if model else []), *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode:
        sys.exit(r.stderr)
    scores = [float(v) for v in (work / "scores.txt").read_text().split()]
    kept_lines = set((work / "kept.tsv").read_text(encoding="utf-8").splitlines())
    pairs = [f"{s}\t{t}" for s, t in zip((work / "c.src").read_text(encoding="utf-8").splitlines(),
                                          (work / "c.en").read_text(encoding="utf-8").splitlines())]
    kept = [p in kept_lines for p in pairs]
    return kept, seconds, " ".join(["hf-laser", *cmd[3:]]), scores


OPUSFILTER_FILTERS = {
    "LengthRatioFilter": {"unit": "char", "threshold": 3},
    "LinguaFilter": {"thresholds": [0, 0], "module": "opusfilter.lid"},
    "TerminalPunctuationFilter": {},
    "NonZeroNumeralsFilter": {},
    "SimilarityFilter": {"unit": "char", "threshold": 0.9},
    "AlphabetRatioFilter": {},
    "RepetitionFilter": {},
}


def opusfilter_decisions(rows, lang: str) -> dict[str, tuple[list[bool], float]]:
    from opusfilter.pipeline import FilterPipeline

    pairs = [(s, t) for s, t, _ in rows]
    out = {}
    for name, params in OPUSFILTER_FILTERS.items():
        params = dict(params)
        module = params.pop("module", None)
        if name == "LinguaFilter":
            params["languages"] = [lang, "en"]
        pipe = FilterPipeline.from_config([{name: params, **({"module": module} if module else {})}])
        t0 = time.perf_counter()
        kept = [bool(d) for d in pipe.filters[0].decisions(pairs)]
        out[name] = (kept, time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lang", default="de", help="source language (FLORES file name; target: en)")
    p.add_argument("--third", default="fr", help="the wrong language of the wrong_language pairs")
    p.add_argument("--model", action="append", default=None,
                   help="model for hf-laser score (repeatable; default: laser-mini, laser-mini-set, and the "
                        "converted reference checkpoint laser-ref-tiny when ../shared has it)")
    p.add_argument("--throughput-pairs", type=int, default=0,
                   help="also time hf-laser score on the first N Tatoeba de-en training pairs")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()

    rows = noisy_corpus(args.lang, args.third)
    kinds = [k for _, _, k in rows]
    results = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "lang": args.lang, "third": args.third,
               "counts": {kind: kinds.count(kind) for kind in KINDS}, "filters": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "c.src").write_text("".join(s + "\n" for s, _, _ in rows), encoding="utf-8")
        (work / "c.en").write_text("".join(t + "\n" for _, t, _ in rows), encoding="utf-8")
        models = args.model
        if models is None:
            models = ["laser-mini", "laser-mini-set"]
            tiny = SHARED / "reference" / "checkpoint" / "laser-ref-tiny.pt"
            if tiny.is_file():
                from hf_laser.checkpoints.convert import convert

                bpe = SHARED / "reference" / "bpe"
                models.append(str(convert(tiny, work / "laser-ref-tiny", bpe_codes=next(bpe.glob("*codes*")),
                                          bpe_vocab=next(bpe.glob("*vocab*")))))
        for model in models:
            name = Path(model).name
            for extra in ((), ("--check-lang",)):
                kept, seconds, command, scores = hf_laser_score(work, model, args.lang, extra)
                label = f"hf-laser score ({name}{', --check-lang' if extra else ''})"
                results["filters"][label] = {**evaluate(kept, kinds), "seconds": round(seconds, 2),
                                             "pairs_per_s": round(len(rows) / seconds, 1), "command": command}
                print(label, results["filters"][label], file=sys.stderr)
        decisions = opusfilter_decisions(rows, args.lang)
        for name, (kept, seconds) in decisions.items():
            results["filters"][f"OpusFilter {name}"] = {**evaluate(kept, kinds), "seconds": round(seconds, 3)}
        together = [all(d[0][i] for d in decisions.values()) for i in range(len(rows))]
        results["filters"]["OpusFilter, all of the above"] = evaluate(together, kinds)
        if args.throughput_pairs:
            src = read(TATOEBA / "tatoeba.de-en.de.gz")[: args.throughput_pairs]
            tgt = read(TATOEBA / "tatoeba.de-en.en.gz")[: args.throughput_pairs]
            (work / "c.src").write_text("".join(s + "\n" for s in src), encoding="utf-8")
            (work / "c.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
            _, seconds, command, _ = hf_laser_score(work, "laser-mini", "de")
            results["throughput"] = {"pairs": len(src), "seconds": round(seconds, 1),
                                     "pairs_per_s": round(len(src) / seconds, 1), "command": command}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
