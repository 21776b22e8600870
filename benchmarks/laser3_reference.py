"""LASER3 transformer students against the original code (fairseq + laser_encoders): fidelity on every sentence the
reference embedded, and CPU throughput side by side in one run.

Needs the full-size outputs of `tests/fixtures/laser3/make_fixtures.py --full-dir DIR` (four random students at
NLLB's size, 12 x 1024, and the original's embeddings of 1,200 Tatoeba sentences in six scripts) and, for the speed
comparison, the Python of that reference environment (fairseq-fixed + laser_encoders):

    python benchmarks/laser3_reference.py --full-dir /tmp/laser3-full                      # fidelity
    python benchmarks/laser3_reference.py --full-dir /tmp/laser3-full --variants cls \\
        --reference-python /tmp/laser3-ref/bin/python --repeat 3                            # + speed

Fidelity: each student converted by `hf_laser.checkpoints.convert` (into DIR/hf/VARIANT), its embeddings of the 1,200 raw
sentences through hf_laser's tokenizer and model, max abs difference to the original's. Speed: the same sentences,
best of --repeat, the original (`SentenceEncoder.encode_sentences` on `LaserTokenizer` output, max_tokens 12000,
run in the reference Python) and hf_laser (`LaserEncoder.encode`, tokenization included, default max_tokens 12000)
alternated, both on --threads threads; then hf_laser's int8 mode with its cosine to fp32. Prints the processor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SPM = SHARED / "reference" / "laser2" / "laser2-ref.spm"
CVOCAB = SHARED / "reference" / "laser2" / "laser2-ref.cvocab"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"

ORIGINAL = textwrap.dedent("""
    import json, os, sys, time
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # laser_encoders' torch.load predates weights_only=True
    import torch
    from pathlib import Path
    from laser_encoders.laser_tokenizer import LaserTokenizer
    from laser_encoders.models import SentenceEncoder
    args = json.load(open(sys.argv[1]))
    torch.set_num_threads(args["threads"])
    encoder = SentenceEncoder(args["checkpoint"], spm_vocab=args["cvocab"], max_tokens=12000, cpu=True)
    tokenizer = LaserTokenizer(spm_model=Path(args["spm"]))
    times = []
    for _ in range(args["repeat"]):
        t0 = time.perf_counter()
        encoder.encode_sentences([tokenizer.tokenize(s) for s in args["sentences"]])
        times.append(time.perf_counter() - t0)
    json.dump({"seconds": min(times), "torch": torch.__version__}, open(args["out"], "w"))
""")


def processor() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        wanted = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni"]
        found = [f for f in wanted if f" {f}" in flags]
    except (OSError, StopIteration):
        found = []
    return f"{name} ({os.cpu_count()} logical CPUs; {', '.join(found) or 'no AVX2'})"


def sentences(langs: list[str], lines: int) -> list[str]:
    out = []
    for lang in langs:
        text = (TATOEBA / f"tatoeba.{lang}-eng.{lang}").read_text(encoding="utf-8").split("\n")
        out += text[:lines]
    return out


def converted(full_dir: Path, variant: str) -> Path:
    from hf_laser.checkpoints.convert import convert

    out = full_dir / "hf" / variant
    if not (out / "config.json").is_file():
        convert(full_dir / f"{variant}.pt", out, spm_model=SPM, spm_vocab=CVOCAB, model_card=False, overwrite=True)
    return out



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full-dir", type=Path, required=True, help="make_fixtures.py --full-dir output")
    parser.add_argument("--variants", default="cls,cls-final-norm,max,max-prenorm")
    parser.add_argument("--reference-python", help="python of the fairseq + laser_encoders environment (speed)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    import torch

    from hf_laser import LaserEncoder

    torch.set_num_threads(args.threads)
    spec = json.loads((args.full_dir / "sentences.json").read_text())
    texts = sentences(spec["langs"], spec["lines"])
    print(f"processor: {processor()}; torch {torch.__version__}, {args.threads} threads; {len(texts)} sentences "
          f"({', '.join(spec['langs'])}, {spec['lines']} each)")
    print("| student | max abs diff to the original | mean abs diff |")
    print("|---|---|---|")
    for variant in args.variants.split(","):
        encoder = LaserEncoder.from_pretrained(converted(args.full_dir, variant))
        emb = encoder.encode(texts, lang="en")
        diff = np.abs(emb - np.load(args.full_dir / f"{variant}.npy"))
        print(f"| {variant} | {diff.max():.2e} | {diff.mean():.2e} |", flush=True)
    if not args.reference_python:
        return
    variant = args.variants.split(",")[0]
    path = converted(args.full_dir, variant)
    encoder = LaserEncoder.from_pretrained(path)
    int8 = LaserEncoder.from_pretrained(path, quantize="int8")
    timings: dict[str, list[float]] = {"original (fairseq + laser_encoders) fp32": [], "hf_laser fp32": [],
                                       "hf_laser int8": []}
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"checkpoint": str(args.full_dir / f"{variant}.pt"), "cvocab": str(CVOCAB),
                                   "spm": str(SPM), "sentences": texts, "threads": args.threads, "repeat": 1,
                                   "out": str(Path(tmp) / "out.json")}))
        for _ in range(args.repeat):
            subprocess.run([args.reference_python, "-c", ORIGINAL, str(job)], check=True, capture_output=True)
            timings["original (fairseq + laser_encoders) fp32"].append(
                json.loads((Path(tmp) / "out.json").read_text())["seconds"])
            for name, enc in (("hf_laser fp32", encoder), ("hf_laser int8", int8)):
                t0 = time.perf_counter()
                enc.encode(texts, lang="en")
                timings[name].append(time.perf_counter() - t0)
    fp32 = encoder.encode(texts, lang="en")
    q = int8.encode(texts, lang="en")
    cosine = (fp32 * q).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(q, axis=1)
    print(f"\nspeed, student {variant} (best of {args.repeat}, tokenization included):")
    print("| mode | seconds | sentences/s |")
    print("|---|---|---|")
    for name, seconds in timings.items():
        print(f"| {name} | {min(seconds):.2f} | {len(texts) / min(seconds):,.0f} |")
    print(f"int8 cosine to fp32: mean {cosine.mean():.5f}, min {cosine.min():.5f}")


if __name__ == "__main__":
    sys.exit(main())
