"""`speed="auto"` decided by measurement on this machine.

The first `auto` for a kind of model on a machine times every candidate mode within the fidelity bounds
([`candidates`]: float32 on the NumPy engine and on PyTorch, int8 for a BiLSTM where PyTorch has int8 kernels, bf16
where the CPU computes it natively) on a short fixed workload ([`workload`]: random token ids from a fixed seed,
sized for a fraction of a second per run), each mode warmed up once and then timed `REPEATS` times in turn. A mode
other than the float32 default is chosen only if its best time beats the default's by more than the measurement's
noise ([`decide`]): ties and near-ties stay float32, so `auto` is never slower than doing nothing, as far as this
machine's timings can tell.

The result is kept in the user's cache (`~/.cache/hf_laser/speed-calibration.json`; `$HF_LASER_SPEED_CALIBRATION`
names another file), keyed by what the timings depend on
([`cache_key`]: the processor's name and flags, PyTorch's and NumPy's versions, the number of threads, the model's
shape class and whether the NumPy engine can load it), and reused after. The file is untrusted input: one that is
too large, not JSON, of another version or with a malformed entry is ignored with one warning, and measured again.
`hf-laser env --calibrate` measures again and prints the table.

Nothing here imports torch or the encoder: the timings come from callables given by the caller (the encoder's
loaders; fakes in tests).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from .cpu import CpuInfo, _proc_cpuinfo

VERSION = 1
CACHE_FILE = "speed-calibration.json"
MAX_FILE_BYTES = 1 << 20  # a calibration file larger than this is not one hf_laser wrote: ignored
MAX_ENTRIES = 200  # entries kept (the newest); a file with more is ignored
MAX_REPEATS = 16
MIN_MARGIN = 0.05  # a mode must beat float32 by 5 % at least, and by more than the timings' noise
REPEATS = 3  # timed runs per mode, after one warm-up run
DROP_FACTOR = 3.0  # a mode this many times slower than the baseline in the first timed round is not timed again
RUN_GFLOP = 8.0  # the workload of one run: about 0.15 s at 60 GFLOP/s (a real batch: per-call costs stay small)
MIN_TOKENS, MAX_TOKENS = 128, 6000
SENTENCE_LENGTHS = (9, 13, 17, 21, 25, 14, 18, 12)  # tokens, </s> included: Tatoeba-like sentences
REFERENCE_SENTENCES = 1_000  # the job `auto` decides for: 1,000 such sentences in a fresh process (a mode faster
# there is faster on every longer job; a shorter one can lose at most the difference in start-up)


@dataclass(frozen=True)
class Candidate:
    """A mode `auto` may measure: `name` in the table, the speed mode, and the engine that computes it."""

    name: str
    mode: str  # fp32, int8, bf16
    engine: str  # numpy, torch


CANDIDATES = {c.name: c for c in (Candidate("fp32-numpy", "fp32", "numpy"), Candidate("fp32-torch", "fp32", "torch"),
                                  Candidate("int8", "int8", "torch"), Candidate("bf16", "bf16", "torch"))}
LABELS = {"fp32-numpy": "fp32 (NumPy engine)", "fp32-torch": "fp32 (PyTorch)", "int8": "int8 (PyTorch)",
          "bf16": "bf16 (PyTorch)"}


def candidates(cpu: CpuInfo, encoder_type: str, numpy_engine: bool) -> list[Candidate]:
    """The modes measured for a model of `encoder_type` ("bilstm", "transformer") on `cpu`: those within the fidelity
    bounds (int8 for BiLSTMs only: a LASER3 transformer's int8 is outside them) that run natively here. The first is
    the float32 default (the NumPy engine where it can load the model: `numpy_engine`), the baseline."""
    names = ["fp32-numpy"] if encoder_type == "bilstm" and numpy_engine else []
    names.append("fp32-torch")
    if encoder_type == "bilstm" and cpu.native("int8"):
        names.append("int8")
    if cpu.native("bf16"):
        names.append("bf16")
    return [CANDIDATES[name] for name in names]


def noise(times: list[float]) -> float:
    """The relative spread of repeated timings of one thing: (median - fastest) / fastest (0 for one timing; the
    median, so that one run disturbed by other work on the machine does not hide a difference, while two do)."""
    return (statistics.median(times) - min(times)) / min(times) if len(times) > 1 else 0.0


def margin(times: list[float], baseline: list[float]) -> float:
    """How much faster than the baseline a mode's best time must be to be chosen: the two timings' noise together,
    and at least `MIN_MARGIN`."""
    return max(MIN_MARGIN, noise(times) + noise(baseline))


def projected(timings: Mapping[str, list[float]], fixed: Mapping[str, float] | None, scale: float) -> dict[str, list[float]]:
    """Each candidate's time for the reference job: its fixed cost (`fixed`: seconds before the first sentence, e.g.
    importing torch and loading the model in that mode; none: 0) plus `scale` times each timed run."""
    fixed = fixed or {}
    return {name: [fixed.get(name, 0.0) + scale * t for t in times] for name, times in timings.items()}


def _faster(totals: Mapping[str, list[float]], noisy: Mapping[str, list[float]], reference: str,
            names: list[str]) -> str:
    """The fastest of `names` whose best total, times `1 + margin` (the noise of the timed runs `noisy`), is below
    `reference`'s best total; else `reference`."""
    winner, best = reference, min(totals[reference])
    for name in names:
        t = min(totals[name])
        if t * (1 + margin(noisy[name], noisy[reference])) < min(totals[reference]) and t < best:
            winner, best = name, t
    return winner


def decide(timings: Mapping[str, list[float]], baseline: str, fixed: Mapping[str, float] | None = None,
           scale: float = 1.0) -> tuple[str, str]:
    """`(winner, reason)` from `timings` (per candidate, its repeated times of the workload in seconds; `baseline`:
    the float32 default), compared on the reference job ([`projected`]: `fixed` costs plus `scale` workloads).
    float32 on the other engine replaces the baseline if its best time, times `1 + margin`, is below the baseline's
    ([`margin`]); then the fastest other mode whose best time, times `1 + margin`, is below that float32's is chosen,
    else float32. Ties and anything within the noise go to float32, and to the default engine."""
    totals = projected(timings, fixed, scale)
    names = sorted(timings)
    fp32 = _faster(totals, timings, baseline, [n for n in names if n != baseline and CANDIDATES[n].mode == "fp32"])
    winner = _faster(totals, timings, fp32, [n for n in names if CANDIDATES[n].mode != "fp32"])
    table = ", ".join(f"{n} {min(ts):.3f} s" for n, ts in totals.items())
    job = "" if fixed is None and scale == 1.0 else " on the reference job, start included"
    if winner == baseline:
        return winner, f"measured here: no mode beat {baseline} by more than the noise{job} ({table})"
    return winner, (f"measured here: {min(totals[baseline]) / min(totals[winner]):.2f}x {baseline}{job}, beyond the "
                    f"noise margin ({table})")


@dataclass(frozen=True)
class ShapeClass:
    """What a model's speed depends on: its encoder type, depth and widths (vocabulary size aside)."""

    encoder_type: str
    num_layers: int
    width: int  # a BiLSTM's hidden size per direction, a transformer's embedding width
    inner: int  # a BiLSTM's input (embedding) width, a transformer's feed-forward width

    @classmethod
    def from_config(cls, config: Mapping) -> ShapeClass:
        kind = config.get("encoder_type", "bilstm")
        if kind == "transformer":
            return cls(kind, int(config.get("num_layers", 1)), int(config.get("embed_dim", 320)),
                       int(config.get("ffn_dim", 4096)))
        return cls(kind, int(config.get("num_layers", 1)), int(config.get("hidden_size", 512)),
                   int(config.get("embed_dim", 320)))

    def describe(self) -> str:
        if self.encoder_type == "transformer":
            return f"a {self.num_layers} x {self.width} transformer (ffn {self.inner})"
        return f"a {self.num_layers} x {self.width} BiLSTM"

    def flop_per_token(self) -> float:
        if self.encoder_type == "transformer":
            return 2.0 * self.num_layers * (4 * self.width * self.width + 2 * self.width * self.inner)
        total, inputs = 0.0, self.inner
        for _ in range(self.num_layers):
            total += 2 * 2 * 4 * self.width * (inputs + self.width)  # 2 directions, 4 gates, multiply-adds
            inputs = 2 * self.width
        return total


def workload(shape: ShapeClass, vocab_size: int, eos_id: int, seed: int = 0) -> list[list[int]]:
    """The fixed calibration workload of `shape`: sentences of Tatoeba-like lengths made of random ids (a fixed seed)
    drawn as words are, by Zipf's law over the vocabulary's order (LASER's and SentencePiece's vocabularies list
    frequent subwords first; from id 4, above the special tokens): text repeats its frequent tokens, which the NumPy
    engine projects once per chunk, so uniform ids would misjudge it. Each sentence ends with `eos_id`; about
    `RUN_GFLOP` of work, between `MIN_TOKENS` and `MAX_TOKENS` tokens."""
    tokens = int(min(MAX_TOKENS, max(MIN_TOKENS, RUN_GFLOP * 1e9 / shape.flop_per_token())))
    rng = random.Random(seed)
    ranks = range(max(1, min(vocab_size, 1 << 20) - 4))
    weights = list(itertools.accumulate(1.0 / (r + 1) for r in ranks))
    sentences, total, i = [], 0, 0
    while total < tokens:
        n = SENTENCE_LENGTHS[i % len(SENTENCE_LENGTHS)]
        sentences.append([4 + r for r in rng.choices(ranks, cum_weights=weights, k=n - 1)] + [eos_id])
        total, i = total + n, i + 1
    return sentences


def measure(runners: Mapping[str, Callable[[], object]], repeats: int = REPEATS,
            timer: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Per runner, up to `repeats` wall times (seconds) of one call, after one untimed warm-up call each; the runners
    take turns, so that a slow moment of the machine is spread over all of them. The first runner is the baseline: one
    more than `DROP_FACTOR` times slower than it in the first timed round is not timed again (it cannot win; its one
    timing is kept)."""
    for run in runners.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    baseline = next(iter(runners), None)
    for round_ in range(repeats):
        for name, run in runners.items():
            if round_ and times[name][0] > DROP_FACTOR * times[baseline][0]:
                continue
            t0 = timer()
            run()
            times[name].append(timer() - t0)
    return times


RELEVANT_FLAGS = frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile",
                            "amx_bf16", "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm"})


def cache_key(processor: str, arch: str, flags: Iterable[str], shape: ShapeClass, *, torch_version: str,
              numpy_version: str, threads: int, numpy_engine: bool) -> str:
    """The key of a calibration: everything its timings depend on, as a JSON string."""
    return json.dumps({"cpu": processor, "arch": arch, "flags": sorted(set(flags) & RELEVANT_FLAGS),
                       "torch": torch_version, "numpy": numpy_version, "threads": int(threads),
                       "shape": [shape.encoder_type, shape.num_layers, shape.width, shape.inner],
                       "numpy_engine": bool(numpy_engine)}, sort_keys=True)


def default_threads() -> int:
    """The threads a process here computes with by default: `$OMP_NUM_THREADS`, else the processors it may run on."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        pass
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def machine_fields() -> dict:
    """This machine's part of [`cache_key`], read without importing torch (a kept NumPy choice loads without it):
    the processor's name, architecture and flags from the operating system, the installed torch and NumPy versions,
    [`default_threads`]."""
    name, flags = _proc_cpuinfo()
    return {"processor": name or platform.processor() or "unknown processor", "arch": platform.machine(),
            "flags": flags, "torch_version": _version("torch"), "numpy_version": _version("numpy"),
            "threads": default_threads()}


def machine_key(shape: ShapeClass, numpy_engine: bool) -> str:
    """[`cache_key`] of a model of `shape` on this machine."""
    return cache_key(shape=shape, numpy_engine=numpy_engine, **machine_fields())


def calibration_path() -> Path:
    """Where calibrations are kept: `$HF_LASER_SPEED_CALIBRATION`, else `~/.cache/hf_laser/speed-calibration.json`
    (one name per thing: not in the download cache, whose variable names downloads)."""
    named = os.environ.get("HF_LASER_SPEED_CALIBRATION")
    if named:
        return Path(named)
    return Path.home() / ".cache" / "hf_laser" / CACHE_FILE


def _valid_entry(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    timings, winner, baseline = entry.get("timings"), entry.get("winner"), entry.get("baseline")
    if not isinstance(timings, dict) or not timings or winner not in timings or baseline not in timings:
        return False
    for name, times in timings.items():
        if name not in CANDIDATES or not isinstance(times, list) or not 1 <= len(times) <= MAX_REPEATS:
            return False
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and 0 < t < 1e6
                   for t in times):
            return False
    start, scale = entry.get("start", {}), entry.get("scale", 1.0)
    if not isinstance(start, dict) or not all(n in timings and isinstance(t, (int, float)) and not isinstance(t, bool)
                                              and math.isfinite(t) and 0 <= t < 1e6 for n, t in start.items()):
        return False
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < 1e9:
        return False
    return isinstance(entry.get("measured", ""), str) and len(entry.get("measured", "")) < 64


def read_calibrations(path: Path | None = None) -> dict[str, dict]:
    """The calibrations kept at `path` ([`calibration_path`]): `{key: entry}`. A missing file is `{}`; a file that
    is too large, not JSON, of another version, or holds a malformed entry is ignored with one warning (`{}`: the
    next `auto` measures again and writes a good file)."""
    path = calibration_path() if path is None else path
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as err:
        warnings.warn(f"cannot read the speed calibration {path} ({err.strerror}): measuring again", stacklevel=2)
        return {}
    why = None
    if len(data) > MAX_FILE_BYTES:
        why = f"larger than {MAX_FILE_BYTES:,} bytes"
    else:
        try:
            content = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            content, why = None, "not JSON"
        if why is None and (not isinstance(content, dict) or content.get("version") != VERSION):
            why = f"not a version-{VERSION} calibration file"
        elif why is None:
            entries = content.get("entries")
            if not isinstance(entries, dict) or len(entries) > MAX_ENTRIES:
                why = f"no entries, or more than {MAX_ENTRIES}"
            elif not all(isinstance(k, str) and len(k) < 2000 and _valid_entry(e) for k, e in entries.items()):
                why = "a malformed entry"
            else:
                return entries
    warnings.warn(f"ignoring the speed calibration {path} ({why}): measuring again", stacklevel=2)
    return {}


def write_calibration(key: str, entry: dict, path: Path | None = None) -> None:
    """Adds (or replaces) `key`'s entry in the calibration file, atomically, keeping the newest `MAX_ENTRIES`. A file
    that cannot be written costs only the next measurement (one warning)."""
    path = calibration_path() if path is None else path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a bad file was said when it was read)
        entries = read_calibrations(path)
    entries.pop(key, None)
    entries[key] = entry
    entries = dict(list(entries.items())[-MAX_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".speed-calibration.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": VERSION, "entries": entries}, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"cannot keep the speed calibration in {path} ({err.strerror}): the next speed='auto' will "
                      "measure again", stacklevel=2)


def calibrate(key: str, shape: ShapeClass, names: list[str],
              load: Callable[[str], tuple[Callable[[], object], float] | None], *, scale: float = 1.0,
              shared_start: Mapping[str, float] | None = None, force: bool = False,
              say: Callable[[str], None] | None = None, path: Path | None = None,
              timer: Callable[[], float] = time.perf_counter) -> dict:
    """The calibration entry of `key` (`{"winner", "reason", "baseline", "timings", "start", "scale", "measured"}`):
    the one kept in the cache, unless `force`; else measured now. `load(name)` loads candidate `name` (the baseline
    once more first, untimed) and gives `(a
    callable that runs the workload, the seconds the loading took)`, or None (that candidate cannot load this model:
    left out); `names[0]` is the baseline. The candidates are compared on the reference job ([`decide`]): each one's
    start (its loading, plus `shared_start[name]`: what a fresh process pays before it, such as importing torch
    where the baseline does without) and `scale` workloads. `say` gets one line before and one after the measurement
    (default: stderr)."""
    if not force:
        kept = read_calibrations(path).get(key)
        if kept is not None:
            return kept
    say = say or (lambda message: print(message, file=sys.stderr, flush=True))
    say(f"hf_laser: measuring speed='auto' for {shape.describe()} on this machine, once ({', '.join(names)}: a few "
        f"seconds; kept in {calibration_path() if path is None else path})")
    runners, start = {}, {}
    load(names[0])  # (once untimed: what the first loading in a process pays once, imports, is no mode's start)
    for name in names:
        loaded = load(name)
        if loaded is not None:
            runners[name] = loaded[0]
            start[name] = round(loaded[1] + (shared_start or {}).get(name, 0.0), 6)
    if not runners:
        raise ValueError(f"speed='auto': none of {', '.join(names)} could load the model to measure it")
    baseline = next(name for name in names if name in runners)
    timings = measure(runners, timer=timer)
    winner, reason = decide(timings, baseline, start, scale)
    entry = {"winner": winner, "reason": reason, "baseline": baseline,
             "timings": {n: [round(t, 6) for t in ts] for n, ts in timings.items()}, "start": start,
             "scale": round(scale, 6), "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_calibration(key, entry, path)
    say(f"hf_laser: speed='auto' here: {LABELS[winner]} ({reason})")
    return entry


def reference_scale(ids: list[list[int]]) -> float:
    """How many calibration workloads (`ids`) make the reference job: `REFERENCE_SENTENCES` sentences of the
    workload's mean length (the job `auto` is decided for; a shorter job in a fresh process gains less, or loses up to
    the difference in start-up)."""
    return REFERENCE_SENTENCES / max(1, len(ids))


def slower_than_fp32(entry: Mapping, mode: str) -> float | None:
    """How many times slower than the float32 default `mode` was measured in a calibration `entry` on its reference
    job (beyond the noise margin), or None (not measured, or not slower)."""
    names = [n for n, c in CANDIDATES.items() if c.mode == mode and n in entry["timings"]]
    if not names or mode == "fp32":
        return None
    totals = projected(entry["timings"], entry.get("start"), entry.get("scale", 1.0))
    base = entry["baseline"]
    best = min(names, key=lambda n: min(totals[n]))
    if min(totals[best]) > min(totals[base]) * (1 + margin(entry["timings"][best], entry["timings"][base])):
        return min(totals[best]) / min(totals[base])
    return None
