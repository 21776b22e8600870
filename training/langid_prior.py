"""Builds `src/hf_laser/text/data/langid_prior.tsv`: how often each language is written in everyday short sentences, the
prior that `lang="auto"` multiplies the detector's probabilities by (a 2-word German sentence was labelled Walloon).

The counts are the distinct sentences per language of the Tatoeba pairs outside the v1 test set
(`../shared/data/parallel/train/tatoeba`), a crowd corpus of everyday sentences; a tenth of them (by hash) is held
out and never counted. The prior's strength (the exponent `alpha` of `p(lang | text) ∝ p_detector(lang | text) ×
prior(lang)^alpha`) is chosen on that held-out tenth: the best label accuracy on its sentences of at most 3 words,
without losing accuracy on its sentences of any length, nor more than half a point of the per-language mean. Tatoeba v1 is only reported (`benchmarks/langid_accuracy.py
--max-words 3`), never used here.

Usage::

    python training/langid_prior.py [--data ../shared/data/parallel/train/tatoeba] [--out src/hf_laser/text/data/langid_prior.tsv]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import random
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from hf_laser.text import langid  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "parallel" / "train" / "tatoeba"
ALPHAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0)
PER_LANGUAGE = 400  # held-out sentences per language and length class scored for the choice


def held_out(sentence: str) -> bool:
    return hashlib.sha256(sentence.encode("utf-8")).digest()[0] % 10 == 0


def read_corpus(data: Path) -> dict[str, set[str]]:
    """Distinct sentences per tokenizer code (`tatoeba.de-en.de.gz` → `de`)."""
    sentences: dict[str, set[str]] = defaultdict(set)
    for path in sorted(data.glob("tatoeba.*.gz")):
        code = langid.label_code(path.name.split(".")[2])
        with gzip.open(path, "rt", encoding="utf-8") as f:
            sentences[code].update(line.strip() for line in f if line.strip())
    return sentences


def accuracy(samples: dict[str, list[str]], alpha: float, prior: dict[str, float]) -> tuple[float, float, int]:
    """(micro, macro accuracy in %, sentences) of the detector with the prior at `alpha` on `samples`."""
    right = total = 0
    per_language = []
    for code, lines in samples.items():
        got = [r[0] if r else None for r in (langid.classify(t, prior=prior, alpha=alpha) for t in lines)]
        ok = sum(g == code for g in got)
        right, total = right + ok, total + len(lines)
        per_language.append(ok / len(lines))
    return 100 * right / total, 100 * sum(per_language) / len(per_language), total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "src" / "hf_laser" / "data" / "langid_prior.tsv")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"needs {args.data} (the project's ../shared folder)", file=sys.stderr)
        return 2
    corpus = read_corpus(args.data)
    supported = langid.supported_codes()
    counts = {code: sum(not held_out(s) for s in lines) for code, lines in corpus.items() if code in supported}
    rng = random.Random(0)
    short, every = {}, {}
    for code in sorted(counts):
        held = sorted(s for s in corpus[code] if held_out(s))
        rng.shuffle(held)
        few = [s for s in held if len(s.split()) <= 3][:PER_LANGUAGE]
        if len(few) >= 20:
            short[code] = few
        if len(held) >= 20:
            every[code] = held[:PER_LANGUAGE]
    total = sum(counts.values())
    prior = langid.prior_from_counts(counts)  # (as the shipped file is read)
    print(f"{len(counts)} languages the detector knows, {total:,} distinct sentences counted; held out: "
          f"{sum(map(len, short.values())):,} of <= 3 words ({len(short)} languages), "
          f"{sum(map(len, every.values())):,} of any length")
    results = {}
    for alpha in ALPHAS:
        results[alpha] = accuracy(short, alpha, prior), accuracy(every, alpha, prior)
        (s_micro, s_macro, _), (e_micro, e_macro, _) = results[alpha]
        print(f"alpha {alpha:<4}: <= 3 words {s_micro:5.1f} % (per-language mean {s_macro:5.1f} %); "
              f"any length {e_micro:5.1f} % ({e_macro:5.1f} %)")
    # the best on short sentences that loses nothing on sentences of any length (overall) and at most half a point
    # of the per-language mean (a prior trades rare languages for common ones: kept small)
    base_micro, base_macro = results[0.0][1][:2]
    allowed = [a for a in ALPHAS if results[a][1][0] >= base_micro and results[a][1][1] >= base_macro - 0.5]
    chosen = max(allowed, key=lambda a: results[a][0][0])
    print(f"chosen: alpha {chosen}")
    lines = [f"# langid prior of hf_laser (training/langid_prior.py): distinct sentences per language of "
             f"{args.data.name} (Tatoeba outside v1), a tenth held out",
             f"# alpha\t{chosen}",
             "# code\tcount"]
    lines += [f"{code}\t{counts[code]}" for code in sorted(counts)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
