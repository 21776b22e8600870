"""Two real processes on one output (issue #24, item 1): `hf-laser embed`, `encode_file`, `mine --embed-dir`,
`embed-shards` and the evaluation cache. The first run holds the output's lock (`OUT.lock`) from before it looks at
anything until `OUT` and its manifest are written; the second is refused in one line naming the process (exit 2), or
waits (`--wait`, the cache) and then reuses the first's result. Never zeros, never mixed rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, SHARED, fra_file, read_lines, require_shared

from hf_laser import mining as M
from hf_laser.outputs import OutputBusyError, output_lock

DEU = SHARED / "data" / "tatoeba" / "v1" / "tatoeba.deu-eng.deu"

pytestmark = pytest.mark.slow

# Runs `hf-laser ARGS...` (or `encode_file` / the evaluation cache); with $GATE set, every embedding call
# (`_embed_ids`, under `encode_ids`, `encode` and `encode_file`, either engine) first waits until the file $GATE exists: the run holds its lock, mid-computation, until the test lets it go on.
_SCRIPT = """
import os, sys, time
import numpy as np
import hf_laser.encoder as E
gate = os.environ.get("GATE")
if gate:
    real = E.LaserEncoder._embed_ids
    def gated(self, *a, **k):
        deadline = time.time() + 240
        while not os.path.exists(gate) and time.time() < deadline:
            time.sleep(0.05)
        return real(self, *a, **k)
    E.LaserEncoder._embed_ids = gated
what, *args = sys.argv[1:]
if what == "cli":
    from hf_laser.cli import main
    sys.exit(main(args))
if what == "encode_file":
    model, src, out = args
    from hf_laser.errors import run_cli
    enc = E.LaserEncoder.from_pretrained(model, engine="torch")
    sys.exit(run_cli("encode_file", lambda: enc.encode_file(src, out, lang="fr", chunk_lines=20,
                                                            show_progress_bar=False) is None))
if what == "cache":
    model, src, cache_dir, result = args
    sys.path.insert(0, os.getcwd())
    from evaluation.cache import EmbeddingCache
    enc = E.LaserEncoder.from_pretrained(model, engine="torch")
    np.save(result, np.array(EmbeddingCache(enc, cache_dir, show_progress=False).embed_file(src, "fr")))
"""



@contextmanager
def one_torch_thread():
    """PyTorch on one thread, like the runs this file starts (its LSTM's last bits depend on the thread count; under
    xdist, conftest already sets one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def src(tmp_path) -> Path:
    return fra_file(tmp_path / "fr.txt", 60)


class Runs:
    def __init__(self, tmp_path: Path):
        self.script = tmp_path / "run.py"
        self.script.write_text(_SCRIPT)
        self.gate = tmp_path / "go"
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
                        OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
        self.env.pop("GATE", None)
        self.tmp_path = tmp_path

    def start(self, *args, gated=False, stderr=subprocess.PIPE):
        env = dict(self.env, GATE=str(self.gate)) if gated else self.env
        return subprocess.Popen([sys.executable, str(self.script), *map(str, args)], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)

    def wait_for_lock(self, proc, lock: Path) -> None:
        """Until `proc` holds `lock` (its pid written in it)."""
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if lock.exists() and lock.read_text().split()[:1] == [str(proc.pid)]:
                return
            time.sleep(0.05)
        raise AssertionError(f"{lock} never held by {proc.pid}: rc {proc.poll()}, {proc.stderr.read()}")

    def refused(self, proc, holder, output) -> None:
        _, err = proc.communicate(timeout=240)
        # (the Python API's model loading shows transformers' bar; the command line does not)
        lines = [line for line in err.strip().splitlines() if not line.startswith("Loading weights")]
        assert proc.returncode == 2, err
        assert len(lines) == 1 and "Traceback" not in err, err
        assert f"{output} is being written by process {holder.pid}" in lines[0], err

    def finish(self, proc) -> str:
        self.gate.touch()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return err


def test_two_embed_runs_on_one_output(tiny_model_dir, encoder, src, tmp_path):
    runs = Runs(tmp_path)
    out = tmp_path / "ce.npy"
    embed = ["cli", "embed", "--model", tiny_model_dir, "-i", src, "-o", out, "--no-progress"]
    first = runs.start(*embed, "--lang", "fr", gated=True)
    runs.wait_for_lock(first, tmp_path / "ce.npy.lock")
    # the reproduction: another language on the same output while the first runs: refused, nothing touched
    runs.refused(runs.start(*embed, "--lang", "de"), first, out)
    assert (tmp_path / "ce.npy.partial").exists() and not out.exists()
    # --wait: waits for the first, then reuses what it wrote
    log = tmp_path / "waiting.log"
    with open(log, "w") as f:
        waiting = runs.start(*embed, "--lang", "fr", "--wait", stderr=f)
        deadline = time.time() + 240
        while "waiting for process" not in log.read_text() and time.time() < deadline and waiting.poll() is None:
            time.sleep(0.05)
        assert f"waiting for process {first.pid}, which is writing {out}" in log.read_text(), log.read_text()
        runs.finish(first)
        assert waiting.wait(timeout=300) == 0, log.read_text()
    assert "is up to date" in log.read_text()
    ref = encoder.encode(read_lines(src), lang="fr")
    got = np.load(out)
    assert got.shape == ref.shape and np.abs(got).sum() > 0
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)


def test_two_encode_file_calls_on_one_output(tiny_model_dir, encoder, src, tmp_path):
    runs = Runs(tmp_path)
    out = tmp_path / "cc.npy"
    first = runs.start("encode_file", tiny_model_dir, src, out, gated=True)
    runs.wait_for_lock(first, tmp_path / "cc.npy.lock")
    runs.refused(runs.start("encode_file", tiny_model_dir, src, out), first, out)  # two identical runs
    runs.finish(first)
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    with one_torch_thread():  # as the runs (OMP_NUM_THREADS=1): PyTorch's LSTM bits depend on its thread count
        ref = np.array(encoder.encode_file(src, ref_dir / "cc.npy", lang="fr", chunk_lines=20))
    assert np.load(out).tobytes() == ref.tobytes()
    assert (tmp_path / "cc.npy.manifest.json").exists()
    # in one process the lock is reentrant; another holder is named
    with output_lock(out), output_lock(out):
        pass


def test_two_mine_runs_on_one_embed_dir(tiny_model_dir, encoder, src, tmp_path):
    pytest.importorskip("faiss")
    require_shared(DEU)
    de = tmp_path / "de.txt"
    de.write_text("\n".join(read_lines(DEU)[:60]) + "\n", encoding="utf-8")
    runs = Runs(tmp_path)
    emb = tmp_path / "emb"
    emb.mkdir()
    mine = ["cli", "mine", src, de, "--model", tiny_model_dir, "--src-lang", "fr", "--tgt-lang", "de",
            "--knn-device", "cpu", "--no-progress", "--embed-dir", emb]
    first = runs.start(*mine, "-o", tmp_path / "a.tsv", gated=True)
    key = M.embedding_key(src, "fr")
    runs.wait_for_lock(first, emb / f"{key}.npy.lock")
    runs.refused(runs.start(*mine, "-o", tmp_path / "b.tsv"), first, emb / f"{key}.npy")
    runs.finish(first)
    np.testing.assert_allclose(np.load(emb / f"{key}.npy"), encoder.encode(read_lines(src), lang="fr"),
                               atol=1e-5, rtol=0)
    assert (tmp_path / "a.tsv").read_text().count("\n") > 0 and not (tmp_path / "b.tsv").exists()


def test_two_embed_shards_runs_on_one_shard(tiny_model_dir, encoder, src, tmp_path):
    runs = Runs(tmp_path)
    shards = tmp_path / "shards"
    cmd = ["cli", "embed-shards", "--model", tiny_model_dir, "--embed-dir", shards, "--input", "fr", src,
           "--num-shards", "2", "--device", "cpu", "--no-progress"]
    first = runs.start(*cmd, gated=True)
    name = f"{M.embedding_key(src, 'fr')}.shard00000-of-00002"
    runs.wait_for_lock(first, shards / f"{name}.npy.lock")
    runs.refused(runs.start(*cmd), first, shards / f"{name}.npy")
    runs.finish(first)
    ref = tmp_path / "ref"
    with one_torch_thread():
        M.embed_shards(encoder, src, ref, "fr", rank=0, world_size=1, num_shards=2)
    for s in range(2):
        shard = f"{M.embedding_key(src, 'fr')}.shard{s:05d}-of-00002.npy"
        assert np.load(shards / shard).tobytes() == np.load(ref / shard).tobytes()
    assert M.load_embedding_shards(shards, src, "fr") is not None


def test_two_evaluation_caches_on_one_entry(tiny_model_dir, encoder, src, tmp_path):
    runs = Runs(tmp_path)
    cache = tmp_path / "cache"
    first = runs.start("cache", tiny_model_dir, src, cache, tmp_path / "a.npy", gated=True)
    deadline = time.time() + 240
    while not list(cache.glob("*/*.partial.npy.lock")) and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert list(cache.glob("*/*.partial.npy.lock")), first.stderr.read() if first.poll() is not None else ""
    # the second waits for the entry's lock, then reuses it
    second = runs.start("cache", tiny_model_dir, src, cache, tmp_path / "b.npy")
    time.sleep(3)
    assert second.poll() is None
    runs.finish(first)
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    assert a.tobytes() == b.tobytes() and np.abs(a).sum() > 0
    np.testing.assert_allclose(a, encoder.encode(read_lines(src), lang="fr"), atol=1e-5, rtol=0)


def test_lock_names_its_holder_in_process(tmp_path):
    out = tmp_path / "x.npy"
    proc = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]); from hf_laser.outputs import output_lock\n"
        "with output_lock(sys.argv[1]):\n print('held', flush=True); time.sleep(60)"), str(out), str(REPO / "src")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusyError, match=f"is being written by process {proc.pid}"):
            with output_lock(out):
                pass
    finally:
        proc.kill()
        proc.wait()
    with output_lock(out):  # released by the kernel when its holder died
        pass
