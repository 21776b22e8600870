"""Models shipped inside the package, and the default one.

`DEFAULT_MODEL` is the directory of `laser-mini`, a small LASER encoder trained by this project with
`training/configs/laser-mini.yaml` on the parallel corpora described in its model card. It is far weaker than the
original LASER models (convert those with `hf-laser convert`); it exists so that embedding works out of the box.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_MODEL_NAME = "laser-mini"
DEFAULT_MODEL = str(Path(__file__).resolve().parent / DEFAULT_MODEL_NAME)

_announced = False


def resolve_model(model: str | os.PathLike | None, *, who: str = "hf_laser") -> str | os.PathLike:
    """`model`, or the shipped default model when it is None, saying so once per process on stderr."""
    global _announced
    if model is not None:
        return model
    if not (Path(DEFAULT_MODEL) / "config.json").is_file():
        raise FileNotFoundError(f"the default model is missing from the installed package ({DEFAULT_MODEL}); "
                                "reinstall hf-laser, or pass a model directory")
    if not _announced:
        print(f"{who}: no model given, using the shipped default model {DEFAULT_MODEL_NAME} ({DEFAULT_MODEL}); "
              "it is small and much weaker than the original LASER (see its model card)", file=sys.stderr)
        _announced = True
    return DEFAULT_MODEL
