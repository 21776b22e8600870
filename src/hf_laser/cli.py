"""`hf-laser` command line: convert, embed, tokenize, mine, embed-shards, similar, push.

Each subcommand's arguments and handler live next to the code they drive (`add_*_arguments` / `run_*`); this file
only assembles them, importing each module when its subcommand runs so that `hf-laser embed` does not import faiss,
and `hf-laser --help` (or a usage error) imports neither torch nor transformers. Every handler runs under
[`run_cli`]: a user error is one line on stderr and exit status 2 (`HF_LASER_TRACEBACK=1` shows the traceback).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

# = hf_laser.encoder.DEFAULT_MAX_TOKENS / DEFAULT_MAX_SENTENCE_TOKENS (not imported: that module imports torch)
DEFAULT_MAX_TOKENS = 12000
DEFAULT_MAX_SENTENCE_TOKENS = 100_000

# subcommand -> (module, add-arguments function, handler, help)
SUBCOMMANDS = {
    "convert": ("convert", "add_convert_arguments", "run_convert",
                "convert an original LASER checkpoint into a Hugging Face directory"),
    "embed": (None, None, None, "embed sentences (one per line) into a .npy file"),
    "tokenize": ("tokenization_laser", "add_tokenize_arguments", "run_tokenize",
                 "run the LASER preprocessing (+ BPE/SentencePiece) over a file, one output line per input line"),
    "mine": ("mining", "add_mine_arguments", "run_mine", "mine parallel sentences with margin-based scoring"),
    "embed-shards": ("mining", "add_embed_shards_arguments", "run_embed_shards",
                     "embed text files into shards for mine --embed-dir, one process per rank (multi-GPU / nodes)"),
    "similar": ("similar", "add_similar_arguments", "run_similar",
                "print the nearest neighbours of sentences among other sentences (any languages)"),
    "push": ("hub", "add_push_arguments", "run_push", "upload a model directory (+ card and results) to the Hub"),
}


# ---------------------------------------------------------------------------------------------------------------
# Errors: one line, exit status 2 for the user's mistakes (shared by every subcommand; no heavy imports here)
# ---------------------------------------------------------------------------------------------------------------


class UsageError(ValueError):
    """A mistake in what the user asked for (missing file, not a model directory...): the command line reports it
    in one line and exits with status 2."""


DISK_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EIO, errno.EFBIG,
                                    errno.EROFS) if e is not None)
# errors in what the user gave (a path): exit status 2; other OSErrors (network, disk) are the environment's: 1
_USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def one_line(err: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    text = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
    return text or type(err).__name__


def run_cli(who: str, fn: Callable[..., int], *args) -> int:
    """Runs a command-line handler, turning errors into one line on stderr: user errors (missing files, bad model
    directory, invalid values: `ValueError`, `FileNotFoundError`...) exit with 2; a full disk, an I/O or network
    error, or a missing optional dependency with 1; Ctrl-C with 130. Anything else is a bug and keeps its
    traceback. `HF_LASER_TRACEBACK=1` shows the traceback of every error."""
    if os.environ.get("HF_LASER_TRACEBACK"):
        return fn(*args)
    try:
        return fn(*args)
    except KeyboardInterrupt:
        print(f"{who}: interrupted (run the same command again to resume)", file=sys.stderr)
        return 130
    except ImportError as err:
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 2 if isinstance(err, _USER_OS_ERRORS) and err.errno not in DISK_ERRNOS else 1
    except ValueError as err:  # UsageError and invalid values (empty input, bad language, unknown token ids...)
        print(f"{who}: error: {one_line(err)}", file=sys.stderr)
        return 2


def looks_local(model: str | os.PathLike) -> bool:
    """A model argument that can only mean a local path: absolute, `./`, `../`, `~`, more than one `/`, or whose
    parent directory exists (`models/x` with a `models/` here, or a bare name). Such a path is never sent to
    the Hub; only `owner/name` with no `owner/` directory here is a Hub id."""
    s = str(model)
    if isinstance(model, os.PathLike) or os.path.isabs(s) or s.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    if s in (".", "..") or "\\" in s or s.count("/") > 1 or s.endswith("/"):
        return True
    return Path(s).parent.is_dir()


def check_local_dir(model: str | os.PathLike) -> None:
    """[`UsageError`] when `model` means a local directory that is missing, or is a file; a Hub id passes."""
    path = Path(str(model)).expanduser()
    if not path.exists():
        if looks_local(model):
            raise UsageError(f"model directory not found: {model}")
    elif not path.is_dir():
        raise UsageError(f"--model {model} is a file, not a model directory (make one with hf-laser convert)")


# ---------------------------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------------------------


def add_max_sentence_tokens_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-sentence-tokens` of every subcommand that embeds (0 on the command line means no limit: None)."""
    parser.add_argument("--max-sentence-tokens", type=int, default=DEFAULT_MAX_SENTENCE_TOKENS,
                        help="a line of more tokens is embedded as its first N-1 tokens + </s>, with a message "
                             f"naming the line (default {DEFAULT_MAX_SENTENCE_TOKENS:,}; 0: no limit)")


def max_sentence_tokens_arg(args: argparse.Namespace) -> int | None:
    """`--max-sentence-tokens` as the encoder takes it: 0 on the command line is None (no limit)."""
    return getattr(args, "max_sentence_tokens", DEFAULT_MAX_SENTENCE_TOKENS) or None


def add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None,
                        help="model directory (from hf-laser convert) or Hub id (default: the shipped laser-mini)")
    parser.add_argument("--lang", default=None,
                        help="language of the input, required: a code (en, fr, zh, ja, el ...: it selects the LASER "
                             "preprocessing) or 'auto' to detect it per sentence (not needed with --pretokenized)")
    parser.add_argument("--pretokenized", action="store_true",
                        help="input lines are already BPE/SentencePiece tokens separated by spaces")
    parser.add_argument("-i", "--input", default=None, help="input text file (default: stdin)")
    parser.add_argument("-o", "--output", required=True, help="output .npy file, shape [lines, dim]")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="token budget per batch")
    add_max_sentence_tokens_argument(parser)
    parser.add_argument("--fp16", action="store_true", help="store float16 instead of float32")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise the embeddings")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="model dtype (float32: the original's numbers; the others trade fidelity for speed)")
    parser.add_argument("--int8", action="store_true", help="int8 dynamic quantisation of the LSTM (CPU only)")
    parser.add_argument("--num-proc", type=int, default=1, help="processes for the text preprocessing")
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute from scratch, ignoring an earlier or interrupted output (by default an output "
                        "computed from the same input, model and options is reused or resumed, anything else is "
                        "recomputed with a message; stdin input is never resumed)")
    parser.add_argument("--no-progress", "-q", "--quiet", dest="no_progress", action="store_true",
                        help="no progress bar (there is none either when stderr is not a terminal)")


def run_embed(args: argparse.Namespace) -> int:
    if args.lang is None and not args.pretokenized:
        print("hf-laser embed: error: --lang is required: pass the language code of the input (e.g. --lang fr) or "
              "--lang auto to detect it per sentence", file=sys.stderr)
        return 2
    from .encoder import embed_main_io

    return embed_main_io(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `hf-laser` parser; only `command`'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog="hf-laser", description="LASER sentence embeddings for Hugging Face.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, add_args, _, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name != command:
            continue
        if name == "embed":
            add_embed_arguments(p)
        else:
            getattr(importlib.import_module(f".{module}", __package__), add_args)(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    if args.command == "embed":
        return run_embed(args)
    module, _, handler, _ = SUBCOMMANDS[args.command]
    run = getattr(importlib.import_module(f".{module}", __package__), handler)
    return run_cli(f"hf-laser {args.command}", lambda a: int(run(a) or 0), args)


if __name__ == "__main__":
    sys.exit(main())
