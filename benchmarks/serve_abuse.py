"""`hf-laser serve` under hostile clients (issue #52): memory, latency of a small request and shutdown time.

Each class of abuse runs against a real `python -m hf_laser.serving` process on a free port of 127.0.0.1 (the
shipped model unless `--model`, its default limits); the server's resident memory (VmRSS) is read before and after
each class, and a one-sentence request ("Hello world.") is timed while the abuse runs. Classes:

- `huge-word`: 5 requests of one 16.7 MB word (the body limit is 16 MiB; the input is refused by
  --max-input-chars before it is tokenized);
- `long-words`: 20 requests of one 190,001-character word each (~95,000 tokens: under --max-input-chars, so
  tokenized, never cached, and refused by --max-input-tokens);
- `made-up-langs`, `made-up-langs-again`: 20 requests of 2,048 inputs, each input with a language code of its
  own (40,960 codes; the second time 40,960 others: what the first left is one-time loading, what the second adds
  would be kept per code);
- `large-request`: 3 requests near the limits (2,048 sentences, 88,538 tokens) sent back to back;
- `silent-connections`: `--connections` connections (default 3,000) that never send a byte;
- `trickled-body`: a body sent 1 byte / 3 s (time until the server answers 408);
- `refused-body`: a request announcing a 100 GB body, answered 413 at once, whose body is then sent as fast as the
  server takes it for 10 s (issue #68: bytes the server read after its answer, its CPU seconds meanwhile, and when
  it closed the connection); `refused-chunked`: the same with a chunked body (413 once 16 MiB have come);
- `long-lang`: a 100 KB `lang` (issue #68: the size of the error's message; it was echoed whole);
- `shutdown`: SIGTERM with a half-sent body, an idle keep-alive connection and 100 silent connections open (time to
  exit);
- `open-files`: the server under an open-files limit of 1,024 (soft and hard) and `--connections` silent
  connections (bytes of log, and whether /health answers once they time out).

The figures of docs/serve.md, "Under hostile clients", come from `python benchmarks/serve_abuse.py`; the script
prints the processor and a table.

Usage::

    python benchmarks/serve_abuse.py [--model DIR] [--connections 3000] [--only CLASS,CLASS]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (see serve_throughput.py)

SMALL = json.dumps({"input": ["Hello world."], "lang": "en"}).encode()


class Server:
    """A `python -m hf_laser.serving` process; `open_files`: its open-files limit (soft and hard)."""

    def __init__(self, model: str | None, *args: str, open_files: int | None = None):
        self.log = Path(tempfile.mkstemp(prefix="serve-abuse-", suffix=".log")[1])
        cmd = [sys.executable, "-m", "hf_laser.serving", "--host", "127.0.0.1", "--port", "0", "--no-access-log",
               *(["--model", model] if model else []), *args]
        limit = None if open_files is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                            (open_files, open_files)))
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                     preexec_fn=limit)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            m = re.search(r" on http://127\.0\.0\.1:(\d+) ", self.output())
            if m:
                self.port = int(m.group(1))
                if self.wait_health(deadline - time.monotonic()) is not None:
                    return
            if self.proc.poll() is not None:
                sys.exit(f"the server exited:\n{self.output()}")
            time.sleep(0.2)
        self.proc.kill()
        sys.exit(f"the server did not start:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=300)

    def request(self, method: str, path: str, body: bytes | None = None, timeout: float = 300) -> tuple[int, float]:
        """(status, seconds) of one request on a new connection; status 0 when it failed."""
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            return resp.status, time.perf_counter() - t0
        except OSError:
            return 0, time.perf_counter() - t0

    def wait_health(self, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, seconds = self.request("GET", "/health", timeout=5)
            if status == 200:
                return seconds
            time.sleep(0.2)
        return None

    def stop(self, timeout: float = 120) -> float:
        """Seconds from SIGTERM to the process's exit (killed after `timeout`)."""
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        took = time.perf_counter() - t0
        self.log.unlink(missing_ok=True)
        return took


def small_latencies(server: Server, stop: threading.Event, every_s: float = 0.25) -> list[float]:
    """Times "Hello world." requests until `stop` is set (run in a thread beside the abuse)."""
    out = []
    while not stop.is_set():
        status, seconds = server.request("POST", "/v1/embeddings", SMALL, timeout=120)
        out.append(seconds if status == 200 else float("inf"))
        stop.wait(every_s)
    return out


def during(server: Server, abuse) -> tuple[object, list[float]]:
    """Runs `abuse()` while small requests are timed; (its result, the small requests' latencies)."""
    stop, lat = threading.Event(), []
    thread = threading.Thread(target=lambda: lat.extend(small_latencies(server, stop)))
    thread.start()
    try:
        result = abuse()
    finally:
        stop.set()
        thread.join()
    return result, lat


def statuses(results) -> str:
    counts: dict = {}
    for status, _ in results:
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n}x {s}" for s, n in sorted(counts.items()))


def lat_text(lat: list[float]) -> str:
    if not lat:
        return "-"
    ok = [x for x in lat if x != float("inf")]
    failed = len(lat) - len(ok)
    text = f"{len(lat)} requests, p50 {statistics.median(ok) * 1000:.0f} ms, max {max(ok) * 1000:.0f} ms" if ok \
        else f"{len(lat)} requests"
    return text + (f", {failed} failed" if failed else "")


def silent(server: Server, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        try:
            socks.append(server.connect())
        except OSError:
            break
    return socks


def answered(socks: list[socket.socket], wait_s: float) -> tuple[int, float]:
    """How many of `socks` got an answer or were closed within `wait_s`, and when the last one did."""
    pending, last, t0 = set(range(len(socks))), 0.0, time.perf_counter()
    for s in socks:
        s.setblocking(False)
    while pending and time.perf_counter() - t0 < wait_s:
        for i in list(pending):
            try:
                socks[i].recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                pass
            pending.discard(i)
            last = time.perf_counter() - t0
        time.sleep(0.05)
    for s in socks:
        s.close()
    return len(socks) - len(pending), last



def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def refused_body(server: Server, chunked: bool, seconds: float = 10.0) -> tuple[str, int, float, float]:
    """A body the server refuses (413), sent as fast as it takes it: (its status line, bytes it took after the
    answer, seconds until it closed the connection or `seconds`, its CPU seconds meanwhile)."""
    head = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: 100000000000\r\n\r\n"))
    chunk = (b"10000\r\n" + b"0" * 65536 + b"\r\n") if chunked else b"0" * 65536
    cpu0 = cpu_seconds(server.proc.pid)
    sock = server.connect()
    sock.sendall(head)
    sock.setblocking(False)
    answer, after, pending, t0 = b"", 0, memoryview(chunk), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            answer += sock.recv(65536)
        except BlockingIOError:
            pass
        except OSError:
            break
        try:
            sent = sock.send(pending)
            after += sent if answer else 0
            pending = pending[sent:] or memoryview(chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            break
    took = time.perf_counter() - t0
    sock.close()
    return (answer.split(b"\r\n", 1)[0].decode(errors="replace"), after, took,
            cpu_seconds(server.proc.pid) - cpu0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model directory (default: the shipped one)")
    ap.add_argument("--connections", type=int, default=3000, help="silent connections (default 3,000)")
    ap.add_argument("--only", default=None, help="comma-separated classes to run (default: all)")
    args = ap.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    classes = ["huge-word", "long-words", "made-up-langs", "made-up-langs-again", "large-request",
               "silent-connections", "trickled-body", "refused-body", "refused-chunked", "long-lang", "shutdown",
               "open-files"]
    chosen = classes if args.only is None else args.only.split(",")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the clients' sockets
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"# {time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    rows = []

    server = Server(args.model)
    for name in [c for c in chosen if c in classes[:10]]:
        before = server.rss_mb()
        if name == "huge-word":
            body = json.dumps({"input": ["w0" + "a" * 16_700_000], "lang": "en"}).encode()
            result, lat = during(server, lambda: [server.request("POST", "/v1/embeddings", body) for _ in range(5)])
            what = f"{statuses(result)}, each in {max(s for _, s in result):.2f} s or less"
        elif name == "long-words":
            body = json.dumps({"input": ["w" + "abcdefghij" * 19_000], "lang": "en"}).encode()
            result, lat = during(server, lambda: [server.request("POST", "/v1/embeddings", body) for _ in range(20)])
            what = f"{statuses(result)}, each in {max(s for _, s in result):.2f} s or less"
        elif name.startswith("made-up-langs"):
            first = 0 if name == "made-up-langs" else 20

            def send():
                out = []
                for r in range(first, first + 20):
                    codes = [f"{chr(97 + (i // 676) % 26)}{chr(97 + (i // 26) % 26)}{chr(97 + i % 26)}_"
                             + ("Latn", "Cyrl", "Arab", "Grek", "Hani")[i // 17_576]
                             for i in range(r * 2048, (r + 1) * 2048)]
                    body = json.dumps({"input": ["Hello world."] * 2048, "lang": codes}).encode()
                    out.append(server.request("POST", "/v1/embeddings", body))
                return out
            result, lat = during(server, send)
            what = f"{statuses(result)}, each in {max(s for _, s in result):.2f} s or less"
        elif name == "large-request":
            sentence = "the house is big and the garden is beautiful , and the street is quiet ."
            body = json.dumps({"input": [f"{i} {sentence} {sentence}" for i in range(2048)],  # 88,538 tokens
                               "lang": "en"}).encode()
            result, lat = during(server, lambda: [server.request("POST", "/v1/embeddings", body) for _ in range(3)])
            what = f"{statuses(result)}, each in {max(s for _, s in result):.2f} s or less"
        elif name == "silent-connections":
            socks = silent(server, args.connections)
            (closed, last), lat = during(server, lambda: answered(socks, 60))
            what = f"{len(socks):,} opened, {closed:,} answered/closed by the server, the last after {last:.1f} s"
        elif name in ("refused-body", "refused-chunked"):
            (answer, after, took, cpu), lat = during(server, lambda: refused_body(server, name == "refused-chunked"))
            what = (f"'{answer}', then {after / 1e6:,.1f} MB read in {took:.1f} s"
                    + (" (connection closed)" if took < 9.9 else " (connection still open)")
                    + f", server CPU {cpu:.1f} s")
        elif name == "long-lang":
            def long_lang():
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                conn.request("POST", "/v1/embeddings", body=json.dumps({"input": ["Hello."], "lang": "x" * 100_000}),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                return resp.status, len(json.loads(body)["error"]["message"]), len(body)
            (status, chars, size), lat = during(server, long_lang)
            what = f"{status}, message of {chars:,} characters ({size:,} bytes of answer)"
        else:  # trickled-body
            def trickle():
                sock = server.connect()
                sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                             b"\r\nContent-Length: 100\r\n\r\n")
                t0, answer = time.perf_counter(), b""
                sock.settimeout(3)
                for byte in b'{"input": ["a"], "lang": "en"':
                    try:
                        sock.sendall(bytes([byte]))
                        answer = sock.recv(65536)
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                    if answer:
                        break
                sock.close()
                return answer.split(b"\r\n", 1)[0].decode(errors="replace"), time.perf_counter() - t0
            (line, took), lat = during(server, trickle)
            what = f"'{line}' after {took:.1f} s"
        rows.append((name, what, f"{before:,.0f} -> {server.rss_mb():,.0f} MB", lat_text(lat)))
        print(" | ".join(rows[-1]), flush=True)
    server.stop()

    if "shutdown" in chosen:
        server = Server(args.model)
        idle = server.connect()
        half = server.connect()
        half.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"input\": [\"a")
        socks = silent(server, 100)
        time.sleep(0.5)
        took = server.stop()
        for s in [idle, half, *socks]:
            s.close()
        rows.append(("shutdown", "SIGTERM with a half body, an idle and 100 silent connections",
                     f"exit after {took:.1f} s", "-"))
        print(" | ".join(rows[-1]), flush=True)

    if "open-files" in chosen:
        server = Server(args.model, open_files=1024)
        socks = silent(server, args.connections)
        time.sleep(12)  # the header timeout (10 s) closes what the server accepted
        health = server.wait_health(30)
        log = len(server.output().encode())
        lowered = re.search(r"--max-connections [\d,]+ lowered to ([\d,]+)", server.output())
        for s in socks:
            s.close()
        server.stop()
        rows.append(("open-files", f"limit 1,024, {len(socks):,} silent connections"
                                   + (f", --max-connections lowered to {lowered.group(1)}" if lowered else ""),
                     f"log {log:,} bytes", "/health " + ("answered" if health is not None else "NOT answered")))
        print(" | ".join(rows[-1]), flush=True)

    print("\n| abuse | what happened | server memory (RSS) / other | a small request meanwhile |\n| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
