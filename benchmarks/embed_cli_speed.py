"""End-to-end speed of `hf-laser embed` (process start, model loading, preprocessing, BPE, encoding, writing) on
real Tatoeba text, per speed mode.

The input is the English side of the first Tatoeba v1 files (1,000 lines each) up to `--lines` lines (default 10,000),
embedded with `--lang en` by the shipped model (or `--model DIR`) in each mode: fp32 (the command's default: the
NumPy engine for a plain model directory), fp32 on PyTorch (`--engine torch`), `--dtype bfloat16`, `--int8`, each
with `--num-proc 1` and `--num-proc 2` (preprocessing workers). Each command runs `--repeat` times in a fresh
process (the best time is reported, so a machine shared with other jobs disturbs it least) and the rows of every
mode are checked against fp32 (max |difference|). What a mode costs in Tatoeba error is measured by
`benchmarks/speed_modes_fidelity.py --model DIR`.

    python benchmarks/embed_cli_speed.py [--model DIR] [--lines 10000] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba" / "v1"
MODES = {"fp32": [], "fp32-torch": ["--engine", "torch"], "bf16": ["--dtype", "bfloat16"], "int8": ["--int8"]}


def english_lines(tatoeba: Path, n: int) -> list[str]:
    lines: list[str] = []
    for path in sorted(tatoeba.glob("tatoeba.*-eng.eng")):
        lines += path.read_text(encoding="utf-8").splitlines()
        if len(lines) >= n:
            return lines[:n]
    raise SystemExit(f"only {len(lines)} English lines in {tatoeba}; lower --lines")


def hf_laser_script() -> str:
    """The `hf-laser` console script of the environment running this benchmark (not whichever one PATH finds first:
    that could be another install of another version)."""
    here = Path(sys.executable).parent / ("hf-laser.exe" if os.name == "nt" else "hf-laser")
    found = str(here) if here.is_file() else shutil.which("hf-laser")
    if found is None:
        raise SystemExit(f"error: no hf-laser script next to {sys.executable} nor on PATH: pip install -e . first")
    return found



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: the shipped laser-mini)")
    parser.add_argument("--tatoeba-dir", default=str(TATOEBA))
    parser.add_argument("--lines", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (OMP_NUM_THREADS) of each run")
    parser.add_argument("--modes", default="fp32,fp32-torch,bf16,int8", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--num-proc", default="1,2", help="preprocessing workers to try (comma-separated)")
    args = parser.parse_args(argv)
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    if unknown := [m for m in args.modes.split(",") if m not in MODES]:
        parser.error(f"unknown mode(s) {', '.join(unknown)}: choose from {', '.join(MODES)}")
    tatoeba = Path(args.tatoeba_dir)
    if not tatoeba.is_dir():
        print(f"error: {tatoeba} not found (the Tatoeba v1 folder of ../shared)", file=sys.stderr)
        return 2
    lines = english_lines(tatoeba, args.lines)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1")
    model = ["--model", args.model] if args.model else []
    script = hf_laser_script()
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "input.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        reference = None
        print(f"{len(lines):,} English Tatoeba lines, {args.threads} torch thread(s), best of {args.repeat}\n")
        print("| mode | --num-proc | seconds | sentences/s | max abs diff vs fp32 |")
        print("|---|---|---|---|---|")
        for mode in args.modes.split(","):
            for num_proc in args.num_proc.split(","):
                out = Path(tmp) / f"{mode}-{num_proc}.npy"
                cmd = [script, "embed", *model, "--lang", "en", "-i", str(text), "-o", str(out), "--overwrite",
                       "--quiet", "--num-proc", num_proc, *MODES[mode]]
                best = float("inf")
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    best = min(best, time.perf_counter() - start)
                    if result.returncode != 0:
                        print(result.stderr, file=sys.stderr)
                        return 1
                emb = np.load(out)
                if emb.shape[0] != len(lines):
                    print(f"error: {out} has {emb.shape[0]} rows for {len(lines)} lines", file=sys.stderr)
                    return 1
                if reference is None:
                    reference = emb
                diff = float(np.abs(emb.astype(np.float32) - reference).max())
                print(f"| {mode} | {num_proc} | {best:.2f} | {len(lines) / best:,.0f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
