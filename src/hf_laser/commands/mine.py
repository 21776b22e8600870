"""`hf-laser mine`: embed two text files (streamed to disk), mine parallel sentences with margin-based scoring
(`hf_laser.mining`), write `score<TAB>src<TAB>tgt`, best first.

[`main`] is `python -m hf_laser.mining {mine,embed-shards}` (the module form that `accelerate launch -m` /
`torchrun -m` start).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_TOKENS
from ..errors import UsageError, run_cli
from ..models import resolve_model
from . import embed_shards
from .common import (
    add_max_sentence_tokens_argument,
    add_ray_arguments,
    add_speed_argument,
    check_device_arg,
    check_encoding_args,
    check_lang_arg,
    check_output_path,
    connect_ray,
    load_encoder_for_cli,
    max_sentence_tokens_arg,
    names_a_model_set,
    ray_on_a_cluster,
)

WHO = "hf-laser mine"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``hf-laser mine`` arguments to ``parser`` (a sub-command parser)."""
    # lazy: mining imports numpy, tqdm
    from ..mining import MARGINS, MODE_ALIASES, MODES

    parser.add_argument("src", help="source text file, one sentence per line")
    parser.add_argument("tgt", help="target text file, one sentence per line")
    parser.add_argument("--model", default=None,
                        help="HF LASER model directory or Hub repo id (default: the shipped laser-mini)")
    parser.add_argument("--src-lang", required=True, help="source language: a code (de, deu_Latn) or a language name (German)")
    parser.add_argument("--tgt-lang", required=True, help="target language: a code (en, eng_Latn) or a language name (English)")
    parser.add_argument("-o", "--output", required=True, help="output TSV: score<TAB>src<TAB>tgt, best first")
    parser.add_argument("--threshold", type=float, default=None,
                        help="keep pairs with score > THRESHOLD (default: keep all)")
    parser.add_argument("--mode", default="max", choices=list(MODES) + list(MODE_ALIASES),
                        help="candidate selection (default: max)")
    parser.add_argument("--margin", default="ratio", choices=MARGINS, help="margin function (default: ratio)")
    parser.add_argument("-k", "--k", "--neighborhood", dest="k", type=int, default=4,
                        help="neighbourhood size (default: 4)")
    parser.add_argument("--fp16", action="store_true", help="encode in float16 / store float16 embeddings")
    parser.add_argument("--embed-dir", default=None,
                        help="keep embeddings here: reused/resumed on re-runs when the input, model and options are "
                        "the same (else recomputed, with a message); shards from `embed-shards` are used")
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute the embeddings in --embed-dir instead of reusing or resuming them")
    parser.add_argument("--wait", action="store_true",
                        help="when another run is writing the same embeddings in --embed-dir, wait for it (then reuse "
                        "them) instead of stopping with an error")
    parser.add_argument("--dedup", action="store_true",
                        help="embed and search identical lines once (what the original's mining scripts call unify); "
                             "outputs each unique pair once")
    parser.add_argument("--pretokenized", action="store_true", help="inputs are already tokenized + BPE'd")
    parser.add_argument("--index", default="flat",
                        help="faiss index: flat (exact, default), ivf, ivfpq, or a faiss factory string")
    parser.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~4*sqrt(N))")
    parser.add_argument("--nprobe", type=int, default=None, help="IVF lists visited per query (default 16)")
    parser.add_argument("--pq-m", type=int, default=None, help="PQ sub-quantizers for ivfpq (default d/16)")
    parser.add_argument("--no-refine", dest="refine", action="store_false", default=None,
                        help="with an approximate index, keep its similarities instead of recomputing the neighbours' "
                        "cosines exactly from the embeddings (saves reading k rows per query; the margins are then "
                        "approximate)")
    parser.add_argument("--shard-size", type=int, default=None,
                        help="split the searched corpus into indexes of this many vectors and merge top-k")
    parser.add_argument("--query-batch-size", type=int, default=None, help="queries searched per batch")
    parser.add_argument("--knn-device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="faiss device (auto: GPU when faiss-gpu sees one)")
    parser.add_argument("--device", default=None, help="encoder device (e.g. cpu, cuda, cuda:1)")
    add_speed_argument(parser)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"token budget per batch, padding included (default {DEFAULT_MAX_TOKENS:,}, as the "
                             "original's)")
    add_max_sentence_tokens_argument(parser)
    add_ray_arguments(parser, searchers=True)
    parser.add_argument("--no-progress", action="store_true", help="disable progress bars")
    return parser


def _side_embeddings(encoder_fn, path, lang, embed_dir: Path, dedup: bool, args, show):
    """Embeddings of one side (all lines, or unique lines with ``dedup``) and the dedup map.

    Shards from ``embed-shards`` are used when they were computed from this file's content with this model and
    options; other cached files are checked by ``encode_file`` (its manifest), so nothing stale is reused."""
    # lazy: mining imports numpy, tqdm
    from ..mining import embedding_key, scan_input

    # lazy: outputs imports numpy
    from ..outputs import output_lock

    info = scan_input(path)
    if info["lines"] == 0:
        raise ValueError(f"input file {path} is empty")
    key = embedding_key(path, lang)
    # one run at a time on these embeddings (the lock encode_file takes on {key}.npy, held here from the start)
    with output_lock(embed_dir / f"{key}.npy", wait=getattr(args, "wait", False),
                     say=lambda m: print(f" - {m}", file=sys.stderr)):
        return _side_embeddings_locked(encoder_fn, path, lang, embed_dir, dedup, args, show, info, key)


def _side_embeddings_locked(encoder_fn, path, lang, embed_dir: Path, dedup: bool, args, show, info, key):
    # lazy: mining imports numpy, tqdm
    from ..mining import StaleEmbeddingsError, as_embeddings, deduplicate_file, load_embedding_shards, shard_identity

    n = info["lines"]
    identity = shard_identity(encoder_fn(), info, lang, pretokenized=args.pretokenized, fp16=args.fp16,
                               max_tokens=args.max_tokens, max_sentence_tokens=max_sentence_tokens_arg(args))
    sharded = None
    if not getattr(args, "overwrite", False):
        try:
            sharded = load_embedding_shards(embed_dir, path, lang, identity=identity)
        except StaleEmbeddingsError as err:
            print(f" - {err}: not using them, embedding {path} anew", file=sys.stderr)
    dd = None
    if dedup:
        dd = deduplicate_file(path, embed_dir / f"{key}.unique.txt")
    if sharded is not None:
        emb = sharded if dd is None else sharded.subset(dd.first)
        print(f" - {path}: using {len(sharded.shards)} embedding shard(s) from {embed_dir}", file=sys.stderr)
    else:
        txt = embed_dir / f"{key}.unique.txt" if dd is not None else Path(path)
        npy = embed_dir / f"{key}{'.unique' if dd is not None else ''}.npy"
        encoder = encoder_fn()
        options = dict(lang=lang, pretokenized=args.pretokenized, fp16=args.fp16, max_tokens=args.max_tokens,
                       max_sentence_tokens=max_sentence_tokens_arg(args), show_progress_bar=show,
                       resume=not getattr(args, "overwrite", False))
        if hasattr(encoder, "_encode_file"):  # a LaserEncoder: its messages in the command line's words
            arr, _ = encoder._encode_file(
                str(txt), str(npy), batch_size=None, chunk_lines=DEFAULT_CHUNK_LINES, normalize_embeddings=False,
                device=None, num_proc=1, say=lambda m: print(f" - {m}", file=sys.stderr), fresh_reason="--overwrite",
                **options)
        else:
            arr = encoder.encode_file(str(txt), str(npy), **options)
        emb = as_embeddings(arr)
    expected = dd.num_unique if dd is not None else n
    if len(emb) != expected:
        raise ValueError(
            f"embeddings of {path} have {len(emb)} rows but {expected} (unique) lines were expected; "
            f"delete stale files in {embed_dir}"
        )
    if dd is not None:
        print(f" - {path}: {n} lines, {dd.num_unique} unique", file=sys.stderr)
    return emb, dd


@contextlib.contextmanager
def _scratch_dir(embed_dir: Path):
    """A new directory in `embed_dir` for this run's kNN arrays, locked while the run uses it and removed after; the
    scratch directories of runs that died (their lock no longer held) are removed first, saying so: they can be
    many GB."""

    # lazy: outputs imports numpy
    from ..outputs import OutputBusyError, output_lock

    for old in sorted(embed_dir.glob("mine-scratch-*")):
        if not old.is_dir():
            continue
        try:
            with output_lock(old):
                shutil.rmtree(old, ignore_errors=True)
            print(f"{WHO}: removed {old}, the scratch directory of a run that did not finish", file=sys.stderr)
        except OutputBusyError:
            continue  # another run's, in use
    scratch = embed_dir / f"mine-scratch-{uuid.uuid4().hex[:12]}"
    with output_lock(scratch):  # taken before the directory exists: a directory without a held lock is a dead run's
        scratch.mkdir()
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    """Run ``hf-laser mine``: embed both files (streamed to disk), mine, write ``score<TAB>src<TAB>tgt``.

    Errors are raised; under [`hf_laser.errors.run_cli`] they become one line on stderr with exit status 2 for a
    user error, 1 for a full disk.
    """

    # lazy: mining imports numpy, tqdm
    from ..mining import mine, require_faiss

    # lazy: mining.lines imports numpy, tqdm
    from ..mining.lines import LineReader

    t0 = time.time()
    show = False if getattr(args, "no_progress", False) else None
    for p in (args.src, args.tgt):
        if not Path(p).is_file():
            raise FileNotFoundError(f"input file not found: {p}" if not Path(p).exists() else f"input {p} is not a file")
    routed = names_a_model_set(args.model)
    args.src_lang = check_lang_arg(args.src_lang, WHO, "--src-lang", note=False, auto=not routed)
    args.tgt_lang = check_lang_arg(args.tgt_lang, WHO, "--tgt-lang", note=False, auto=not routed)
    check_device_arg(args.device)
    check_encoding_args(args)
    check_output_path(args.output)  # before minutes of work, not after
    require_faiss()
    encoder = None
    model = resolve_model(args.model, who=WHO)

    def get_encoder():
        nonlocal encoder
        if encoder is None:
            encoder = load_encoder_for_cli(model, WHO, langs={"--src-lang": args.src_lang,
                                                             "--tgt-lang": args.tgt_lang},
                                           pretokenized=args.pretokenized, device=args.device,
                                           **({"speed": args.speed} if args.speed else {}))
        return encoder

    get_encoder()  # a bad --model fails before anything is embedded
    knn = None
    if args.ray:
        if ray_on_a_cluster(args) and not args.embed_dir:
            raise UsageError("--ray on a cluster needs --embed-dir, on a filesystem every node shares")
        if args.overwrite:
            raise UsageError("--overwrite with --ray: delete the shards in --embed-dir instead")
        connect_ray(args)

        # lazy: mining.on_ray imports numpy, tqdm
        from ..mining.on_ray import knn_search_on_ray

        knn = functools.partial(knn_search_on_ray, num_searchers=args.num_searchers, gpus_per_searcher=args.gpus_per_searcher)

    tmpdir = None
    if args.embed_dir:
        embed_dir = Path(args.embed_dir)
        embed_dir.mkdir(parents=True, exist_ok=True)
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="hf_laser_mine_")
        embed_dir = Path(tmpdir.name)
    try:
        if args.ray:  # both files as shards by encoder actors (finished shards skipped), found below by identity
            # lazy: mining.on_ray imports numpy, tqdm
            from ..mining.on_ray import embed_files

            embed_files([(args.src_lang, args.src), (args.tgt_lang, args.tgt)], embed_dir, model,
                        num_encoders=args.num_encoders, gpus_per_encoder=args.gpus_per_encoder,
                        tokenizers_per_encoder=args.tokenizers_per_encoder, pretokenized=args.pretokenized,
                        fp16=args.fp16, max_tokens=args.max_tokens, max_sentence_tokens=max_sentence_tokens_arg(args),
                        **({"speed": args.speed} if args.speed else {}),
                        **({"device": args.device} if args.device else {}))
        x, dx = _side_embeddings(get_encoder, args.src, args.src_lang, embed_dir, args.dedup, args, show)
        y, dy = _side_embeddings(get_encoder, args.tgt, args.tgt_lang, embed_dir, args.dedup, args, show)
        # the [N, k] kNN arrays and the line starts live on disk beside the embeddings, not in memory
        with _scratch_dir(embed_dir) as scratch:
            res = mine(
                x, y, k=args.k, margin=args.margin, mode=args.mode, threshold=args.threshold, index=args.index,
                device=args.knn_device, query_batch_size=args.query_batch_size, shard_size=args.shard_size,
                nlist=args.nlist, nprobe=args.nprobe, pq_m=getattr(args, "pq_m", None), show_progress=show,
                refine=getattr(args, "refine", None), knn_dir=scratch / "knn", **({"knn": knn} if knn else {}),
            )
            src_lines = dx.to_original(res.src) if dx is not None else res.src
            tgt_lines = dy.to_original(res.tgt) if dy is not None else res.tgt
            out_path = Path(args.output)
            # a file output is whole or absent, never cut short (a device or pipe, /dev/stdout, is written to as is)
            direct = out_path.exists() and not out_path.is_file()
            partial = out_path if direct else out_path.with_name(out_path.name + ".partial")
            with LineReader(args.src, scratch / "src.offsets") as src_text, \
                    LineReader(args.tgt, scratch / "tgt.offsets") as tgt_text:
                for text, lines in ((src_text, src_lines), (tgt_text, tgt_lines)):
                    if len(lines):
                        text.lines_at([int(lines.max())])  # the file still has them all, before anything is written
                try:
                    with open(partial, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
                        for a in range(0, len(res), 1 << 16):  # written as read: the texts of a block at a time
                            block = slice(a, a + (1 << 16))
                            out.writelines(f"{s:.6f}\t{i}\t{j}\n" for s, i, j in zip(
                                res.scores[block].tolist(), src_text.lines_at(src_lines[block]),
                                tgt_text.lines_at(tgt_lines[block])))
                except BaseException:
                    if not direct:
                        partial.unlink(missing_ok=True)
                    raise
            if not direct:
                os.replace(partial, out_path)
        print(
            f" - mined {len(res)} pairs ({args.mode}, {args.margin} margin, k={args.k}"
            f"{'' if args.threshold is None else f', threshold {args.threshold}'}) from {len(x)} x {len(y)} "
            f"sentences in {time.time() - t0:.1f}s -> {out_path}",
            file=sys.stderr,
        )
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hf_laser.mining {mine,embed-shards} ...``."""
    parser = argparse.ArgumentParser(prog="python -m hf_laser.mining", description="LASER bitext mining")
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("mine", help="mine parallel sentences between two text files"))
    embed_shards.add_arguments(
        sub.add_parser("embed-shards", help="embed text files into shards (run once per process)")
    )
    args = parser.parse_args(argv)
    if args.command == "mine":
        return run_cli(WHO, run, args)
    return run_cli("hf_laser.mining embed-shards", embed_shards.run, args)
