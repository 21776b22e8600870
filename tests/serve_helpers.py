"""A real `hf-laser serve` process on a free port of 127.0.0.1, for the server tests (nothing else is contacted)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

START_TIMEOUT_S = 180  # loading torch + the model on a loaded 2-core machine


def require_serve_extra() -> None:
    for module in ("starlette", "uvicorn", "orjson"):
        pytest.importorskip(module, reason=f"needs the 'serve' extra ({module}): pip install -e '.[serve]'")


def _limit_open_files(n: int) -> None:
    """In the server's process: at most `n` open files, soft and hard (it cannot raise its own)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


class ServerProcess:
    """`python -m hf_laser.cli serve --host 127.0.0.1 --port 0 ARGS...`; `url` once it listens. `open_files_limit`:
    the server's limit of open files (soft and hard); `cwd`: its working directory."""

    def __init__(self, *args: str, threads: int = 1, open_files_limit: int | None = None, cwd=None):
        self.log = Path(tempfile.mkstemp(prefix="hf-laser-serve-", suffix=".log")[1])
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE",
               "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hf_laser.cli", "serve", "--host", "127.0.0.1", "--port", "0",
             "--threads", str(threads), "--no-access-log", *args],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT, env=env, cwd=cwd,
            preexec_fn=None if open_files_limit is None else lambda: _limit_open_files(open_files_limit))
        self.url = self._wait_url()

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def _wait_url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            m = re.search(r" on (http://127\.0\.0\.1:\d+) ", self.output())
            if m:
                self._wait_ready(m.group(1), deadline)
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"hf-laser serve exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"hf-laser serve did not start in {START_TIMEOUT_S} s:\n{self.output()}")

    def _wait_ready(self, url: str, deadline: float) -> None:
        import requests

        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/health", timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"hf-laser serve exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.2)
        raise RuntimeError(f"hf-laser serve did not answer /health:\n{self.output()}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._log_file.close()
        return self.proc.returncode

    def cleanup(self) -> None:
        self.stop()
        self.log.unlink(missing_ok=True)
