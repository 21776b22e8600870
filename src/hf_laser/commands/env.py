"""`hf-laser env`: versions, the processor and which speed modes it makes fast (for a bug report, and before
choosing `--dtype bfloat16` or `--int8`)."""

from __future__ import annotations

import argparse
import platform
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import torch

    from .. import __version__
    from ..cpu import MODES, cpu_info

    info = cpu_info()
    print(f"hf-laser {__version__}, Python {platform.python_version()}, torch {torch.__version__}"
          + (f", CUDA {torch.version.cuda} ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    print(f"processor: {info.line()}")
    notes = info.notes()
    for mode in MODES:
        print(f"  {mode:<5} {notes[mode]}")
    sys.stdout.flush()
    return 0
