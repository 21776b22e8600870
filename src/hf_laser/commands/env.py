"""`hf-laser env`: versions, the processor and which speed modes it makes fast (for a bug report, and before
choosing `--speed`, `--dtype bfloat16` or `--int8`)."""

from __future__ import annotations

import argparse
import platform
import sys

from .. import __version__
from ..speed import ModelShape, choose
from ..speed.cpu import MODES, cpu_info


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


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

    print("--speed auto picks here:")
    for name, shape in (("a one-layer BiLSTM (laser-mini)", ModelShape("bilstm", 1)),
                        ("a deeper BiLSTM (LASER, LASER2)", ModelShape("bilstm", 5)),
                        ("a transformer (LASER3 students)", ModelShape("transformer", 12))):
        choice = choose(info, shape)
        engine = "NumPy engine where it can load the model" if choice.engine == "auto" else "PyTorch"
        print(f"  {name}: {choice.mode} ({engine}; {choice.reason})")
    sys.stdout.flush()
    return 0
