"""#48 item 1: what the processor can do (`hf_laser.speed.cpu`) on simulated capability sets, and `hf-laser env`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hf_laser.speed.cpu import CpuInfo, cpu_info, from_flags

NONE = {"avx2": False, "avx512": False, "avx512_bf16": False, "vnni": False, "amx": False, "amx_fp16": False}


def x86(**on) -> CpuInfo:
    return from_flags("test CPU", "x86_64", "AVX512" if on.get("avx512") else "AVX2", {**NONE, **on}, set())


def test_avx2_only_has_no_native_bf16():
    """The AMD EPYC of this project: bf16 emulated (measured 6x slower than fp32), int8 on fbgemm."""
    info = x86(avx2=True)
    assert info.native("fp32") and not info.native("bf16") and info.native("int8")
    assert "emulated" in info.notes()["bf16"] and "AVX2" in info.notes()["fp32"]


def test_sapphire_rapids_has_native_bf16_and_fast_int8():
    info = x86(avx2=True, avx512=True, avx512_bf16=True, vnni=True, amx=True)
    assert info.native("bf16") and info.native("int8")
    assert info.notes()["bf16"].startswith("native (amx, avx512_bf16")
    assert info.notes()["int8"].startswith("fast (vnni, amx")


def test_avx_vnni_from_the_os_flags():
    """Alder Lake style AVX-VNNI (no AVX-512): torch's VNNI check is AVX-512's; the OS flag completes it."""
    info = from_flags("test CPU", "x86_64", "AVX2", {**NONE, "avx2": True}, {"avx2", "avx_vnni"})
    assert "vnni" in info.flags and not info.native("bf16")


@pytest.mark.parametrize("features, bf16", [({"asimd", "sve", "bf16"}, True), ({"asimd"}, False)])
def test_arm(features, bf16):
    """Graviton3 (SVE, BF16) and Graviton2 (NEON only)."""
    info = from_flags("", "aarch64", "SVE256" if "sve" in features else "DEFAULT", NONE, features)
    assert "neon" in info.flags and info.native("int8") and info.native("bf16") is bf16
    assert ("sve" in info.flags) is ("sve" in features)


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="mode must be one of fp32, bf16, int8"):
        x86(avx2=True).native("fp8")


def test_this_machine_and_hf_laser_env():
    info = cpu_info()
    assert info.native("fp32") and info.line().startswith(info.model)
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "env"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("hf-laser ") and lines[1] == f"processor: {info.line()}"
    assert [line.split()[0] for line in lines[2:5]] == ["fp32", "bf16", "int8"]


def test_the_python_api_warns_for_an_emulated_dtype_too(monkeypatch):
    """#48 item 2 (part): `--dtype bfloat16` on a CPU without bf16 said so on the command line, but
    `LaserEncoder.from_pretrained(dtype=torch.bfloat16)` was silently 6x slower; now one warning at the caller's
    line saying what to use instead (the mode is kept: it is the user's choice)."""
    import warnings

    import torch

    from hf_laser import DEFAULT_MODEL, LaserEncoder

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    with pytest.warns(UserWarning, match="no native bfloat16 arithmetic .* emulated, several times slower") as got:
        encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL, dtype=torch.bfloat16)
    ours = [w for w in got if "no native bfloat16" in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__ and "quantize='int8'" in str(ours[0].message)
    assert next(encoder.model.parameters()).dtype == torch.bfloat16
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LaserEncoder.from_pretrained(DEFAULT_MODEL, dtype=torch.bfloat16)


def test_int8_without_kernels_is_said():
    """int8 asked for on a CPU whose int8 kernels PyTorch lacks (x86 without AVX2): one message naming the mode to
    use; nothing where fbgemm / qnnpack run."""
    from hf_laser.speed.cpu import int8_without_kernels_message

    message = int8_without_kernels_message(x86(), flag="--int8")
    assert "--int8" in message and "use float32" in message and "fbgemm needs AVX2" in message
    assert int8_without_kernels_message(x86(avx2=True)) is None
    assert int8_without_kernels_message(from_flags("", "aarch64", "DEFAULT", NONE, {"asimd"})) is None


def test_env_says_what_speed_auto_measured_here(tmp_path, monkeypatch, capsys):
    """#69 item 1: `hf-laser env` says that nothing is measured yet (no rule of flags is presented as a measurement),
    `--calibrate` measures (here with fake timings: no test times real code) and prints the table, and a later `env`
    prints what was kept."""
    import argparse

    from hf_laser.commands import env
    from hf_laser.speed import calibration

    monkeypatch.setenv("HF_LASER_SPEED_CALIBRATION", str(tmp_path / "cal.json"))
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "env"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "--speed auto: not measured on this machine yet" in run.stdout and "picks" not in run.stdout

    def fake_measure(runners, **kwargs):
        return {name: [0.5 if name == "fp32-torch" else 1.0] * 3 for name in runners}

    monkeypatch.setattr(calibration, "measure", fake_measure)
    import hf_laser.encoder

    monkeypatch.setattr(hf_laser.encoder, "_torch_import_seconds", lambda: 1.0)  # (no timing of real code)
    assert env.run(argparse.Namespace(calibrate=True, model=None)) == 0
    out = capsys.readouterr()
    assert "a 1 x 512 BiLSTM (laser-mini)" in out.out and "auto = fp32 (PyTorch)" in out.out
    assert "fp32 (NumPy engine)  1.0000 s, median 1.0000 s of 3; start " in out.out
    assert "measuring speed='auto' for a 1 x 512 BiLSTM" in out.err
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "env"], capture_output=True, text=True, timeout=300)
    assert "--speed auto, as measured on this machine" in run.stdout, run.stdout
    assert "auto = fp32 (PyTorch)" in run.stdout and "fp32 (PyTorch)       0.5000 s, median 0.5000 s of 3" in run.stdout
