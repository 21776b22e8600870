"""Speed modes: how an encoder computes (engine, dtype, quantisation), and `speed="auto"`, the fastest mode within
the fidelity bounds on this processor.

The modes, as `LaserEncoder.from_pretrained(speed=...)` and `--speed` take them:

- **fp32**: float32, the original's numbers (to round-off); on the CPU with the NumPy engine where it can load the
  model (faster than PyTorch on every BiLSTM measured, docs/speed.md), else PyTorch.
- **bf16**: PyTorch with bfloat16 weights and activations.
- **int8**: PyTorch with dynamic int8 quantisation of the LSTM / the transformer's linear layers (CPU only).
- **auto**: one of the above, chosen by [`choose`] from what the processor does natively and the model's kind, by
  rules from measurements (docs/speed.md, "Which mode is fast where"). The rule is a function of the processor's
  instruction sets and the model's shape, never of a timing taken at run time: the same kind of machine always
  makes the same choice, so the shards of a corpus embedded on a cluster of like machines are computed alike (the
  choice is part of every output's identity all the same: engine, dtype and quantisation are recorded, and a resume
  never mixes them).

Fidelity bounds (measured by `benchmarks/speed_modes_fidelity.py`, checked by `tests/test_speed.py`): a mode `auto`
may pick changes the Tatoeba error of the shipped model by at most 0.2 points and keeps the cosine to float32 of
the reference model at 0.999 or more. bf16 and int8 are within them for BiLSTMs; for the LASER3 transformer, only
bf16 is (int8 of its 12 layers moves the embeddings further, docs/speed.md), so `auto` never quantises one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cpu import CpuInfo

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


def choose(cpu: CpuInfo, shape: ModelShape, device_type: str = "cpu") -> SpeedChoice:
    """`speed="auto"`: the mode measured fastest on a processor like `cpu` for a model of this `shape`, among those
    within the fidelity bounds (module docstring; the measurements: docs/speed.md, "Which mode is fast where")."""
    if shape.encoder_type == "sonar":
        return SpeedChoice("fp32", "torch", "SONAR: float32, the only mode whose fidelity is measured for SONAR")
    if device_type != "cpu":
        return SpeedChoice("fp32", "torch", f"on {device_type}, float32: bf16 / fp16 were no faster for the encoder "
                                            "on the GPU measured (an H200)")
    exact = "auto" if shape.encoder_type == "bilstm" else "torch"  # (the NumPy engine computes BiLSTMs)
    if cpu.native("bf16"):
        native = ", ".join(sorted(cpu.flags & {"amx", "avx512_bf16", "arm_bf16"}))
        return SpeedChoice("bf16", "torch", f"native bf16 arithmetic ({native}): the fastest mode measured on such "
                                            "a CPU")
    if shape.encoder_type != "bilstm":
        return SpeedChoice("fp32", exact, "no native bf16, and int8 of a transformer is outside the fidelity bounds")
    if not cpu.native("int8"):
        return SpeedChoice("fp32", exact, "no native bf16 and no int8 kernels on this CPU")
    if shape.num_layers == 1:
        return SpeedChoice("fp32", exact, "no native bf16; for a one-layer BiLSTM the NumPy engine's float32 was "
                                          "measured faster than int8")
    return SpeedChoice("int8", "torch", f"no native bf16; int8 kernels ({cpu.notes()['int8']}) measured the fastest "
                                        f"for a BiLSTM of {shape.num_layers} layers")


def resolve(speed: str, cpu: CpuInfo | None, shape: ModelShape | None, device_type: str = "cpu") -> SpeedChoice:
    """`speed` (one of [`SPEEDS`]) as a [`SpeedChoice`]; `cpu` and `shape` are needed for `"auto"` only."""
    if speed not in SPEEDS:
        raise ValueError(f"speed must be one of {', '.join(map(repr, SPEEDS))}, got {speed!r}")
    if speed == "auto":
        return choose(cpu, shape, device_type)
    if speed == "int8" and device_type != "cpu":
        raise ValueError("speed='int8' (dynamic int8 quantisation) runs on the CPU only")
    return SpeedChoice(speed, "auto" if speed == "fp32" and device_type == "cpu" else "torch", "asked for")
