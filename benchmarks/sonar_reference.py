"""SONAR's text encoder converted by hf_laser against the original pipeline (sonar-space on fairseq2): CPU throughput
side by side in one run, loading time, peak memory, and the difference of the embeddings.

The original runs in an environment of its own (tests/fixtures/sonar/make_fixtures.py says how to build it); this
file starts it as a worker process under that interpreter (`--reference-side`: this same file, which then imports
neither hf_laser nor anything of this project but make_fixtures.py's constants):

    python benchmarks/sonar_reference.py --reference-python /tmp/sonar-ref/bin/python            # 300 lines
    python benchmarks/sonar_reference.py --reference-python /tmp/sonar-ref/bin/python --lines 20 --rounds 1

What it does:
* builds the full-size random encoder of the fixtures (24 x 1024, ffn 8192, 16 heads: `random_sonar_state` of
  make_fixtures.py with the names, shapes and seed of full.keys.json; the stand-in SentencePiece model), writes it as
  SONAR's `{"model": state}` file in --work-dir (a temporary directory by default) and converts it with
  `hf_laser.checkpoints.sonar.convert_sonar`;
* reads --lines lines of FLORES-200 devtest, split evenly over --langs (each with its SONAR tag);
* starts one worker process per variant, one after the other (each loads its model, timed, then warms up), each on
  --threads torch threads: the original (`TextToEmbeddingModelPipeline(encoder, tokenizer, device=CPU,
  dtype=float32).predict(lines, source_lang=tag, batch_size=5)` per language, the model built as make_fixtures.py
  builds it: `SonarTextEncoderFactory(config).create_model()`, then `load_state_dict` of the file), hf_laser fp32
  (`LaserEncoder.from_pretrained(dir).encode(lines, lang=tags)`: default token-budget batches) and hf_laser bf16
  (`dtype=torch.bfloat16`), and with --extra-max-tokens N hf_laser fp32 with `max_tokens=N`;
* times --rounds passes over all the lines, the variants in turn (the order rotated each round; the workers not
  timing are idle), tokenization included, loading apart; the peak RSS of each process while loading and while
  embedding (`VmHWM` of /proc/self/status, reset through /proc/self/clear_refs after loading) and its `ru_maxrss`;
* then, unless --no-breakdown, where the time goes: each side's tokenization alone, the original with a token budget
  (`batch_max_tokens`) instead of 5 sentences a batch, hf_laser with 5 sentences a batch, the padded tokens of each
  batching, and fp32 GEMM throughput of the encoder's feed-forward shapes under each side's torch;
* prints a markdown table (with the processor, both torch versions and the date) and writes everything as JSON
  (--out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sonar"
SPM = FIXTURES / "stand-in.spm.model"
SHARED = ROOT.parent / "shared"
FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"
# FLORES-200 devtest file -> SONAR tag
TAGS = {"en": "eng_Latn", "ru": "rus_Cyrl", "zh_Hans": "zho_Hans", "hi": "hin_Deva", "ar_Arab": "arb_Arab",
        "ja": "jpn_Jpan", "el": "ell_Grek", "he": "heb_Hebr", "th": "tha_Thai", "ko": "kor_Hang", "ka": "kat_Geor",
        "am": "amh_Ethi", "de": "deu_Latn", "fr": "fra_Latn", "es": "spa_Latn"}
MARK = "@@sonar-bench "  # a worker's protocol lines on stdout (anything else a library prints is passed on)
ORIGINAL_BATCH_SIZE = 5  # TextToEmbeddingModelPipeline.predict's default, as SONAR's README calls it
ORIGINAL_TOKEN_BUDGET = 12000  # predict(batch_max_tokens=...) in the breakdown: hf_laser's default budget
SMALL_BUDGET = 2000  # hf_laser's max_tokens in the breakdown: finer length buckets on a few hundred lines
FFN_SHAPES = [(1024, 8192), (8192, 1024)]  # fc1, fc2: most of the encoder's arithmetic


# ------------------------------------------------------------------------------------------ both sides (stdlib only)
def _proc_status_kb(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else -1


def _reset_peak() -> bool:
    """Resets VmHWM (the peak RSS) to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _mb(kb: int) -> float:
    return round(kb / 1024, 1)


def _send(**message) -> None:
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def _gemm_gflops(torch, rows: list[int], repeat: int = 5) -> dict:
    """fp32 products (rows x k) @ (k x n) for the feed-forward shapes: best GFLOP/s of `repeat`."""
    out = {}
    with torch.inference_mode():
        for m in rows:
            flops, best = 0, 0.0
            for k, n in FFN_SHAPES:
                a, b = torch.randn(m, k), torch.randn(k, n)
                a @ b
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    a @ b
                    times.append(time.perf_counter() - t0)
                flops += 2 * m * k * n
                best += min(times)
            out[str(m)] = round(flops / best / 1e9, 1)
    return out


def _worker(side: str, job_path: str) -> None:
    """One variant's process: load (timed), warm up, then answer the driver's commands on stdin ("embed",
    "breakdown", "gemm", "quit") with one protocol line each."""
    job = json.loads(Path(job_path).read_text())
    threads = job["threads"]
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    lines, tags = job["lines"], job["tags"]
    groups = _groups(tags)  # [tag, first, end]: the lines come in blocks of one language
    rss_start = _proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    if side == "original":
        side_obj = _OriginalSide(job, torch)
    else:
        side_obj = _OursSide(job, torch)
    load_s = time.perf_counter() - t0
    load_peak, after_load = _proc_status_kb("VmHWM"), _proc_status_kb("VmRSS")
    warm = [i for _, a, b in groups for i in range(a, min(b, a + job["warmup"]))]
    t0 = time.perf_counter()
    side_obj.embed([lines[i] for i in warm], [tags[i] for i in warm], groups=None)
    warmup_s = time.perf_counter() - t0
    reset = _reset_peak()
    _send(event="loaded", load_s=round(load_s, 2), warmup_s=round(warmup_s, 2), rss_start_mb=_mb(rss_start),
          load_peak_mb=_mb(load_peak), after_load_mb=_mb(after_load), peak_reset=reset, torch=torch.__version__,
          threads=torch.get_num_threads(), **side_obj.info)
    saved = False
    for command in sys.stdin:
        command = command.strip()
        if command == "embed":
            t0 = time.perf_counter()
            emb = side_obj.embed(lines, tags, groups=groups)
            seconds = time.perf_counter() - t0
            peak = _proc_status_kb("VmHWM")
            if not saved:
                np.save(job["out"], np.asarray(emb, dtype=np.float32))
                saved = True
            _send(event="embedded", seconds=seconds, embed_peak_mb=_mb(peak))
        elif command == "breakdown":
            _send(event="breakdown", **side_obj.breakdown(lines, tags, groups))
        elif command == "gemm":
            _send(event="gemm", gflops=_gemm_gflops(torch, job["gemm_rows"]))
        elif command == "quit":
            _send(event="quit", ru_maxrss_mb=_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss),
                  embed_peak_mb=_mb(_proc_status_kb("VmHWM")))
            return


class _OriginalSide:
    """SONAR's own pipeline (runs under the reference interpreter: fairseq2 + sonar-space, no hf_laser)."""

    def __init__(self, job, torch):
        import importlib.util

        from fairseq2 import init_fairseq2

        spec = importlib.util.spec_from_file_location("make_fixtures", job["make_fixtures"])
        fixtures = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixtures)  # constants and functions only (main() is not run)
        init_fairseq2()
        from fairseq2.data.tokenizers import VocabularyInfo
        from fairseq2.device import CPU
        from fairseq2.models.nllb.tokenizer import (
            NllbTokenizerConfig,
            load_nllb_tokenizer,
        )
        from sonar.inference_pipelines.text import TextToEmbeddingModelPipeline
        from sonar.models.sonar_text import (
            SonarTextEncoderConfig,
            SonarTextEncoderFactory,
        )

        self.torch, self.cpu = torch, CPU
        # as make_fixtures.py builds it: the card's 202 tags, the "basic" configuration with the stand-in's vocabulary
        self.tokenizer = load_nllb_tokenizer(Path(job["spm"]), NllbTokenizerConfig(langs=list(fixtures.SONAR_LANGS),
                                                                                   default_lang="eng_Latn"))
        size = self.tokenizer.vocab_info.size
        config = SonarTextEncoderConfig(**fixtures.BASIC, vocab_info=VocabularyInfo(size=size, unk_idx=1, bos_idx=2,
                                                                                    eos_idx=3, pad_idx=1))
        model = SonarTextEncoderFactory(config).create_model()
        model.load_state_dict(torch.load(job["checkpoint"], weights_only=True)["model"], strict=True)
        self.model = model.eval()
        self.pipeline = TextToEmbeddingModelPipeline(encoder=self.model, tokenizer=self.tokenizer, device=CPU,
                                                     dtype=torch.float32)
        self.info = {"fairseq2": _version("fairseq2"), "sonar": _version("sonar-space")}

    def embed(self, lines, tags, groups, **predict_args):
        predict_args = predict_args or {"batch_size": ORIGINAL_BATCH_SIZE}
        if groups is None:
            groups = _groups(tags)
        return self.torch.cat([self.pipeline.predict(lines[a:b], source_lang=tag, **predict_args)
                               for tag, a, b in groups]).float().numpy()

    def breakdown(self, lines, tags, groups):
        t0 = time.perf_counter()
        lengths = []
        for tag, a, b in groups:
            encoder = self.tokenizer.create_encoder(lang=tag, device=self.cpu)
            lengths += [min(len(encoder(line)), 514) for line in lines[a:b]]
        tokenize_s = time.perf_counter() - t0
        # the pipeline's own batches: per language, sorted by characters, 5 at a time, padded to the longest
        batches = []
        for tag, a, b in groups:
            order = sorted(range(a, b), key=lambda i: len(lines[i]))  # torch.argsort of the character counts
            batches += [order[k:k + ORIGINAL_BATCH_SIZE] for k in range(0, len(order), ORIGINAL_BATCH_SIZE)]
        padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)
        # batch_max_tokens: dynamic_bucket sums the (unpadded) lengths in the same order
        budget_batches = []
        for tag, a, b in groups:
            current, total = [], 0
            for i in sorted(range(a, b), key=lambda i: len(lines[i])):
                if current and total + lengths[i] > ORIGINAL_TOKEN_BUDGET:
                    budget_batches.append(current)
                    current, total = [], 0
                current.append(i)
                total += lengths[i]
            budget_batches.append(current)
        budget_padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in budget_batches)
        t0 = time.perf_counter()
        self.embed(lines, tags, groups, batch_size=None, batch_max_tokens=ORIGINAL_TOKEN_BUDGET)
        budget_s = time.perf_counter() - t0
        return {"tokenize_s": tokenize_s, "lengths": lengths, "batches": len(batches), "padded_tokens": padded,
                "token_budget_s": budget_s, "token_budget_padded": budget_padded,
                "token_budget_batches": len(budget_batches)}


class _OursSide:
    """hf_laser's LaserEncoder on the converted directory (project environment)."""

    def __init__(self, job, torch):
        from hf_laser import LaserEncoder

        self.torch = torch
        self.dtype = getattr(torch, job["dtype"])
        self.encoder = LaserEncoder.from_pretrained(job["hf_dir"], dtype=self.dtype)
        self.max_tokens = job.get("max_tokens") or 12000
        import transformers

        self.info = {"transformers": transformers.__version__, "dtype": job["dtype"]}

    def embed(self, lines, tags, groups):
        return self.encoder.encode(lines, lang=tags, max_tokens=self.max_tokens)

    def breakdown(self, lines, tags, groups):
        from hf_laser.encoder import plan_batches

        t0 = time.perf_counter()
        ids = self.encoder.token_ids(lines, tags)
        tokenize_s = time.perf_counter() - t0
        lengths = [len(x) for x in ids]
        out = {"tokenize_s": tokenize_s, "lengths": lengths}
        for key, max_tokens in (("default", 12000), ("small_budget", SMALL_BUDGET)):
            plan = plan_batches(lengths, max_tokens)
            out[key] = {"padded_tokens": sum(len(batch) * max(lengths[i] for i in batch) for batch in plan),
                        "batches": len(plan), "batch_sentences": [len(batch) for batch in plan]}
        t0 = time.perf_counter()
        self.encoder.encode_ids(ids, max_tokens=SMALL_BUDGET)
        out["small_budget"]["seconds"] = time.perf_counter() - t0
        five = []
        for _, a, b in groups:  # the original's batching: one language at a time, 5 sentences a batch
            five += [[a + i for i in batch] for batch in plan_batches(lengths[a:b], None, ORIGINAL_BATCH_SIZE)]
        t0 = time.perf_counter()
        for _, a, b in groups:
            self.encoder.encode_ids(ids[a:b], max_tokens=None, batch_size=ORIGINAL_BATCH_SIZE)
        out["five"] = {"seconds": time.perf_counter() - t0, "batches": len(five),
                       "padded_tokens": sum(len(batch) * max(lengths[i] for i in batch) for batch in five)}
        return out


def _groups(tags):
    groups = []
    for i, tag in enumerate(tags):
        if groups and groups[-1][0] == tag:
            groups[-1][2] = i + 1
        else:
            groups.append([tag, i, i + 1])
    return groups


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 (a version string is decoration)
        return "?"


# ------------------------------------------------------------------------------------------------ the driver
class _Worker:
    def __init__(self, name: str, argv: list[str], env: dict):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=ROOT)

    def ask(self, command: str | None) -> dict:
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
            sys.stderr.write(f"[{self.name}] {line}")
        raise RuntimeError(f"{self.name}: the worker ended (exit status {self.proc.wait()})")


def processor() -> str:
    name = platform.processor() or platform.machine()
    found = []
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
        flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split())
        found = [f for f in ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"] if f in flags]
    except (OSError, StopIteration):
        pass
    return f"{name} ({os.cpu_count()} logical CPUs; {', '.join(found) or 'no AVX2'})"


def read_flores(langs: list[str], n: int) -> tuple[list[str], list[str]]:
    per = [n // len(langs) + (1 if k < n % len(langs) else 0) for k in range(len(langs))]
    lines, tags = [], []
    for lang, count in zip(langs, per):
        text = (FLORES / f"{lang}.txt").read_text(encoding="utf-8").split("\n")[:count]
        lines += text
        tags += [TAGS[lang]] * len(text)
    return lines, tags


def prepare(work: Path) -> tuple[Path, Path, float]:
    """SONAR's file of the full-size random encoder and its conversion (kept in `work` for later runs)."""
    checkpoint, hf_dir = work / "sonar_text_encoder.pt", work / "hf"
    convert_s = 0.0
    if not checkpoint.is_file():
        import importlib.util

        import torch

        spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
        fixtures = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixtures)
        keys = json.loads((FIXTURES / "full.keys.json").read_text())
        state = fixtures.random_sonar_state([(k, s) for k, s in keys["shapes"]], keys["seed"])
        torch.save({"model": state}, checkpoint)
        del state
    if not (hf_dir / "config.json").is_file():
        from hf_laser.checkpoints.sonar import convert_sonar

        t0 = time.perf_counter()
        convert_sonar(checkpoint, SPM, hf_dir, model_card=False, overwrite=True)
        convert_s = time.perf_counter() - t0
    return checkpoint, hf_dir, convert_s


def summary(texts: list[str], tags: list[str], args, result: dict) -> str:
    rows = result["variants"]
    base = statistics.median(rows["original"]["seconds"])
    base_best = min(rows["original"]["seconds"])
    n = len(texts)
    counts = ", ".join(f"{k} {tags.count(TAGS[k])}" for k in args.langs.split(","))
    out = [f"processor: {result['processor']}; {args.threads} torch threads each; {result['date']}",
           (f"{n} FLORES-200 devtest lines ({counts}), {result.get('tokens', '?')} tokens with the tags; "
            f"{args.rounds} rounds, variants in turn"),
           "",
           ("| variant | torch | batches | best s | median s | sentences/s (best / median) | speed-up (median; best) "
            "| load s | peak RSS loading MB | peak RSS embedding MB | max abs diff to the original "
            "| cosine to hf_laser fp32 (mean / min) |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        s = row["seconds"]
        med, best = statistics.median(s), min(s)
        out.append(f"| {name} | {row['torch']} | {row['batching']} | {best:.2f} | {med:.2f} | {n / best:.1f} / "
                   f"{n / med:.1f} | {base / med:.2f}x; {base_best / best:.2f}x | {row['load_s']:.1f} | "
                   f"{row['load_peak_mb']:,.0f} | {row['embed_peak_mb']:,.0f} | {row.get('max_abs_diff', 0):.2e} | "
                   f"{row.get('cosine', '')} |")
    if "breakdown" in result:
        b = result["breakdown"]
        out += ["", "where the time goes (one pass each, after the rounds):", "",
                "| what | seconds | sentences/s | padded tokens (real " + f"{result.get('tokens', '?')}) | batches "
                "| padded tokens/s |",
                "|---|---|---|---|---|---|"]
        for what, seconds, padded, batches in b["rows"]:
            out.append(f"| {what} | {seconds:.2f} | {n / seconds:.1f} | {'' if padded is None else f'{padded:,}'} | "
                       f"{'' if batches is None else batches} | {'' if padded is None else f'{padded / seconds:.0f}'} |")
        if "gemm" in b:
            out += ["", "fp32 GEMM GFLOP/s (feed-forward shapes rows x 1024 x 8192 and back; best of 5): "
                    + "; ".join(f"{side} (torch {b['gemm_torch'][side]}): " + ", ".join(
                        f"{rows_} rows {g}" for rows_, g in gf.items()) for side, gf in b["gemm"].items())]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", help="python of the sonar-space + fairseq2 environment")
    parser.add_argument("--lines", type=int, default=300, help="FLORES-200 devtest lines in all, split over --langs")
    parser.add_argument("--langs", default="en,ru,zh_Hans,hi,ar_Arab,ja", help=f"FLORES files: {', '.join(TAGS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5, help="lines of each language embedded once after loading")
    parser.add_argument("--no-bf16", action="store_true", help="leave out hf_laser bf16")
    parser.add_argument("--no-breakdown", action="store_true", help="leave out the where-the-time-goes passes")
    parser.add_argument("--extra-max-tokens", type=int, help="adds hf_laser fp32 with this token budget (max_tokens)")
    parser.add_argument("--work-dir", type=Path, help="keeps the checkpoint and its conversion (default: temporary)")
    parser.add_argument("--out", type=Path, help="results as JSON")
    parser.add_argument("--side", choices=["original", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--reference-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_side or args.side:
        return _worker("original" if args.reference_side else args.side, args.job)
    if not args.reference_python:
        parser.error("--reference-python is required (the original runs there)")
    langs = args.langs.split(",")
    texts, tags = read_flores(langs, args.lines)
    with tempfile.TemporaryDirectory(prefix="sonar-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        checkpoint, hf_dir, convert_s = prepare(work)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                   TOKENIZERS_PARALLELISM="false")
        variants = [("original", "original", "float32", None), ("hf_laser fp32", "ours", "float32", None)]
        if not args.no_bf16:
            variants.append(("hf_laser bf16", "ours", "bfloat16", None))
        if args.extra_max_tokens:
            variants.append((f"hf_laser fp32, max_tokens={args.extra_max_tokens}", "ours", "float32",
                             args.extra_max_tokens))
        workers, rows = {}, {}
        for name, side, dtype, max_tokens in variants:  # one at a time: loading timed alone
            tag = f"{side}-{dtype}-{max_tokens or 'default'}"
            job = Path(tmp) / f"job-{tag}.json"
            job.write_text(json.dumps({"max_tokens": max_tokens,
                "threads": args.threads, "lines": texts, "tags": tags, "warmup": args.warmup, "dtype": dtype,
                "checkpoint": str(checkpoint), "spm": str(SPM), "hf_dir": str(hf_dir),
                "make_fixtures": str(FIXTURES / "make_fixtures.py"), "out": str(Path(tmp) / f"{tag}.npy"),
                "gemm_rows": [200, 2000, 12000]}))
            python = args.reference_python if side == "original" else sys.executable
            flag = ["--reference-side"] if side == "original" else ["--side", side]
            workers[name] = _Worker(name, [python, str(Path(__file__).resolve()), *flag, "--job", str(job)], env)
            rows[name] = workers[name].ask(None)
            rows[name].update(seconds=[], npy=str(Path(tmp) / f"{tag}.npy"),
                              batching=(f"predict(batch_size={ORIGINAL_BATCH_SIZE}) per language" if side ==
                                        "original" else f"token budget {max_tokens or 12000:,}, all languages "
                                                        "at once"))
            print(f"# {name}: loaded in {rows[name]['load_s']} s (warm-up {rows[name]['warmup_s']} s), "
                  f"torch {rows[name]['torch']}", file=sys.stderr, flush=True)
        names = list(workers)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                answer = workers[name].ask("embed")
                rows[name]["seconds"].append(answer["seconds"])
                rows[name]["embed_peak_mb"] = max(rows[name].get("embed_peak_mb", 0), answer["embed_peak_mb"])
                print(f"# round {r + 1} {name}: {answer['seconds']:.2f} s", file=sys.stderr, flush=True)
        result = {"processor": processor(), "date": datetime.date.today().isoformat(), "threads": args.threads,
                  "lines": len(texts), "langs": {lang: TAGS[lang] for lang in langs}, "rounds": args.rounds,
                  "convert_s": round(convert_s, 1), "python": platform.python_version(), "variants": rows}
        if not args.no_breakdown:
            ours, orig = workers["hf_laser fp32"].ask("breakdown"), workers["original"].ask("breakdown")
            gemm = {name: workers[name].ask("gemm")["gflops"] for name in ("original", "hf_laser fp32")}
            result["tokens"] = sum(ours["lengths"])
            orig_med, ours_med = (statistics.median(rows[k]["seconds"]) for k in ("original", "hf_laser fp32"))
            result["breakdown"] = {
                "same_token_counts": ours["lengths"] == orig["lengths"],
                "our_batch_sentences": ours["default"]["batch_sentences"],
                "our_small_budget_batch_sentences": ours["small_budget"]["batch_sentences"],
                "gemm": gemm, "gemm_torch": {k: rows[k]["torch"] for k in gemm},
                "rows": [
                    ["original: tokenization alone (fairseq2)", orig["tokenize_s"], None, None],
                    [f"original: predict, batch_size={ORIGINAL_BATCH_SIZE} per language (median above)", orig_med,
                     orig["padded_tokens"], orig["batches"]],
                    [f"original: predict, batch_max_tokens={ORIGINAL_TOKEN_BUDGET} per language",
                     orig["token_budget_s"], orig["token_budget_padded"], orig["token_budget_batches"]],
                    ["hf_laser: tokenization alone", ours["tokenize_s"], None, None],
                    ["hf_laser fp32: encode, max_tokens=12000 (default; median above)", ours_med,
                     ours["default"]["padded_tokens"], ours["default"]["batches"]],
                    [f"hf_laser fp32: encode_ids, max_tokens={SMALL_BUDGET}", ours["small_budget"]["seconds"],
                     ours["small_budget"]["padded_tokens"], ours["small_budget"]["batches"]],
                    [f"hf_laser fp32: encode_ids, {ORIGINAL_BATCH_SIZE} a batch per language (the original's batching)",
                     ours["five"]["seconds"], ours["five"]["padded_tokens"], ours["five"]["batches"]]]}
        for name, worker in workers.items():
            answer = worker.ask("quit")
            rows[name]["ru_maxrss_mb"] = answer["ru_maxrss_mb"]
            worker.proc.wait()
        import numpy as np

        reference = np.load(rows["original"]["npy"])
        fp32 = np.load(rows["hf_laser fp32"]["npy"])
        for name, row in rows.items():
            emb = np.load(row.pop("npy"))
            row["max_abs_diff"] = float(np.abs(emb - reference).max())
            cos = (emb * fp32).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(fp32, axis=1)
            row["cosine_mean"], row["cosine_min"] = float(cos.mean()), float(cos.min())
            if name != "hf_laser fp32":
                row["cosine"] = f"{cos.mean():.6f} / {cos.min():.6f}"
    text = summary(texts, tags, args, result)
    print(text)
    ok = result["variants"]["hf_laser fp32"]["max_abs_diff"] <= 1e-5
    print(f"\nhf_laser fp32 within 1e-5 of the original: {'yes' if ok else 'NO'}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
