"""Start-up time: wall time of `import hf_laser`, `hf-laser --help` and of the Python API's first embedding
(`LaserEncoder.from_pretrained()` + `encode(["Hello"], lang="en")` with laser-mini) in fresh processes (median of 5).

    python benchmarks/import_time.py [--runs 5]

Also shown: a bare `python -c pass` (the interpreter's own start-up, included in every figure), `import torch`
and `import transformers` for scale, and whether torch was imported. For a per-module breakdown:
`python -X importtime -c "import hf_laser" 2>&1 | sort -t'|' -k2 -n | tail`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


FIRST = ("from hf_laser import DEFAULT_MODEL, LaserEncoder; "
         "LaserEncoder.from_pretrained(DEFAULT_MODEL, {args}).encode(['Hello'], lang='en')")


def wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    py = sys.executable
    script = shutil.which("hf-laser", path=str(Path(py).parent)) or shutil.which("hf-laser")
    cases = [
        ("python -c pass", [py, "-c", "pass"]),
        ("import hf_laser", [py, "-c", "import hf_laser"]),
        ("hf-laser --help", [script, "--help"] if script else [py, "-m", "hf_laser.cli", "--help"]),
        ("hf-laser embed --help", [script, "embed", "--help"] if script else [py, "-m", "hf_laser.cli", "embed",
                                                                              "--help"]),
        ("first embedding, Python API default", [py, "-c", FIRST.format(args="")]),
        ("first embedding, engine='torch'", [py, "-c", FIRST.format(args="engine='torch'")]),
        ("import transformers", [py, "-c", "import transformers"]),
        ("import torch", [py, "-c", "import torch"]),
    ]
    probe = subprocess.run([py, "-c", "import sys, hf_laser; print('torch' in sys.modules, "
                            "'transformers' in sys.modules)"], capture_output=True, text=True, check=True)
    torch_loaded, tf_loaded = probe.stdout.split()
    # lazy: the processor's line imports torch, which the timed processes must not find imported
    from hf_laser.speed.cpu import cpu_info

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.runs} fresh processes")
    print(f"processor: {cpu_info().line()}")
    for name, cmd in cases:
        print(f"  {name:<36} {wall(cmd, args.runs):6.3f} s")
    print(f"after `import hf_laser`: torch imported: {torch_loaded}, transformers imported: {tf_loaded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
