"""What checking a finished output costs: the sha256 of an `.npy` of N x dim float32 rows (what `encode_file` checks
before it reuses an output, and `mine --embed-dir` before it uses a shard), timed on this machine.

    python benchmarks/output_checksum.py --lines 1000000          # a 1M-line output of 1024-d embeddings (4.1 GB)

The file is written with random rows into --dir (default: a temporary directory), then hashed --repeat times; the
first hash may read from the disk, later ones from the page cache: both are printed. Prints the processor.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from hf_laser.outputs import file_sha256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "out.npy"
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(args.lines, args.dim))
        rng = np.random.default_rng(0)
        for start in range(0, args.lines, 100_000):
            stop = min(args.lines, start + 100_000)
            out[start:stop] = rng.standard_normal((stop - start, args.dim), dtype=np.float32)
        out.flush()
        del out
        size = path.stat().st_size
        print(f"{platform.processor() or platform.machine()}; {args.lines:,} x {args.dim} float32 = {size / 1e9:.2f} GB")
        for i in range(args.repeat):
            t0 = time.perf_counter()
            file_sha256(path)
            seconds = time.perf_counter() - t0
            print(f"sha256 pass {i + 1}: {seconds:.2f} s ({size / seconds / 1e9:.2f} GB/s)")


if __name__ == "__main__":
    main()
