"""`hf-laser decode`: SONAR sentence embeddings (a `.npy` file, e.g. from `hf-laser embed --model sonar`) back into
text with SONAR's text decoder (a directory `hf-laser convert` wrote from `sonar_text_decoder.pt`):

    hf-laser decode --model sonar-decoder --lang fra_Latn -i embeddings.npy -o texts.txt [--beam-size 5]

One output line per embedding, what SONAR's `EmbeddingToTextModelPipeline.predict` gives (beam search, 5 beams;
`--beam-size 1` is greedy).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from pathlib import Path

from ..errors import UsageError
from .common import check_device_arg, check_output_path

WHO = "hf-laser decode"
MAX_INPUT_BYTES = 64 << 30  # a .npy larger than this is refused before it is mapped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="SONAR text decoder directory (what hf-laser convert writes from sonar_text_decoder.pt)")
    parser.add_argument("--lang", required=True,
                        help="language of the output: one of SONAR's tags (fra_Latn ...) or a code or name that names "
                             "one (fr, French)")
    parser.add_argument("-i", "--input", required=True,
                        help="embeddings, a .npy file of shape [n, dim] (SONAR's encoder's, not normalised)")
    parser.add_argument("-o", "--output", default=None, help="output text file, one line per embedding "
                                                             "(default: stdout)")
    parser.add_argument("--beam-size", type=int, default=5, help="beams (default 5, SONAR's; 1: greedy)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="longest output in ids, the two of the language prompt included (default: the "
                             "decoder's 512)")
    parser.add_argument("--min-gen-len", type=int, default=1, help="shortest output in ids (default 1)")
    parser.add_argument("--len-penalty", type=float, default=1.0,
                        help="length penalty (default 1.0; below 1 favours shorter outputs)")
    parser.add_argument("--unk-penalty", type=float, default=0.0,
                        help="subtracted from <unk>'s log-probability (default 0)")
    parser.add_argument("--batch-size", type=int, default=5, help="embeddings per batch (default 5, as SONAR's)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")


def read_embeddings(path: str | os.PathLike):
    """A 2-d floating-point `.npy` (memory-mapped, no pickles); [`UsageError`] in one line otherwise."""
    # lazy: numpy (the command line's start runs without it)
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"input not found: {path}")
    if path.stat().st_size > MAX_INPUT_BYTES:
        raise UsageError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_INPUT_BYTES:,} read")
    try:
        rows = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise UsageError(f"{path} is not a .npy file of embeddings: {' '.join(str(err).split())}") from None
    if not isinstance(rows, np.ndarray) or rows.ndim != 2 or not np.issubdtype(rows.dtype, np.floating):
        raise UsageError(f"{path}: expected a 2-d float array [n, dim], got "
                         f"{getattr(rows, 'dtype', type(rows).__name__)} of shape {getattr(rows, 'shape', '?')}")
    return rows


def run(args: argparse.Namespace) -> int:
    check_device_arg(args.device)
    if args.output is not None:
        check_output_path(args.output)
    for flag, value, least in (("--beam-size", args.beam_size, 1), ("--batch-size", args.batch_size, 1),
                               ("--min-gen-len", args.min_gen_len, 1)):
        if value < least:
            raise UsageError(f"{flag} must be >= {least}, got {value}")
    if args.max_seq_len is not None and args.max_seq_len < 3:
        raise UsageError(f"--max-seq-len must be >= 3 (the two ids of the prompt and one more), got {args.max_seq_len}")
    rows = read_embeddings(args.input)
    # lazy: tqdm, needed once the work starts
    from tqdm.auto import tqdm

    # lazy: torch, transformers (seconds), after the arguments are checked
    from ..decoder import SonarTextDecoder
    from ..text.text_tokenizer import LaserInputError

    decoder = SonarTextDecoder.from_pretrained(args.model, device=args.device)
    if rows.shape[1] != decoder.embedding_dim:
        raise UsageError(f"{args.input}: embeddings of dimension {rows.shape[1]}, the decoder reads "
                         f"{decoder.embedding_dim}")
    try:
        decoder.target_prefix(args.lang)
    except LaserInputError as err:
        raise UsageError(str(err)) from None
    out = None if args.output is None else Path(args.output)
    tmp = None if out is None else out.with_name(out.name + ".partial")
    broken = 0
    # batch by batch into the output (a memory-mapped input is never held whole); the file appears once complete
    with (nullcontext(sys.stdout) if tmp is None else open(tmp, "w", encoding="utf-8", newline="\n")) as sink, \
            tqdm(total=len(rows), desc="decode", unit="sentence", disable=None, file=sys.stderr) as bar:
        for start in range(0, len(rows), args.batch_size):
            texts = decoder.decode(rows[start:start + args.batch_size], args.lang, batch_size=args.batch_size,
                                   beam_size=args.beam_size, max_seq_len=args.max_seq_len,
                                   min_gen_len=args.min_gen_len, len_penalty=args.len_penalty,
                                   unk_penalty=args.unk_penalty)
            for text in texts:
                if "\n" in text or "\r" in text:
                    # one line per embedding: a line break inside a text would shift every line after it
                    broken += 1
                    text = text.replace("\r", " ").replace("\n", " ")
                sink.write(text + "\n")
            sink.flush()
            bar.update(len(texts))
    if broken:
        print(f"{WHO}: note: {broken} text(s) held line breaks, written as spaces", file=sys.stderr)
    if tmp is not None:
        os.replace(tmp, out)
        print(f"{WHO}: wrote {len(rows):,} lines to {out}", file=sys.stderr)
    return 0
