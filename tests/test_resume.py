"""`encode_file` / `hf-laser embed` / `mine --embed-dir` / `embed-shards`: resume and reuse only the same
computation (manifest), atomic outputs, disk-full handling, one-line CLI errors, summary line and progress bar."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, SHARED, read_lines, require_shared

import hf_laser.encoder as E
import hf_laser.outputs as O
from hf_laser import mining as M
from hf_laser.cli import main as cli_main
from hf_laser.commands.mine import main as mining_main
from hf_laser.encoder import EmbeddingWriteError, LaserEncoder, UsageError

FRA = SHARED / "data" / "tatoeba" / "v1" / "tatoeba.fra-eng.fra"
DEU = SHARED / "data" / "tatoeba" / "v1" / "tatoeba.deu-eng.deu"


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> LaserEncoder:
    return LaserEncoder.from_pretrained(tiny_model_dir, engine="torch")


@pytest.fixture
def texts(tmp_path) -> tuple[Path, Path]:
    """Two 100-line raw-text inputs (French, German)."""
    require_shared(FRA, DEU)
    fr, de = tmp_path / "fr.txt", tmp_path / "de.txt"
    fr.write_text("\n".join(read_lines(FRA)[:100]) + "\n", encoding="utf-8")
    de.write_text("\n".join(read_lines(DEU)[:100]) + "\n", encoding="utf-8")
    return fr, de


def fresh(encoder, src, tmp_path, name="fresh.npy", **kw) -> np.ndarray:
    """An uninterrupted run into a new directory (the reference a resumed run must equal bit for bit)."""
    d = tmp_path / "fresh"
    d.mkdir(exist_ok=True)
    (d / name).unlink(missing_ok=True)
    (d / (name + ".manifest.json")).unlink(missing_ok=True)
    return np.array(encoder.encode_file(src, d / name, **kw))


def crash_after(monkeypatch, chunks: int, exc: BaseException):
    """Makes the row writes fail after `chunks` chunks were written (the state a crash or a full disk leaves)."""
    calls = {"n": 0}
    real = O._write_at

    def write_at(fd, offset, data):
        calls["n"] += 1
        if calls["n"] > chunks:
            raise exc
        real(fd, offset, data)

    monkeypatch.setattr(O, "_write_at", write_at)
    return calls


# ------------------------------------------------------------------------------------------------ same computation
def test_complete_output_recomputed_when_anything_changed(encoder, texts, tmp_path, capsys, monkeypatch):
    fr, de = texts
    out = tmp_path / "out.npy"
    first = np.array(encoder.encode_file(fr, out, lang="fr"))
    assert np.array_equal(first, encoder.encode(read_lines(fr), lang="fr"))
    manifest = json.loads((tmp_path / "out.npy.manifest.json").read_text())
    ident = manifest["identity"]
    for key in ("hf_laser", "input_sha256", "input_size", "lines", "lang", "model", "tokenizer", "model_dtype",
                "quantize", "output_dtype", "normalize", "max_tokens", "batch_size", "chunk_lines"):
        assert key in ident, key
    assert manifest["input"]["path"] == str(fr.resolve()) and manifest["output"]["shape"] == [100, 96]
    capsys.readouterr()
    assert np.array_equal(encoder.encode_file(fr, out, lang="fr"), first)
    assert "up to date" in capsys.readouterr().err

    def check(expect_msg, expected, src=fr, enc=encoder, **kw):
        got = np.array(enc.encode_file(src, out, **{"lang": "fr", **kw}))
        err = capsys.readouterr().err
        assert "recomputing" in err and expect_msg in err, err
        np.testing.assert_array_equal(got, expected)
        assert (tmp_path / "out.npy.manifest.json").exists() and not (tmp_path / "out.npy.partial").exists()

    check('language "fr" -> "de"', encoder.encode(read_lines(fr), lang="de"), lang="de")
    check("input content (sha256)", encoder.encode(read_lines(de), lang="de"), src=de, lang="de")
    # an edited file with the same size and line count (in place)
    edited = fr.read_bytes().replace(b"Dieu", b"dieu", 1)
    assert len(edited) == fr.stat().st_size
    fr.write_bytes(edited)
    check("input content (sha256)", encoder.encode(read_lines(fr), lang="fr"))
    normed = encoder.encode(read_lines(fr), lang="fr", normalize_embeddings=True)
    check("normalize false -> true", normed, normalize_embeddings=True)
    check('output dtype "float32" -> "float16"', normed.astype(np.float16), normalize_embeddings=True, fp16=True)
    check("max_tokens 12000 -> 500", encoder.encode(read_lines(fr), lang="fr", max_tokens=500), max_tokens=500)
    bf16 = LaserEncoder.from_pretrained(encoder_dir(encoder), dtype=torch.bfloat16)
    assert bf16.model_identity()["model"] == encoder.model_identity()["model"]  # hashed before the cast
    check('model dtype "float32" -> "bfloat16"', bf16.encode(read_lines(fr), lang="fr"), enc=bf16)
    other = LaserEncoder.from_pretrained(encoder_dir(encoder), engine="torch")
    with torch.no_grad():
        other.model.get_input_embeddings().weight[5] += 1.0
    check("model (sha256)", other.encode(read_lines(fr), lang="fr"), enc=other)
    encoder.encode_file(fr, out, lang="fr")
    capsys.readouterr()
    monkeypatch.setattr(O, "_package_version", lambda: "9.9.9")
    check('hf-laser version "0.1.0" -> "9.9.9"', encoder.encode(read_lines(fr), lang="fr"))


def encoder_dir(encoder) -> str:
    return encoder.model.config._name_or_path


def test_interrupted_run_resumes_only_the_same_computation(encoder, texts, tmp_path, capsys, monkeypatch):
    fr, de = texts
    out = tmp_path / "out.npy"
    crash_after(monkeypatch, 2, RuntimeError("killed"))
    with pytest.raises(RuntimeError, match="killed"):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    assert not out.exists()  # never a half-written OUT
    assert json.loads((tmp_path / "out.npy.partial.json").read_text())["lines_done"] == 60
    monkeypatch.undo()
    capsys.readouterr()
    # another input for the same OUT: not mixed (the old bug: the first rows from file A, the rest from file B)
    got = np.array(encoder.encode_file(de, out, lang="fr", chunk_lines=30))
    err = capsys.readouterr().err
    assert "computing something else" in err and "input content" in err and "starting over" in err
    np.testing.assert_array_equal(got, fresh(encoder, de, tmp_path, lang="fr", chunk_lines=30))
    # normalize turned on when resuming: starts over, every row normalised
    out.unlink()
    crash_after(monkeypatch, 2, RuntimeError("killed"))
    with pytest.raises(RuntimeError):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30, normalize_embeddings=True))
    assert "normalize false -> true" in capsys.readouterr().err
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # the same computation resumes, bit-identical to an uninterrupted run
    out.unlink()
    crash_after(monkeypatch, 1, RuntimeError("killed"))
    with pytest.raises(RuntimeError):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    assert "resuming" in capsys.readouterr().err
    ref = fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30)
    assert got.tobytes() == ref.tobytes()
    assert out.read_bytes() == (tmp_path / "fresh" / "fresh.npy").read_bytes()


@pytest.mark.parametrize("damage, message", [
    ("no_progress", "has no progress record"),
    ("corrupt_progress", "is unreadable (JSONDecodeError)"),
    ("too_many_lines", "claims 500 lines done, the input has 100"),
    ("truncated_partial", "is truncated"),
    ("old_format", "has format None, not"),
])
def test_untrusted_partial_state_starts_over(encoder, texts, tmp_path, capsys, monkeypatch, damage, message):
    fr, _ = texts
    out = tmp_path / "out.npy"
    crash_after(monkeypatch, 2, RuntimeError("killed"))
    with pytest.raises(RuntimeError):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    partial, progress = tmp_path / "out.npy.partial", tmp_path / "out.npy.partial.json"
    state = json.loads(progress.read_text())
    if damage == "no_progress":  # a kill between creating OUT.partial and the first progress record
        progress.unlink()
    elif damage == "corrupt_progress":
        progress.write_text('{"lines_done": 6')
    elif damage == "too_many_lines":
        progress.write_text(json.dumps({**state, "lines_done": 500}))
    elif damage == "truncated_partial":
        progress.write_text(json.dumps({**state, "lines_done": 90}))
        os.truncate(partial, partial.stat().st_size // 2)
    elif damage == "old_format":
        progress.write_text(json.dumps({"lines_done": 60, "input": str(fr)}))
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    err = capsys.readouterr().err
    assert message in err and "starting over" in err, err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30).tobytes()


def test_untrusted_complete_output_is_recomputed(encoder, texts, tmp_path, capsys):
    fr, _ = texts
    ref = fresh(encoder, fr, tmp_path, lang="fr")
    out = tmp_path / "out.npy"
    # a right-shape .npy without manifest or progress file (all zeros: what a kill used to leave)
    np.save(out, np.zeros((100, 96), np.float32))
    got = np.array(encoder.encode_file(fr, out, lang="fr"))
    assert "no manifest" in capsys.readouterr().err
    assert got.tobytes() == ref.tobytes()
    # a truncated OUT (its manifest no longer describes it): not zero-filled and returned
    os.truncate(out, out.stat().st_size - 96 * 4 * 10)
    got = np.array(encoder.encode_file(fr, out, lang="fr"))
    assert "modified or replaced" in capsys.readouterr().err
    assert got.tobytes() == ref.tobytes()
    # a corrupt manifest
    (tmp_path / "out.npy.manifest.json").write_text("{")
    got = np.array(encoder.encode_file(fr, out, lang="fr"))
    assert "manifest out.npy.manifest.json is unreadable" in capsys.readouterr().err
    assert got.tobytes() == ref.tobytes()
    # the output is the input: refused
    with pytest.raises(UsageError, match="is the input file"):
        encoder.encode_file(fr, fr, lang="fr")


# ------------------------------------------------------------------------------------------------ SIGKILL
_SCRIPT = """
import sys, time
import hf_laser.encoder as E
model, src, out, chunk, delay = sys.argv[1:6]
real = E.LaserEncoder._embed_ids  # what encode_file calls once per chunk (not encode_ids)
def slow(self, *a, **k):
    r = real(self, *a, **k)
    time.sleep(float(delay))
    return r
E.LaserEncoder._embed_ids = slow
enc = E.LaserEncoder.from_pretrained(model, engine="torch")
enc.encode_file(src, out, lang="fr", chunk_lines=int(chunk), show_progress_bar=False)
print("complete", flush=True)
"""


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_is_bit_identical(tiny_model_dir, tmp_path):
    require_shared(FRA)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(read_lines(FRA)[:200]) + "\n", encoding="utf-8")
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")

    def run(out, delay, **kw):
        return subprocess.Popen([sys.executable, str(script), str(tiny_model_dir), str(src), str(out), "20",
                                 str(delay)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    ref = tmp_path / "ref.npy"
    proc = run(ref, 0)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    out = tmp_path / "out.npy"
    progress = tmp_path / "out.npy.partial.json"
    proc = run(out, 0.5)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(progress.read_text())["lines_done"] >= 60:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    assert proc.poll() is None, ("the run ended before it could be killed", proc.stderr.read()[-3000:])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / "out.npy.partial").exists()  # nothing that looks complete
    done = json.loads(progress.read_text())["lines_done"]
    assert 60 <= done < 200
    proc = run(out, 0)
    assert proc.wait(timeout=300) == 0
    assert f"resuming {out} at line {done}" in proc.stderr.read()
    assert out.read_bytes() == ref.read_bytes()
    assert not progress.exists() and not (tmp_path / "out.npy.partial").exists()


# ------------------------------------------------------------------------------------------------ disk full
def test_disk_full_at_allocation_is_one_clear_error(encoder, texts, tmp_path, monkeypatch, capsys):
    fr, _ = texts
    out = tmp_path / "out.npy"

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(EmbeddingWriteError, match="No space left on device while reserving") as info:
        encoder.encode_file(fr, out, lang="fr")
    assert info.value.errno == errno.ENOSPC and "run the same command again" in str(info.value)
    assert not out.exists() and not (tmp_path / "out.npy.partial").exists()
    # the command line: one line, exit status 1
    capsys.readouterr()
    assert cli_main(["embed", "--model", encoder_dir(encoder), "--lang", "fr", "-i", str(fr), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-laser embed: error: No space left on device while reserving"), err
    assert not any("Traceback" in line for line in err)
    monkeypatch.undo()
    ref = fresh(encoder, fr, tmp_path, lang="fr")
    assert np.array(encoder.encode_file(fr, out, lang="fr")).tobytes() == ref.tobytes()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_write_error_mid_run_keeps_a_resumable_state(encoder, texts, tmp_path, monkeypatch, capsys, code):
    fr, _ = texts
    out = tmp_path / "out.npy"
    crash_after(monkeypatch, 2, OSError(code, os.strerror(code)))
    with pytest.raises(EmbeddingWriteError, match=f"{os.strerror(code)} while writing .*60 of 100 lines saved"):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    assert not out.exists() and json.loads((tmp_path / "out.npy.partial.json").read_text())["lines_done"] == 60
    # still no space when resuming: the interrupted state is kept
    monkeypatch.setattr(os, "posix_fallocate", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(EmbeddingWriteError):
        encoder.encode_file(fr, out, lang="fr", chunk_lines=30)
    monkeypatch.undo()
    assert json.loads((tmp_path / "out.npy.partial.json").read_text())["lines_done"] == 60
    capsys.readouterr()
    got = np.array(encoder.encode_file(fr, out, lang="fr", chunk_lines=30))
    assert "resuming" in capsys.readouterr().err
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr", chunk_lines=30).tobytes()


def test_no_posix_fallocate_falls_back_to_plain_writes(encoder, texts, tmp_path, monkeypatch):
    fr, _ = texts
    monkeypatch.delattr(os, "posix_fallocate")
    got = np.array(encoder.encode_file(fr, tmp_path / "out.npy", lang="fr"))
    monkeypatch.undo()
    assert got.tobytes() == fresh(encoder, fr, tmp_path, lang="fr").tobytes()


# ------------------------------------------------------------------------------------------------ command line
def test_cli_embed_other_language_or_input_or_stdin_is_recomputed(tiny_model_dir, encoder, texts, tmp_path,
                                                                   monkeypatch, capsys):
    fr, de = texts
    out = tmp_path / "out.npy"
    common = ["embed", "--model", str(tiny_model_dir), "-o", str(out)]
    # the command line computes with the NumPy engine (a plain directory on the CPU): the same bits as this encoder
    encoder = LaserEncoder.from_pretrained(tiny_model_dir, engine="auto")
    assert encoder.engine == "numpy"
    assert cli_main([*common, "--lang", "fr", "-i", str(fr)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hf-laser embed: 100 lines in ") and "sentences/s" in err[0]
    assert err[0].endswith(f"-> {out} (100, 96) float32")
    assert cli_main([*common, "--lang", "de", "-i", str(fr)]) == 0
    assert 'language "fr" -> "de"' in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(out), encoder.encode(read_lines(fr), lang="de"))
    assert cli_main([*common, "--lang", "de", "-i", str(de)]) == 0
    assert "input content" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(out), encoder.encode(read_lines(de), lang="de"))
    assert cli_main([*common, "--lang", "de", "-i", str(de)]) == 0
    assert "100 lines already embedded" in capsys.readouterr().err
    # stdin never resumes nor reuses
    for path, lang in ((fr, "fr"), (fr, "fr"), (de, "de")):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
        assert cli_main([*common, "--lang", lang]) == 0
        assert "stdin input is never resumed" in capsys.readouterr().err
        np.testing.assert_array_equal(np.load(out), encoder.encode(read_lines(path), lang=lang))


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_cli_user_errors_are_one_line(tiny_model_dir, tiny_dictionary_dir, texts, tmp_path, monkeypatch, capsys):
    fr, _ = texts
    out = str(tmp_path / "out.npy")
    embed = ["embed", "--lang", "fr", "-o", out]
    assert cli_main([*embed, "--model", str(tiny_model_dir), "-i", str(tmp_path / "missing.txt")]) == 2
    assert _one_error_line(capsys) == f"hf-laser embed: error: input file not found: {tmp_path / 'missing.txt'}"

    def no_hub(*a, **k):
        raise AssertionError("a local-looking path must not be sent to the Hub")

    monkeypatch.setattr(E.LaserEncoder, "from_pretrained", classmethod(no_hub))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    for missing in (str(tmp_path / "nope"), "./nope", "../nope", "nope", "models/nope", "a/b/c"):
        assert cli_main([*embed, "--model", missing, "-i", str(fr)]) == 2
        assert _one_error_line(capsys).startswith(f"hf-laser embed: error: model directory not found: {missing} (")
    assert E.looks_local("models/x") and E.looks_local("nope") and not E.looks_local("someone/laser")
    (tmp_path / "empty_dir").mkdir()
    assert cli_main([*embed, "--model", "empty_dir", "-i", str(fr)]) == 2
    assert "empty_dir is not a LASER model directory: it has no config.json" in _one_error_line(capsys)
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    assert cli_main([*embed, "--model", "bert", "-i", str(fr)]) == 2
    assert "config.json has model_type 'bert', expected 'laser'" in _one_error_line(capsys)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    # a dictionary-only model without --pretokenized
    assert cli_main([*embed, "--model", str(tiny_dictionary_dir), "-i", str(fr)]) == 2
    line = _one_error_line(capsys)
    assert "has no tokenizer" in line and "--pretokenized" in line
    # hf-laser mine: the same one-line errors
    pytest.importorskip("faiss")
    mine = ["mine", "--src-lang", "fr", "--tgt-lang", "fr", "-o", str(tmp_path / "p.tsv"), "--no-progress"]
    assert cli_main([*mine, "--model", "./nope", str(fr), str(fr)]) == 2
    assert _one_error_line(capsys).startswith("hf-laser mine: error: model directory not found: ./nope (")
    assert cli_main([*mine, "--model", str(tiny_model_dir), str(fr), "missing.txt"]) == 2
    assert _one_error_line(capsys) == "hf-laser mine: error: input file not found: missing.txt"


def test_cli_progress_bar_and_summary(tiny_model_dir, texts, tmp_path, monkeypatch, capsys):
    fr, _ = texts
    monkeypatch.setattr(E, "PROGRESS_BAR_DELAY_S", 0)
    base = ["embed", "--model", str(tiny_model_dir), "--lang", "fr", "-i", str(fr), "--overwrite"]
    # stderr not a terminal: no bar
    assert cli_main([*base, "-o", str(tmp_path / "a.npy")]) == 0
    assert "embedding:" not in capsys.readouterr().err
    monkeypatch.setattr(type(sys.stderr), "isatty", lambda self: True, raising=False)
    assert cli_main([*base, "-o", str(tmp_path / "a.npy")]) == 0
    err = capsys.readouterr().err
    assert "embedding: 100%" in err and "100/100" in err  # a bar for 100 lines, not only from 10,000
    for flag in ("--no-progress", "-q", "--quiet"):
        assert cli_main([*base, flag, "-o", str(tmp_path / "a.npy")]) == 0
        err = capsys.readouterr().err
        assert "embedding:" not in err and "100 lines in" in err


# ------------------------------------------------------------------------------------------------ mining caches
def test_mine_embed_dir_and_shards_follow_edits(tiny_model_dir, encoder, texts, tmp_path, capsys):
    pytest.importorskip("faiss")
    fr, de = texts
    emb = tmp_path / "emb"
    args = ["mine", str(fr), str(de), "--model", str(tiny_model_dir), "--src-lang", "fr", "--tgt-lang", "de",
            "--knn-device", "cpu", "--no-progress", "--embed-dir", str(emb), "-o", str(tmp_path / "p.tsv")]
    assert mining_main(args) == 0
    key = M.embedding_key(fr, "fr")
    cached = np.array(np.load(emb / f"{key}.npy"))
    np.testing.assert_array_equal(cached, encoder.encode(read_lines(fr), lang="fr"))
    # edited in place, same line count and size: the cache is not reused
    fr.write_bytes(fr.read_bytes().replace(b"Dieu", b"dieu", 1))
    capsys.readouterr()
    assert mining_main(args) == 0
    assert "input content (sha256)" in capsys.readouterr().err
    np.testing.assert_array_equal(np.load(emb / f"{key}.npy"), encoder.encode(read_lines(fr), lang="fr"))
    # shards: written, used, then stale after an edit (mine says so and embeds anew; embed-shards recomputes)
    shards = tmp_path / "shards"
    for lang, path in (("fr", fr), ("de", de)):
        assert M.embed_shards(encoder, path, shards, lang, rank=0, world_size=1, num_shards=2) is not None
    args[args.index(str(emb))] = str(shards)
    assert mining_main(args) == 0
    assert "using 2 embedding shard(s)" in capsys.readouterr().err
    fr.write_bytes(fr.read_bytes().replace(b"dieu", b"Dieu", 1))
    assert mining_main(args) == 0
    err = capsys.readouterr().err
    assert "stale embedding shards" in err and "input content (sha256)" in err and "embedding" in err
    with pytest.raises(M.StaleEmbeddingsError, match="input content"):
        M.load_embedding_shards(shards, fr, "fr")
    M.embed_shards(encoder, fr, shards, "fr", rank=0, world_size=1, num_shards=2)
    loaded = M.load_embedding_shards(shards, fr, "fr", identity=M.shard_identity(
        encoder, E.scan_input(fr), "fr", pretokenized=False, fp16=False, max_tokens=12000))
    np.testing.assert_allclose(loaded.to_numpy(), encoder.encode(read_lines(fr), lang="fr"), atol=1e-6, rtol=0)
    # another model: the shards are stale for it
    with pytest.raises(M.StaleEmbeddingsError, match="fp16|output dtype"):
        M.load_embedding_shards(shards, fr, "fr", identity=M.shard_identity(
            encoder, E.scan_input(fr), "fr", pretokenized=False, fp16=True, max_tokens=12000))
