"""What the processor can do, and which speed modes it makes fast.

The instruction sets that decide a mode's speed on a CPU are read from PyTorch's own report (`torch.cpu._is_*`,
`torch.backends.cpu.get_cpu_capability()`: the same checks its kernels dispatch on) and, for what PyTorch does not
report (Arm's BF16, the processor's name), from `/proc/cpuinfo`:

- **fp32**: always native; AVX2 / AVX-512 (x86) or NEON / SVE (Arm) make it fast.
- **bf16** (`dtype=torch.bfloat16`): native with AVX512-BF16 or AMX-BF16 (x86) or the BF16 extension (Arm);
  elsewhere PyTorch emulates it, several times slower than fp32 (measured on an AVX2-only AMD EPYC: 6x).
- **int8** (`quantize="int8"`): fbgemm's kernels need AVX2 at least and are fastest with VNNI (AVX512-VNNI or
  AVX-VNNI) or AMX-INT8; on Arm, qnnpack on NEON.

[`cpu_info`] gives a [`CpuInfo`]; `hf-laser env` prints it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

MODES = ("fp32", "bf16", "int8")


@dataclass(frozen=True)
class CpuInfo:
    """The processor as the speed modes see it (see the module docstring)."""

    model: str
    arch: str  # platform.machine(): x86_64, aarch64, arm64 ...
    torch_capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT, AVX2, AVX512, SVE256 ...
    # avx2, avx512, avx512_bf16, vnni, amx, amx_fp16 (x86); neon, sve, arm_bf16 (Arm)
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def x86(self) -> bool:
        return self.arch.lower() in ("x86_64", "amd64", "i686", "x86")

    def native(self, mode: str) -> bool:
        """Whether `mode` runs on instructions of its own here (not emulated)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "fp32":
            return True
        if mode == "bf16":
            return bool(self.flags & {"avx512_bf16", "amx", "arm_bf16"})
        return "avx2" in self.flags or "neon" in self.flags  # int8: fbgemm (x86, AVX2+) or qnnpack (Arm)

    def notes(self) -> dict[str, str]:
        """Per mode, what makes it fast or slow here (one phrase each)."""
        have = sorted(self.flags)
        fp32 = "AVX-512" if "avx512" in self.flags else "AVX2" if "avx2" in self.flags else \
            "SVE" if "sve" in self.flags else "NEON" if "neon" in self.flags else "no vector extension PyTorch uses"
        if self.native("bf16"):
            bf16 = "native (" + ", ".join(f for f in ("amx", "avx512_bf16", "arm_bf16") if f in have) + ")"
        else:
            bf16 = "emulated: several times slower than fp32 here (no AVX512-BF16, AMX or Arm BF16)"
        if not self.native("int8"):
            int8 = "no kernel for this processor (fbgemm needs AVX2)"
        elif self.flags & {"vnni", "amx"}:
            int8 = "fast (" + ", ".join(f for f in ("vnni", "amx") if f in have) + ")"
        else:
            int8 = "fbgemm on AVX2 (no VNNI / AMX)" if self.x86 else "qnnpack on NEON"
        return {"fp32": f"native ({fp32})", "bf16": bf16, "int8": int8}

    def line(self) -> str:
        """One line naming the processor and the instruction sets that matter (for benchmark outputs)."""
        sets = ", ".join(sorted(self.flags)) or "none of those that matter"
        return f"{self.model} ({self.arch}; {sets}; PyTorch dispatch: {self.torch_capability})"


def _proc_cpuinfo() -> tuple[str, set[str]]:
    """The processor's name and its flags (x86) / features (Arm) from /proc/cpuinfo ("" and empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", set()
    name, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return name, flags


def from_flags(model: str, arch: str, torch_capability: str, torch_flags: dict[str, bool],
               cpu_flags: set[str]) -> CpuInfo:
    """A [`CpuInfo`] from PyTorch's checks (`torch_flags`: `avx2`, `avx512`, `avx512_bf16`, `vnni`, `amx`,
    `amx_fp16`) and the operating system's flag list (`cpu_flags`, for Arm's features); testable with any set."""
    flags = {name for name, ok in torch_flags.items() if ok}
    if arch.lower() in ("aarch64", "arm64"):
        flags.add("neon")  # (part of every ARMv8-A: "asimd" in /proc/cpuinfo)
        if "sve" in cpu_flags or torch_capability.upper().startswith("SVE"):
            flags.add("sve")
        if "bf16" in cpu_flags:
            flags.add("arm_bf16")
    elif "avx_vnni" in cpu_flags or "avx512_vnni" in cpu_flags:
        flags.add("vnni")
    return CpuInfo(model=model or platform.processor() or "unknown processor", arch=arch,
                   torch_capability=torch_capability, flags=frozenset(flags))


@lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    """This machine's [`CpuInfo`] (imports torch)."""
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    checks = {"avx2": "_is_avx2_supported", "avx512": "_is_avx512_supported",
              "avx512_bf16": "_is_avx512_bf16_supported", "vnni": "_is_vnni_supported",
              "amx": "_is_amx_tile_supported", "amx_fp16": "_is_amx_fp16_supported"}
    torch_flags = {}
    for name, fn in checks.items():
        try:
            torch_flags[name] = bool(getattr(torch.cpu, fn)())
        except Exception:  # noqa: BLE001 - a torch without that check reports nothing for it
            torch_flags[name] = False
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001
        capability = "unknown"
    model, cpu_flags = _proc_cpuinfo()
    return from_flags(model, platform.machine(), capability, torch_flags, cpu_flags)


def emulated_dtype_message(dtype, device, *, flag: str, int8: str = "quantize='int8'") -> str | None:
    """Why a bfloat16 / float16 model will be slow on this device, where the CPU has no native arithmetic for it
    (oneDNN's own probes, as PyTorch's kernels decide): PyTorch then emulates it, slower than float32 (6x measured
    on an AVX2-only AMD EPYC, docs/measured/processors.md). `flag` and `int8` name the settings in the message (`--dtype
    bfloat16` / `--int8` on a command line). None where nothing is to be said."""
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    if dtype not in (torch.bfloat16, torch.float16) or torch.device(device or "cpu").type != "cpu":
        return None
    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    try:  # (private oneDNN probes; a torch without them says nothing)
        if getattr(torch.ops.mkldnn, f"_is_mkldnn_{name}_supported")():
            return None
    except (AttributeError, RuntimeError):
        return None
    dtype_name = str(dtype).removeprefix("torch.")
    return (f"this CPU has no native {dtype_name} arithmetic (PyTorch's CPU capability: "
            f"{torch.backends.cpu.get_cpu_capability()}), so {flag} is emulated, several times slower than float32 "
            f"(6x on an AVX2-only CPU): use float32 (the default) or {int8} here; `hf-laser env` says what this CPU "
            "makes fast")


def int8_without_kernels_message(info: CpuInfo, *, flag: str = "quantize='int8'") -> str | None:
    """Why int8 quantisation will not be fast on the processor `info` describes (no AVX2 on x86, no NEON on Arm:
    PyTorch's int8 kernels, fbgemm and qnnpack, need them), or None."""
    if info.native("int8"):
        return None
    return (f"this CPU has no int8 kernels for PyTorch ({info.notes()['int8']}), so {flag} runs on slower fallback "
            "code, expected no faster than float32 (not measured on such a CPU): use float32 (the default) here; "
            "`hf-laser env` says what this CPU makes fast")
