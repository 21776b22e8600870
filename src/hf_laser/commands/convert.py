"""`hf-laser convert` (also `python -m hf_laser.checkpoints.convert`): an original LASER checkpoint into a Hugging Face
directory (`hf_laser.checkpoints.convert.convert`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import exit_status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="original LASER checkpoint (.pt)")
    parser.add_argument("out_dir", help="output directory")
    parser.add_argument("--bpe-codes", help="fastBPE codes (LASER1, e.g. 93langs.fcodes)")
    parser.add_argument("--bpe-vocab", help="fastBPE vocabulary (LASER1, e.g. 93langs.fvocab)")
    parser.add_argument("--spm-model", help="SentencePiece model (LASER2, e.g. laser2.spm)")
    parser.add_argument("--spm-vocab", help="SentencePiece .cvocab (LASER2, e.g. laser2.cvocab)")
    parser.add_argument("--no-tokenizer", action="store_true",
                        help="convert without subword files: a dictionary-only directory for pre-tokenized input")
    parser.add_argument("--language", default=None,
                        help="LASER3 student: its language (FLORES-200 code, e.g. wol_Latn), recorded for model sets "
                        "(default: read from a file name laser3-LANG.v1.pt)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    parser.add_argument("--no-model-card", action="store_true", help="do not write README.md")


def run(args: argparse.Namespace) -> int:
    # the files first, before torch is imported (seconds): a mistyped path is said at once
    for what, path in (("checkpoint", args.checkpoint), ("file", args.bpe_codes), ("file", args.bpe_vocab),
                       ("file", args.spm_model), ("file", args.spm_vocab)):
        if path is not None and not Path(path).is_file():
            print(f"hf-laser convert: error: {what} not found: {path}"
                  + (" (a directory)" if Path(path).is_dir() else ""), file=sys.stderr)
            return 2
    # lazy: checkpoints.convert imports this module
    from ..checkpoints.convert import NotALaserCheckpoint, convert

    try:
        out = convert(
            args.checkpoint,
            args.out_dir,
            bpe_codes=args.bpe_codes,
            bpe_vocab=args.bpe_vocab,
            spm_model=args.spm_model,
            spm_vocab=args.spm_vocab,
            model_card=not args.no_model_card,
            no_tokenizer=bool(getattr(args, "no_tokenizer", False)),
            overwrite=bool(getattr(args, "overwrite", False)),
            language=getattr(args, "language", None),
        )
    except (NotALaserCheckpoint, ValueError, OSError) as err:
        message = " ".join(str(err).split())  # one line
        print(f"hf-laser convert: error: {message}", file=sys.stderr)
        return exit_status(err)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    # lazy: checkpoints.convert imports this module
    from ..checkpoints.convert import __doc__ as doc

    parser = argparse.ArgumentParser(prog="python -m hf_laser.checkpoints.convert", description=doc.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
