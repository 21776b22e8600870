"""The NumPy engine (`hf_laser.modeling.bilstm_numpy.NumpyLaserBiLSTM`, `LaserEncoder.from_pretrained(engine=...)`,
`hf-laser embed --engine`): the original encoder's reference embeddings, the PyTorch model's to round-off on every
shape it handles (layers, one direction, literal <pad> tokens, threads), the same weights and model hash as the
PyTorch loader, clear refusals, and a command line that embeds without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REFERENCE, read_lines, reference_embeddings
from safetensors.torch import save_file

from hf_laser import DEFAULT_MODEL, LaserConfig, LaserModel
from hf_laser.modeling.bilstm import LaserBiLSTM
from hf_laser.modeling.bilstm_numpy import NumpyLaserBiLSTM
from hf_laser.encoder import LaserEncoder
from hf_laser.outputs import model_sha256
from hf_laser.modeling.plain_weights import read_plain_weights


def save_plain(tmp_path, seed=0, dtype=torch.float32, **kwargs):
    """A plain model directory (config + model.safetensors, no tokenizer) of a small random LaserModel."""
    torch.manual_seed(seed)
    config = dict(vocab_size=40, embed_dim=6, hidden_size=5, num_layers=2)
    config.update(kwargs)
    model = LaserModel(LaserConfig(**config)).eval()
    path = tmp_path / f"model-{seed}-{str(dtype)[6:]}-{'-'.join(f'{k}{v}' for k, v in kwargs.items())}"
    path.mkdir()
    model.config.save_pretrained(path)
    save_file({k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


def torch_pooled(path, sentences):
    model = LaserBiLSTM.from_directory(path)
    width = max(map(len, sentences))
    ids = torch.full((len(sentences), width), 1)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sentences):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    with torch.no_grad():
        return model(ids, attention_mask=mask).pooler_output.numpy()


def numpy_pooled(model, sentences):
    width = max(map(len, sentences))
    ids = np.full((len(sentences), width), 1, np.int64)
    for i, s in enumerate(sentences):
        ids[i, :len(s)] = s
    return model.pooled(ids, np.array([len(s) for s in sentences]))


def random_sentences(n, seed=0, max_len=14, vocab=40):
    rng = np.random.default_rng(seed)
    return [list(rng.integers(4, vocab, rng.integers(0, max_len))) + [2] for _ in range(n)]


def test_reference_checkpoint_gives_the_original_embeddings(tiny_model_dir):
    """The original encoder's embeddings (2-layer BiLSTM, real BPE input) within 1e-5, like the PyTorch model."""
    encoder = LaserEncoder.from_pretrained(tiny_model_dir, engine="numpy")
    assert encoder.engine == "numpy" and type(encoder.model) is NumpyLaserBiLSTM
    for name in ("tatoeba.fra-eng.fra", "tatoeba.cmn-eng.cmn", "tatoeba.kat-eng.kat"):
        lines = read_lines(REFERENCE / "tatoeba" / f"{name}.bpe")
        emb = encoder.encode(lines, pretokenized=True, max_tokens=300)  # many batches of mixed lengths
        assert np.abs(emb - reference_embeddings(name)).max() <= 1e-5, name
    for lang in ("en", "zh", "ja", "el"):
        lines = read_lines(REFERENCE / "edge" / f"edge.{lang}.bpe")
        emb = encoder.encode(lines, pretokenized=True)
        assert np.abs(emb - reference_embeddings(f"edge.{lang}")).max() <= 1e-5, lang


@pytest.mark.parametrize("shape", [dict(num_layers=1), dict(num_layers=3), dict(num_layers=2, bidirectional=False)])
def test_same_embeddings_as_pytorch_on_every_shape(tmp_path, shape):
    path = save_plain(tmp_path, **shape)
    sentences = random_sentences(150, seed=len(shape))
    sentences += [[2], [1, 2], [7, 1, 9, 2], [1, 1, 1, 2]]  # </s> alone, literal <pad> tokens inside sentences
    expected = torch_pooled(path, sentences)
    got = numpy_pooled(NumpyLaserBiLSTM.from_directory(path), sentences)
    assert got.shape == expected.shape == (len(sentences), 5 * (2 if shape.get("bidirectional", True) else 1))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    # a sentence of nothing but <pad> tokens has nothing to pool: -inf, like the original and the PyTorch model
    only_pad = numpy_pooled(NumpyLaserBiLSTM.from_directory(path), [[1, 1]])
    assert np.isneginf(only_pad).all() and np.isneginf(torch_pooled(path, [[1, 1]])).all()


def test_batch_order_and_threads(tmp_path):
    """Rows in any order give the same vectors; 1 and 2 threads the same bits; more threads (the batch split between
    them) the same to round-off."""
    path = save_plain(tmp_path, num_layers=2)
    sentences = random_sentences(300, seed=5)
    one, two, four = (NumpyLaserBiLSTM.from_directory(path, threads=t) for t in (1, 2, 4))
    base = numpy_pooled(two, sentences)
    assert np.array_equal(base, numpy_pooled(one, sentences))
    np.testing.assert_allclose(numpy_pooled(four, sentences), base, rtol=0, atol=1e-6)
    perm = np.random.default_rng(0).permutation(len(sentences))
    np.testing.assert_allclose(numpy_pooled(two, [sentences[i] for i in perm]), base[perm], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="threads"):
        NumpyLaserBiLSTM.from_directory(path, threads=0)


def test_deeper_layers_project_real_tokens_only(tmp_path, monkeypatch):
    """One long sentence among short ones: the deeper layers' input projections cover the batch's real tokens, not
    its padded grid (60 x 120 positions here; 1.7-2.6x slower than PyTorch on the full-size model when they did), with PyTorch's
    embeddings to round-off."""
    from hf_laser.modeling import bilstm_numpy

    path = save_plain(tmp_path, num_layers=3)
    sentences = random_sentences(59, seed=3, max_len=6) + [[5] * 119 + [2]]
    rows = []
    project = bilstm_numpy._Direction.project
    monkeypatch.setattr(bilstm_numpy._Direction, "project", lambda self, x: rows.append(len(x)) or project(self, x))
    got = numpy_pooled(NumpyLaserBiLSTM.from_directory(path), sentences)
    real = sum(map(len, sentences))
    assert rows[2:] == [real] * 4  # layers 2 and 3, both directions (the first projects the distinct tokens)
    np.testing.assert_allclose(got, torch_pooled(path, sentences), rtol=0, atol=1e-6)


def test_token_table_shared_by_batches(tmp_path):
    """A table of the first layer's projections computed once for many batches gives PyTorch's embeddings to
    round-off; a table without a token of the batch, or with ids outside the vocabulary, is an error."""
    path = save_plain(tmp_path, num_layers=2)
    model = NumpyLaserBiLSTM.from_directory(path)
    sentences = random_sentences(120, seed=9) + [[1, 7, 2], [2]]
    table = model.token_table([t for s in sentences for t in s])
    assert list(table.tokens) == sorted({t for s in sentences for t in s})
    assert model.token_table_bytes(len(table.tokens)) == sum(p.nbytes for p in table.projections)
    expected = torch_pooled(path, sentences)
    for rows in (slice(0, 50), slice(50, None)):  # two batches, one table
        batch = sentences[rows]
        ids = np.full((len(batch), max(map(len, batch))), 1, np.int64)
        for i, s in enumerate(batch):
            ids[i, :len(s)] = s
        got = model.pooled(ids, np.array([len(s) for s in batch]), table)
        np.testing.assert_allclose(got, expected[rows], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="does not hold every token"):
        model.pooled(np.array([[4, 39, 2]]), np.array([3]), model.token_table([4, 2]))
    with pytest.raises(ValueError, match="does not hold every token"):
        model.pooled(np.array([[4, 2]]), np.array([2]), model.token_table([]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.token_table([3, 40])


def test_interrupted_chunk_resumes_bit_identical(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """An encode_file interrupted inside a chunk resumes with only the batches not saved, and the rows are the
    same bits as an uninterrupted run: the shared token table is computed from the whole chunk either way."""
    import hf_laser.encoder as E
    import hf_laser.outputs as O

    encoder = LaserEncoder.from_pretrained(tiny_model_dir, engine="numpy")
    lines = read_lines(REFERENCE / "tatoeba" / "tatoeba.fra-eng.fra.bpe")[:120]
    src = tmp_path / "in.bpe"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fresh = np.array(encoder.encode_file(src, tmp_path / "fresh.npy", pretokenized=True, max_tokens=200))
    monkeypatch.setattr(E, "PROGRESS_SAVE_S", 0.0)
    real_save, saves = O.ResumableWriter.save_chunk_part, {"n": 0}

    def save_then_interrupt(*a, **k):
        real_save(*a, **k)
        saves["n"] += 1
        if saves["n"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(O.ResumableWriter, "save_chunk_part", save_then_interrupt)
    out = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(src, out, pretokenized=True, max_tokens=200)
    monkeypatch.setattr(O.ResumableWriter, "save_chunk_part", real_save)
    batches, real_pooled = [], encoder.model.pooled
    monkeypatch.setattr(encoder.model, "pooled", lambda *a, **k: batches.append(1) or real_pooled(*a, **k))
    capsys.readouterr()
    got = np.array(encoder.encode_file(src, out, pretokenized=True, max_tokens=200))
    assert "resuming" in capsys.readouterr().err
    plan = E.plan_batches([len(s) for s in dict.fromkeys(map(tuple, encoder.token_ids(lines, pretokenized=True)))],
                          200)
    assert len(plan) > 4 and len(batches) == len(plan) - 3
    assert got.tobytes() == fresh.tobytes()
    # rows saved by another revision of the engine's arithmetic are not resumed: the run starts over, saying why
    out.unlink()
    monkeypatch.setattr(NumpyLaserBiLSTM, "numerics_revision", 1)
    saves["n"] = 0
    monkeypatch.setattr(O.ResumableWriter, "save_chunk_part", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        encoder.encode_file(src, out, pretokenized=True, max_tokens=200)
    monkeypatch.undo()
    capsys.readouterr()
    got = np.array(encoder.encode_file(src, out, pretokenized=True, max_tokens=200))
    err = capsys.readouterr().err
    assert f"NumPy engine revision 1 -> {NumpyLaserBiLSTM.numerics_revision}" in err and "starting over" in err, err
    assert got.tobytes() == fresh.tobytes()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_files_widen_exactly_and_hash_like_torch(tmp_path, dtype):
    path = save_plain(tmp_path, dtype=dtype)
    config, arrays = read_plain_weights(path)
    model = LaserBiLSTM.from_directory(path)
    state = model.state_dict()
    assert list(arrays) and set(arrays) == set(state)
    for name, value in arrays.items():
        assert value.dtype == np.float32 and np.array_equal(value, state[name].numpy()), name
    # the manifest's model hash is the same whichever engine loaded the weights
    assert model_sha256(NumpyLaserBiLSTM.from_directory(path)) == model_sha256(model)


def test_damaged_or_unusual_files_are_not_plain(tmp_path):
    path = save_plain(tmp_path)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-8])  # truncated tensor data
    assert read_plain_weights(path) is None
    weights.write_bytes(data)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    assert read_plain_weights(path) is None  # a model that is meant to compute in bf16: torch's business
    with pytest.raises(ValueError, match="engine='numpy' cannot load .*plain local LASER directory"):
        LaserEncoder.from_pretrained(path, engine="numpy")
    assert LaserEncoder.from_pretrained(path, engine="auto").engine == "torch"


def test_engine_choice_and_refusals():
    sentences = ["Hello world.", "Where is the station?", "I do not know what you mean by that, my friend."]
    auto = LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="auto")
    torch_encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="torch")
    assert (auto.engine, torch_encoder.engine) == ("numpy", "torch")
    assert LaserEncoder.from_pretrained(DEFAULT_MODEL).engine == "numpy"  # the Python API's default is the CLI's
    np.testing.assert_allclose(auto.encode(sentences, lang="en"), torch_encoder.encode(sentences, lang="en"),
                               rtol=0, atol=1e-5)
    normalized = auto.encode(sentences, lang="en", normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(normalized, torch_encoder.encode(sentences, lang="en", normalize_embeddings=True),
                               rtol=0, atol=1e-6)
    assert isinstance(auto.encode(sentences, lang="en", convert_to="torch"), torch.Tensor)
    # identities differ by the engine only (a manifest never resumes one engine's rows with the other's)
    a, t = auto.model_identity(), torch_encoder.model_identity()
    assert a.pop("engine") == "numpy" and "engine" not in t
    assert a.pop("engine_revision") == NumpyLaserBiLSTM.numerics_revision and a == t
    for kwargs, reason in (({"dtype": torch.bfloat16}, "float32 only"), ({"quantize": "int8"}, "no quantisation"),
                           ({"device": "meta"}, "CPU only")):
        with pytest.raises(ValueError, match=reason):
            LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="numpy", **kwargs)
        assert LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="auto", **kwargs).engine == "torch"
    with pytest.raises(ValueError, match="engine must be one of"):
        LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="jax")
    with pytest.raises(ValueError, match="engine='torch' to use another device"):
        auto.encode(sentences, lang="en", device="meta")


def run_cli(*args, env=None):
    code = ("import sys\nfrom hf_laser.cli import main\nrc = main(sys.argv[1:])\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\nsys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def test_command_line_embeds_without_torch_and_records_the_engine(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("Hello world.\nWhere is the station?\nHello world.\n\nI am hungry.\n", encoding="utf-8")
    out_numpy, out_torch = tmp_path / "numpy.npy", tmp_path / "torch.npy"
    result = run_cli("embed", "--lang", "en", "-i", str(text), "-o", str(out_numpy), "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "NO-TORCH"
    manifest = json.loads(out_numpy.with_name("numpy.npy.manifest.json").read_text())
    assert manifest["identity"]["engine"] == "numpy"
    result = run_cli("embed", "--lang", "en", "-i", str(text), "-o", str(out_torch), "-q", "--engine", "torch")
    assert result.returncode == 0 and result.stdout.strip() == "TORCH", result.stderr
    assert "engine" not in json.loads(out_torch.with_name("torch.npy.manifest.json").read_text())["identity"]
    np.testing.assert_allclose(np.load(out_numpy), np.load(out_torch), rtol=0, atol=1e-5)
    # an output of one engine is recomputed, not reused, by the other (and says why)
    result = run_cli("embed", "--lang", "en", "-i", str(text), "-o", str(out_numpy), "-q", "--engine", "torch")
    assert result.returncode == 0 and "engine" in result.stderr and "recomputing" in result.stderr, result.stderr
    result = run_cli("embed", "--lang", "en", "-i", str(text), "-o", str(out_numpy), "-q", "--engine", "numpy",
                     "--int8")
    assert result.returncode == 2 and "--engine numpy computes float32 on the CPU only" in result.stderr


@pytest.mark.parametrize("engine", [None, "torch"])
def test_python_api_loads_quietly(engine):
    """#69 item 2: the Python API's default load is the command line's (the NumPy engine: neither torch nor
    transformers imported), and no load of a local directory prints transformers' "Loading weights" bar or a warning."""
    args = "" if engine is None else f", engine={engine!r}"
    code = ("import sys; from hf_laser import DEFAULT_MODEL, LaserEncoder; "
            f"e = LaserEncoder.from_pretrained(DEFAULT_MODEL{args}); e.encode(['Hello'], lang='en'); "
            "print(e.engine, 'torch' in sys.modules, 'transformers' in sys.modules)")
    run = subprocess.run([sys.executable, "-W", "default::UserWarning", "-c", code], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == (["numpy", "False", "False"] if engine is None else ["torch", "True", "True"])
    assert "Loading weights" not in run.stderr and "UserWarning" not in run.stderr, run.stderr
