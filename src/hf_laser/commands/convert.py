"""`hf-laser convert` (also `python -m hf_laser.checkpoints.convert`): an original LASER checkpoint into a Hugging Face
directory (`hf_laser.checkpoints.convert.convert`), or SONAR's text encoder (`sonar_text_encoder.pt` with
`--spm-model sentencepiece.source.256000.model`: `hf_laser.checkpoints.sonar.convert_sonar`) or decoder
(`sonar_text_decoder.pt`: `hf_laser.checkpoints.sonar_decoder.convert_sonar_decoder`), recognised by its contents."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import exit_status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="original LASER checkpoint (.pt), or SONAR's sonar_text_encoder.pt or "
                        "sonar_text_decoder.pt")
    parser.add_argument("out_dir", help="output directory")
    parser.add_argument("--bpe-codes", help="fastBPE codes (LASER1, e.g. 93langs.fcodes)")
    parser.add_argument("--bpe-vocab", help="fastBPE vocabulary (LASER1, e.g. 93langs.fvocab)")
    parser.add_argument("--spm-model", help="SentencePiece model (LASER2, e.g. laser2.spm; SONAR: "
                        "sentencepiece.source.256000.model)")
    parser.add_argument("--spm-vocab", help="SentencePiece .cvocab (LASER2, e.g. laser2.cvocab)")
    parser.add_argument("--no-tokenizer", action="store_true",
                        help="convert without subword files: a dictionary-only directory for pre-tokenized input")
    parser.add_argument("--language", default=None,
                        help="LASER3 student: its language (FLORES-200 code, e.g. wol_Latn), recorded for model sets "
                        "(default: read from a file name laser3-LANG.v1.pt)")
    parser.add_argument("--attention-heads", type=int, default=None,
                        help="SONAR: attention heads per layer (not stored in the weights; default: width / 64, 16 for "
                        "SONAR)")
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

    # lazy: checkpoints.sonar imports torch, transformers
    from ..checkpoints.sonar import convert_sonar, sonar_checkpoint_kind
    from ..checkpoints.sonar_decoder import convert_sonar_decoder

    try:
        sonar_kind = sonar_checkpoint_kind(args.checkpoint)
        if sonar_kind:
            laser_only = [flag for flag, value in (("--bpe-codes", args.bpe_codes), ("--bpe-vocab", args.bpe_vocab),
                                                   ("--spm-vocab", args.spm_vocab), ("--language", args.language),
                                                   ("--no-tokenizer", args.no_tokenizer)) if value]
            if laser_only or args.spm_model is None:
                raise ValueError(f"{args.checkpoint} is a SONAR text {sonar_kind}: it takes --spm-model "
                                 "(sentencepiece.source.256000.model) and no "
                                 + (", ".join(laser_only) if laser_only else "other subword files"))
            convert_one = convert_sonar_decoder if sonar_kind == "decoder" else convert_sonar
            out = convert_one(args.checkpoint, args.spm_model, args.out_dir, num_attention_heads=args.attention_heads,
                              overwrite=bool(args.overwrite), model_card=not args.no_model_card)
            print(f"wrote {out} (SONAR text {sonar_kind}; its weights are CC BY-NC 4.0: non-commercial use only)",
                  file=sys.stderr)
            return 0
        if args.attention_heads is not None:
            raise ValueError("--attention-heads is for SONAR checkpoints (a LASER checkpoint's shapes give them)")
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
