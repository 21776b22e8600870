"""`hf-laser serve` throughput and latency vs `LaserEncoder.encode` in-process, on the same sentences.

The sentences are Tatoeba v1 (../shared/data/tatoeba/v1, `--lines` per language, each with its language code). The
in-process baseline embeds them with `encode(sentences, lang=codes)` in this process, once in one call (the
fastest way to use `encode`) and once as the requests (`--per-request` sentences a call, one after the other). The
server is a real `python -m hf_laser.serving` process on a free port of 127.0.0.1 (torch threads: its default, one
less than torch's, or `--server-threads`); 1, 4 and 16 clients (threads of this process, one keep-alive HTTP connection each) send the same sentences as
`POST /v1/embeddings` requests of `--per-request` sentences with one language code per input, `encoding_format`
base64 (what the `openai` client asks for) or `--format float`. Every answer is compared with the in-process
embeddings (the maximum difference is reported). Reported: sentences/s over the whole run, and p50 / p99 of the
request latency; each level runs `--repeats` times and the best run is kept (the machine may be shared).

Usage::

    python benchmarks/serve_throughput.py [--langs fra,deu,spa,rus,ita,por,nld,eng] [--lines 500]
        [--per-request 8] [--clients 1,4,16] [--threads N] [--server-threads N] [--format base64] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

# before torch starts OpenMP (here and in the server, which inherits it): busy-waiting OpenMP threads make small
# LSTM calls orders of magnitude slower when the cores are shared
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba" / "v1"
CODES = {"fra": "fr", "deu": "de", "spa": "es", "rus": "ru", "ita": "it", "por": "pt", "nld": "nl", "eng": "en",
         "pol": "pl", "ces": "cs", "tur": "tr", "swe": "sv"}


def load_sentences(langs: list[str], lines: int) -> tuple[list[str], list[str]]:
    if not TATOEBA.is_dir():
        sys.exit(f"needs {TATOEBA} (the project's ../shared folder)")
    sentences, codes = [], []
    for iso in langs:
        path = TATOEBA / ("tatoeba.fra-eng.eng" if iso == "eng" else f"tatoeba.{iso}-eng.{iso}")
        text = path.read_text(encoding="utf-8").split("\n")[:lines]
        sentences += text
        codes += [CODES[iso]] * len(text)
    # interleave the languages, so that every request mixes them
    order = np.random.default_rng(0).permutation(len(sentences))
    return [sentences[i] for i in order], [codes[i] for i in order]


def start_server(threads: int | None, extra: list[str]) -> tuple[subprocess.Popen, str, Path]:
    log = Path(tempfile.mkstemp(prefix="serve-bench-", suffix=".log")[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if threads:
        extra = ["--threads", str(threads), *extra]
    proc = subprocess.Popen([sys.executable, "-m", "hf_laser.serving", "--host", "127.0.0.1", "--port", "0",
                             "--no-access-log", "--max-inputs", "100000",
                             "--max-request-tokens", "10000000", *extra],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        m = re.search(r" on http://(127\.0\.0\.1:\d+) ", log.read_text(errors="replace"))
        if m:
            host, port = m.group(1).split(":")
            for _ in range(600):
                try:
                    conn = http.client.HTTPConnection(host, int(port), timeout=10)
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        return proc, m.group(1), log
                except OSError:
                    time.sleep(0.2)
        if proc.poll() is not None:
            sys.exit(f"the server exited:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)
    proc.kill()
    sys.exit("the server did not start")


class Client:
    """One keep-alive connection."""

    def __init__(self, address: str, fmt: str):
        host, port = address.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=300)
        self.fmt = fmt

    def embed(self, sentences: list[str], codes: list[str]) -> np.ndarray:
        body = json.dumps({"input": sentences, "lang": codes, "model": "laser", "encoding_format": self.fmt})
        self.conn.request("POST", "/v1/embeddings", body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
        rows = json.loads(data)["data"]
        if self.fmt == "base64":
            return np.stack([np.frombuffer(base64.b64decode(r["embedding"]), dtype="<f4") for r in rows])
        return np.array([r["embedding"] for r in rows], dtype=np.float32)


def run_clients(address: str, requests: list[tuple[list[str], list[str]]], clients: int, fmt: str):
    """All `requests` through `clients` concurrent connections; (seconds, latencies, answers in request order)."""
    answers: list = [None] * len(requests)
    latencies: list = [0.0] * len(requests)
    lock = threading.Lock()
    next_index = [0]

    def worker():
        client = Client(address, fmt)
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(requests):
                return
            t0 = time.perf_counter()
            answers[i] = client.embed(*requests[i])
            latencies[i] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return time.perf_counter() - t0, np.array(latencies), answers



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--langs", default="fra,deu,spa,rus,ita,por,nld,eng")
    ap.add_argument("--lines", type=int, default=500, help="sentences per language")
    ap.add_argument("--per-request", type=int, default=8)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--threads", type=int, default=None, help="torch threads in-process (default: torch's choice)")
    ap.add_argument("--server-threads", type=int, default=None, help="the server's --threads (default: its own)")
    ap.add_argument("--format", choices=["base64", "float"], default="base64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--server-args", default="", help="extra arguments of the server, e.g. '--max-wait-ms 5'")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)

    import torch

    from hf_laser import LaserEncoder

    if args.threads:
        torch.set_num_threads(args.threads)
    sentences, codes = load_sentences(args.langs.split(","), args.lines)
    n = len(sentences)
    k = args.per_request
    requests = [(sentences[i:i + k], codes[i:i + k]) for i in range(0, n, k)]
    encoder = LaserEncoder.from_pretrained()
    encoder.encode(sentences[:200], lang=codes[:200])  # warm-up (caches, lazy imports)
    results = {"sentences": n, "per_request": k, "requests": len(requests), "threads": torch.get_num_threads(),
               "format": args.format, "cpu_count": os.cpu_count(), "load_average": os.getloadavg()}

    best = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        reference = encoder.encode(sentences, lang=codes)
        best = min(best or 1e9, time.perf_counter() - t0)
    results["encode_one_call"] = {"seconds": round(best, 3), "sentences_per_s": round(n / best, 1)}
    best, lat = None, None
    for _ in range(args.repeats):
        times = []
        t0 = time.perf_counter()
        for s, c in requests:
            t1 = time.perf_counter()
            encoder.encode(s, lang=c)
            times.append(time.perf_counter() - t1)
        seconds = time.perf_counter() - t0
        if best is None or seconds < best:
            best, lat = seconds, np.array(times)
    results["encode_per_request"] = {"seconds": round(best, 3), "sentences_per_s": round(n / best, 1),
                                     "p50_ms": round(1000 * float(np.percentile(lat, 50)), 2),
                                     "p99_ms": round(1000 * float(np.percentile(lat, 99)), 2)}
    print(f"in-process encode, one call: {results['encode_one_call']['sentences_per_s']:,.0f} sentences/s; "
          f"per request of {k}: {results['encode_per_request']['sentences_per_s']:,.0f} sentences/s", flush=True)
    del encoder

    proc, address, log = start_server(args.server_threads, args.server_args.split())
    try:
        run_clients(address, requests[:50], 4, args.format)  # warm-up
        results["server"] = {}
        for clients in map(int, args.clients.split(",")):
            best = None
            for _ in range(args.repeats):
                seconds, lat, answers = run_clients(address, requests, clients, args.format)
                if best is None or seconds < best[0]:
                    best = (seconds, lat, answers)
            seconds, lat, answers = best
            err = float(np.abs(np.concatenate(answers) - reference).max())
            row = {"seconds": round(seconds, 3), "sentences_per_s": round(n / seconds, 1),
                   "p50_ms": round(1000 * float(np.percentile(lat, 50)), 2),
                   "p99_ms": round(1000 * float(np.percentile(lat, 99)), 2),
                   "vs_encode_one_call": round(n / seconds / results["encode_one_call"]["sentences_per_s"], 3),
                   "max_abs_diff_vs_encode": err}
            results["server"][str(clients)] = row
            print(f"{clients:>3} clients: {row['sentences_per_s']:>8,.0f} sentences/s "
                  f"({100 * row['vs_encode_one_call']:.0f} % of encode in one call), p50 {row['p50_ms']:.1f} ms, "
                  f"p99 {row['p99_ms']:.1f} ms, max |diff| vs encode {err:.1e}", flush=True)
        conn = http.client.HTTPConnection(*address.split(":"), timeout=30)
        conn.request("GET", "/health")
        results["server_stats"] = json.loads(conn.getresponse().read())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.unlink(missing_ok=True)
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
