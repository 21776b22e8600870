"""What several subcommands share: `--max-sentence-tokens`, and loading the encoder a `--model` names."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..defaults import DEFAULT_MAX_SENTENCE_TOKENS
from ..errors import UsageError, one_line


def add_max_sentence_tokens_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-sentence-tokens` of every subcommand that embeds (0 on the command line means no limit: None)."""
    parser.add_argument("--max-sentence-tokens", type=int, default=DEFAULT_MAX_SENTENCE_TOKENS,
                        help="a line of more tokens is embedded as its first N-1 tokens + </s>, with a message "
                             f"naming the line (default {DEFAULT_MAX_SENTENCE_TOKENS:,}; 0: no limit)")


def max_sentence_tokens_arg(args: argparse.Namespace) -> int | None:
    """`--max-sentence-tokens` as the encoder takes it: 0 on the command line is None (no limit)."""
    return getattr(args, "max_sentence_tokens", DEFAULT_MAX_SENTENCE_TOKENS) or None


def load_encoder_for_cli(model, who: str, *, pretokenized: bool = False, **kwargs):
    """`LaserEncoder.from_pretrained(model, **kwargs)` for a command line: the model argument is checked first
    ([`hf_laser.models.check_model_dir`]), and failures are [`UsageError`]s of one line."""
    from transformers.utils import logging as hf_logging

    from ..encoder import LaserEncoder
    from ..models import check_model_dir

    check_model_dir(model)
    local = Path(str(model)).expanduser().is_dir()
    bars = hf_logging.is_progress_bar_enabled()
    if local and bars:  # no "Loading weights" bar for a local directory (download bars stay for Hub ids)
        hf_logging.disable_progress_bar()
    try:
        encoder = LaserEncoder.from_pretrained(model, **kwargs)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load the model {model}: {one_line(err)}") from err
    finally:
        if local and bars:
            hf_logging.enable_progress_bar()
    if not pretokenized and getattr(encoder, "tokenizer", "n/a") is None:
        raise UsageError(f"{model} has no tokenizer (it was converted without --bpe-codes/--bpe-vocab or "
                         "--spm-model): give BPE-tokenized input with --pretokenized, or convert it again with them")
    return encoder
