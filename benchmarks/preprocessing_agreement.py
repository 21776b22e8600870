#!/usr/bin/env python
"""Agreement of hf_laser.text.preprocessing with the original LASER pipeline (``.tok`` stage).

For every reference file in ``shared/reference`` (224 Tatoeba files = first 100 lines of
``shared/data/tatoeba/v1/FILE``, and ``edge.txt`` in 7 languages) the pipeline output is
compared line by line with the ``.tok`` file of the original tools.  Prints a per-language
table (files, lines identical / total) and exits with status 1 if any line differs.

    PYTHONPATH=src python benchmarks/preprocessing_agreement.py            # agreement table
    PYTHONPATH=src python benchmarks/preprocessing_agreement.py --speed    # + sentences/s
    PYTHONPATH=src python benchmarks/preprocessing_agreement.py --laser2   # + LASER2 via SPM

``--speed`` runs the pipeline over all lines of all 224 Tatoeba files, file by file (the
way the Perl speed anchor in shared/reference/README.md was measured), and also checks
those full-length outputs for crashes and obviously broken lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from hf_laser.text.preprocessing import LaserPreprocessor  # noqa: E402

EDGE_LANGS = ["en", "fr", "de", "el", "zh", "ja", "ru"]


def read_lines(path: Path) -> list[str]:
    """Lines split on '\\n' only (edge.txt has CR, NEL, U+2028 ... inside lines)."""
    lines = path.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def tatoeba_langs(shared: Path) -> dict[str, str]:
    rows = (shared / "reference" / "tatoeba_langs.tsv").read_text(encoding="utf-8").split("\n")[1:]
    return dict(r.split("\t") for r in rows if r)


def reference_cases(shared: Path):
    """Yield (label, lang, input_lines, reference_dir_stem) for every .tok reference file."""
    ref = shared / "reference"
    langs = tatoeba_langs(shared)
    for tok in sorted((ref / "tatoeba").glob("*.tok")):
        name = tok.name[: -len(".tok")]
        inp = read_lines(shared / "data" / "tatoeba" / "v1" / name)[:100]
        yield name, langs[name.rsplit(".", 1)[1]], inp, ref / "tatoeba" / name
    edge = read_lines(ref / "edge" / "edge.txt")
    for lang in EDGE_LANGS:
        yield f"edge.{lang}", lang, edge, ref / "edge" / f"edge.{lang}"


def compare(got: list[str], exp: list[str]) -> tuple[int, int, int | None]:
    """(identical lines, total reference lines, first differing line index or None)."""
    same = sum(a == b for a, b in zip(got, exp))
    first = next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b), None)
    if first is None and len(got) != len(exp):
        first = min(len(got), len(exp))
    return same, len(exp), first


def tok_agreement(shared: Path, verbose: bool = True) -> list[dict]:
    """One row per reference file: label, lang, same, total, first_diff."""
    rows = []
    for label, lang, inp, stem in reference_cases(shared):
        got = LaserPreprocessor(lang).batch(inp)
        exp = read_lines(stem.with_name(stem.name + ".tok"))
        same, total, first = compare(got, exp)
        rows.append(dict(label=label, lang=lang, same=same, total=total, first_diff=first))
        if verbose and first is not None:
            g = got[first] if first < len(got) else "<missing>"
            e = exp[first] if first < len(exp) else "<missing>"
            print(f"MISMATCH {label} ({lang}) line {first + 1}:\n  got {g!r}\n  exp {e!r}")
    return rows


def laser2_agreement(shared: Path) -> list[dict]:
    """LASER2 mode: the pre-SPM text is not stored, so compare after SentencePiece."""
    import sentencepiece as spm

    ref = shared / "reference" / "laser2"
    sp = spm.SentencePieceProcessor(model_file=str(ref / "laser2-ref.spm"))
    rows = []
    for label, lang, inp, stem in reference_cases(shared):
        spm_file = (ref / "tatoeba" / f"{label}.spm") if not label.startswith("edge.") else (
            ref / "edge" / f"{label}.spm")
        got = [" ".join(sp.encode(x, out_type=str)) for x in LaserPreprocessor(lang, mode="laser2").batch(inp)]
        same, total, first = compare(got, read_lines(spm_file))
        rows.append(dict(label=label, lang=lang, same=same, total=total, first_diff=first))
    return rows


def print_table(rows: list[dict], title: str) -> bool:
    by_lang: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_lang[r["lang"]].append(r)
    print(f"\n{title}")
    print(f"{'lang':<6} {'files':>5} {'files ok':>8} {'lines identical':>16} {'agreement':>9}")
    ok_all = True
    for lang in sorted(by_lang):
        rs = by_lang[lang]
        same, total = sum(r["same"] for r in rs), sum(r["total"] for r in rs)
        files_ok = sum(r["first_diff"] is None for r in rs)
        ok_all &= files_ok == len(rs)
        print(f"{lang:<6} {len(rs):>5} {files_ok:>8} {same:>7} / {total:<7} {100.0 * same / max(total, 1):>8.2f}%")
    same, total = sum(r["same"] for r in rows), sum(r["total"] for r in rows)
    files_ok = sum(r["first_diff"] is None for r in rows)
    tat = [r for r in rows if not r["label"].startswith("edge.")]
    edge = [r for r in rows if r["label"].startswith("edge.")]
    print(f"{'ALL':<6} {len(rows):>5} {files_ok:>8} {same:>7} / {total:<7} {100.0 * same / max(total, 1):>8.2f}%")
    print(f"Tatoeba files 100% identical: {sum(r['first_diff'] is None for r in tat)}/{len(tat)}; "
          f"edge files: {sum(r['first_diff'] is None for r in edge)}/{len(edge)}")
    return ok_all


def speed(shared: Path) -> bool:
    """Sentences/s over all lines of all Tatoeba files, file by file; sanity-check outputs."""
    langs = tatoeba_langs(shared)
    files = sorted(p for p in (shared / "data" / "tatoeba" / "v1").glob("tatoeba.*"))
    data = [(f.name, langs[f.name.rsplit(".", 1)[1]], read_lines(f)) for f in files]
    n = sum(len(lines) for _, _, lines in data)
    t0, c0 = time.perf_counter(), time.process_time()
    problems = []
    for name, lang, lines in data:
        out = LaserPreprocessor(lang).batch(lines)
        if len(out) != len(lines):
            problems.append(f"{name}: {len(out)} output lines for {len(lines)} inputs")
        for i, (src, o) in enumerate(zip(lines, out)):
            if "\n" in o or "\r" in o:
                problems.append(f"{name}:{i + 1}: line break in output")
            elif src.strip() and not o.strip():
                problems.append(f"{name}:{i + 1}: empty output for non-empty input")
            elif "  " in o and lang != "zh":
                problems.append(f"{name}:{i + 1}: double space in output {o!r}")
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nspeed: {len(data)} files, {n} sentences in {dt:.2f}s wall ({cpu:.2f}s CPU) -> "
          f"{n / dt:,.0f} sentences/s wall, {n / cpu:,.0f} per CPU-second\n"
          "  (file by file, one process, incl. one-time start-up: Unicode tables, jieba dictionary, MeCab)")
    print("  Perl anchor (reference/README.md): steps 1-6 ~10,900 sentences/s; with fastBPE ~5,000")
    for p in problems[:20]:
        print("  PROBLEM", p)
    print(f"  full-length outputs checked: {len(problems)} problems")
    return not problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared/ folder")
    ap.add_argument("--speed", action="store_true", help="also time the pipeline over all Tatoeba lines")
    ap.add_argument("--laser2", action="store_true", help="also check LASER2 mode through SentencePiece")
    args = ap.parse_args(argv)
    if not (args.shared / "reference" / "tatoeba").is_dir():
        print(f"reference data not found under {args.shared}", file=sys.stderr)
        return 2
    ok = True
    if args.speed:  # first, so that the one-time start-up costs are part of the measurement
        ok &= speed(args.shared)
    ok &= print_table(tok_agreement(args.shared), "LASER1 .tok agreement (lines identical / total)")
    if args.laser2:
        ok &= print_table(laser2_agreement(args.shared), "LASER2 text agreement, via SentencePiece (.spm)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
