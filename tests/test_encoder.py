"""LaserEncoder.encode / encode_file and `hf-laser embed`: batching, order, bad input, streaming, resume."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import REFERENCE, read_lines, reference_embeddings

from hf_laser import LaserConfig, LaserModel
from hf_laser.cli import main as cli_main
from hf_laser.encoder import LaserEncoder, count_lines, plan_batches, read_lines as stream_lines


@pytest.fixture(scope="module")
def encoder(tiny_dictionary_dir) -> LaserEncoder:
    return LaserEncoder.from_pretrained(tiny_dictionary_dir)


@pytest.fixture(scope="module")
def fra_lines() -> list[str]:
    return read_lines(REFERENCE / "tatoeba" / "tatoeba.fra-eng.fra.bpe")


def test_a_float16_config_still_computes_in_float32_by_default(tiny_dictionary_dir, tmp_path, fra_lines):
    """A directory saved from a half model names `dtype: float16` in its config; LaserEncoder's documented default
    (float32) holds anyway: the same numbers as the float32 directory with its weights rounded to float16."""
    half_dir = tmp_path / "half"
    shutil.copytree(tiny_dictionary_dir, half_dir, ignore=shutil.ignore_patterns("model*.safetensors*", "config.json"))
    LaserModel.from_pretrained(tiny_dictionary_dir).half().save_pretrained(half_dir)
    assert json.loads((half_dir / "config.json").read_text())["dtype"] == "float16"
    enc = LaserEncoder.from_pretrained(half_dir, engine="torch")
    assert {p.dtype for p in enc.model.parameters()} == {torch.float32}
    rounded = LaserEncoder.from_pretrained(tiny_dictionary_dir, engine="torch")
    rounded.model._apply(lambda t: t.half().float() if t.is_floating_point() else t)
    np.testing.assert_array_equal(enc.encode(fra_lines[:20], pretokenized=True),
                                  rounded.encode(fra_lines[:20], pretokenized=True))
    assert LaserEncoder.from_pretrained(half_dir, dtype=torch.float16).model.embed_tokens.weight.dtype == torch.float16


def test_plan_batches_budget_and_coverage():
    rng = np.random.default_rng(0)
    lengths = list(rng.integers(1, 60, 500)) + [5000]
    batches = plan_batches(lengths, max_tokens=300, batch_size=16)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    for b in batches:
        assert lengths[b[0]] == max(lengths[i] for i in b)  # longest first: padded size = len(b) * lengths[b[0]]
        assert len(b) <= 16
        assert len(b) * lengths[b[0]] <= 300 or len(b) == 1
    firsts = [lengths[b[0]] for b in batches]
    assert firsts == sorted(firsts, reverse=True)
    assert [len(b) for b in batches if lengths[b[0]] == 5000] == [1]
    assert plan_batches([]) == []
    with pytest.raises(ValueError):
        plan_batches([3], max_tokens=0)


@pytest.mark.parametrize("max_tokens, batch_size", [(12000, None), (7, None), (None, 3), (1, 1)])
def test_encode_matches_reference_any_budget(encoder, fra_lines, max_tokens, batch_size):
    emb = encoder.encode(fra_lines, pretokenized=True, max_tokens=max_tokens, batch_size=batch_size)
    assert emb.dtype == np.float32 and emb.shape == (100, 96)
    assert np.abs(emb - reference_embeddings("tatoeba.fra-eng.fra")).max() <= 1e-5


def test_encode_input_order_and_outputs(encoder, fra_lines):
    perm = np.random.default_rng(0).permutation(100)
    emb = encoder.encode([fra_lines[i] for i in perm], pretokenized=True)
    assert np.abs(emb - reference_embeddings("tatoeba.fra-eng.fra")[perm]).max() <= 1e-5
    single = encoder.encode(fra_lines[0], pretokenized=True)
    assert single.shape == (96,)
    as_torch = encoder.encode(fra_lines[:3], pretokenized=True, convert_to="torch", normalize_embeddings=True)
    assert isinstance(as_torch, torch.Tensor)
    torch.testing.assert_close(as_torch.norm(dim=-1), torch.ones(3))
    with pytest.raises(ValueError, match="convert_to"):
        encoder.encode(fra_lines[:1], pretokenized=True, convert_to="list")


def test_empty_and_whitespace_sentences(encoder):
    assert encoder.encode([], pretokenized=True).shape == (0, 96)
    emb = encoder.encode(["", "   ", "\t"], pretokenized=True)
    eos_only = encoder.encode_ids([[2]]).numpy()
    np.testing.assert_allclose(emb, np.repeat(eos_only, 3, axis=0), atol=0)
    # the reference edge files hold empty lines (27-31): their embeddings are </s> alone too
    ref = reference_embeddings("edge.en")
    edge = read_lines(REFERENCE / "edge" / "edge.en.bpe")
    empty = [i for i, line in enumerate(edge) if not line.strip()]
    assert empty and np.abs(ref[empty] - eos_only).max() <= 1e-5


def test_bad_input(encoder):
    with pytest.raises(TypeError, match="sentence 1"):
        encoder.encode(["a", None], pretokenized=True)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        encoder.encode_ids([[5, 2], [10**6, 2]])
    with pytest.raises(ValueError, match="no tokenizer"):
        encoder.encode(["raw text"])


def test_long_sentence_among_short(encoder):
    """A 10,000-token sentence among short ones: batches stay within the budget, results unchanged."""
    rng = np.random.default_rng(0)
    long = list(rng.integers(4, 60000, 10_000)) + [2]
    short = [list(rng.integers(4, 60000, rng.integers(1, 20))) + [2] for _ in range(50)]
    together = encoder.encode_ids(short[:25] + [long] + short[25:], max_tokens=2000)
    alone = torch.cat([encoder.encode_ids([s]) for s in short[:25] + [long] + short[25:]])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=0)


def test_line_reading_keeps_alignment(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes("a\rb\nc\u2028d\n\x85e\x0c\n\nlast".encode() + b"\xff\n")
    lines = list(stream_lines(path))
    assert lines == ["a\rb", "c\u2028d", "\x85e\x0c", "", "last\udcff"]
    assert count_lines(path) == 5
    (tmp_path / "empty.txt").write_bytes(b"")
    assert count_lines(tmp_path / "empty.txt") == 0


def test_encode_file_fp16_and_resume(encoder, tmp_path, fra_lines, capsys):
    src = REFERENCE / "tatoeba" / "tatoeba.fra-eng.fra.bpe"
    ref = reference_embeddings("tatoeba.fra-eng.fra")
    out32 = encoder.encode_file(src, tmp_path / "e32.npy", pretokenized=True, chunk_lines=30)
    assert out32.shape == (100, 96) and np.abs(out32 - ref).max() <= 1e-5
    out16 = encoder.encode_file(src, tmp_path / "e16.npy", pretokenized=True, fp16=True)
    assert out16.dtype == np.float16 and np.abs(out16.astype(np.float32) - ref).max() < 1e-2

    # an interrupted run of hf-laser <= 0.1.0 (written in place, OUT.progress.json, no manifest) cannot be checked:
    # it is recomputed, never returned as complete
    partial = np.lib.format.open_memmap(tmp_path / "r.npy", mode="w+", dtype=np.float32, shape=(100, 96))
    partial[:40] = ref[:40]
    partial[40:] = np.nan
    partial.flush()
    del partial
    (tmp_path / "r.npy.progress.json").write_text(json.dumps({"lines_done": 40}))
    resumed = encoder.encode_file(src, tmp_path / "r.npy", pretokenized=True, chunk_lines=25)
    assert "older hf-laser" in capsys.readouterr().err
    assert np.abs(resumed - ref).max() <= 1e-5
    assert not (tmp_path / "r.npy.progress.json").exists() and not (tmp_path / "r.npy.partial").exists()
    # a complete output of the same computation is reused as is
    assert np.array_equal(encoder.encode_file(src, tmp_path / "r.npy", pretokenized=True, chunk_lines=25), resumed)
    assert "up to date" in capsys.readouterr().err
    # a .npy of another shape without manifest is recomputed; a file that is no .npy is never overwritten silently
    np.save(tmp_path / "bad.npy", np.zeros((3, 96), np.float32))
    assert encoder.encode_file(src, tmp_path / "bad.npy", pretokenized=True).shape == (100, 96)
    assert "no manifest" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("my notes\n")
    with pytest.raises(ValueError, match="is not a .npy file"):
        encoder.encode_file(src, tmp_path / "notes.txt", pretokenized=True)
    assert encoder.encode_file(src, tmp_path / "notes.txt", pretokenized=True, resume=False).shape == (100, 96)
    # a complete run writes exactly what np.save writes (same header, same bytes)
    np.save(tmp_path / "saved.npy", np.asarray(out32))
    assert (tmp_path / "saved.npy").read_bytes() == (tmp_path / "e32.npy").read_bytes()


def test_cli_embed_stdin(tiny_dictionary_dir, tmp_path, monkeypatch, fra_lines):
    import io
    import sys

    data = ("\n".join(fra_lines[:10]) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli_main(["embed", "--model", str(tiny_dictionary_dir), "--pretokenized", "-q", "--fp16",
                     "-o", str(tmp_path / "out.npy")]) == 0
    out = np.load(tmp_path / "out.npy")
    assert out.dtype == np.float16 and out.shape == (10, 96)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli_main(["embed", "--model", str(tiny_dictionary_dir), "--pretokenized", "-q", "--int8",
                     "-o", str(tmp_path / "int8.npy")]) == 0
    assert np.load(tmp_path / "int8.npy").shape == (10, 96)
    assert np.abs(out - reference_embeddings("tatoeba.fra-eng.fra")[:10]).max() < 1e-2


def test_encoder_on_model_without_vocab():
    encoder = LaserEncoder(LaserModel(LaserConfig(vocab_size=20, embed_dim=4, hidden_size=3, num_layers=1)))
    assert encoder.dim == 6
    with pytest.raises(ValueError, match="no vocabulary"):
        encoder.encode(["a b"], pretokenized=True)
    assert encoder.encode_ids([[5, 2]]).shape == (1, 6)


def test_many_empty_lines_and_duplicates_match_plain_path(encoder, fra_lines):
    """Deduplication inside encode() must not change results: 100k empty lines, repeated sentences."""
    eos_only = encoder.encode_ids([[2]]).numpy()
    emb = encoder.encode([""] * 100_000, pretokenized=True)
    assert emb.shape == (100_000, 96) and np.array_equal(emb, np.repeat(eos_only, 100_000, axis=0))
    mixed = [fra_lines[i % 7] if i % 3 else "" for i in range(60)]
    plain = np.concatenate([encoder.encode([line], pretokenized=True) for line in mixed])
    np.testing.assert_allclose(encoder.encode(mixed, pretokenized=True), plain, atol=1e-6, rtol=0)


def test_int8_quantized_encoder_is_close(tiny_dictionary_dir, fra_lines):
    q = LaserEncoder.from_pretrained(tiny_dictionary_dir, quantize="int8")
    emb = q.encode(fra_lines, pretokenized=True)
    ref = reference_embeddings("tatoeba.fra-eng.fra")
    cos = np.sum(emb * ref, 1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() > 0.99
    with pytest.raises(ValueError, match="int8"):
        LaserEncoder.from_pretrained(tiny_dictionary_dir, quantize="int4")


def test_int8_prints_no_torch_deprecation_warning(tmp_path):
    """#71: `--speed int8` printed torch 2.13's three-line warning that quantized tensors are deprecated, on every
    run. That one warning is silenced around the quantisation (in a fresh process: torch says it once per process);
    the run's own lines are all that is left."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}  # (a normal run's warning filters)
    run = subprocess.run([sys.executable, "-m", "hf_laser.cli", "embed", "--speed", "int8", "--lang", "fr", "-i",
                          str(REPO / "examples" / "fr.txt"), "-o", str(tmp_path / "fr.npy")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "deprecated" not in run.stderr and "Warning" not in run.stderr, run.stderr
    assert all(line.startswith("hf-laser embed: ") for line in run.stderr.splitlines()), run.stderr
    assert np.load(tmp_path / "fr.npy").shape == (8, 1024)
