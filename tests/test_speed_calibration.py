"""#69 item 1: `speed="auto"` decided by measurement on the machine (`hf_laser.speed.calibration`): the chooser on
fake timings (never a slower mode, ties to float32), the measurement loop with a fake timer, the cache key and the
cache file (untrusted input), and the cluster rule (one mode decided once for every worker). No test here times
real code: timings are injected."""

from __future__ import annotations

import itertools
import json
import random
import warnings

import pytest
from test_cpu import x86

from hf_laser.speed import SpeedChoice, agreed_choice, from_calibration
from hf_laser.speed.calibration import (
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    MIN_MARGIN,
    ShapeClass,
    cache_key,
    calibrate,
    candidates,
    decide,
    measure,
    noise,
    read_calibrations,
    slower_than_fp32,
    workload,
    write_calibration,
)

AVX2 = x86(avx2=True)
ZEN4 = x86(avx2=True, avx512=True, avx512_bf16=True, vnni=True)  # the kind of the issue: AVX512-BF16, no AMX
NO_AVX2 = x86()
LASER_MINI = ShapeClass("bilstm", 1, 512, 256)
LASER3 = ShapeClass("transformer", 12, 1024, 2048)


def test_candidates_are_within_the_bounds_and_native():
    """int8 for BiLSTMs only (a LASER3 transformer's int8 is outside the bounds), where PyTorch has int8 kernels;
    bf16 only where the CPU computes it natively; the float32 default first (the baseline)."""
    names = lambda cpu, kind, numpy=True: [c.name for c in candidates(cpu, kind, numpy)]  # noqa: E731
    assert names(ZEN4, "bilstm") == ["fp32-numpy", "fp32-torch", "int8", "bf16"]
    assert names(ZEN4, "transformer") == ["fp32-torch", "bf16"]
    assert names(AVX2, "bilstm") == ["fp32-numpy", "fp32-torch", "int8"]
    assert names(AVX2, "transformer") == ["fp32-torch"]
    assert names(NO_AVX2, "bilstm") == ["fp32-numpy", "fp32-torch"]
    assert names(ZEN4, "bilstm", numpy=False) == ["fp32-torch", "int8", "bf16"]


def test_a_clearly_faster_mode_is_chosen():
    timings = {"fp32-numpy": [1.0, 1.01, 1.02], "fp32-torch": [2.0, 2.0, 2.1], "int8": [0.5, 0.51, 0.5],
               "bf16": [0.7, 0.7, 0.71]}
    winner, reason = decide(timings, "fp32-numpy")
    assert winner == "int8" and "2.00x fp32-numpy" in reason


def test_ties_and_near_ties_go_to_fp32():
    """Equal times, and a mode faster by less than MIN_MARGIN, stay with the float32 default."""
    assert decide({"fp32-numpy": [1.0] * 3, "int8": [1.0] * 3, "bf16": [1.0] * 3}, "fp32-numpy")[0] == "fp32-numpy"
    almost = 1 / (1 + MIN_MARGIN) + 1e-3
    assert decide({"fp32-torch": [1.0] * 3, "bf16": [almost] * 3}, "fp32-torch")[0] == "fp32-torch"
    assert decide({"fp32-torch": [1.0] * 3, "bf16": [0.9] * 3}, "fp32-torch")[0] == "bf16"


def test_a_difference_within_the_noise_is_not_chosen():
    """int8 is 20 % faster at best, but its repeats spread by 30 % (median 0.8 -> 1.04): within the noise."""
    noisy = {"fp32-numpy": [1.0, 1.0, 1.0], "int8": [0.8, 1.04, 1.2]}
    assert noise(noisy["int8"]) == pytest.approx(0.3)
    assert decide(noisy, "fp32-numpy")[0] == "fp32-numpy"
    steady = {"fp32-numpy": [1.0, 1.0, 1.0], "int8": [0.8, 0.81, 1.2]}  # one disturbed run does not hide it
    assert decide(steady, "fp32-numpy")[0] == "int8"


def test_fp32_on_the_other_engine_must_beat_the_default_and_others_must_beat_it():
    """PyTorch's fp32 replaces the NumPy engine's only when faster beyond the margin, and a non-fp32 mode must then
    beat the faster fp32, not only the default."""
    timings = {"fp32-numpy": [1.0] * 3, "fp32-torch": [0.5] * 3, "bf16": [0.49] * 3}
    assert decide(timings, "fp32-numpy")[0] == "fp32-torch"
    timings["bf16"] = [0.3] * 3
    assert decide(timings, "fp32-numpy")[0] == "bf16"


def test_never_slower_than_the_default_on_random_timings():
    """10,000 random tables (3 repeats each, any spread): the winner's best time is never above the default's, and
    a winner other than the default is faster than it by more than MIN_MARGIN."""
    rng = random.Random(0)
    for _ in range(10_000):
        names = ["fp32-numpy", "fp32-torch", "int8", "bf16"][:rng.randint(1, 4)]
        timings = {n: [rng.uniform(0.01, 1.0) for _ in range(3)] for n in names}
        winner, _ = decide(timings, "fp32-numpy")
        assert min(timings[winner]) <= min(timings["fp32-numpy"])
        if winner != "fp32-numpy":
            assert min(timings[winner]) * (1 + MIN_MARGIN) < min(timings["fp32-numpy"])


def test_measure_warms_up_takes_turns_and_drops_a_clearly_slower_mode():
    calls, clock = [], [0.0]
    cost = {"fp32-numpy": 1.0, "int8": 0.5, "bf16": 10.0}

    def runner(name):
        def run():
            calls.append(name)
            clock[0] += cost[name]
        return run

    times = measure({n: runner(n) for n in cost}, repeats=3, timer=lambda: clock[0])
    assert calls[:3] == ["fp32-numpy", "int8", "bf16"]  # warm-up, once each
    assert calls[3:6] == ["fp32-numpy", "int8", "bf16"]  # then in turns
    assert times == {"fp32-numpy": [1.0] * 3, "int8": [0.5] * 3, "bf16": [10.0]}  # bf16: 10x the baseline, once


def test_workload_is_fixed_and_bounded():
    a, b = workload(LASER_MINI, 8000, 2), workload(LASER_MINI, 8000, 2)
    assert a == b and all(s[-1] == 2 and all(4 <= t < 8000 for t in s[:-1]) for s in a)
    big = workload(LASER3, 50_000, 2)
    assert 128 <= sum(map(len, big)) < 128 + 25  # the smallest workload for a 12 x 1024 transformer
    assert sum(map(len, a)) > sum(map(len, big))


def key(**changes):
    args = {"processor": "test CPU", "arch": "x86_64", "flags": {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "sse2"},
            "shape": LASER_MINI, "torch_version": "2.13.0", "numpy_version": "2.4.6", "threads": 2, "numpy_engine": True,
            **changes}
    return cache_key(**args)


def test_cache_key_holds_everything_the_timings_depend_on():
    base = key()
    assert key() == base and json.loads(base)["cpu"] == "test CPU"
    assert key(flags={"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "sse4_1"}) == base  # flags that do not matter
    different = [key(processor="other CPU"), key(arch="aarch64"), key(flags={"avx2"}),
                 key(flags={"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile"}),
                 key(shape=LASER3), key(shape=ShapeClass("bilstm", 5, 512, 320)), key(torch_version="2.14.0"),
                 key(numpy_version="2.5.0"), key(threads=16), key(numpy_engine=False)]
    assert len({base, *different}) == len(different) + 1


def test_this_machines_key_needs_no_torch():
    """A kept NumPy choice must load without importing torch: the key of this machine is read from the operating
    system and the installed packages' metadata."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys; from hf_laser.speed.calibration import ShapeClass, machine_key; "
            "machine_key(ShapeClass('bilstm', 1, 512, 256), True); print('torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "False", run.stderr


ENTRY = {"winner": "int8", "reason": "measured here", "baseline": "fp32-numpy", "measured": "2026-12-07 04:00 UTC",
         "timings": {"fp32-numpy": [1.0, 1.0, 1.01], "int8": [0.5, 0.5, 0.51], "bf16": [3.0]},
         "start": {"fp32-numpy": 0.1, "int8": 0.3, "bf16": 0.3}, "scale": 2.0}


def test_cache_round_trip_and_bounded_entries(tmp_path):
    path = tmp_path / "cal.json"
    assert read_calibrations(path) == {}
    write_calibration("k", ENTRY, path)
    assert read_calibrations(path) == {"k": ENTRY}
    for i in range(MAX_ENTRIES + 5):
        write_calibration(f"k{i}", ENTRY, path)
    kept = read_calibrations(path)
    assert len(kept) == MAX_ENTRIES and f"k{MAX_ENTRIES + 4}" in kept and "k" not in kept  # the newest


@pytest.mark.parametrize("content", [
    b"{not json", b"\xff\xfe", json.dumps({"version": 99, "entries": {}}).encode(), b"[1, 2]",
    json.dumps({"version": 1, "entries": {"k": {**ENTRY, "winner": "fp64"}}}).encode(),
    json.dumps({"version": 1, "entries": {"k": {**ENTRY, "timings": {"int8": [-1.0], "fp32-numpy": [1]}}}}).encode(),
    json.dumps({"version": 1, "entries": {"k": {**ENTRY, "timings": {"rm -rf": [1.0]}}}}).encode(),
    json.dumps({"version": 1, "entries": {"k": {**ENTRY, "start": {"int8": "1e400"}}}}).encode(),
    json.dumps({"version": 1, "entries": {"k": {**ENTRY, "scale": -1}}}).encode(),
    json.dumps({"version": 1, "entries": {f"k{i}": ENTRY for i in range(MAX_ENTRIES + 1)}}).encode(),
    b" " * (MAX_FILE_BYTES + 1),
], ids=["not-json", "not-utf8", "version", "not-a-dict", "bad-winner", "negative-time", "bad-name", "bad-start",
        "bad-scale", "too-many", "too-large"])
def test_a_bad_cache_file_is_ignored_with_one_warning(tmp_path, content):
    path = tmp_path / "cal.json"
    path.write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_calibrations(path) == {}
    assert len(caught) == 1 and "ignoring the speed calibration" in str(caught[0].message)
    write_calibration("k", ENTRY, path)  # and the next measurement replaces it
    assert read_calibrations(path) == {"k": ENTRY}


def test_calibrate_measures_once_then_reuses_and_force_measures_again(tmp_path):
    path, loads, said = tmp_path / "cal.json", [], []
    clock = [0.0]
    cost = {"fp32-numpy": 1.0, "fp32-torch": 2.0, "int8": 0.4, "bf16": None}  # bf16 cannot load this model

    def load(name):
        loads.append(name)
        if cost[name] is None:
            return None
        return (lambda: clock.__setitem__(0, clock[0] + cost[name])), 0.5  # (runner, seconds it took to load)

    names = ["fp32-numpy", "fp32-torch", "int8", "bf16"]
    entry = calibrate("k", LASER_MINI, names, load, say=said.append, path=path, timer=lambda: clock[0])
    assert entry["winner"] == "int8" and entry["baseline"] == "fp32-numpy" and "bf16" not in entry["timings"]
    assert entry["start"] == {"fp32-numpy": 0.5, "fp32-torch": 0.5, "int8": 0.5} and entry["scale"] == 1.0
    assert loads == ["fp32-numpy", *names]  # the baseline once more first, untimed
    assert len(said) == 2 and "measuring" in said[0] and "int8" in said[1]
    assert from_calibration(entry) == SpeedChoice("int8", "torch", entry["reason"])
    loads.clear()
    assert calibrate("k", LASER_MINI, names, load, say=said.append, path=path) == entry and loads == []
    cost["int8"] = 1.0
    again = calibrate("k", LASER_MINI, names, load, force=True, say=said.append, path=path, timer=lambda: clock[0])
    assert again["winner"] == "fp32-numpy" and read_calibrations(path)["k"] == again
    assert from_calibration(again).engine == "auto"  # the NumPy engine where it loads the model


def test_the_start_of_a_fresh_process_counts_on_the_reference_job():
    """int8 runs the workload twice as fast, but pays 10 s more to start (importing torch, quantising): on a job of
    5 workloads it loses (10 + 5 x 0.5 > 5 x 1), on one of 50 it wins (10 + 25 < 50)."""
    timings = {"fp32-numpy": [1.0] * 3, "int8": [0.5] * 3}
    start = {"fp32-numpy": 0.0, "int8": 10.0}
    assert decide(timings, "fp32-numpy", start, 5.0)[0] == "fp32-numpy"
    winner, reason = decide(timings, "fp32-numpy", start, 50.0)
    assert winner == "int8" and "1.43x fp32-numpy on the reference job, start included" in reason


def test_slower_than_fp32_per_the_calibration():
    assert slower_than_fp32(ENTRY, "bf16") == pytest.approx((0.3 + 6.0) / (0.1 + 2.0))
    assert slower_than_fp32(ENTRY, "int8") is None  # faster
    assert slower_than_fp32({**ENTRY, "timings": {"fp32-numpy": [1.0]}}, "bf16") is None  # not measured
    assert slower_than_fp32({**ENTRY, "timings": {"fp32-numpy": [1.0], "bf16": [1.03]}, "start": {}}, "bf16") is None


def test_the_first_rank_decides_and_every_other_rank_takes_its_choice(tmp_path):
    """embed-shards ranks started by a launcher: whichever decides first records its choice; the others read it,
    whatever they would have measured (their `decide` is not called)."""
    record = tmp_path / "embed" / ".speed-auto.x.json"
    first = SpeedChoice("int8", "torch", "measured on rank 0")
    assert agreed_choice(record, lambda: first) == first
    for other in (SpeedChoice("bf16", "torch", "measured on rank 1"), SpeedChoice("fp32", "auto", "rank 2")):
        assert agreed_choice(record, pytest.fail) == first, other
    assert [p.name for p in record.parent.iterdir()] == [record.name]  # no temporary file left behind
    record.write_text("{half a json")
    with pytest.raises(ValueError, match="does not record a speed mode"):
        agreed_choice(record, lambda: first)


def test_every_combination_of_candidates_is_decided(tmp_path):
    """decide() answers for every subset of the candidates that the baseline is part of."""
    names = ["fp32-torch", "int8", "bf16"]
    for n in range(len(names) + 1):
        for subset in itertools.combinations(names, n):
            timings = {"fp32-numpy": [1.0], **{name: [0.5] for name in subset}}
            assert decide(timings, "fp32-numpy")[0] in timings
