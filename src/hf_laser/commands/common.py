"""What several subcommands share: `--max-sentence-tokens`, loading the encoder a `--model` names, and the checks of
`--lang`, `--device` and output paths made before any work starts."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import stat
import sys
import tempfile
import warnings
from pathlib import Path

from ..defaults import DEFAULT_MAX_SENTENCE_TOKENS
from ..errors import EmbeddingWriteError, UsageError, one_line
from ..models import check_model_dir


def add_max_sentence_tokens_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-sentence-tokens` of every subcommand that embeds (0 on the command line means no limit: None)."""
    parser.add_argument("--max-sentence-tokens", type=int, default=DEFAULT_MAX_SENTENCE_TOKENS,
                        help="a line of more tokens is embedded as its first N-1 tokens + </s>, with a message "
                             f"naming the line (default {DEFAULT_MAX_SENTENCE_TOKENS:,}; 0: no limit)")


def max_sentence_tokens_arg(args: argparse.Namespace) -> int | None:
    """`--max-sentence-tokens` as the encoder takes it: 0 on the command line is None (no limit)."""
    return getattr(args, "max_sentence_tokens", DEFAULT_MAX_SENTENCE_TOKENS) or None


def load_encoder_for_cli(model, who: str, *, pretokenized: bool = False, langs: dict[str, str | None] | None = None,
                         **kwargs):
    """`LaserEncoder.from_pretrained(model, **kwargs)` for a command line: the model argument is checked first
    ([`hf_laser.models.check_model_dir`]), and failures are [`UsageError`]s of one line. `langs` (`{flag:
    language}`): what the model does with them is said on stderr ([`say_languages`])."""
    # lazy: encoder imports numpy, tqdm
    from ..encoder import LaserEncoder

    check_model_dir(model)
    if "engine" not in kwargs and "speed" not in kwargs:
        # the commands without --engine (mine, embed-shards, serve, similar) compute on PyTorch, as before the library's
        # default became the NumPy engine: their outputs stay the same bits
        kwargs["engine"] = "torch"
    try:
        # torch_only: a plain local directory never imports transformers, half of a command's start-up (and any other
        # local directory loads without a "Loading weights" bar; download bars stay for Hub ids)
        with warnings.catch_warnings(record=True) as caught:  # (a slow dtype is said below, in the command's words)
            warnings.filterwarnings("ignore", message="this CPU has no (native|int8)")
            warnings.filterwarnings("always", message="speed=.* was measured")
            encoder = LaserEncoder.from_pretrained(model, torch_only=True, **kwargs)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load the model {model}: {one_line(err)}") from err
    for caught_warning in caught:  # (the others as they would have been shown)
        if str(caught_warning.message).startswith("speed="):
            print(f"{who}: --speed {kwargs.get('speed')}: {str(caught_warning.message).split(' ', 1)[1]}",
                  file=sys.stderr)
        else:
            warnings.showwarning(caught_warning.message, caught_warning.category, caught_warning.filename,
                                 caught_warning.lineno)
    choice = getattr(encoder, "speed", None)
    dtype = kwargs.get("dtype") if choice is None else choice.dtype()
    slow = dtype is not None and slow_cpu_dtype_message(dtype, kwargs.get("device") or "cpu")
    if getattr(encoder, "quantize", None) == "int8":
        # lazy: cli.py imports this module, and `hf-laser --help` does without the processor's flags
        from ..speed.cpu import cpu_info, int8_without_kernels_message

        slow = slow or int8_without_kernels_message(cpu_info(), flag="--int8")
    if slow:
        print(f"{who}: {slow}", file=sys.stderr)
    if choice is not None and kwargs.get("speed") == "auto":
        engine = "NumPy" if encoder.engine == "numpy" else "PyTorch"
        print(f"{who}: --speed auto: {choice.mode} on {engine} ({choice.reason})", file=sys.stderr)
    if not pretokenized and getattr(encoder, "tokenizer", "n/a") is None:
        raise UsageError(f"{model} has no tokenizer (it was converted without --bpe-codes/--bpe-vocab or "
                         "--spm-model): give BPE-tokenized input with --pretokenized, or convert it again with them")
    if langs and not pretokenized:
        say_languages(encoder, who, langs)
    return encoder


def slow_cpu_dtype_message(dtype, device) -> str | None:
    """Why `--dtype bfloat16` / `float16` will be slow on this CPU ([`hf_laser.speed.cpu.emulated_dtype_message`]), or
    None."""
    # lazy: cli.py imports this module, and `hf-laser --help` does without the processor's flags
    from ..speed.cpu import emulated_dtype_message

    dtype_name = str(dtype).removeprefix("torch.")
    return emulated_dtype_message(dtype, device, flag=f"--dtype {dtype_name}", int8="--int8")


def check_lang_arg(lang: str | None, who: str, flag: str = "--lang", *, note: bool = True,
                   auto: bool = True) -> str | None:
    """A language argument: `auto`, an ISO 639 code (`fr`, `fra`, `en-US`, `eng_Latn`) or a language's English name
    as LASER3 lists them (`french`, `wolof`: returned as its FLORES-200 code, `fra_Latn`); anything else is a
    [`UsageError`] (`fr,en`, `123`, `../etc`). A well-formed code without LASER rules of its own is accepted with one
    line on stderr (in place of the library's warning; `note=False`: said later by [`load_encoder_for_cli`]'s
    `langs`, once it knows whether the model is a set, which refuses such a code instead). `auto=False` (the model
    is a set, [`names_a_model_set`]): `auto` is refused, and no message offers it. Returns the language to use."""
    # lazy: cli.py imports this module, and `hf-laser --help` does without the preprocessing's rules
    from ..text.langid import is_auto
    from ..text.languages import LANG_CODE, check_language

    if lang is None:
        return lang
    if is_auto(lang):
        if not auto:
            raise UsageError(f"{flag} auto cannot choose among a model set's models: give the language (a code or a "
                             "name)")
        return lang
    if not lang.strip():
        raise UsageError(f"{flag} lang is an empty string: give a language code (en, fr, zh, ...)"
                         + (" or auto" if auto else ""))

    if not LANG_CODE.match(lang):
        try:
            return check_language(lang, auto=auto)
        except ValueError as err:
            raise UsageError(f"{flag} {err}") from None
    if note:
        _moses_defaults_note(lang, who)
    return lang


def names_a_model_set(model) -> bool:
    """Whether a `--model` argument names a model set, known without loading or fetching anything (a shipped set
    such as `laser-mini-set`, or a local directory with `laser_model_set.json`)."""
    # lazy: cli.py imports this module, and `hf-laser --help` does without the models' resolver
    from ..model_set import is_model_set
    from ..models import shipped_model

    return model is not None and is_model_set(shipped_model(model) or model)


def _moses_defaults_note(lang: str, who: str) -> None:
    """The one line that says a language code has no LASER rules of its own (once per code and process)."""
    # lazy: cli.py imports this module, and `hf-laser --help` does without the preprocessing's rules
    from ..text.preprocessing import KNOWN_CODES, normalize_lang, warned_codes

    code = normalize_lang(lang)
    if code not in KNOWN_CODES and code not in warned_codes:
        warned_codes.add(code)  # the library's UserWarning is replaced by this line
        print(f"{who}: note: no LASER preprocessing rules for language {lang!r}: using the Moses defaults (English "
              "non-breaking prefixes, generic punctuation rules)", file=sys.stderr)


def say_languages(encoder, who: str, langs: dict[str, str | None]) -> None:
    """What the model does with each language argument (`{flag: language}`, checked by [`check_lang_arg`] with
    `note=False`), once per run on stderr: for a model set, the member that embeds it (a language the set has no
    model for is a [`UsageError`] naming the flag); for one model, the Moses-defaults note of a code without LASER
    rules."""
    # lazy: model_set imports numpy; cli.py imports this module
    from ..model_set import UnknownLanguage
    from ..text.langid import is_auto

    routed = callable(getattr(encoder, "describe_route", None))
    said = set()
    for flag, lang in langs.items():
        if lang is None or is_auto(lang) or lang in said:
            continue
        said.add(lang)
        if not routed:
            _moses_defaults_note(lang, who)
            continue
        try:
            print(f"{who}: {encoder.describe_route(lang)}", file=sys.stderr)
        except UnknownLanguage as err:
            raise UsageError(f"{flag}: {err}") from None


def check_device_arg(device: str | None) -> None:
    """`--device`: a device torch knows (`cpu`, `cuda`, `cuda:1`, `mps`...) that is there; else a [`UsageError`]."""
    if device is None or device == "cpu":  # (torch is not imported for the common case)
        return
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"--device {device!r} is not a device: give cpu, cuda, cuda:N (or mps)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device} but no CUDA device is available")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: there are only {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "meta":
        raise UsageError("--device meta holds no data: give cpu or cuda")


def check_output_path(path: str | os.PathLike, flag: str = "-o") -> None:
    """An output file whose directory must exist (checked before any work: it is not created behind the user's
    back) and that is no directory."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"output {path} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"the directory of {flag} {path} does not exist ({parent}); create it first "
                         f"(mkdir -p {parent})")


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    """`--engine` of the commands that embed with a model from disk."""
    parser.add_argument("--engine", choices=["auto", "numpy", "torch"], default="auto",
                        help="what computes the embeddings: numpy (float32 on the CPU, no torch import: faster "
                             "start-up and, on small CPUs, faster per sentence), torch (every device, dtype and "
                             "--int8), auto (default: numpy for a plain local model directory on the CPU in float32, "
                             "else torch); the two agree to float round-off (~1e-6)")


def add_speed_argument(parser: argparse.ArgumentParser) -> None:
    """`--speed` of the commands that embed with a model from disk ([`hf_laser.speed`]); its help names only the
    options of `parser` it replaces (add it after `--dtype` / `--int8` / `--engine` where a command has them)."""
    replaced = [flag for flag in ("--dtype", "--int8", "--engine") if flag in parser._option_string_actions]
    instead = f" instead of {'/'.join(replaced)}" if replaced else ""
    parser.add_argument("--speed", choices=["auto", "fp32", "bf16", "int8"], default=None,
                        help=f"speed mode{instead}: fp32 (the original's numbers, fastest float32 engine), bf16, "
                             "int8, or auto: the fastest mode on this CPU within the fidelity bounds (Tatoeba error "
                             "within 0.2 points), said on stderr and recorded in the output's manifest; `hf-laser "
                             "env` shows what auto picks here (default: float32)")


def speed_kwargs(args: argparse.Namespace, *, dtype: str = "float32", int8: bool = False,
                 engine: str | None = None) -> dict:
    """The loading arguments of `--speed`, or of `--dtype` / `--int8` / `--engine` without it (as given in the
    keywords); both together are a [`UsageError`]."""
    speed = getattr(args, "speed", None)
    if speed is None:
        return {"dtype": dtype_arg(dtype), "quantize": "int8" if int8 else None,
                **({"engine": engine} if engine is not None else {})}
    clash = [flag for flag, given in (("--dtype", dtype != "float32"), ("--int8", int8),
                                      ("--engine", engine not in (None, "auto"))) if given]
    if clash:
        raise UsageError(f"--speed {speed} chooses the dtype, quantisation and engine: drop {' and '.join(clash)}")
    return {"speed": speed}


def dtype_arg(name: str):
    """`--dtype NAME` as `from_pretrained` takes it: None for float32 (the default, without importing torch), else
    the torch dtype."""
    if name == "float32":
        return None
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    return getattr(torch, name)


def check_encoding_args(args: argparse.Namespace) -> None:
    """`--max-tokens`, `--max-sentence-tokens`, `--num-proc` (where the command has them), checked before any file
    is created."""
    if getattr(args, "max_tokens", 1) is not None and getattr(args, "max_tokens", 1) <= 0:
        raise UsageError(f"--max-tokens must be positive, got {args.max_tokens}")
    limit = getattr(args, "max_sentence_tokens", DEFAULT_MAX_SENTENCE_TOKENS)
    if limit is not None and (limit < 0 or limit == 1):
        raise UsageError(f"--max-sentence-tokens must be at least 2 (one token and </s>), or 0 for no limit; "
                         f"got {limit}")
    if getattr(args, "num_proc", 1) < 1:
        raise UsageError(f"--num-proc must be at least 1, got {args.num_proc}")


def is_stream(path: str | os.PathLike) -> bool:
    """True for an input that exists but is no regular file or directory: a pipe, `/dev/stdin`, `<(zcat f.gz)`."""

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def spool_stream(source, name: str) -> str:
    """Copies a stream (a binary file object, or the path of a pipe) into a temporary file (in `TMPDIR`) and returns
    its path: the encoder counts and streams files. A full disk says where the copy was going."""

    tmp = tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False)
    try:
        with tmp:
            if isinstance(source, (str, os.PathLike)):
                with open(source, "rb") as f:
                    shutil.copyfileobj(f, tmp, 1 << 24)
            else:
                shutil.copyfileobj(source, tmp, 1 << 24)
    except OSError as err:
        os.unlink(tmp.name)
        if err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
            raise EmbeddingWriteError(err.errno, f"{os.strerror(err.errno)} while copying {name} to {tmp.name} (the input of a "
                          f"stream is spooled to the temporary directory {tempfile.gettempdir()}); set TMPDIR to a "
                          "directory with more space, or give the input as a file") from None
        raise
    return tmp.name


def add_ray_arguments(parser: argparse.ArgumentParser, *, searchers: bool = False) -> None:
    """`--ray [ADDRESS]` and the actor counts of `hf_laser.mining.on_ray` (`searchers`: the kNN search's too)."""
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="run on Ray (the ray extra): the cluster at ADDRESS, else $RAY_ADDRESS's, else a local "
                             "Ray on this machine; the shards are given out to encoder actors (a dead one is "
                             "restarted and its shard resumed); --embed-dir must be on a filesystem every node shares")
    parser.add_argument("--num-encoders", type=int, default=None,
                        help="with --ray: encoder actors (default: one per GPU with --gpus-per-encoder, else 1)")
    parser.add_argument("--gpus-per-encoder", type=float, default=0.0, help="with --ray: GPUs per encoder actor")
    parser.add_argument("--tokenizers-per-encoder", type=int, default=1,
                        help="with --ray: processes per encoder actor that tokenize the next chunk while it embeds "
                             "(each reserves a CPU; default 1: a thread beside the model, enough on CPU; a GPU needs "
                             "several)")
    if searchers:
        parser.add_argument("--num-searchers", type=int, default=None,
                            help="with --ray: kNN actors, each holding a shard of the searched side's index "
                                 "(default: one per CPU slot of the cluster, or per GPU with --gpus-per-searcher)")
        parser.add_argument("--gpus-per-searcher", type=float, default=0.0, help="with --ray: GPUs per kNN actor")


def connect_ray(args: argparse.Namespace):
    """Ray, connected to `--ray ADDRESS` (else `$RAY_ADDRESS`, else started on this machine when first used)."""
    try:
        # lazy: Ray (the ray extra)
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install \"hf-laser[ray]\"") from None
    if args.ray != "local" and not ray.is_initialized():
        ray.init(address=args.ray, log_to_driver=False)
    return ray


def ray_on_a_cluster(args: argparse.Namespace) -> bool:
    """`--ray` names a cluster (an address, or `$RAY_ADDRESS`) rather than a Ray started on this machine."""
    return args.ray != "local" or bool(os.environ.get("RAY_ADDRESS"))
