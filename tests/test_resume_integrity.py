"""Resume checks what it keeps (issue #24, items 2-4): per-chunk checksums of the rows written, the part of a
chunk saved by time (an interrupt loses seconds, not a chunk), manifests and progress records with wrong field
types, and the count of saved lines a full disk reports."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import fra_file, read_lines

import hf_laser.encoder as E
import hf_laser.outputs as O
from hf_laser.encoder import EmbeddingWriteError




@pytest.fixture
def fr(tmp_path) -> Path:
    return fra_file(tmp_path / "fr.txt", 100)


def fresh(encoder, src, tmp_path, **kw) -> np.ndarray:
    d = tmp_path / "fresh"
    d.mkdir(exist_ok=True)
    for f in d.iterdir():
        f.unlink()
    return np.array(encoder.encode_file(src, d / "fresh.npy", **kw))


def interrupt_after(monkeypatch, target, name, calls: int):
    """Makes `target.name` raise KeyboardInterrupt after it ran `calls` times (a Ctrl-C at that point)."""
    real, n = getattr(target, name), {"n": 0}

    def wrapped(*a, **k):
        result = real(*a, **k)
        n["n"] += 1
        if n["n"] >= calls:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(target, name, wrapped)


def test_changed_rows_in_the_partial_file_start_over(encoder, fr, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.npy"
    interrupt_after(monkeypatch, O.ResumableWriter, "append", 2)  # 2 chunks of 30 lines kept
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    partial = tmp_path / "out.npy.partial"
    state = json.loads((tmp_path / "out.npy.partial.json").read_text())
    assert state["lines_done"] == 60 and [c[0] for c in state["chunks"]] == [30, 60]
    _, _, header = O.npy_header(partial)
    size = partial.stat().st_size
    with open(partial, "r+b") as f:  # one byte inside the finished part, same size
        f.seek(header + 40 * 96 * 4 + 7)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    assert partial.stat().st_size == size
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    err = capsys.readouterr().err
    assert "lines 31-60 of out.npy.partial changed since they were written (checksum)" in err, err
    assert "starting over" in err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30).tobytes()


def test_an_interrupt_inside_a_chunk_keeps_the_batches_saved_by_time(encoder, fr, tmp_path, monkeypatch, capsys):
    """The issue's newcomer case: Ctrl-C half-way through a file smaller than one chunk resumed at line 0. The
    batches done are now saved every PROGRESS_SAVE_S seconds of work (0 here: after every batch)."""
    out = tmp_path / "out.npy"
    monkeypatch.setattr(E, "PROGRESS_SAVE_S", 0.0)
    interrupt_after(monkeypatch, O.ResumableWriter, "save_chunk_part", 3)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(fr, out, lang="fr", max_tokens=100)  # one chunk, many batches
    monkeypatch.undo()
    state = json.loads((tmp_path / "out.npy.partial.json").read_text())
    assert state["lines_done"] == 0 and state["current"]["batches"] == 3
    saved = state["current"]["rows"]
    # #52 D6: the saved part is inside out.npy.partial (its rows not written yet), no file beside it grows
    assert saved > 0 and not (tmp_path / "out.npy.partial.chunk").exists()
    _, _, header = O.npy_header(tmp_path / "out.npy.partial")
    assert (tmp_path / "out.npy.partial").stat().st_size == header + 100 * 96 * 4
    batches = {"n": 0}
    real = encoder.model.forward

    def counting(*a, **k):
        batches["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(encoder.model, "forward", counting)
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", max_tokens=100))
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert f"resuming {out} at line 0 of 100 (with {saved:,} sentences of the next chunk saved)" in err, err
    plan = E.plan_batches([len(s) for s in dict.fromkeys(map(tuple, encoder.token_ids(read_lines(fr), "fr")))], 100)
    assert batches["n"] == len(plan) - 3  # only the batches not saved were encoded
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", max_tokens=100).tobytes()
    assert not (tmp_path / "out.npy.partial.chunk").exists() and not (tmp_path / "out.npy.partial.json").exists()


def test_a_damaged_saved_chunk_part_only_recomputes_that_chunk(encoder, fr, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out.npy"
    monkeypatch.setattr(E, "PROGRESS_SAVE_S", 0.0)
    interrupt_after(monkeypatch, O.ResumableWriter, "save_chunk_part", 2)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(fr, out, lang="fr", max_tokens=100, chunk_lines=60)
    monkeypatch.undo()
    partial = tmp_path / "out.npy.partial"
    _, _, header = O.npy_header(partial)
    data = bytearray(partial.read_bytes())
    data[header + 5] ^= 0xFF  # a byte of the saved part (lines_done is 0: it starts at the first row)
    partial.write_bytes(bytes(data))
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", max_tokens=100, chunk_lines=60))
    assert f"resuming {out} at line 0 of 100\n" in capsys.readouterr().err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", max_tokens=100, chunk_lines=60).tobytes()


@pytest.mark.parametrize("field, value", [("identity", [1]), ("output", None), ("identity", "x")])
def test_manifest_with_wrong_field_types_is_recomputed(encoder, fr, tmp_path, capsys, field, value):
    out = tmp_path / "out.npy"
    ref = np.array(encoder.encode_file(fr, out, lang="fr"))
    manifest = tmp_path / "out.npy.manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), field: value}))
    capsys.readouterr()
    assert np.array(encoder.encode_file(fr, out, lang="fr")).tobytes() == ref.tobytes()
    assert "manifest out.npy.manifest.json is unreadable" in capsys.readouterr().err
    assert np.array(encoder.encode_file(fr, out, lang="fr")).tobytes() == ref.tobytes()  # and then reused
    assert "is up to date" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("identity", [1]), ("identity", None), ("chunks", None),
                                          ("chunks", [[1, 2]]), ("current", {"rows": "x"})])
def test_progress_record_with_wrong_field_types_starts_over(encoder, fr, tmp_path, monkeypatch, capsys, field, value):
    out = tmp_path / "out.npy"
    interrupt_after(monkeypatch, O.ResumableWriter, "append", 2)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    progress = tmp_path / "out.npy.partial.json"
    progress.write_text(json.dumps({**json.loads(progress.read_text()), field: value}))
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    err = capsys.readouterr().err
    assert ("starting over" in err) or field == "current", err  # a bad "current" only loses the chunk part
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30).tobytes()


def test_full_disk_reports_the_lines_the_next_run_resumes_at(encoder, fr, tmp_path, monkeypatch, capsys):
    """The issue: "10,000 of 20,000 lines saved" but the re-run resumed at 8,000 (the progress record of the last
    chunk was the write that failed)."""
    out = tmp_path / "out.npy"
    real, calls = O.write_json_atomic, {"n": 0}

    def full_at_third(path, obj):
        calls["n"] += 1
        if calls["n"] == 3:  # the fresh record, chunk 1, then chunk 2's record fails
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, obj)

    monkeypatch.setattr(O, "write_json_atomic", full_at_third)
    with pytest.raises(EmbeddingWriteError, match=r"\(30 of 100 lines saved\)"):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    assert f"resuming {out} at line 30 of 100" in capsys.readouterr().err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30).tobytes()


def _zero_rows_keeping_size_and_mtime(path: Path, rows: slice) -> None:
    """Zeroes rows of a finished float32 output in place and restores its modification time (the edit a size/mtime
    check cannot see)."""
    st = path.stat()
    arr = np.load(path, mmap_mode="r+")
    arr[rows] = 0
    arr.flush()
    del arr
    import os

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_finished_output_changed_in_place_is_recomputed_not_reused(encoder, fr, tmp_path, capsys):
    """#52 D8: 50 rows zeroed with the mtime restored were reused as "up to date"; the content checksum catches it."""
    out = tmp_path / "out.npy"
    ref = np.array(encoder.encode_file(fr, out, lang="fr"))
    manifest = json.loads((tmp_path / "out.npy.manifest.json").read_text())
    assert manifest["output"]["sha256"] == O.file_sha256(out)
    _zero_rows_keeping_size_and_mtime(out, slice(0, 50))
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr"))
    assert "its content changed after it was written (sha256 differs from its manifest)" in capsys.readouterr().err
    assert got.tobytes() == ref.tobytes() and not (got[:50] == 0).all()
    np.array(encoder.encode_file(fr, out, lang="fr"))
    assert "is up to date" in capsys.readouterr().err  # and the recomputed one is reused


def test_a_manifest_without_checksum_is_recomputed(encoder, fr, tmp_path, capsys):
    out = tmp_path / "out.npy"
    ref = np.array(encoder.encode_file(fr, out, lang="fr"))
    manifest = tmp_path / "out.npy.manifest.json"
    content = json.loads(manifest.read_text())
    del content["output"]["sha256"]  # as hf-laser wrote it before the checksum
    manifest.write_text(json.dumps(content))
    capsys.readouterr()
    assert np.array(encoder.encode_file(fr, out, lang="fr")).tobytes() == ref.tobytes()
    assert "records no checksum of its content" in capsys.readouterr().err


def test_a_changed_embedding_shard_is_stale_and_recomputed(encoder, fr, tmp_path):
    from hf_laser.mining.shards import StaleEmbeddingsError, embed_shards, load_embedding_shards

    embed_dir = tmp_path / "emb"
    embed_shards(encoder, fr, embed_dir, "fr", num_shards=2, rank=0, world_size=1)
    ref = load_embedding_shards(embed_dir, fr, "fr").to_numpy()
    shard = sorted(embed_dir.glob("*.npy"))[0]
    _zero_rows_keeping_size_and_mtime(shard, slice(0, 5))
    with pytest.raises(StaleEmbeddingsError, match="content changed after it was written"):
        load_embedding_shards(embed_dir, fr, "fr")
    embed_shards(encoder, fr, embed_dir, "fr", num_shards=2, rank=0, world_size=1)  # redoes that shard
    assert load_embedding_shards(embed_dir, fr, "fr").to_numpy().tobytes() == ref.tobytes()


def test_an_output_where_no_lock_file_can_be_made_is_one_clear_error(encoder, fr, capsys):
    """#52 D7: -o /proc/version said "is being written by another process (lock /proc/version.lock)" when nothing
    held it, and --wait hung."""
    if not Path("/proc/version").is_file():
        pytest.skip("needs Linux's /proc")
    from hf_laser.cli import main as cli_main
    from hf_laser.errors import UsageError

    with pytest.raises(UsageError, match=r"cannot create the lock file /proc/version\.lock of /proc/version"):
        with O.output_lock("/proc/version", wait=True):
            pass
    assert cli_main(["embed", "--lang", "fr", "-i", str(fr), "-o", "/proc/version", "--wait", "-q"]) == 2
    err = capsys.readouterr().err
    assert "cannot create the lock file" in err and "being written by" not in err


SMALL_DISK_RUN = """
import sys
import numpy as np
import hf_laser.encoder as E
from hf_laser.encoder import EmbeddingWriteError, LaserEncoder

model, src, out, reference = sys.argv[1:]
E.PROGRESS_SAVE_S = 0.0  # the chunk's part saved after every batch
enc = LaserEncoder.from_pretrained(model)
for attempt in range(3):
    try:
        got = np.array(enc.encode_file(src, out, lang="fr", max_tokens=200))
        break
    except EmbeddingWriteError as err:
        print("attempt", attempt, "failed:", err)
else:
    sys.exit(3)
expected = np.array(enc.encode_file(src, reference, lang="fr", max_tokens=200))
print("identical" if got.tobytes() == expected.tobytes() else "DIFFERENT")
"""


def _in_a_small_filesystem(size: str, mountpoint: Path) -> list[str] | None:
    """The command prefix that runs a command with a tmpfs of `size` mounted at `mountpoint` (its own mount
    namespace: nothing outside sees it), or None where this machine cannot (no `unshare`, no user namespaces)."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    user_ns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    prefix = [unshare, *user_ns, "--mount", "sh", "-c",
              f'mount -t tmpfs -o size={size} tmpfs "{mountpoint}" && exec "$@"', "sh"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        return None
    return prefix


def test_an_output_that_fits_the_disk_finishes(tiny_model_dir, tmp_path):
    """#52 D6: on a 33 MiB filesystem a 32.8 MB output failed three times in a row ("run the same command again: it
    resumes from there", 0 lines saved): the space reserved covered OUT.partial but not OUT.partial.chunk, which
    grew to a whole chunk. The chunk's saved part now lives in OUT.partial's own rows: a run needs the output's
    room only. Here: a 1 MiB filesystem, an output of 998,528 bytes in one chunk saved after every batch."""
    import subprocess
    import sys

    disk = tmp_path / "disk"
    disk.mkdir()
    prefix = _in_a_small_filesystem("1m", disk)
    if prefix is None:
        pytest.skip("needs a small filesystem: `unshare --mount` (root or user namespaces) with tmpfs")
    lines = read_lines(fra_file(tmp_path / "fr1000.txt", 1000))
    src = tmp_path / "fr.txt"  # 2,600 distinct lines x 96 float32 + the header: 998,528 bytes of 1,048,576
    src.write_text("".join(f"{lines[i % 1000]} ({i // 1000})\n" for i in range(2600)), encoding="utf-8")
    run = subprocess.run([*prefix, sys.executable, "-c", SMALL_DISK_RUN, str(tiny_model_dir), str(src),
                          str(disk / "out.npy"), str(tmp_path / "reference.npy")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("identical"), run.stdout + run.stderr
    assert "failed" not in run.stdout, run.stdout


def test_a_float16_output_saves_the_chunk_part_while_it_fits(encoder, fr, tmp_path, monkeypatch, capsys):
    """#52 D6, float16 outputs: the chunk's float32 part takes twice the room of its rows, so it is saved while it
    fits in the rows not written yet, then no more (never beyond the reserved space); a resume is bit-identical."""
    out = tmp_path / "out.npy"
    monkeypatch.setattr(E, "PROGRESS_SAVE_S", 0.0)
    real, results = O.ResumableWriter.save_chunk_part, []

    def recorded(self, batches, rows):
        results.append(real(self, batches, rows))
        if results[-1] is False:
            raise KeyboardInterrupt  # a Ctrl-C once the part no longer fits
        return results[-1]

    monkeypatch.setattr(O.ResumableWriter, "save_chunk_part", recorded)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(fr, out, lang="fr", max_tokens=100, fp16=True)  # one chunk of 100 lines
    monkeypatch.undo()
    assert results[0] is True and results[-1] is False
    state = json.loads((tmp_path / "out.npy.partial.json").read_text())
    saved = state["current"]["rows"]
    assert 0 < saved * 96 * 4 <= 100 * 96 * 2  # within the reserved rows
    _, _, header = O.npy_header(tmp_path / "out.npy.partial")
    assert (tmp_path / "out.npy.partial").stat().st_size == header + 100 * 96 * 2
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", max_tokens=100, fp16=True))
    assert f"with {saved:,} sentences of the next chunk saved" in capsys.readouterr().err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", max_tokens=100, fp16=True).tobytes()
