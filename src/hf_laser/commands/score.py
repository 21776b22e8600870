"""`hf-laser score`: one score per pair of a parallel corpus (two aligned files, or one TSV), and with a threshold
the kept (and removed) pairs: corpus filtering with LASER ([`hf_laser.mining.score_pairs`]: cosine, or the margin
over the corpus's own sentences).

Both sides are embedded as `hf-laser mine` embeds them (streamed into `.npy` files, resumable and reused by their
manifests in `--embed-dir`; each side by the member of its language in a model set), the kNN arrays of the margin
go to a scratch directory beside them, and the pairs are written as they are read: memory holds `[N]` vectors, not
the text. The scores file (`-o`) has a manifest (`OUT.manifest.json`: the inputs' hashes, each side's model and
options, the scoring options); a run with the same identity reuses it (a new `--threshold` costs one pass over
the files), anything else recomputes it, saying why.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .. import __version__
from ..defaults import DEFAULT_MAX_TOKENS
from ..errors import UsageError
from ..models import resolve_model
from .common import (
    add_max_sentence_tokens_argument,
    add_speed_argument,
    check_device_arg,
    check_encoding_args,
    check_lang_arg,
    check_output_path,
    is_stream,
    load_encoder_for_cli,
    max_sentence_tokens_arg,
    spool_stream,
)
from .mine import _scratch_dir, _side_embeddings

WHO = "hf-laser score"
SCORES_FORMAT = "hf-laser-scores/1"
# a TSV line longer than this is refused (one sentence pair; LASER itself cuts sentences at 1,024 tokens)
MAX_TSV_LINE_BYTES = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", nargs="?", help="source text file, one sentence per line (or give --tsv)")
    parser.add_argument("tgt", nargs="?", help="target text file, aligned with the source line by line")
    parser.add_argument("--tsv", default=None, metavar="FILE",
                        help="the corpus as one TSV file of src<TAB>tgt lines instead of two files ('-': stdin)")
    parser.add_argument("--model", default=None,
                        help="model directory, model set or Hub id (default: the shipped laser-mini); a model set "
                             "embeds each side with the member of its language")
    parser.add_argument("--src-lang", default=None, help="source language (required)")
    parser.add_argument("--tgt-lang", default=None, help="target language (required)")
    parser.add_argument("-o", "--output", default=None,
                        help="scores file: one score per pair, in the corpus's order, 6 decimals ('-': stdout)")
    parser.add_argument("--method", choices=["margin", "cosine"], default="margin",
                        help="margin (default): cos(x, y) against the mean cosine of each side's k nearest "
                             "neighbours among the corpus's other side; cosine: cos(x, y)")
    parser.add_argument("--margin", choices=["ratio", "distance"], default="ratio",
                        help="margin function: ratio (a / b, default) or distance (a - b)")
    parser.add_argument("-k", "--k", dest="k", type=int, default=4, help="neighbourhood size of the margin (default 4)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="a pair is kept when its score (as written, 6 decimals) is >= THRESHOLD (default: 1.06 "
                             "for the ratio margin, NLLB's; required for --method cosine and --margin distance)")
    parser.add_argument("--keep", default=None, metavar="FILE",
                        help="write the kept pairs here as src<TAB>tgt lines, in the corpus's order ('-': stdout)")
    parser.add_argument("--removed", default=None, metavar="FILE",
                        help="write the removed pairs here as src<TAB>tgt lines ('-': stdout)")
    parser.add_argument("--check-lang", action="store_true",
                        help="also remove pairs whose source or target is detected (py3langid, the detector of "
                             "lang=auto elsewhere) in another language than --src-lang / --tgt-lang; text without "
                             "letters is not judged")
    parser.add_argument("--embed-dir", default=None,
                        help="keep the embeddings here: reused or resumed on re-runs for the same input, model and "
                             "options (else recomputed, with a message)")
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute the embeddings and the scores instead of reusing or resuming them")
    parser.add_argument("--wait", action="store_true",
                        help="when another run writes the same embeddings or scores, wait for it instead of stopping")
    parser.add_argument("--fp16", action="store_true", help="store float16 embeddings")
    parser.add_argument("--pretokenized", action="store_true", help="inputs are already tokenized + BPE'd")
    parser.add_argument("--index", default="flat",
                        help="faiss index of the margin's kNN search: flat (exact, default), ivf, ivfpq or a factory "
                             "string")
    parser.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~4*sqrt(N))")
    parser.add_argument("--nprobe", type=int, default=None, help="IVF lists visited per query (default 16)")
    parser.add_argument("--knn-device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="faiss device (auto: GPU when faiss-gpu sees one)")
    parser.add_argument("--device", default=None, help="encoder device (e.g. cpu, cuda, cuda:1)")
    add_speed_argument(parser)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"token budget per batch, padding included (default {DEFAULT_MAX_TOKENS:,})")
    add_max_sentence_tokens_argument(parser)
    parser.add_argument("--opuscleaner-filter", action="store_true",
                        help="print this command's OpusCleaner filter definition (JSON, save it as "
                             "filters/hf_laser_score.json) and exit")
    parser.add_argument("--no-progress", "-q", dest="no_progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    if args.opuscleaner_filter:
        # lazy: the filter definition is printed on request only
        from ..integrations.opuscleaner import opuscleaner_filter

        print(json.dumps(opuscleaner_filter(), indent=4))
        return 0
    # lazy: mining imports numpy, tqdm
    from ..mining import default_threshold, require_faiss

    t0 = time.time()
    outputs = check_arguments(args)
    if args.method == "margin":
        require_faiss()
    threshold = args.threshold if args.threshold is not None else default_threshold(args.method, args.margin)
    if (args.keep or args.removed) and threshold is None:
        raise UsageError(f"--keep / --removed with --method {args.method}"
                         f"{' --margin distance' if args.method == 'margin' else ''} need a --threshold (there is "
                         "a default only for the ratio margin: 1.06)")
    langs = check_lang_detector(args) if args.check_lang else None
    model = resolve_model(args.model, who=WHO)
    encoder = load_encoder_for_cli(model, WHO, pretokenized=args.pretokenized, device=args.device,
                                   **({"speed": args.speed} if args.speed else {}))
    show = False if args.no_progress else None
    tmp = tempfile.TemporaryDirectory(prefix="hf_laser_score_")
    try:
        embed_dir = Path(args.embed_dir) if args.embed_dir else Path(tmp.name)
        embed_dir.mkdir(parents=True, exist_ok=True)
        src, tgt = input_files(args, embed_dir)
        n = aligned_lines(src, tgt)
        if n == 0:  # (a filter in a pipeline may be handed nothing): empty outputs
            with Outputs(outputs):
                pass
            print(f"{WHO}: the corpus is empty: nothing to score", file=sys.stderr)
            return 0
        if args.method == "margin" and args.k > n:
            raise UsageError(f"-k {args.k} is larger than the corpus ({n:,} pairs): the margin needs k <= the number "
                             "of pairs; give a smaller -k, or --method cosine")
        with scores_lock(outputs["scores"], args.wait):  # one run at a time writes these scores
            identity = scores_identity(args, encoder, src, tgt)
            with scores_of(args, encoder, src, tgt, n, embed_dir, outputs["scores"], identity, show) as (scores,
                                                                                                          reused):
                counts = write_outputs(src, tgt, scores, n, threshold, langs, outputs, reused, identity, show)
    finally:
        tmp.cleanup()
    kept = "" if counts is None else (
        f"; kept {counts['kept']:,} of {n:,} (score >= {threshold}: {counts['above']:,}"
        + (f"; wrong language: {counts['wrong_lang']:,}" if langs else "") + ")")
    what = f"{args.method}" + (f" ({args.margin}, k={args.k})" if args.method == "margin" else "")
    print(f"{WHO}: {n:,} pairs scored by {what}{' (reused)' if reused else ''} in {time.time() - t0:.1f} s{kept}",
          file=sys.stderr)
    return 0


def check_arguments(args: argparse.Namespace) -> dict:
    """Every argument checked before the model is loaded or a file is written; the outputs by role."""
    if args.tsv is not None and (args.src or args.tgt):
        raise UsageError("give either two files (SRC TGT) or --tsv FILE, not both")
    if args.tsv is None and not (args.src and args.tgt):
        raise UsageError("give the corpus: two aligned files (SRC TGT) or --tsv FILE")
    for flag, lang in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if lang is None and not args.pretokenized:
            raise UsageError(f"{flag} is required (the language selects the preprocessing, and a model set's member)")
    args.src_lang = check_lang_arg(args.src_lang, WHO, "--src-lang")
    args.tgt_lang = check_lang_arg(args.tgt_lang, WHO, "--tgt-lang")
    for flag, lang in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if isinstance(lang, str) and lang.strip().lower() == "auto":
            raise UsageError(f"{flag} auto: a corpus side has one language; give it (--check-lang checks it)")
    if args.check_lang and (args.pretokenized or None in (args.src_lang, args.tgt_lang)):
        raise UsageError("--check-lang detects the language of text: give --src-lang and --tgt-lang, without "
                         "--pretokenized")
    check_device_arg(args.device)
    check_encoding_args(args)
    if args.k < 1:
        raise UsageError(f"-k must be at least 1, got {args.k}")
    for path in [args.src, args.tgt] + ([] if args.tsv in (None, "-") else [args.tsv]):
        if path is not None and not Path(path).is_file() and not is_stream(path):
            raise UsageError(f"input file not found: {path}" if not Path(path).exists()
                             else f"input {path} is not a file")
    outputs = {"scores": args.output, "keep": args.keep, "removed": args.removed}
    given = {role: path for role, path in outputs.items() if path is not None}
    if not given:
        raise UsageError("nothing to write: give -o (the scores), --keep and/or --removed")
    if sum(path == "-" for path in given.values()) > 1:
        raise UsageError("only one of -o, --keep and --removed can be stdout ('-')")
    real = [os.path.realpath(p) for p in given.values() if p != "-"]
    inputs = {os.path.realpath(p) for p in (args.src, args.tgt, args.tsv) if p not in (None, "-")}
    if len(set(real)) != len(real) or inputs & set(real):
        raise UsageError("-o, --keep, --removed and the inputs must be different files")
    for role, path in given.items():
        if path != "-":
            check_output_path(path, {"scores": "-o", "keep": "--keep", "removed": "--removed"}[role])
    return outputs


def check_lang_detector(args: argparse.Namespace) -> tuple[str, str]:
    """The detector's codes of the two declared languages, or a [`UsageError`] when it does not know one."""
    # lazy: the detector (py3langid) is loaded for --check-lang only
    from ..text.langid import label_code, supported_codes
    from ..text.languages import flores_codes

    out = []
    for flag, lang in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        candidates = [lang] + list(flores_codes(lang))
        codes = [label_code(c) for c in candidates]
        known = [c for c in codes if c in supported_codes()]
        if not known:
            raise UsageError(f"--check-lang: the language detector (py3langid) does not know {flag} {lang}; drop "
                             "--check-lang for this corpus")
        out.append(known[0])
    return out[0], out[1]


def input_files(args: argparse.Namespace, embed_dir: Path) -> tuple[str, str]:
    """The two sides as files: the two given, or the TSV's columns written beside the embeddings (named by the
    TSV's content, so that --embed-dir reuses their embeddings)."""
    if args.tsv is None:
        return args.src, args.tgt
    tsv = args.tsv
    if tsv == "-" or is_stream(tsv):
        tsv = spool_stream(sys.stdin.buffer if tsv == "-" else tsv, "stdin" if tsv == "-" else tsv)
        spooled = True
    else:
        spooled = False
    try:
        digest = hashlib.sha256()
        with open(tsv, "rb") as f:
            while block := f.read(1 << 24):
                digest.update(block)
        stem = f"tsv-{digest.hexdigest()[:16]}"
        src, tgt = embed_dir / f"{stem}.src.txt", embed_dir / f"{stem}.tgt.txt"
        if not (src.is_file() and tgt.is_file()):
            split_tsv(tsv, src, tgt, "stdin" if args.tsv == "-" else args.tsv)
    finally:
        if spooled:
            os.unlink(tsv)
    return str(src), str(tgt)


def split_tsv(tsv, src: Path, tgt: Path, name: str) -> None:
    """The two columns of a `src<TAB>tgt` file into two files (each complete or absent); a line of another number
    of columns, or longer than [`MAX_TSV_LINE_BYTES`], is refused with its number."""
    parts = [p.with_name(p.name + f".{os.getpid()}.partial") for p in (src, tgt)]
    try:
        with open(tsv, "rb") as f, open(parts[0], "wb") as fs, open(parts[1], "wb") as ft:
            for number, line in enumerate(iter(lambda: f.readline(MAX_TSV_LINE_BYTES + 1), b""), 1):
                if len(line) > MAX_TSV_LINE_BYTES:
                    raise UsageError(f"line {number} of {name} is longer than {MAX_TSV_LINE_BYTES:,} bytes: not a "
                                     "sentence pair")
                fields = line.rstrip(b"\n").split(b"\t")
                if len(fields) != 2:
                    raise UsageError(f"line {number} of {name} has {len(fields)} column(s); --tsv expects "
                                     "src<TAB>tgt (2 columns)")
                fs.write(fields[0] + b"\n")
                ft.write(fields[1] + b"\n")
        for part, final in zip(parts, (src, tgt)):
            os.replace(part, final)
    finally:
        for part in parts:
            part.unlink(missing_ok=True)


def aligned_lines(src: str, tgt: str) -> int:
    # lazy: outputs imports numpy
    from ..outputs import scan_input

    n, m = scan_input(src, sha256=False)["lines"], scan_input(tgt, sha256=False)["lines"]
    if n != m:
        raise UsageError(f"the two sides are not aligned: {src} has {n:,} lines, {tgt} {m:,}")
    return n


def scores_identity(args: argparse.Namespace, encoder, src: str, tgt: str) -> dict:
    """What the scores are computed from: each side's embedding identity (its content's sha256, language, the model
    of its language, options) and the scoring options."""
    # lazy: mining imports numpy, tqdm
    from ..mining import scan_input, shard_identity

    sides = {}
    for side, path, lang in (("src", src, args.src_lang), ("tgt", tgt, args.tgt_lang)):
        sides[side] = shard_identity(encoder, scan_input(path), lang, pretokenized=args.pretokenized, fp16=args.fp16,
                                     max_tokens=args.max_tokens, max_sentence_tokens=max_sentence_tokens_arg(args))
    scoring = {"method": args.method}
    if args.method == "margin":
        scoring.update(margin=args.margin, k=args.k, index=args.index, nlist=args.nlist, nprobe=args.nprobe)
    return {"hf_laser": __version__, **sides, "scoring": scoring}


def scores_lock(output, wait: bool):
    """The lock of the scores file `output` (none for stdout or no file)."""
    if output in (None, "-"):
        return contextlib.nullcontext()
    # lazy: outputs imports numpy
    from ..outputs import output_lock

    return output_lock(output, wait=wait, say=lambda m: print(f"{WHO}: {m}", file=sys.stderr))


@contextlib.contextmanager
def scores_of(args, encoder, src: str, tgt: str, n: int, embed_dir: Path, output, identity: dict, show):
    """`(scores, reused)`: the scores as an iterable of floats in the corpus's order: read from `-o` when its
    manifest holds this identity and its content its checksum, else computed (into a memory map in `embed_dir`,
    removed after)."""
    if output not in (None, "-") and not args.overwrite:
        why = reusable(Path(output), identity, n)
        if why is None:
            with open(output, encoding="ascii") as f:
                yield (float(line) for line in f), True
            return
        if why:
            print(f"{WHO}: recomputing the scores in {output}: {why}", file=sys.stderr)
    # lazy: numpy (hf-laser --help imports none)
    import numpy as np

    path = embed_dir / f"scores-{os.getpid()}.npy"
    try:
        scores = compute_scores(args, encoder, src, tgt, n, embed_dir, path, show)
        yield (float(v) for a in range(0, n, 1 << 16) for v in np.asarray(scores[a:a + (1 << 16)]).tolist()), False
    finally:
        path.unlink(missing_ok=True)


def reusable(output: Path, identity: dict, n: int) -> str | None:
    """None when `output` holds the scores of `identity`; else why not ("" when there is no output)."""
    # lazy: outputs imports numpy
    from ..outputs import file_sha256, identity_changes, read_json

    manifest_path = output.with_name(output.name + ".manifest.json")
    if not output.exists():
        return ""
    try:
        manifest = read_json(manifest_path)
        old, recorded = manifest["identity"], manifest["output"]
        if manifest.get("format") != SCORES_FORMAT or not isinstance(old, dict) or not isinstance(recorded, dict):
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        return f"it has no readable manifest ({manifest_path.name})"
    flat_old = {**{f"src {k}": v for k, v in old.get("src", {}).items()},
                **{f"tgt {k}": v for k, v in old.get("tgt", {}).items()}, "scoring": old.get("scoring")}
    flat_new = {**{f"src {k}": v for k, v in identity["src"].items()},
                **{f"tgt {k}": v for k, v in identity["tgt"].items()}, "scoring": identity["scoring"]}
    if changes := identity_changes(flat_old, flat_new):
        return "they were computed from something else: " + "; ".join(changes)
    if recorded.get("lines") != n or recorded.get("size") != output.stat().st_size \
            or recorded.get("sha256") != file_sha256(output):
        return "the file was changed after its manifest was written"
    return None


def compute_scores(args, encoder, src: str, tgt: str, n: int, embed_dir: Path, path: Path, show):
    """The scores of the corpus, `[n]` float64 in the `.npy` memory map `path`."""
    # lazy: numpy (hf-laser --help imports none)
    import numpy as np

    # lazy: mining imports numpy, tqdm
    from ..mining import score_pairs

    x, _ = _side_embeddings(lambda: encoder, src, args.src_lang, embed_dir, False, args, show)
    y, _ = _side_embeddings(lambda: encoder, tgt, args.tgt_lang, embed_dir, False, args, show)
    scores = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n,))
    with _scratch_dir(embed_dir) as scratch:  # the [N, k] kNN arrays on disk, removed after
        score_pairs(x, y, method=args.method, margin=args.margin, k=args.k, index=args.index, nlist=args.nlist,
                    nprobe=args.nprobe, device=args.knn_device, knn_dir=scratch / "knn", show_progress=show,
                    out=scores)
    scores.flush()
    return scores


class Outputs:
    """The output files of a run, written as `.partial` files renamed when complete (stdout written to as is)."""

    def __init__(self, paths: dict):
        self.paths = {role: path for role, path in paths.items() if path is not None}
        self.files, self.partials = {}, {}

    def __enter__(self):
        for role, path in self.paths.items():
            if path == "-":
                self.files[role] = sys.stdout
                continue
            partial = Path(path).with_name(Path(path).name + f".{os.getpid()}.partial")
            self.partials[role] = partial
            self.files[role] = open(partial, "w", encoding="utf-8", errors="surrogateescape", newline="\n")
        return self

    def get(self, role: str):
        return self.files.get(role)

    def __exit__(self, exc_type, exc, tb):
        for role, f in self.files.items():
            if f is not sys.stdout:
                f.close()
            else:
                f.flush()
        for role, partial in self.partials.items():
            if exc_type is None:
                os.replace(partial, self.paths[role])
            else:
                partial.unlink(missing_ok=True)
        return False


def write_outputs(src: str, tgt: str, scores, n: int, threshold, langs, paths: dict, reused: bool, identity: dict,
                  show):
    """One pass over both sides: the scores (unless reused) and their manifest, the kept and removed pairs. Counts,
    or None without a threshold."""
    # lazy: tqdm (hf-laser --help imports none)
    from tqdm.auto import tqdm

    # lazy: encoder and outputs import numpy
    from ..encoder import read_lines
    from ..outputs import file_sha256, write_json_atomic

    if langs is not None:
        # lazy: the detector (py3langid) is loaded for --check-lang only
        from ..text.langid import classify
    paths = dict(paths)
    scores_path = paths["scores"]
    if reused:
        paths["scores"] = None
    decide = threshold is not None and (paths["keep"] or paths["removed"])
    counts = {"kept": 0, "above": 0, "wrong_lang": 0}
    with Outputs(paths) as out:
        scores_file, keep, removed = out.get("scores"), out.get("keep"), out.get("removed")
        bar = tqdm(total=n, desc="pairs", unit="pair", disable=None if show is None else not show)
        for i, (score, s, t) in enumerate(zip(scores, read_lines(src), read_lines(tgt))):
            text = f"{score:.6f}"
            if scores_file is not None:
                scores_file.write(text + "\n")
            if decide:
                above = float(text) >= threshold
                ok = above
                if langs is not None and ok:
                    ok = lang_ok(classify, s, langs[0]) and lang_ok(classify, t, langs[1])
                    counts["wrong_lang"] += not ok
                counts["above"] += above
                counts["kept"] += ok
                f = keep if ok else removed
                if f is not None:
                    if "\t" in s or "\t" in t:
                        raise UsageError(f"line {i + 1} holds a tab: a pair with a tab cannot be written as "
                                         "src<TAB>tgt")
                    f.write(f"{s}\t{t}\n")
            if i % 4096 == 4095:
                bar.update(4096)
        bar.update(n - bar.n)
        bar.close()
    if paths["scores"] not in (None, "-"):
        output = Path(scores_path)
        st = output.stat()
        write_json_atomic(output.with_name(output.name + ".manifest.json"), {
            "format": SCORES_FORMAT, "identity": identity,
            "output": {"lines": n, "size": st.st_size, "sha256": file_sha256(output)}})
    return counts if decide else None


def lang_ok(classify, text: str, expected: str) -> bool:
    guess = classify(text)
    return guess is None or guess[0] == expected
