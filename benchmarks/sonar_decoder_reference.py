"""SONAR's text decoder run by hf_laser against the original pipeline (sonar-space on fairseq2): CPU time of the same
generations side by side, and whether the texts are the same.

The original runs in an environment of its own (tests/fixtures/sonar/make_fixtures.py says how to build it); this file
starts itself under that interpreter as the worker of the original (`--side original`), and under this one as
hf_laser's (`--side hf_laser`), one after the other, each timing --rounds passes after a warm-up pass:

    python benchmarks/sonar_decoder_reference.py --reference-python /tmp/sonar-ref/bin/python
    python benchmarks/sonar_decoder_reference.py --reference-python /tmp/sonar-ref/bin/python --rows 10 --beam-size 1

The decoder is the full-size random one of the fixtures (24 x 1024, ffn 8192, 16 heads: tests/fixtures/sonar/
decoder.json.gz's names, shapes and seed, `random_sonar_state` of make_fixtures.py, the `</s>` row scaled as there),
written as SONAR's `{"model": state}` file and converted with hf_laser; the inputs are the first --rows embeddings of
the full-size encoder (full.npy); both sides batch 5 embeddings (the original's default) unless --batch-size says
otherwise for hf_laser. Prints a markdown table with the processor, both torch versions and the date.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sonar"
SPM = FIXTURES / "stand-in.spm.model"
MARK = "@@decoder-bench "


def _worker(side: str, job: dict) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(job["threads"])
    emb = np.load(FIXTURES / "full.npy")[:job["rows"]]
    options = {"beam_size": job["beam_size"], "max_seq_len": job["max_seq_len"]}
    start = time.perf_counter()
    if side == "original":
        sys.path.insert(0, str(FIXTURES))
        from fairseq2 import init_fairseq2

        init_fairseq2()
        from fairseq2.models.nllb.tokenizer import NllbTokenizerConfig, load_nllb_tokenizer
        from make_decoder_fixtures import BASIC, build_decoder  # noqa: F401 - the reference's own builder
        from make_fixtures import SONAR_LANGS
        from sonar.inference_pipelines.text import EmbeddingToTextModelPipeline
        from sonar.models.sonar_text.config import SonarTextDecoderConfig
        from sonar.models.sonar_text.factory import SonarTextDecoderFactory
        from fairseq2.data.tokenizers import VocabularyInfo

        tokenizer = load_nllb_tokenizer(SPM, NllbTokenizerConfig(langs=list(SONAR_LANGS), default_lang="eng_Latn"))
        config = SonarTextDecoderConfig(**BASIC, vocab_info=VocabularyInfo(
            size=tokenizer.vocab_info.size, unk_idx=1, bos_idx=2, eos_idx=3, pad_idx=1))
        model = SonarTextDecoderFactory(config).create_model()
        model.load_state_dict(torch.load(job["checkpoint"], weights_only=True)["model"])
        pipeline = EmbeddingToTextModelPipeline(model.eval(), tokenizer)

        def run():
            return pipeline.predict(torch.from_numpy(emb), target_lang=job["lang"], batch_size=5, **options)
    else:
        sys.path.insert(0, str(ROOT / "src"))
        from hf_laser.decoder import SonarTextDecoder

        decoder = SonarTextDecoder.from_pretrained(job["directory"])

        def run():
            return decoder.decode(emb, job["lang"], batch_size=job["batch_size"], **options)
    loaded = time.perf_counter() - start
    texts = run()  # warm-up
    times = []
    for _ in range(job["rounds"]):
        start = time.perf_counter()
        again = run()
        times.append(time.perf_counter() - start)
        assert again == texts
    print(MARK + json.dumps({"side": side, "load_s": loaded, "times": times, "texts": texts,
                             "torch": torch.__version__}), flush=True)


def processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def prepare(work: Path) -> tuple[Path, Path]:
    """The full-size random decoder as SONAR's checkpoint, and its hf_laser directory."""
    import importlib.util

    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from hf_laser.checkpoints.sonar_decoder import convert_sonar_decoder

    spec = importlib.util.spec_from_file_location("sonar_make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with gzip.open(FIXTURES / "decoder.json.gz", "rt", encoding="utf-8") as f:
        record = json.load(f)
    shapes = [s for s in record["full"]["shapes"] if s[0] != "final_proj.weight"]
    state = module.random_sonar_state(shapes, record["full"]["seed"])
    state["decoder_frontend.embed.weight"][3] *= record["eos_row_scale"]
    state["final_proj.weight"] = state["decoder_frontend.embed.weight"]
    checkpoint = work / "sonar_text_decoder.pt"
    torch.save({"model": state}, checkpoint)
    del state
    directory = convert_sonar_decoder(checkpoint, SPM, work / "decoder", overwrite=True)
    return checkpoint, directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-python", help="python of the sonar-space + fairseq2 environment")
    parser.add_argument("--rows", type=int, default=20, help="embeddings decoded (of full.npy's 79)")
    parser.add_argument("--lang", default="fra_Latn")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--max-seq-len", type=int, default=32, help="longest output, prompt included")
    parser.add_argument("--batch-size", type=int, default=5, help="hf_laser's embeddings per batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return _worker(args.side, json.loads(args.job))
    if not args.reference_python:
        parser.error("--reference-python is required (the original runs there)")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="sonar-decoder-bench-"))
    checkpoint, directory = prepare(work)
    job = {"rows": args.rows, "lang": args.lang, "beam_size": args.beam_size, "max_seq_len": args.max_seq_len,
           "batch_size": args.batch_size, "rounds": args.rounds, "threads": args.threads,
           "checkpoint": str(checkpoint), "directory": str(directory)}
    results = {}
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    for side, python in (("original", args.reference_python), ("hf_laser", sys.executable)):
        done = subprocess.run([python, __file__, "--side", side, "--job", json.dumps(job)], capture_output=True,
                              text=True, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
        if done.returncode or not lines:
            sys.exit(f"{side} failed:\n{done.stderr[-3000:]}")
        results[side] = json.loads(lines[-1][len(MARK):])
    same = results["original"]["texts"] == results["hf_laser"]["texts"]
    med = {side: statistics.median(r["times"]) for side, r in results.items()}
    print(f"{datetime.date.today()}, {processor()}, {args.threads} threads; original torch "
          f"{results['original']['torch']}, hf_laser torch {results['hf_laser']['torch']}; {args.rows} embeddings, "
          f"beam {args.beam_size}, max_seq_len {args.max_seq_len}, {args.rounds} rounds\n")
    print("| side | load (s) | decode, median (s) | min-max (s) | speed-up | texts |")
    print("|---|---|---|---|---|---|")
    for side, r in results.items():
        print(f"| {side} | {r['load_s']:.1f} | {med[side]:.2f} | {min(r['times']):.2f}-{max(r['times']):.2f} | "
              f"{med['original'] / med[side]:.2f}x | {'identical' if same else 'DIFFER'} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"job": job, "results": results, "same": same}, indent=1) + "\n")


if __name__ == "__main__":
    main()
