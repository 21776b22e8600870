"""`hf-laser embed-shards` (= `python -m hf_laser.mining embed-shards`): embed text files into `.npy` shards for
`hf-laser mine --embed-dir`, one process per rank (`hf_laser.mining.embed_shards`), or `--nproc` local workers."""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import sys
from pathlib import Path

from ..defaults import DEFAULT_MAX_TOKENS
from ..errors import UsageError
from ..models import check_model_dir, resolve_model
from ..text.text_tokenizer import check_lang_argument
from .common import (
    add_max_sentence_tokens_argument,
    add_ray_arguments,
    add_speed_argument,
    check_device_arg,
    check_encoding_args,
    check_lang_arg,
    connect_ray,
    load_encoder_for_cli,
    max_sentence_tokens_arg,
)

WHO = "hf-laser embed-shards"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--model", default=None,
                        help="HF LASER model directory or Hub repo id (default: the shipped laser-mini)")
    parser.add_argument("--embed-dir", required=True, help="directory for the shards (shared by all processes)")
    parser.add_argument("--input", nargs=2, action="append", metavar=("LANG", "FILE"), required=True,
                        help="language and text file to embed; repeat for several files. With --ray also a Parquet "
                             "corpus (a .parquet file, a directory of them, or a URI such as s3://bucket/corpus/): "
                             "written to the same names under --embed-dir (a directory or URI) with an "
                             "'embedding' column")
    parser.add_argument("--text-column", default="text", help="the text column of Parquet inputs (default: text)")
    parser.add_argument("--num-shards", type=int, default=None, help="shards per file (default: world size)")
    parser.add_argument("--nproc", type=int, default=None,
                        help="start this many local worker processes (ranks 0..N-1) instead of being one rank")
    add_ray_arguments(parser)
    parser.add_argument("--rank", type=int, default=None, help="this process's rank (default: $RANK or 0)")
    parser.add_argument("--world-size", type=int, default=None, help="number of processes (default: $WORLD_SIZE or 1)")
    parser.add_argument("--device", default=None,
                        help="encoder device (default: cuda:$LOCAL_RANK when CUDA is available, else cpu)")
    parser.add_argument("--fp16", action="store_true", help="store float16 shards instead of float32")
    add_speed_argument(parser)
    parser.add_argument("--pretokenized", action="store_true",
                        help="input lines are already BPE/SentencePiece tokens separated by spaces (text files only)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"token budget per batch, padding included (default {DEFAULT_MAX_TOKENS:,}, as the "
                             "original's)")
    add_max_sentence_tokens_argument(parser)
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (there is none either when stderr is not a terminal)")
    return parser


def _is_parquet(path: str) -> bool:
    """A Parquet corpus: a `.parquet` file, a URI (`s3://...`, `file://...`), or a directory (of `*.parquet`)."""
    return "://" in str(path) or str(path).endswith(".parquet") or Path(path).is_dir()


def _speed(args: argparse.Namespace) -> dict:
    return {"speed": args.speed} if getattr(args, "speed", None) else {}


def _say_choice(choice, how: str) -> None:
    engine = "NumPy where it loads the model" if choice.engine == "auto" else "PyTorch"
    print(f"{WHO}: --speed auto: {choice.mode} on {engine}, {how} ({choice.reason})", file=sys.stderr)


def _decide_once(args: argparse.Namespace, model, device, world: int) -> None:
    """`--speed auto` decided once for every process of this run (its [`~hf_laser.speed.SpeedChoice`] in
    `args.speed`): by this process where it starts the others (`--nproc`), else by the first rank to get here, recorded
    in the embedding directory for the other ranks ([`hf_laser.speed.agreed_choice`]): shards never mix modes."""
    if getattr(args, "speed", None) != "auto":
        return
    # lazy: encoder imports numpy, tqdm
    from ..encoder import decide_speed
    from ..speed import agreed_choice

    if world <= 1:
        args.speed = decide_speed("auto", model, device)
        _say_choice(args.speed, "for every worker")
        return
    record = Path(args.embed_dir) / f".speed-auto.{hashlib.sha256(str(model).encode()).hexdigest()[:16]}.json"
    args.speed = agreed_choice(record, lambda: decide_speed("auto", model, device))
    _say_choice(args.speed, f"as every rank (recorded in {record})")


def _worker(args: argparse.Namespace, rank: int, world: int, threads: int) -> None:
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    torch.set_num_threads(max(1, threads))
    args = argparse.Namespace(**{**vars(args), "nproc": None, "rank": rank, "world_size": world})
    run(args)


def run(args: argparse.Namespace) -> int:
    """Embed this process's shards of every ``--input`` (see [`hf_laser.mining.embed_shards`]).

    With ``--nproc N`` it starts N local processes (``spawn``), ranks 0..N-1, each with ``cpu_count // N`` torch
    threads, waits for them and fails if any failed. The inputs, languages and model directory are checked first
    (a [`~hf_laser.errors.UsageError`] / `FileNotFoundError` of one line), before any worker starts.
    """
    # lazy: mining imports numpy, tqdm
    from ..mining import dist_env, embed_shards, load_embedding_shards

    parquet = [path for _, path in args.input if _is_parquet(path)]
    if parquet and not getattr(args, "ray", None):
        if Path(parquet[0]).is_dir():
            raise UsageError(f"input {parquet[0]} is not a file (a directory of Parquet files is embedded with --ray)")
        raise UsageError(f"Parquet corpora ({parquet[0]}) are embedded on Ray: add --ray")
    if parquet and args.pretokenized:
        raise UsageError("--pretokenized is for text files, not Parquet corpora")
    for i, (lang, path) in enumerate(args.input):
        if _is_parquet(path):
            args.input[i] = (check_lang_arg(lang, WHO, "--input LANG"), path)
            continue
        if not Path(path).is_file():
            raise FileNotFoundError(f"input file not found: {path}" if not Path(path).exists()
                                    else f"input {path} is not a file")
        if not args.pretokenized:
            check_lang_argument(lang)
            args.input[i] = (check_lang_arg(lang, WHO, "--input LANG"), path)  # a language name -> its code
    check_device_arg(args.device)
    check_encoding_args(args)
    model = resolve_model(args.model, who=WHO)
    args.model = str(model)  # the workers do not announce the default model again
    check_model_dir(model)
    if getattr(args, "ray", None):
        if args.nproc or args.rank is not None or args.world_size is not None:
            raise UsageError("--ray gives the shards out itself: drop --nproc / --rank / --world-size")
        connect_ray(args)
        # lazy: mining.on_ray imports numpy, tqdm
        from ..mining.on_ray import embed_files, embed_parquet

        for lang, path in [(lang, path) for lang, path in args.input if _is_parquet(path)]:
            embed_parquet(path, args.embed_dir, model, lang=lang, text_column=args.text_column,
                          num_encoders=args.num_encoders, gpus_per_encoder=args.gpus_per_encoder,
                          tokenizers_per_encoder=args.tokenizers_per_encoder, fp16=args.fp16,
                          max_tokens=args.max_tokens, max_sentence_tokens=max_sentence_tokens_arg(args),
                          say=lambda m: print(f"{WHO}: {m}", file=sys.stderr), **_speed(args),
                          **({"device": args.device} if args.device else {}))
        args.input = [(lang, path) for lang, path in args.input if not _is_parquet(path)]
        if not args.input:
            return 0
        embed_files(args.input, args.embed_dir, model, num_shards=args.num_shards, num_encoders=args.num_encoders,
                    gpus_per_encoder=args.gpus_per_encoder, tokenizers_per_encoder=args.tokenizers_per_encoder,
                    pretokenized=args.pretokenized, fp16=args.fp16,
                    max_tokens=args.max_tokens, max_sentence_tokens=max_sentence_tokens_arg(args),
                    say=lambda m: print(f"{WHO}: {m}", file=sys.stderr), **_speed(args),
                    **({"device": args.device} if args.device else {}))
        return 0
    if getattr(args, "nproc", None):
        n = int(args.nproc)
        _decide_once(args, model, args.device or "cpu", 1)
        ctx = mp.get_context("spawn")
        threads = max(1, (os.cpu_count() or 1) // n)
        procs = [ctx.Process(target=_worker, args=(args, r, n, threads)) for r in range(n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"embed-shards worker(s) {failed} failed (see their messages above)")
        for lang, path in args.input:
            if load_embedding_shards(args.embed_dir, path, lang) is None:
                raise RuntimeError(f"shards of {path} are incomplete after all workers finished")
        return 0
    rank, world = dist_env()
    rank = rank if args.rank is None else args.rank
    world = world if args.world_size is None else args.world_size
    device = args.device
    if device is None:
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        use_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
        if torch.cuda.is_available() and not use_cpu:
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}"
        else:
            device = "cpu"
    _decide_once(args, model, device, world)
    # rank 0 says which member of a model set embeds each input's language (once, not once per rank)
    langs = {f"--input {lang}": lang for lang, _ in args.input} if rank == 0 else None
    encoder = load_encoder_for_cli(model, WHO, pretokenized=args.pretokenized, langs=langs, device=device,
                                   **_speed(args))
    show = False if args.no_progress else None
    for lang, path in args.input:
        manifest = embed_shards(
            encoder, path, args.embed_dir, lang, rank=rank, world_size=world, num_shards=args.num_shards,
            pretokenized=args.pretokenized, fp16=args.fp16, max_tokens=args.max_tokens,
            max_sentence_tokens=max_sentence_tokens_arg(args), show_progress_bar=show,
        )
        state = f"complete: {manifest}" if manifest else "waiting for other ranks"
        print(f" - rank {rank}/{world}: {path} ({lang}) shards done; {state}", file=sys.stderr)
    return 0
