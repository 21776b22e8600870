"""#49 items 2 and 4 (mining): the kNN search with its index shards held by Ray actors (`hf_laser.mining.on_ray`) gives
single-process `knn_search`'s result bit for bit with the same shards, `hf-laser mine --ray` the single-process
pairs on a real BUCC-format corpus, a searcher killed mid-search changes nothing, and a killed driver's run resumes
from its finished shards; a worker node removed mid-mining changes no pair."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import SHARED, read_lines
from test_ray import _assert_shards_as_single_process, _actor_pids, _long_text, _parent

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'hf-laser[ray]')")
pytest.importorskip("faiss", reason="mining needs faiss (pip install 'hf-laser[mining]')")

from hf_laser.mining import knn_search  # noqa: E402
from hf_laser.mining.on_ray import knn_search_on_ray  # noqa: E402

BUCC_DE_EN = SHARED / "data" / "mining" / "de-en"


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    yield
    ray.shutdown()


@pytest.mark.parametrize("index", ["flat", "ivf"])
def test_knn_on_ray_is_knn_search_with_the_same_shards(local_ray, tmp_path, index):
    """Database and queries in memory (rows through the object store) and as `.npy` files (opened by the actors):
    4 shards over 2 actors, the last shard smaller than k; bit for bit single-process `knn_search(shard_size=...)`."""
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((900, 32)).astype(np.float32)
    database = rng.standard_normal((1203, 32)).astype(np.float32)  # shards of 400, 400, 400, 3
    np.save(tmp_path / "db.npy", database)
    expected = knn_search(queries, database, 5, shard_size=400, index=index, query_batch_size=250,
                          show_progress=False)
    np.save(tmp_path / "queries.npy", queries)
    both = [(queries, database), (tmp_path / "queries.npy", tmp_path / "db.npy")]  # npy: read by the searchers
    mixed = [(queries, tmp_path / "db.npy"), (tmp_path / "queries.npy", database)]
    for qs, db in both + (mixed if index == "flat" else []):
        got = knn_search_on_ray(qs, db, 5, num_searchers=2, shard_size=400, index=index, query_batch_size=250,
                                show_progress=False)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    with pytest.raises(ValueError, match="larger than the corpus"):
        knn_search_on_ray(queries, database[:3], 4)


def _bucc_sample(tmp_path, lines: int):
    """The first `lines` sentences of each side of the BUCC-format de-en sample (text column only)."""
    out = []
    for lang in ("de", "en"):
        rows = read_lines(BUCC_DE_EN / f"de-en.sample.{lang}")[:lines]
        path = tmp_path / f"sample.{lang}"
        path.write_text("".join(r.split("\t", 1)[1] + "\n" for r in rows), encoding="utf-8")
        out.append(path)
    return out


def _mine(src, tgt, out, *extra):
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "mine", str(src), str(tgt), "--src-lang", "de",
                          "--tgt-lang", "en", "-o", str(out), "--speed", "fp32", "--no-progress", *extra],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()], run.stderr


def test_mine_on_ray_gives_the_single_process_pairs(tmp_path):
    """`hf-laser mine --ray` (a local Ray of its own: encoder actors write the shards, 2 searcher actors hold the
    index shards) on 1,500 x 1,500 sentences of the BUCC-format de-en sample: the same pairs in the same order as
    single-process `hf-laser mine`, scores within 1e-6 (the NumPy engine: the embeddings are the same bits; the kNN
    over 2 shards differs from one index in the last bits of the cosines)."""
    src, tgt = _bucc_sample(tmp_path, 1500)
    single, _ = _mine(src, tgt, tmp_path / "single.tsv")
    on_ray, said = _mine(src, tgt, tmp_path / "ray.tsv", "--ray", "--num-searchers", "2",
                         "--embed-dir", str(tmp_path / "emb"))
    assert "embedding shard(s) from" in said  # the encoder actors' shards were what was mined
    assert len(single) > 500 and [r[1:] for r in on_ray] == [r[1:] for r in single]
    assert max(abs(float(a[0]) - float(b[0])) for a, b in zip(on_ray, single)) <= 1e-6 + 1e-9


def test_a_searcher_killed_mid_search_is_restarted_and_the_result_is_unchanged(local_ray, tmp_path):
    """A searcher actor's process is SIGKILLed while query blocks are being answered: Ray restarts it (its index
    rebuilt from the same `.npy` rows), its blocks are retried, and the result is bit for bit the undisturbed one."""
    rng = np.random.default_rng(1)
    database = rng.standard_normal((20000, 64)).astype(np.float32)
    queries = rng.standard_normal((30000, 64)).astype(np.float32)
    np.save(tmp_path / "db.npy", database)
    killed = []

    def kill_a_searcher():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            pids = _actor_pids(b"ray::_Searcher")
            if len(pids) == 2:
                time.sleep(1.0)  # the indexes are built in well under a second: this is mid-search
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_a_searcher)
    watcher.start()
    got = knn_search_on_ray(queries, tmp_path / "db.npy", 4, num_searchers=2, query_batch_size=200,
                            show_progress=False)
    watcher.join()
    assert killed, "no searcher was killed: the test did not test anything"
    assert killed[0] not in _actor_pids(b"ray::_Searcher")
    expected = knn_search(queries, database, 4, shard_size=10000, query_batch_size=200, show_progress=False)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_a_killed_driver_is_run_again_and_resumes_from_its_finished_shards(tmp_path):
    """`hf-laser embed-shards --ray`'s driver is SIGKILLed once a shard has finished; the same command run again
    leaves that shard as it was (not computed again) and finishes the others, every shard byte for byte what an
    undisturbed single-process run writes."""
    text = _long_text(tmp_path)
    command = [sys.executable, "-m", "hf_laser.cli", "embed-shards", "--ray", "--speed", "fp32", "--num-shards", "6",
               "--embed-dir", str(tmp_path / "ray"), "--input", "fr", str(text)]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list((tmp_path / "ray").glob("*.done.json")):
        assert driver.poll() is None, "the driver ended before a shard finished"
        time.sleep(0.05)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    finished = {p: p.stat().st_mtime_ns for p in (tmp_path / "ray").glob("*.npy")
                if p.with_name(p.name[:-4] + ".done.json").is_file()}
    assert finished and len(finished) < 6, "the driver was not killed mid-job"
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # finished shards were not computed again
    _assert_shards_as_single_process(tmp_path, text, num_shards=6)


def test_a_worker_node_removed_mid_mining_on_a_multi_node_cluster(tmp_path):
    """Item 4 for mining on a real multi-node Ray cluster on this machine (a head without CPUs and three worker
    nodes of one CPU each): while the two searcher actors answer the forward search's query blocks, the node whose
    raylet runs one of them is removed without grace; the searcher is restarted on the free node (its index shards
    rebuilt from the same `.npy` rows), its blocks retried, and `mine` gives bit for bit the pairs and scores of
    single-process `mine` with the same index shards, with its kNN arrays in files (`knn_dir`)."""
    from ray.cluster_utils import Cluster  # noqa: PLC0415

    from hf_laser.mining import mine  # noqa: PLC0415

    rng = np.random.default_rng(2)
    src = rng.standard_normal((24000, 64)).astype(np.float32)
    tgt = np.concatenate([src[:8000] + 0.3 * rng.standard_normal((8000, 64)).astype(np.float32),  # planted pairs
                          rng.standard_normal((12000, 64)).astype(np.float32)])
    np.save(tmp_path / "src.npy", src)
    np.save(tmp_path / "tgt.npy", tgt)
    if ray.is_initialized():  # (another test's local Ray, in this process)
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    removed = []
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(3)]
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()

        def remove_a_searchers_node():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not removed:
                raylets = {_parent(pid) for pid in _actor_pids(b"ray::_Searcher")}
                busy = [n for n in nodes if n.all_processes["raylet"][0].process.pid in raylets]
                if len(busy) == 2:
                    time.sleep(1.0)  # the indexes are built in well under a second: this is mid-search
                    cluster.remove_node(busy[0], allow_graceful=False)
                    removed.append(time.monotonic())
                time.sleep(0.02)

        watcher = threading.Thread(target=remove_a_searchers_node)
        watcher.start()
        searches = []

        def knn(*args, **kwargs):  # when each direction's search ran
            start = time.monotonic()
            result = knn_search_on_ray(*args, num_searchers=2, **kwargs)
            searches.append((start, time.monotonic()))
            return result

        got = mine(tmp_path / "src.npy", tmp_path / "tgt.npy", k=4, query_batch_size=200, show_progress=False,
                   knn=knn, knn_dir=tmp_path / "knn")
        watcher.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert removed, "no node was removed: the test did not test anything"
    assert any(a < removed[0] < b for a, b in searches), "the node was removed outside the searches"
    expected = mine(src, tgt, k=4, query_batch_size=200, shard_size=12000, show_progress=False)
    assert len(expected) > 8000
    for name in ("src", "tgt", "scores", "x2y_sim", "x2y_ind", "y2x_sim", "y2x_ind"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name


def test_ties_between_duplicates_on_ray_are_the_single_process_ties(local_ray):
    """#68 item 6: from the same embeddings, one process and Ray gave 3,523 and 3,517 pairs on a corpus with repeated
    target lines. Now Ray's searchers (3 shards over 2 actors) give the pairs of one process with one index."""
    from hf_laser.mining import mine
    from hf_laser.mining.on_ray import mine_on_ray
    from test_mining import _pairs, corpus_with_duplicates

    x, y = corpus_with_duplicates()
    single = _pairs(mine(x, y, k=4, device="cpu", show_progress=False))
    on_ray = _pairs(mine_on_ray(x, y, k=4, num_searchers=2, shard_size=600, device="cpu", show_progress=False))
    assert len(single) > 100 and on_ray == single
