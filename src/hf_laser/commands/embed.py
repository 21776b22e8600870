"""`hf-laser embed`: a text file (or stdin), one sentence per line, into a `.npy` file (`LaserEncoder.encode_file`:
streamed, resumable, with a manifest)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_TOKENS
from ..errors import UsageError
from ..models import resolve_model
from .common import (
    add_engine_argument,
    add_max_sentence_tokens_argument,
    add_speed_argument,
    check_device_arg,
    check_encoding_args,
    check_lang_arg,
    check_output_path,
    is_stream,
    load_encoder_for_cli,
    max_sentence_tokens_arg,
    names_a_model_set,
    speed_kwargs,
    spool_stream,
)

WHO = "hf-laser embed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="model directory (from hf-laser convert) or Hub id (default: the shipped laser-mini)")
    parser.add_argument("--lang", default=None,
                        help="language of the input, required: a code (en, fr, cym_Latn ...: it selects the LASER "
                             "preprocessing), a language name (Welsh) or 'auto' to detect it per sentence (not needed with --pretokenized)")
    parser.add_argument("--pretokenized", action="store_true",
                        help="input lines are already BPE/SentencePiece tokens separated by spaces")
    parser.add_argument("-i", "--input", default=None,
                        help="input text file (default: stdin; a pipe such as <(zcat f.gz) is read like stdin)")
    parser.add_argument("-o", "--output", required=True, help="output .npy file, shape [lines, dim]")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"token budget per batch, padding included (default {DEFAULT_MAX_TOKENS:,}, as the "
                             "original's)")
    add_max_sentence_tokens_argument(parser)
    parser.add_argument("--fp16", action="store_true", help="store float16 instead of float32")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise the embeddings")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="model dtype (float32: the original's numbers; the others trade fidelity for speed)")
    parser.add_argument("--int8", action="store_true", help="int8 dynamic quantisation of the LSTM (CPU only)")
    add_engine_argument(parser)
    add_speed_argument(parser)
    parser.add_argument("--num-proc", type=int, default=1, help="processes for the text preprocessing")
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute from scratch, ignoring an earlier or interrupted output (by default an output "
                        "computed from the same input, model and options is reused or resumed, anything else is "
                        "recomputed with a message; stdin input is never resumed)")
    parser.add_argument("--wait", action="store_true",
                        help="when another run is writing the same output, wait for it to finish (and then reuse or "
                        "resume what it wrote) instead of stopping with an error")
    parser.add_argument("--no-progress", "-q", "--quiet", dest="no_progress", action="store_true",
                        help="no progress bar (there is none either when stderr is not a terminal)")


def run(args: argparse.Namespace) -> int:
    if args.lang is None and not args.pretokenized:  # before torch is imported
        print(f"{WHO}: error: --lang is required: pass the language code of the input (e.g. --lang fr) or "
              "--lang auto to detect it per sentence", file=sys.stderr)
        return 2

    # every argument is checked before the model is loaded or any file is created
    args.lang = check_lang_arg(args.lang, WHO, note=False,  # (said once the model is known)
                               auto=not names_a_model_set(args.model))
    check_device_arg(args.device)
    check_encoding_args(args)
    stdin = args.input in (None, "-")
    stream = not stdin and is_stream(args.input)  # a pipe, /dev/stdin, <(zcat f.gz): read like stdin
    if not stdin and not stream and not Path(args.input).is_file():
        raise UsageError(f"input file not found: {args.input}" if not Path(args.input).exists()
                         else f"input {args.input} is not a file")
    check_output_path(args.output)
    no_progress = getattr(args, "no_progress", False) or getattr(args, "quiet", False)
    if args.engine == "numpy" and (args.device != "cpu" or args.dtype != "float32" or args.int8):
        raise UsageError("--engine numpy computes float32 on the CPU only: drop --device/--dtype/--int8, or use "
                         "--engine torch")
    loading = speed_kwargs(args, dtype=args.dtype, int8=args.int8, engine=args.engine)
    encoder = load_encoder_for_cli(resolve_model(args.model, who=WHO), WHO, pretokenized=args.pretokenized,
                                   langs={"--lang": args.lang}, device=None if args.device == "cpu" else args.device,
                                   **loading)
    tmp = None
    try:
        if stdin or stream:
            # streams are spooled to disk so that huge inputs are streamed and counted like files; never resumed
            tmp = spool_stream(sys.stdin.buffer if stdin else args.input, "stdin" if stdin else args.input)
            input_path = tmp
        else:
            input_path = args.input
        out, stats = encoder._encode_file(
            input_path, args.output, lang=args.lang, pretokenized=args.pretokenized, fp16=args.fp16,
            max_tokens=args.max_tokens, batch_size=None, chunk_lines=DEFAULT_CHUNK_LINES,
            max_sentence_tokens=max_sentence_tokens_arg(args),
            normalize_embeddings=args.normalize, device=None,
            show_progress_bar=not no_progress and sys.stderr.isatty(),
            resume=not (args.overwrite or stdin or stream),
            num_proc=args.num_proc, say=lambda m: print(f"{WHO}: {m}", file=sys.stderr),
            fresh_reason="--overwrite" if args.overwrite else "stdin input is never resumed" if stdin
            else f"input from a pipe ({args.input}) is never resumed",
            wait=getattr(args, "wait", False))
    finally:
        if tmp is not None:
            os.unlink(tmp)
    where = f"-> {args.output} {tuple(out.shape)} {out.dtype}"
    if stats["reused"]:
        print(f"{WHO}: {stats['lines']:,} lines already embedded {where}", file=sys.stderr)
    else:
        seconds = stats["seconds"]
        resumed = f", resumed at line {stats['resumed_at']:,}" if stats["resumed_at"] else ""
        print(f"{WHO}: {stats['computed']:,} lines in {seconds:.1f} s ({stats['computed'] / max(seconds, 1e-9):,.0f} "
              f"sentences/s{resumed}) {where}", file=sys.stderr)
    return 0
