"""hf_laser's speed modes against the peer `laserembeddings`, side by side in one run, on a full-size model.

The peer is the `laserembeddings` package (PyPI; its own preprocessing with sacremoses and subword-nmt, LASER's
`SentenceEncoder` on PyTorch), installed in a virtual environment of its own and named with `--peer-python`
(it pins `torch<2`, so `pip install laserembeddings` gives torch 1.13.1; a second environment with
`pip install torch==2.13.0 && pip install --no-deps laserembeddings subword-nmt sacremoses==0.0.35 transliterate`
measures the same code on this project's torch: repeat `--peer-python` for both).

Both load the same full-size checkpoint in LASER's original file format (5 x 512 BiLSTM, 320-d embeddings, random
weights with PyTorch's initialisation, the 63,021-entry reference dictionary; `embed_throughput.py` builds it) and
embed the same raw Tatoeba v1 sentences, one `embed_sentences` / `encode` call per language, each variant in a fresh
process with the same number of threads; the variants are run in turn, `--rounds` times, so that the machine's
drift falls on all of them alike. Timed: preprocessing and encoding (model loading apart, after one warm-up call on
8 sentences). Printed per variant: best and median sentences/s over the rounds, speed-up over the (first) peer, and
the mean / min cosine of its embeddings to hf_laser fp32 (the same weights; the peer has its own preprocessing,
sacremoses and subword-nmt, so its cosine need not be 1).

`--model DIR` (repeatable) measures hf_laser's modes on other model directories too (laser-mini, a converted LASER3
student: the peer runs only the original-format checkpoint); for every model the table names the mode that
`speed="auto"` picks on this processor (`hf_laser.speed.choose`), so its rule can be checked against the fastest
measured mode.

Usage::

    python benchmarks/peer_speed.py --peer-python /tmp/peerenv/bin/python [--peer-python /tmp/peerenv2/bin/python]
        [--langs fra,deu,spa,rus] [--lines 500] [--modes fp32,numpy,int8] [--rounds 3] [--threads 2] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from embed_throughput import CACHE, REFERENCE, TATOEBA, build_full_size_model, tatoeba_lang  # noqa: E402

# each variant runs this in its own process: argv = variant spec (JSON), output prefix
WORKER = r"""
import json, sys, time
import numpy as np
spec, out = json.loads(sys.argv[1]), sys.argv[2]
import torch
torch.set_num_threads(spec["threads"])
texts = json.load(open(spec["texts"], encoding="utf-8"))
if spec["kind"] == "peer":
    from laserembeddings import Laser
    model = Laser(bpe_codes=spec["codes"], bpe_vocab=spec["vocab"], encoder=spec["checkpoint"],
                  embedding_options={"cpu": True})
    embed = lambda lines, lang: model.embed_sentences(lines, lang=lang)
else:
    from hf_laser import LaserEncoder
    dtype = {"bf16": torch.bfloat16}.get(spec["mode"])
    model = LaserEncoder.from_pretrained(spec["model_dir"], engine="numpy" if spec["mode"] == "numpy" else "torch",
                                         dtype=dtype, quantize="int8" if spec["mode"] == "int8" else None)
    embed = lambda lines, lang: model.encode(lines, lang=lang)
for lang, lines in texts.items():  # warm-up: lazy imports and per-language rules, not timed
    embed(lines[:8], lang)
start = time.perf_counter()
parts = [embed(lines, lang) for lang, lines in texts.items()]
seconds = time.perf_counter() - start
np.save(out + ".npy", np.concatenate([np.asarray(p, dtype=np.float32) for p in parts]))
json.dump({"seconds": seconds, "torch": torch.__version__}, open(out + ".json", "w"))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", action="append", default=[],
                        help="python of an environment with laserembeddings (repeatable)")
    parser.add_argument("--langs", default="fra,deu,spa,rus", help="Tatoeba v1 languages (ISO 639-3)")
    parser.add_argument("--lines", type=int, default=500, help="sentences per language")
    parser.add_argument("--modes", default="fp32,numpy,int8", help="hf_laser modes: fp32, numpy, int8, bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", action="append", default=[],
                        help="another model directory to measure hf_laser's modes on (repeatable)")
    parser.add_argument("--no-fullsize", action="store_true", help="only the --model directories (no peer)")
    args = parser.parse_args()
    if not TATOEBA.exists():
        sys.exit(f"needs ../shared (Tatoeba v1 at {TATOEBA})")

    from hf_laser.speed.cpu import cpu_info

    print(f"# processor: {cpu_info().line()}")
    texts = {}
    for iso3 in args.langs.split(","):
        path = TATOEBA / f"tatoeba.{iso3}-eng.{iso3}"
        texts[tatoeba_lang(iso3)] = path.read_text("utf-8").splitlines()[: args.lines]
    n = sum(map(len, texts.values()))
    tmp = Path(tempfile.mkdtemp(prefix="peer_speed_"))
    (tmp / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), "utf-8")
    common = {"texts": str(tmp / "texts.json"), "threads": args.threads}
    models = [] if args.no_fullsize else [("full-size BiLSTM (5 x 512, random)", build_full_size_model())]
    models += [(Path(m).name, Path(m)) for m in args.model]
    variants = {}  # name -> (model label, python, spec)
    if not args.no_fullsize:
        checkpoint = CACHE / "laser-fullsize-random-v2.pt"
        for i, python in enumerate(args.peer_python):
            variants[f"laserembeddings ({i + 1})"] = (models[0][0], python, {
                **common, "kind": "peer", "checkpoint": str(checkpoint),
                "codes": str(REFERENCE / "bpe" / "laser-ref.fcodes"),
                "vocab": str(REFERENCE / "bpe" / "laser-ref.fvocab")})
    for label, model_dir in models:
        config = json.loads((model_dir / "config.json").read_text("utf-8"))
        for mode in args.modes.split(","):
            if mode == "numpy" and config.get("encoder_type", "bilstm") != "bilstm":
                continue  # (the NumPy engine computes BiLSTMs)
            variants[f"{label}: hf_laser {mode}"] = (label, sys.executable, {
                **common, "kind": "hf_laser", "mode": mode, "model_dir": str(model_dir)})
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    versions = {}
    for r in range(args.rounds):
        for name, (_, python, spec) in variants.items():
            out = tmp / f"{len(times[name])}-{safe(name)}"
            subprocess.run([python, "-c", WORKER, json.dumps(spec), str(out)], check=True, env=env)
            result = json.loads(Path(str(out) + ".json").read_text())
            times[name].append(result["seconds"])
            versions[name] = result["torch"]
            print(f"  round {r + 1} {name}: {result['seconds']:.2f} s", flush=True)
    print(f"\n{n} sentences ({args.langs}, {args.lines} each), {args.threads} threads, {args.rounds} rounds\n")
    from hf_laser.speed import ModelShape, choose

    for label, model_dir in models:
        shape = ModelShape.from_config(json.loads((model_dir / "config.json").read_text("utf-8")))
        auto = choose(cpu_info(), shape)
        print(f"{label}: speed='auto' picks {auto.mode}{' (NumPy engine)' if auto.engine == 'auto' else ''} here "
              f"({auto.reason})\n")
        names = [name for name, (owner, _, _) in variants.items() if owner == label]
        reference = tmp / f"0-{safe(f'{label}: hf_laser fp32')}.npy"
        peer_best = min(times[names[0]]) if names[0].startswith("laserembeddings") else None
        print("| variant | torch | best sentences/s | median sentences/s | speed-up over the peer (best) "
              "| mean / min cosine to hf_laser fp32 |")
        print("|---|---|---|---|---|---|")
        for name in names:
            best, median = n / min(times[name]), n / statistics.median(times[name])
            speedup = f"{peer_best / min(times[name]):.2f}x" if peer_best else ""
            cos = ""
            if reference.exists():
                emb, ref = np.load(tmp / f"0-{safe(name)}.npy"), np.load(reference)
                c = np.einsum("ij,ij->i", emb, ref) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
                cos = f"{c.mean():.5f} / {c.min():.5f}"
            print(f"| {name.split(': ')[-1]} | {versions[name]} | {best:,.0f} | {median:,.0f} | {speedup} | {cos} |")
        print()


def safe(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


if __name__ == "__main__":
    main()
