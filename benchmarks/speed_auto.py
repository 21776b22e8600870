"""`--speed auto` against the default, per model shape, on this machine: how long the calibration takes, what it
measured and chose, and `hf-laser embed` end to end with `--speed auto` (the calibration kept) and with no `--speed`
(fp32: the NumPy engine for a BiLSTM, PyTorch for a transformer), alternated, each command a fresh process.

    python benchmarks/speed_auto.py [--models laser-mini,bilstm,laser3] [--lines 3000,500,100] [--repeat 3]

Models: `laser-mini` (shipped, 1 x 512 BiLSTM), `bilstm` (the full-size LASER shape, 5 x 512, random weights, the
reference dictionary: benchmarks/embed_throughput.py's), `laser3` (a full-size LASER3 student, 12 x 1024 transformer,
random weights, `cls` pooling: the fixture of tests/fixtures/laser3 converted with the reference SentencePiece model).
Input: the first N distinct English lines of Tatoeba v1 (its `*-eng.eng` files in name order; N per model from
--lines). The calibration goes to a scratch file
(`HF_LASER_SPEED_CALIBRATION`), not the user's cache. Prints the processor line first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"
CACHE = REPO / ".cache" / "benchmarks"


def model_dir(name: str) -> Path:
    if name == "laser-mini":
        return REPO / "src" / "hf_laser" / "models" / "laser-mini"
    if name == "bilstm":
        sys.path.insert(0, str(REPO / "benchmarks"))
        from embed_throughput import build_full_size_model  # noqa: PLC0415

        return build_full_size_model()
    if name == "laser3":
        out = CACHE / "laser3-cls-fullsize"
        if not (out / "config.json").is_file():
            sys.path.insert(0, str(REPO / "tests"))
            from laser3_helpers import CVOCAB, SPM, full_size_checkpoint  # noqa: PLC0415

            from hf_laser.checkpoints.convert import convert  # noqa: PLC0415

            CACHE.mkdir(parents=True, exist_ok=True)
            checkpoint = full_size_checkpoint(CACHE / "laser3-cls-fullsize.pt", "cls")
            convert(checkpoint, out, spm_model=SPM, spm_vocab=CVOCAB, model_card=False, overwrite=True)
            checkpoint.unlink()
        return out
    raise SystemExit(f"unknown model {name!r}: laser-mini, bilstm or laser3")


def run(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="laser-mini,bilstm,laser3")
    parser.add_argument("--lines", default="3000,500,100", help="English Tatoeba lines per model (comma-separated)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    # lazy: the processor's line imports torch
    from hf_laser.speed.cpu import cpu_info

    print(f"processor: {cpu_info().line()}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    models = args.models.split(",")
    counts = [int(n) for n in args.lines.split(",")]
    counts += counts[-1:] * (len(models) - len(counts))
    english = list(dict.fromkeys(line for path in sorted(TATOEBA.glob("tatoeba.*-eng.eng"))
                                 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()))
    hf_laser = [sys.executable, "-m", "hf_laser.cli"]
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "HF_LASER_SPEED_CALIBRATION": str(Path(scratch) / "calibration.json"),
               "HF_HUB_OFFLINE": "1"}
        for name, n in zip(models, counts):
            directory = model_dir(name)
            text = Path(scratch) / f"{name}.txt"
            text.write_text("\n".join((english * (n // len(english) + 1))[:n]) + "\n", encoding="utf-8")
            seconds, out = run([*hf_laser, "env", "--calibrate", "--model", str(directory)], env)
            table = out[out.index("--speed auto, measured now"):].rstrip()
            print(f"\n{name} ({directory.name}): calibration {seconds:.1f} s in all (process, loading and "
                  f"measurement)\n{table}")
            times = {"default": [], "auto": []}
            for _ in range(args.repeat):
                for mode, extra in (("default", []), ("auto", ["--speed", "auto"])):
                    cmd = [*hf_laser, "embed", "--lang", "en", "-i", str(text), "-o", str(Path(scratch) / "out.npy"),
                           "--model", str(directory), "--no-progress", *extra]
                    times[mode].append(run(cmd, env)[0])
            for mode, ts in times.items():
                print(f"  hf-laser embed, {n:,} lines, {mode:<7}: best {min(ts):.2f} s, median "
                      f"{statistics.median(ts):.2f} s ({', '.join(f'{t:.2f}' for t in ts)})")
            print(f"  auto / default (medians): {statistics.median(times['auto']) / statistics.median(times['default']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
