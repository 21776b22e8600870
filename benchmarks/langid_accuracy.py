"""Accuracy and speed of the language identification behind `lang="auto"` on Tatoeba v1 (112 languages).

For every `tatoeba.xxx-eng.xxx` file, the non-English side is classified sentence by sentence and the answer is
compared with the code the LASER preprocessing gets for that language (`evaluation.tatoeba.TATOEBA_LANGS`). Three
figures per language:

* `exact`: the detected tokenizer code is the gold one (`zh` for cmn/wuu/yue, `nb` for nob ...);
* `same .tok` (with `--tok`): the sentence's LASER preprocessing (`.tok` line) with the detected code is identical to
  the one with the gold code -- what matters for the embeddings (Moses falls back to English rules for most
  languages, so a confusion between two such languages changes nothing; a miss on zh/ja/el always does);
* `supported`: whether the detector knows the gold language at all (most Tatoeba languages without an ISO 639-1
  code are unknown to every library: they can only be missed).

Usage::

    python benchmarks/langid_accuracy.py                        # hf_laser.text.langid (py3langid), per-language table
    python benchmarks/langid_accuracy.py --tok                  # + the .tok agreement (slower: runs the preprocessing)
    python benchmarks/langid_accuracy.py --detector lingua      # compare (pip install lingua-language-detector)
    python benchmarks/langid_accuracy.py --max-words 3 [--no-prior]   # short sentences, with / without the prior

Speed is sentences per second of the detector alone, single process, over all the sentences.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from evaluation.tatoeba import TATOEBA_LANGS  # noqa: E402

DEFAULT_DIR = REPO.parent / "shared" / "data" / "tatoeba" / "v1"


def read_lines(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def hf_laser_detector(prior: bool = True):
    from hf_laser.text import langid

    if prior:
        return langid.detect, langid.supported_codes(), f"hf_laser.text.langid ({langid.detector_version()})"

    def detect(texts):
        return [r[0] if (r := langid.classify(t, alpha=0)) else "en" for t in texts]

    return detect, langid.supported_codes(), "hf_laser.text.langid without its language prior"


def lingua_detector():
    from lingua import LanguageDetectorBuilder
    from hf_laser.text.preprocessing import normalize_lang

    detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()
    codes = {}
    for lang in detector_languages(detector):
        code = lang.iso_code_639_1.name.lower()
        codes[lang] = {"no": "nb"}.get(code, normalize_lang(code))

    def detect(texts):
        return [codes.get(r, "en") if r is not None else "en"
                for r in detector.detect_languages_in_parallel_of(list(texts))]

    import importlib.metadata as md

    return detect, frozenset(codes.values()), f"lingua-language-detector {md.version('lingua-language-detector')}"


def detector_languages(detector):
    from lingua import Language

    return list(Language.all())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tatoeba-dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--detector", choices=["hf_laser", "lingua"], default="hf_laser")
    parser.add_argument("--tok", action="store_true", help="also measure the .tok agreement (runs the preprocessing)")
    parser.add_argument("--limit", type=int, default=None, help="sentences per language (default: all)")
    parser.add_argument("--worst", type=int, default=15, help="worst languages listed at the end")
    parser.add_argument("--max-words", type=int, default=None,
                        help="only sentences of at most this many words (short sentences: where the prior matters)")
    parser.add_argument("--no-prior", action="store_true", help="the detector without hf_laser's language prior")
    parser.add_argument("--default-check", action="store_true",
                        help="instead: how often the lang=None check warns on English (false alarms) and stays "
                             "silent on other languages, per call of 1, 10 and 100 sentences")
    args = parser.parse_args(argv)
    if args.default_check:
        return default_check(args)

    detect, supported, name = hf_laser_detector(not args.no_prior) if args.detector == "hf_laser" \
        else lingua_detector()
    files = sorted(args.tatoeba_dir.glob("tatoeba.*-eng.*"))
    langs = sorted({p.name.split(".")[1][:-4] for p in files} - {"eng"})
    if not langs:
        print(f"no Tatoeba files in {args.tatoeba_dir}", file=sys.stderr)
        return 2
    if args.tok:
        from hf_laser.text.preprocessing import LaserPreprocessor

    rows, total, seconds = [], Counter(), 0.0
    for iso3 in langs:
        gold = TATOEBA_LANGS.get(iso3, iso3)
        lines = read_lines(args.tatoeba_dir / f"tatoeba.{iso3}-eng.{iso3}")
        if args.max_words is not None:
            lines = [line for line in lines if len(line.split()) <= args.max_words]
        lines = lines[: args.limit]
        if not lines:
            continue
        t0 = time.perf_counter()
        got = detect(lines)
        seconds += time.perf_counter() - t0
        exact = sum(g == gold for g in got)
        row = {"iso3": iso3, "gold": gold, "n": len(lines), "exact": exact, "supported": gold in supported,
               "confusions": Counter(g for g in got if g != gold).most_common(3)}
        if args.tok:
            ref = LaserPreprocessor(gold).batch(lines)
            by_lang: dict[str, list[int]] = {}
            for i, g in enumerate(got):
                by_lang.setdefault(g, []).append(i)
            same = 0
            for g, idx in by_lang.items():
                if g == gold:
                    same += len(idx)
                    continue
                with warnings.catch_warnings():  # unknown codes: Moses defaults, said once
                    warnings.simplefilter("ignore")
                    out = LaserPreprocessor(g).batch([lines[i] for i in idx])
                same += sum(ref[i] == o for i, o in zip(idx, out))
            row["tok"] = same
            total["tok"] += same
        total["n"] += row["n"]
        total["exact"] += exact
        if row["supported"]:
            total["n_sup"] += row["n"]
            total["exact_sup"] += exact
        rows.append(row)

    print(f"detector: {name}; Tatoeba v1: {len(rows)} languages, {total['n']:,} sentences")
    header = f"{'lang':<5} {'code':<5} {'n':>5} {'exact %':>8}" + (f" {'same .tok %':>11}" if args.tok else "") + \
        "  sup  most frequent wrong answers"
    print(header)
    for r in rows:
        tok = f" {100 * r['tok'] / r['n']:>11.1f}" if args.tok else ""
        conf = ", ".join(f"{c} {k}" for c, k in r["confusions"])
        print(f"{r['iso3']:<5} {r['gold']:<5} {r['n']:>5} {100 * r['exact'] / r['n']:>8.1f}{tok}  "
              f"{'yes' if r['supported'] else 'no ':<3}  {conf}")
    n_sup_langs = sum(r["supported"] for r in rows)
    print()
    print(f"overall exact: {100 * total['exact'] / total['n']:.2f} % of {total['n']:,} sentences "
          f"(macro average over languages {sum(100 * r['exact'] / r['n'] for r in rows) / len(rows):.2f} %)")
    if total["n_sup"]:
        sup_rows = [r for r in rows if r["supported"]]
        print(f"languages the detector knows ({n_sup_langs} of {len(rows)}): "
              f"{100 * total['exact_sup'] / total['n_sup']:.2f} % of {total['n_sup']:,} sentences "
              f"(macro {sum(100 * r['exact'] / r['n'] for r in sup_rows) / len(sup_rows):.2f} %)")
    if args.tok:
        print(f"same .tok as with the gold code: {100 * total['tok'] / total['n']:.2f} % of {total['n']:,} sentences")
        for code in ("zh", "ja", "el"):
            rs = [r for r in rows if r["gold"] == code]
            if rs:
                print(f"  {code}: {100 * sum(r['tok'] for r in rs) / sum(r['n'] for r in rs):.2f} % same .tok")
    key = "tok" if args.tok else "exact"
    worst = sorted((r for r in rows if r["supported"]), key=lambda r: r[key] / r["n"])[: args.worst]
    print(f"worst known languages ({key}): " + ", ".join(f"{r['iso3']} {100 * r[key] / r['n']:.1f}" for r in worst))
    print(f"speed: {total['n'] / seconds:,.0f} sentences/s ({seconds:.2f} s for {total['n']:,} sentences, one process)")
    return 0


def default_check(args) -> int:
    """False alarms / misses of `hf_laser.text.langid.check_default_lang` (the warning of `lang=None`), used = "en"."""
    from hf_laser.text import langid

    files = sorted(args.tatoeba_dir.glob("tatoeba.*-eng.*"))
    langs = sorted({p.name.split(".")[1][:-4] for p in files} - {"eng"})
    english = [line for iso3 in langs for line in read_lines(args.tatoeba_dir / f"tatoeba.{iso3}-eng.eng")]
    print(f"default-language check (min probability {langid.CHECK_MIN_PROB}, sample {langid.CHECK_SAMPLE}); "
          f"used language: en")
    for size in (1, 10, 100):
        calls = [english[i:i + size] for i in range(0, len(english) - size + 1, size)]
        alarms = sum(_warns(langid, c) for c in calls)
        print(f"  English, calls of {size:>3} sentences: {alarms:,} warnings in {len(calls):,} calls "
              f"({100 * alarms / len(calls):.2f} % false alarms)")
    for size in (1, 10, 100):
        missed = total = 0
        for iso3 in langs:
            gold = TATOEBA_LANGS.get(iso3, iso3)
            if gold == "en":
                continue
            lines = read_lines(args.tatoeba_dir / f"tatoeba.{iso3}-eng.{iso3}")
            calls = [lines[i:i + size] for i in range(0, len(lines) - size + 1, size)]
            total += len(calls)
            missed += sum(not _warns(langid, c) for c in calls)
        print(f"  other languages, calls of {size:>3} sentences: no warning in {missed:,} of {total:,} calls "
              f"({100 * missed / total:.2f} %)")
    return 0


def _warns(langid, texts) -> bool:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        langid.check_default_lang(texts, "en")
    return bool(rec)


if __name__ == "__main__":
    sys.exit(main())
