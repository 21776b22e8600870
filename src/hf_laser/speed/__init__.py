"""Speed modes: how an encoder computes (engine, dtype, quantisation), and `speed="auto"`, the fastest mode within
the fidelity bounds on this processor.

The modes, as `LaserEncoder.from_pretrained(speed=...)` and `--speed` take them:

- **fp32**: float32, the original's numbers (to round-off); on the CPU with the NumPy engine where it can load the
  model (faster than PyTorch on every BiLSTM measured, docs/measured/processors.md), else PyTorch.
- **bf16**: PyTorch with bfloat16 weights and activations.
- **int8**: PyTorch with dynamic int8 quantisation of the LSTM / the transformer's linear layers (CPU only).
- **auto**: one of the above, measured fastest on this machine for this kind of model ([`calibration`]: the first
  `auto` for a model shape times each candidate mode within the fidelity bounds on a short fixed workload, keeps the
  result in the user's cache keyed by processor, versions, threads and shape, and reuses it after). A mode other than
  float32 is chosen only if it beats float32 by more than the measurement's noise. On a GPU, and for SONAR, `auto` is
  float32 by rule ([`rule`]). A run spread over processes or machines decides once and hands the [`SpeedChoice`] to
  every worker ([`agreed_choice`] where no driver does): the choice is part of every output's identity (engine,
  dtype and quantisation are recorded, and a resume never mixes them).

Fidelity bounds (measured by `benchmarks/speed_modes_fidelity.py`, checked by `tests/test_speed.py`): a mode `auto`
may pick changes the Tatoeba error of the shipped model by at most 0.2 points and keeps the cosine to float32 of
the reference model at 0.999 or more. bf16 and int8 are within them for BiLSTMs; for the LASER3 transformer, only
bf16 is (int8 of its 12 layers moves the embeddings further, docs/laser3.md), so `auto` never quantises one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .calibration import CANDIDATES

SPEEDS = ("auto", "fp32", "bf16", "int8")


@dataclass(frozen=True)
class SpeedChoice:
    """A resolved speed mode: what [`~encoder.LaserEncoder.from_pretrained`] loads with, and why."""

    mode: str  # fp32, bf16 or int8
    engine: str  # "auto" (NumPy where it can, else PyTorch) or "torch"
    reason: str  # one phrase: why this mode (for `auto`: the rule that chose it)

    @property
    def quantize(self) -> str | None:
        return "int8" if self.mode == "int8" else None

    def dtype(self):
        """The torch dtype to load with (None: float32, without importing torch)."""
        if self.mode != "bf16":
            return None
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        return torch.bfloat16


@dataclass(frozen=True)
class ModelShape:
    """What the choice depends on in a model: its encoder type and depth."""

    encoder_type: str  # "bilstm", "transformer" (a LASER3 student) or "sonar"
    num_layers: int

    @classmethod
    def from_config(cls, config: dict) -> ModelShape:
        if config.get("model_type") == "sonar":
            return cls(encoder_type="sonar", num_layers=int(config.get("encoder_layers", 24)))
        return cls(encoder_type=config.get("encoder_type", "bilstm"), num_layers=int(config.get("num_layers", 1)))


def rule(shape: ModelShape, device_type: str = "cpu") -> SpeedChoice | None:
    """The part of `speed="auto"` that is a rule, not a measurement: float32 for SONAR (the only mode whose fidelity
    is measured for it) and on a GPU; None for a LASER model on the CPU (measured: [`calibration.calibrate`])."""
    if shape.encoder_type == "sonar":
        return SpeedChoice("fp32", "torch", "SONAR: float32, the only mode whose fidelity is measured for SONAR")
    if device_type != "cpu":
        return SpeedChoice("fp32", "torch", f"on {device_type}, float32: bf16 / fp16 were no faster for the encoder "
                                            "on the GPU measured (an H200)")
    return None


def from_calibration(entry: dict) -> SpeedChoice:
    """The [`SpeedChoice`] of a calibration entry ([`calibration.calibrate`]): its winner."""
    candidate = CANDIDATES[entry["winner"]]
    engine = "auto" if candidate.engine == "numpy" else "torch"  # (NumPy where it loads the model, else PyTorch)
    return SpeedChoice(candidate.mode, engine, entry["reason"])


def resolve(speed: str, device_type: str = "cpu") -> SpeedChoice:
    """An explicit `speed` (`"fp32"`, `"bf16"`, `"int8"`) as a [`SpeedChoice`]; `"auto"` is decided by the encoder
    (a rule or a measurement, [`rule`], [`calibration`])."""
    if speed not in SPEEDS:
        raise ValueError(f"speed must be one of {', '.join(map(repr, SPEEDS))}, got {speed!r}")
    if speed == "auto":
        raise ValueError("speed='auto' is decided for a model (LaserEncoder.from_pretrained), not by name")
    if speed == "int8" and device_type != "cpu":
        raise ValueError("speed='int8' (dynamic int8 quantisation) runs on the CPU only")
    return SpeedChoice(speed, "auto" if speed == "fp32" and device_type == "cpu" else "torch", "asked for")


def agreed_choice(path: Path, decide: Callable[[], SpeedChoice]) -> SpeedChoice:
    """The [`SpeedChoice`] recorded at `path` by the first of several processes working on one output (the ranks of
    `embed-shards` started by a launcher, with no driver to decide for them), else `decide()`, recorded there for the
    others (created exclusively: the first process's choice wins, and the others read it). Every rank thus computes in
    one mode, decided once; a later run on the same directory resumes in that mode."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        return SpeedChoice(str(recorded["mode"]), str(recorded["engine"]), str(recorded["reason"]))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} does not record a speed mode ({err}): remove it to decide again") from None
    choice = decide()
    if choice.mode not in SPEEDS[1:] or choice.engine not in ("auto", "torch"):
        raise ValueError(f"not a speed choice: {choice}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"mode": choice.mode, "engine": choice.engine, "reason": choice.reason}, f)
        os.link(tmp, path)  # (complete when it appears; fails where another rank's is there)
    except FileExistsError:
        return agreed_choice(path, decide)  # another rank was first: its choice
    finally:
        os.unlink(tmp)
    return choice
