"""`hf-laser` command line: convert, download, embed, tokenize, mine, score, embed-shards, similar, push, serve.

Each subcommand's arguments and handler live in its module under `hf_laser/commands/` (`add_arguments` / `run`);
this file only assembles them, importing a subcommand's module when that subcommand is asked for, so that
`hf-laser embed` does not import faiss and `hf-laser --help` (or a usage error) imports neither torch nor
transformers. Every handler runs under [`hf_laser.errors.run_cli`]: a user error is one line on stderr and exit
status 2 (`HF_LASER_TRACEBACK=1` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# re-exported for code that imported them from here
from .commands.common import add_max_sentence_tokens_argument, max_sentence_tokens_arg  # noqa: F401
from .defaults import DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS  # noqa: F401
from .errors import DISK_ERRNOS, UsageError, one_line, run_cli  # noqa: F401
from .models import check_local_dir, looks_local  # noqa: F401

# subcommand -> (module in hf_laser.commands, help)
SUBCOMMANDS = {
    "convert": ("convert", "convert an original LASER checkpoint into a Hugging Face directory"),
    "download": ("download", "fetch the original LASER2 / LASER3 files and convert them into a model set"),
    "embed": ("embed", "embed sentences (one per line) into a .npy file"),
    "tokenize": ("tokenize",
                 "run the LASER preprocessing (+ BPE/SentencePiece) over a file, one output line per input line"),
    "mine": ("mine", "mine parallel sentences with margin-based scoring"),
    "score": ("score",
              "score the pairs of a parallel corpus (margin or cosine) and keep those at or above a threshold"),
    "embed-shards": ("embed_shards",
                     "embed text files into shards for mine --embed-dir, one process per rank (multi-GPU / nodes)"),
    "decode": ("decode", "SONAR sentence embeddings (.npy) back into text with SONAR's text decoder"),
    "similar": ("similar", "print the nearest neighbours of sentences among other sentences (any languages)"),
    "push": ("push", "upload a model directory (+ card and results) to the Hub"),
    "env": ("env", "versions, the processor, which speed modes (fp32, bf16, int8) it makes fast, and what "
                       "--speed auto measured here (--calibrate: measure again)"),
    "serve": ("serve", "serve embeddings over HTTP: the OpenAI embeddings API, LASER's /vectorize, and a demo page"),
}


def _command(name: str):
    return importlib.import_module(f".commands.{SUBCOMMANDS[name][0]}", __package__)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `hf-laser` parser; only `command`'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog="hf-laser", description="LASER sentence embeddings for Hugging Face.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _command(name).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    return run_cli(f"hf-laser {args.command}", _command(args.command).run, args)


if __name__ == "__main__":
    sys.exit(main())
