"""`hf-laser tokenize`: the LASER preprocessing (+ BPE / SentencePiece) over a file, exactly one output line per
input line (split on `'\\n'` only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError, exit_status, one_line
from ..models import check_local_dir, resolve_model
from ..text.text_tokenizer import LaserTextPipeline, LaserTextTokenizer
from .common import check_lang_arg

WHO = "hf-laser tokenize"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``hf-laser tokenize``."""
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="DIR",
                     help="converted model / tokenizer directory (default, without --bpe-codes / --spm-model: the "
                          "shipped laser-mini)")
    src.add_argument("--bpe-codes", metavar="F", help="fastBPE codes (LASER1, *.fcodes)")
    src.add_argument("--spm-model", metavar="F", help="SentencePiece model (LASER2, *.spm)")
    parser.add_argument("--bpe-vocab", metavar="F", help="fastBPE vocabulary (LASER1, *.fvocab); needed with --bpe-codes")
    parser.add_argument("--lang", default=None,
                        help="language of the input, required: a code (en, fr, cym_Latn ...: it selects the LASER "
                             "preprocessing), a language name (Welsh) or 'auto' to detect it per sentence")
    parser.add_argument(
        "--laser2-punct-lang",
        default=None,
        help="LASER2: language for normalize-punctuation whatever --lang is ('en' = stock LASER2)",
    )
    parser.add_argument(
        "--stage", choices=["tok", "bpe"], default="bpe", help="stop after preprocessing (tok) or after BPE/SPM (bpe)"
    )
    parser.add_argument("-i", "--input", default="-", help="input file (default stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    parser.add_argument("--num-proc", type=int, default=1, help="worker processes (0 = all CPUs)")
    parser.add_argument("--chunk-size", type=int, default=2000, help="lines per worker task")
    return parser


def run(args: argparse.Namespace) -> int:
    """``hf-laser tokenize``: exactly one output line per input line (split on ``'\\n'`` only). ``--lang`` is
    required (a code or ``auto``), as for ``hf-laser embed``; errors are one line, exit status 2."""
    if args.lang is None:
        print(f"{WHO}: error: --lang is required: pass the language code of the input (e.g. --lang fr) or "
              "--lang auto to detect it per sentence", file=sys.stderr)
        return 2

    try:
        args.lang = check_lang_arg(args.lang, WHO)
        if args.input not in (None, "-") and not Path(args.input).exists():
            raise UsageError(f"input file not found: {args.input}")  # as hf-laser embed says it
        if args.input not in (None, "-") and Path(args.input).is_dir():
            raise UsageError(f"input {args.input} is not a file")
        if args.bpe_codes is None and args.spm_model is None:
            model = resolve_model(args.model, who=WHO)
            check_local_dir(model)  # a missing local path is an error here, not a Hub id to look up
            tok = LaserTextTokenizer.from_directory(model)  # a plain directory: no transformers to import
            if tok is None:
                # lazy: text.tokenization_laser imports numpy, transformers
                from ..text.tokenization_laser import LaserTokenizer

                tok = LaserTokenizer.from_pretrained(model)
            pipeline = tok.pipeline
            if args.laser2_punct_lang is not None:
                pipeline.laser2_punct_lang = args.laser2_punct_lang
        elif args.bpe_codes is not None:
            if args.bpe_vocab is None:
                print(f"{WHO}: error: --bpe-codes needs --bpe-vocab", file=sys.stderr)
                return 2
            pipeline = LaserTextPipeline(bpe_codes=args.bpe_codes, bpe_vocab=args.bpe_vocab)
        else:
            pipeline = LaserTextPipeline(spm_model=args.spm_model, laser2_punct_lang=args.laser2_punct_lang)
        pipeline.tokenize_file(
            args.input, args.output, args.lang, stage=args.stage, num_proc=args.num_proc, chunk_size=args.chunk_size
        )
    except (OSError, ValueError) as exc:
        print(f"{WHO}: error: {one_line(exc)}", file=sys.stderr)
        return exit_status(exc)
    return 0


def main(argv=None) -> int:
    """`hf-laser tokenize` on its own (`python -m hf_laser.commands.tokenize`)."""
    parser = argparse.ArgumentParser(prog=WHO, description=run.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
