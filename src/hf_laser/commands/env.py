"""`hf-laser env`: versions, the processor, which speed modes it makes fast, and what `--speed auto` measured here
(`--calibrate`: measure again and print the table)."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

from .. import __version__
from ..speed.calibration import LABELS, ShapeClass, calibration_path, machine_key, read_calibrations
from ..speed.cpu import MODES, cpu_info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibrate", action="store_true",
                        help="measure the candidate modes of the 'auto' speed mode again on this machine (seconds per "
                             "model) and print the table; kept for the next use of 'auto'")
    parser.add_argument("--model", action="append", default=None,
                        help="with --calibrate: a model whose kind to measure (repeatable; default: the shipped "
                             "laser-mini); other kinds are measured on their first use of 'auto'")


def print_entry(what: str, entry: dict) -> None:
    scale, start = entry.get("scale", 1.0), entry.get("start", {})
    print(f"  {what}, measured {entry['measured']}: auto = {LABELS[entry['winner']]}")
    print(f"    (the workload's best and median time; the reference job, {scale:.0f} workloads in a fresh process: "
          "start, then the total)")
    base = start.get(entry["baseline"], 0.0) + scale * min(entry["timings"][entry["baseline"]])
    for name, times in entry["timings"].items():
        total = start.get(name, 0.0) + scale * min(times)
        print(f"    {LABELS[name]:<20} {min(times):.4f} s, median {statistics.median(times):.4f} s of {len(times)}; "
              f"start {start.get(name, 0.0):.2f} s, total {total:.2f} s ({base / total:.2f}x {entry['baseline']})")


def run(args: argparse.Namespace) -> int:
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    info = cpu_info()
    print(f"hf-laser {__version__}, Python {platform.python_version()}, torch {torch.__version__}"
          + (f", CUDA {torch.version.cuda} ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    print(f"processor: {info.line()}")
    notes = info.notes()
    for mode in MODES:
        print(f"  {mode:<5} {notes[mode]}")
    sys.stdout.flush()
    if getattr(args, "calibrate", False):
        # lazy: encoder imports numpy, tqdm (not needed by `hf-laser env` without --calibrate)
        from ..encoder import calibrate_speed

        print("--speed auto, measured now (each mode's best time on the calibration workload):")
        for model in args.model or [None]:
            entry, shape = calibrate_speed(model, say=lambda message: print(message, file=sys.stderr, flush=True))
            print_entry(f"{shape.describe()} ({model or 'laser-mini'})", entry)
        return 0
    here = json.loads(machine_key(ShapeClass("", 0, 0, 0), False))
    mine = {}
    for key, entry in read_calibrations().items():
        k = json.loads(key)
        if all(k.get(field) == value for field, value in here.items() if field not in ("shape", "numpy_engine")):
            mine[tuple(k["shape"])] = entry
    if not mine:
        print(f"--speed auto: not measured on this machine yet ({calibration_path()}): the first --speed auto for a "
              "kind of model measures its candidate modes (a few seconds), or run `hf-laser env --calibrate`")
        return 0
    print(f"--speed auto, as measured on this machine ({calibration_path()}):")
    for shape, entry in sorted(mine.items()):
        print_entry(ShapeClass(*shape).describe(), entry)
    return 0
