"""Throughput of the LASER1 text pipeline (preprocessing + fastBPE) on all 224 Tatoeba v1 files.

    python benchmarks/tokenize_throughput.py                 # full pipeline + BPE-only comparison
    python benchmarks/tokenize_throughput.py --bpe-only      # only the BPE comparison

Full pipeline: every file of ``../shared/data/tatoeba/v1`` is read whole and run raw -> .tok -> .bpe
with its tokenizer language (``reference/tatoeba_langs.tsv``), (a) file by file in one process, like
the original pipeline's measurement, and (b) all files as one stream with ``num_proc`` workers.

BPE only: the ``.tok`` lines (of the full files when the preprocessing is available, else of the
reference ``.tok`` files) through (1) the cached Python fastBPE port (fresh cache), and (2) HF
``tokenizers``' Rust BPE model built from the same codes, plus the Python post-pass that makes it
identical (fastBPE's vocabulary-restricted split-back, fallback for characters the Rust model does
not know).  Both outputs are compared line by line with each other.

The original pipeline's figure is read from ``../shared/reference/README.md`` and printed as such;
it was measured there on a different 2-vCPU machine, not by this script.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "reference"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"
CODES = REFERENCE / "bpe" / "laser-ref.fcodes"
VOCAB = REFERENCE / "bpe" / "laser-ref.fvocab"
LASER2_SPM = REFERENCE / "laser2" / "laser2-ref.spm"


def read_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def tatoeba_langs() -> dict[str, str]:
    rows = [line.split("\t") for line in read_lines(REFERENCE / "tatoeba_langs.tsv")[1:]]
    return {iso3: lang for iso3, lang in rows}


def reference_figure() -> str:
    readme = (REFERENCE / "README.md").read_text(encoding="utf-8")
    m = re.search(r"tokenisation \+ BPE:[^\n]*\n?[^\n]*?\*\*(≈[^*]+)\*\*", readme)
    median = re.search(r"\(median ([\d.]+ s)\)", readme)
    if not m:
        return "(figure not found in reference/README.md)"
    return f"{m.group(1).strip()} (median {median.group(1) if median else '?'}; reference/README.md, original Perl+fastBPE)"


def build_rust_bpe(bpe):
    """tokenizers BPE model with fastBPE's merges; returns (tokenizer, fastbpe-identical apply_lines)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    pairs = sorted(bpe.codes, key=bpe.codes.__getitem__)
    vocab = {"<unk>": 0}

    def add(t):
        if t not in vocab:
            vocab[t] = len(vocab)

    for a, b in pairs:
        add(a)
        add(b)
        add(a + b)
    chars = set()
    for t in list(vocab) + list(bpe.vocab):
        chars.update(t.replace("</w>", "").replace("@@", ""))
    for c in sorted(chars):
        add(c)
        add(c + "</w>")
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token="<unk>", end_of_word_suffix="</w>",
                              fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")

    def apply_lines(lines):
        out = []
        # encode_batch (not _fast): the post-pass needs word_ids
        for line, enc in zip(lines, tk.encode_batch(lines, add_special_tokens=False)):
            groups: list[list[str]] = []
            prev = -1
            for t, w in zip(enc.tokens, enc.word_ids):
                if w != prev:
                    groups.append([])
                    prev = w
                groups[-1].append(t)
            it = iter(groups)
            res = []
            for w in line.split(" "):
                if not w:
                    res.append("")
                    continue
                g = next(it)
                if "<unk>" in g or "".join(g) != w + "</w>":
                    res.append(bpe.bpe_word(w))  # character unknown to the Rust model
                else:
                    res.append("@@ ".join(bpe._limit_vocab(g))[:-4])
            out.append(" ".join(res))
        return out

    return tk, apply_lines


def bench_bpe(tok_lines: list[str], label: str) -> None:
    from hf_laser.text.bpe import FastBPE

    n_words = sum(len(line.split()) for line in tok_lines)
    print(f"\nBPE only on {label}: {len(tok_lines):,} lines, {n_words:,} words")
    bpe = FastBPE(CODES, VOCAB)
    t = time.perf_counter()
    py = bpe.apply_lines(tok_lines)
    t_py = time.perf_counter() - t
    t = time.perf_counter()
    bpe.apply_lines(tok_lines)
    t_py_warm = time.perf_counter() - t
    print(f"  python fastBPE port, fresh cache : {t_py:7.3f} s  {len(tok_lines) / t_py:>10,.0f} lines/s")
    print(f"  python fastBPE port, warm cache  : {t_py_warm:7.3f} s  {len(tok_lines) / t_py_warm:>10,.0f} lines/s")
    try:
        tk, rust_apply = build_rust_bpe(FastBPE(CODES, VOCAB))
    except ImportError:
        print("  tokenizers not installed: Rust comparison skipped")
        return
    t = time.perf_counter()
    tk.encode_batch_fast(tok_lines, add_special_tokens=False)
    t_raw = time.perf_counter() - t
    t = time.perf_counter()
    rust = rust_apply(tok_lines)
    t_rust = time.perf_counter() - t
    same = sum(a == b for a, b in zip(rust, py))
    print(f"  tokenizers Rust BPE alone        : {t_raw:7.3f} s  {len(tok_lines) / t_raw:>10,.0f} lines/s"
          " (not fastBPE output: no vocab split-back)")
    print(f"  tokenizers Rust BPE + post-pass  : {t_rust:7.3f} s  {len(tok_lines) / t_rust:>10,.0f} lines/s"
          f"  identical lines {same}/{len(py)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument("--bpe-only", action="store_true")
    args = ap.parse_args()
    for p in (CODES, VOCAB, TATOEBA):
        if not p.exists():
            print(f"needs {p} (the ../shared folder); not found", file=sys.stderr)
            return 2

    from hf_laser.text.tokenization_laser import LaserTextPipeline

    langs = tatoeba_langs()
    files = sorted(p for p in TATOEBA.iterdir() if p.name.startswith("tatoeba."))
    tok_all: list[str] | None = None
    if not args.bpe_only:
        try:
            import hf_laser.text.preprocessing  # noqa: F401
        except ImportError:
            print("hf_laser.text.preprocessing not available: full-pipeline numbers skipped")
        else:
            data = [(read_lines(f), langs[f.name.rsplit(".", 1)[1]]) for f in files]
            n = sum(len(lines) for lines, _ in data)
            print(f"Tatoeba v1: {len(files)} files, {n:,} sentences")
            print(f"original pipeline (reference's figure, not measured here): {reference_figure()}")

            # first measurement is cold: includes one-time setup (jieba dictionary, MeCab, prefix files)
            pipe = LaserTextPipeline(bpe_codes=CODES, bpe_vocab=VOCAB)
            t = time.perf_counter()
            out1 = []
            for lines, lang in data:
                out1.extend(pipe.process(lines, lang, stage="bpe"))
            t1 = time.perf_counter() - t
            print(f"  tokenisation + BPE, 1 process     : {t1:7.2f} s  {n / t1:>8,.0f} sentences/s  (cold start)")

            pipe = LaserTextPipeline(bpe_codes=CODES, bpe_vocab=VOCAB)
            t = time.perf_counter()
            tok_all = []
            for lines, lang in data:
                tok_all.extend(pipe.process(lines, lang, stage="tok"))
            t_tok = time.perf_counter() - t
            print(f"  tokenisation only, 1 process      : {t_tok:7.2f} s  {n / t_tok:>8,.0f} sentences/s")

            pipe = LaserTextPipeline(bpe_codes=CODES, bpe_vocab=VOCAB)
            all_lines = [line for lines, _ in data for line in lines]
            all_langs = [lang for lines, lang in data for _ in lines]
            from hf_laser.text.text_tokenizer import _iter_chunked

            t = time.perf_counter()
            out2 = list(_iter_chunked(pipe, all_lines, all_langs, "bpe", False, args.num_proc, 2000))
            t2 = time.perf_counter() - t
            print(f"  tokenisation + BPE, num_proc={args.num_proc}    : {t2:7.2f} s  {n / t2:>8,.0f} sentences/s"
                  f"  (same output: {out1 == out2})")

            if LASER2_SPM.exists():
                pipe2 = LaserTextPipeline(spm_model=LASER2_SPM)
                t = time.perf_counter()
                for lines, lang in data:
                    pipe2.process(lines, lang, stage="bpe")
                t3 = time.perf_counter() - t
                print(f"  LASER2 preprocessing + SPM, 1 proc: {t3:7.2f} s  {n / t3:>8,.0f} sentences/s")

            # agreement with the reference on the first 100 lines of each file
            ok = total = 0
            pos = 0
            for f, (lines, _) in zip(files, data):
                ref = read_lines(REFERENCE / "tatoeba" / f"{f.name}.bpe")
                got = out1[pos:pos + len(ref)]
                ok += sum(a == b for a, b in zip(got, ref))
                total += len(ref)
                pos += len(lines)
            print(f"  agreement with reference .bpe (first 100 lines/file): {ok}/{total}")

    if tok_all is not None:
        bench_bpe(tok_all, "the .tok of all 224 full Tatoeba files")
    ref_tok = []
    for f in sorted((REFERENCE / "tatoeba").glob("*.tok")):
        ref_tok.extend(read_lines(f))
    bench_bpe(ref_tok, "the 224 reference .tok files (100 lines each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
