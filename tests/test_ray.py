"""#49 item 1 (first part): `hf_laser.mining.on_ray.embed_dataset` on a local Ray (the laptop as the default cluster): the
embeddings of `LaserEncoder.encode` (to float round-off) through CPU tokenizer actors and encoder actors, every row
once; Ray is imported only when asked for."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SHARED, read_lines

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'hf-laser[ray]')")

from hf_laser import DEFAULT_MODEL, LaserEncoder  # noqa: E402
from hf_laser.mining.on_ray import embed_dataset  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    """A Ray of this test process's own on this machine, as hf_laser starts without an address (`"local"`: never
    another test's cluster found running here, whose nodes those tests remove)."""
    assert not ray.is_initialized()
    ray.init(address="local", log_to_driver=False)
    yield
    ray.shutdown()


def test_embeddings_are_encodes_every_row_once(local_ray):
    lines = read_lines(SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra")[:300]
    lines += lines[:5]  # repeated sentences stay rows of their own
    ds = ray.data.from_items([{"text": t, "row": i} for i, t in enumerate(lines)], override_num_blocks=4)
    out = embed_dataset(ds, lang="fr", num_tokenizers=1, num_encoders=2, batch_size=64).take_all()
    assert ray.is_initialized()  # started locally by embed_dataset
    assert sorted(r["row"] for r in out) == list(range(len(lines)))
    expected = LaserEncoder.from_pretrained(DEFAULT_MODEL).encode(lines, lang="fr")
    got = np.stack([r["embedding"] for r in sorted(out, key=lambda r: r["row"])])
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert "input_ids" not in out[0] and out[0]["text"] == lines[out[0]["row"]]


def test_loading_arguments_and_bad_columns(local_ray):
    ds = ray.data.from_items([{"sentence": "Hello world."}, {"sentence": "How are you?"}])
    with pytest.raises(ValueError, match="no column 'text'"):
        embed_dataset(ds, lang="en")
    out = embed_dataset(ds, lang="en", text_column="sentence", output_column="vec", keep_ids=True,
                        speed="int8").take_all()
    exact = LaserEncoder.from_pretrained(DEFAULT_MODEL).encode([r["sentence"] for r in out], lang="en")
    cos = [float(np.dot(r["vec"], e) / np.linalg.norm(r["vec"]) / np.linalg.norm(e)) for r, e in zip(out, exact)]
    assert min(cos) > 0.99 and list(out[0]["input_ids"])[-1] == 2  # int8: close, not equal; ids end with </s>


def test_hf_laser_never_imports_ray_unless_asked():
    code = ("import sys, hf_laser; from hf_laser import LaserEncoder; "
            "e = LaserEncoder.from_pretrained(); e.encode(['a'], lang='en'); import hf_laser.cli; "
            "print('ray' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr


def test_files_on_ray_give_the_single_process_shards_and_skip_finished_ones(local_ray, tmp_path):
    """`embed_files` (`hf-laser embed-shards --ray`): the same shard files, byte for byte, as single-process
    `embed_shards` with the same shards (the NumPy engine, whose bits do not depend on the threads a process has:
    PyTorch's differ by ~1e-7 between a 1-thread actor and a 2-thread process); a re-run computes nothing."""
    from hf_laser.mining import embed_shards, load_embedding_shards  # noqa: PLC0415
    from hf_laser.mining.on_ray import embed_files  # noqa: PLC0415

    text = tmp_path / "fr.txt"
    text.write_text("\n".join(read_lines(SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra")[:400]) + "\n")
    manifests = embed_files([("fr", text)], tmp_path / "ray", num_shards=5, num_encoders=2, speed="fp32")
    assert len(manifests) == 1 and manifests[0].is_file()
    encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL, speed="fp32")
    for shard in range(5):
        embed_shards(encoder, text, tmp_path / "single", "fr", rank=shard, world_size=5, num_shards=5,
                     show_progress_bar=False)
    ray_npy = sorted((tmp_path / "ray").glob("*.npy"))
    assert [p.name for p in ray_npy] == [p.name for p in sorted((tmp_path / "single").glob("*.npy"))]
    assert all(a.read_bytes() == (tmp_path / "single" / a.name).read_bytes() for a in ray_npy)
    shards = load_embedding_shards(tmp_path / "ray", text, "fr")
    got = shards.rows(0, len(shards))
    np.testing.assert_allclose(got, encoder.encode(read_lines(text), lang="fr"), rtol=0, atol=1e-6)
    before = {p: p.stat().st_mtime_ns for p in ray_npy}
    embed_files([("fr", text)], tmp_path / "ray", num_shards=5, num_encoders=2, speed="fp32")
    assert {p: p.stat().st_mtime_ns for p in ray_npy} == before  # finished shards are not computed again
    # tokenized by 2 processes beside the encoder (the actor reserves 2 CPUs): the same bytes
    embed_files([("fr", text)], tmp_path / "procs", num_shards=5, num_encoders=1, tokenizers_per_encoder=2,
                speed="fp32")
    assert all(a.read_bytes() == (tmp_path / "procs" / a.name).read_bytes() for a in ray_npy)
    with pytest.raises(ValueError, match="tokenizers_per_encoder must be >= 1"):
        embed_files([("fr", text)], tmp_path / "procs", tokenizers_per_encoder=0)


def test_embed_shards_command_on_ray(tmp_path):
    """`hf-laser embed-shards --ray` (a local Ray of its own): the shards `hf-laser mine --embed-dir` reads."""
    from hf_laser.mining import load_embedding_shards  # noqa: PLC0415

    text = tmp_path / "de.txt"
    text.write_text("\n".join(read_lines(SHARED / "data" / "tatoeba" / "v1" / "tatoeba.deu-eng.deu")[:120]) + "\n")
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "embed-shards", "--ray", "--embed-dir",
                          str(tmp_path / "emb"), "--input", "de", str(text), "--num-shards", "3"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "complete:" in run.stderr
    shards = load_embedding_shards(tmp_path / "emb", text, "de")
    expected = LaserEncoder.from_pretrained(DEFAULT_MODEL).encode(read_lines(text), lang="de")
    np.testing.assert_allclose(shards.rows(0, len(shards)), expected, rtol=0, atol=1e-6)
    clash = subprocess.run([sys.executable, "-m", "hf_laser.cli", "embed-shards", "--ray", "--nproc", "2",
                            "--embed-dir", str(tmp_path / "x"), "--input", "de", str(text)],
                           capture_output=True, text=True, timeout=300)
    assert clash.returncode == 2 and "drop --nproc" in clash.stderr


def _embed_while_disturbed(tmp_path, text, disturb) -> None:
    """`embed_files` of `text` into `tmp_path/ray` (4 shards, 2 encoders, the NumPy engine), calling `disturb()`
    while a shard is being embedded until it returns True (once); fails if it never did."""
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    from hf_laser.mining.on_ray import embed_files  # noqa: PLC0415

    done = []

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done:
            if list((tmp_path / "ray").glob("*.npy.partial")) and disturb():  # a shard is being embedded
                done.append(True)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    embed_files([("fr", text)], tmp_path / "ray", num_shards=4, num_encoders=2, speed="fp32")
    watcher.join()
    assert done, "nothing was disturbed: the test did not test anything"


def _assert_shards_as_single_process(tmp_path, text, num_shards: int = 4) -> None:
    """Every shard in `tmp_path/ray` byte for byte what single-process `embed_shards` writes (NumPy engine)."""
    from hf_laser.mining import embed_shards  # noqa: PLC0415

    encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL, speed="fp32")
    for shard in range(num_shards):
        embed_shards(encoder, text, tmp_path / "single", "fr", rank=shard, world_size=num_shards,
                     num_shards=num_shards, show_progress_bar=False)
    ray_npy = sorted((tmp_path / "ray").glob("*.npy"))
    assert len(ray_npy) == num_shards
    assert all(a.read_bytes() == (tmp_path / "single" / a.name).read_bytes() for a in ray_npy)


def _long_text(tmp_path):
    text = tmp_path / "fr.txt"  # 4,000 lines: shards long enough to be disturbed in
    text.write_text("\n".join(read_lines(SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra") * 4) + "\n")
    return text


def test_an_encoder_killed_mid_job_is_restarted_and_the_output_is_unchanged(local_ray, tmp_path):
    """Item 4 on one machine: an encoder actor's process is killed (SIGKILL) while shards are being embedded; Ray
    restarts it, its shard is retried and resumes, the job finishes, and every shard is byte for byte what an
    undisturbed single-process run writes: no row lost or duplicated."""
    import signal  # noqa: PLC0415

    def kill_an_encoder():
        pids = _actor_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
        return bool(pids)

    text = _long_text(tmp_path)
    _embed_while_disturbed(tmp_path, text, kill_an_encoder)
    _assert_shards_as_single_process(tmp_path, text)


def _actor_pids(title: bytes = b"ray::_ShardEncoder") -> list[int]:
    """Processes whose title Ray set to an actor's (`ray::_ShardEncoder...` by default)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read().startswith(title):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
    except (OSError, StopIteration, ValueError):
        return None


def test_a_worker_node_removed_mid_job_on_a_multi_node_cluster(tmp_path):
    """Item 4 on a real multi-node Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head without CPUs
    and three worker nodes of one CPU each, each its own raylet): while shards are being embedded, the node whose
    raylet runs a busy encoder is removed without grace; the encoder is restarted on the free node, its shard
    retried and resumed, and every shard is byte for byte what an undisturbed single-process run writes."""
    from ray.cluster_utils import Cluster  # noqa: PLC0415

    if ray.is_initialized():  # (another test's local Ray, in this process)
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    text = _long_text(tmp_path)
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(3)]
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()

        def remove_a_busy_node():
            raylets = {_parent(pid) for pid in _actor_pids()}
            busy = [n for n in nodes if n.all_processes["raylet"][0].process.pid in raylets]
            if busy:
                cluster.remove_node(busy[0], allow_graceful=False)
            return bool(busy)

        _embed_while_disturbed(tmp_path, text, remove_a_busy_node)
    finally:
        ray.shutdown()
        cluster.shutdown()
    _assert_shards_as_single_process(tmp_path, text)


def test_parquet_corpora_on_ray_from_uris_resume_file_by_file(local_ray, tmp_path):
    """#49 item 1 for Parquet: every `*.parquet` under a `file://` URI (any pyarrow filesystem works the same way)
    embedded by encoder actors into the same names under the output, the input's columns kept and the embeddings
    `LaserEncoder.encode`'s in row order; a re-run skips what is done; a changed input file is computed again (said),
    and only it."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    from hf_laser.mining.on_ray import embed_parquet  # noqa: PLC0415

    lines = read_lines(SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra")[:150]
    (tmp_path / "corpus" / "part").mkdir(parents=True)
    parts = {"a.parquet": lines[:60], "part/b.parquet": lines[60:]}
    for name, texts in parts.items():
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), tmp_path / "corpus" / name)
    said = []
    out = embed_parquet((tmp_path / "corpus").as_uri(), tmp_path / "out", lang="fr", num_encoders=2, speed="fp32",
                        say=said.append)
    assert sorted(out) == sorted(str(tmp_path / "out" / name) for name in parts)
    assert sorted(m.split(":")[0] for m in said) == ["computed", "computed"]
    encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL, speed="fp32")
    for name, texts in parts.items():
        table = pq.read_table(tmp_path / "out" / name)
        assert table.column("text").to_pylist() == texts and table.column("id").to_pylist() == list(range(len(texts)))
        got = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
        np.testing.assert_allclose(got, encoder.encode(texts, lang="fr"), rtol=0, atol=1e-6)
    before = (tmp_path / "out" / "a.parquet").stat().st_mtime_ns
    pq.write_table(pa.table({"id": [0], "text": ["Autre chose."]}), tmp_path / "corpus" / "part" / "b.parquet")
    command = [sys.executable, "-m", "hf_laser.cli", "embed-shards", "--input", "fr", str(tmp_path / "corpus"),
               "--embed-dir", str(tmp_path / "out"), "--speed", "fp32", "--num-encoders", "2"]
    no_ray = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert no_ray.returncode == 2 and "embedded with --ray" in no_ray.stderr, no_ray.stderr
    rerun = subprocess.run(command + ["--ray"], capture_output=True, text=True, timeout=900)  # the command line
    said = [line.split(": ", 1)[1] for line in rerun.stderr.splitlines()
            if line.startswith(("hf-laser embed-shards: computed", "hf-laser embed-shards: skipped"))]
    assert rerun.returncode == 0 and sorted(m.split(" ")[0] for m in said) == ["computed", "skipped"], rerun.stderr
    assert any("input content" in m for m in said), said  # what changed is said
    assert (tmp_path / "out" / "a.parquet").stat().st_mtime_ns == before
    assert pq.read_table(tmp_path / "out" / "part" / "b.parquet").column("text").to_pylist() == ["Autre chose."]


def test_parquet_text_column_errors():
    """A Parquet text column with a null, or not of text, is an error naming the row, never the text "None"."""
    import pyarrow as pa  # noqa: PLC0415

    from hf_laser.mining.on_ray import _text_column  # noqa: PLC0415

    assert _text_column(pa.table({"text": ["a", "b"]}), "text", "x.parquet") == ["a", "b"]
    with pytest.raises(ValueError, match=r"1 null value\(s\) \(the first in row 1\)"):
        _text_column(pa.table({"text": ["a", None, "c"]}), "text", "x.parquet")
    with pytest.raises(ValueError, match="holds int64, not text"):
        _text_column(pa.table({"text": [1, 2]}), "text", "x.parquet")
    with pytest.raises(ValueError, match="no column 'text'"):
        _text_column(pa.table({"sentence": ["a"]}), "text", "x.parquet")
