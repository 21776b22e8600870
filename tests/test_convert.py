"""Conversion of original LASER checkpoints: end to end through the CLI, fidelity, rejection of other files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REFERENCE, TINY_CHECKPOINT, reference_embeddings, require_shared
from transformers import AutoModel

from hf_laser import LaserModel
from hf_laser.cli import main as cli_main
from hf_laser.convert import NotALaserCheckpoint, convert, load_laser_checkpoint
from hf_laser.encoder import LaserEncoder


def test_cli_convert_then_embed_reproduces_reference(tmp_path):
    require_shared(TINY_CHECKPOINT)
    out = tmp_path / "converted"
    result = subprocess.run([sys.executable, "-m", "hf_laser.convert", str(TINY_CHECKPOINT), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert (out / "README.md").read_text().startswith("---")
    model = AutoModel.from_pretrained(out)
    assert isinstance(model, LaserModel)
    assert model.config.embedding_dim == 96 and model.config.vocab_size == 63021

    name = "tatoeba.deu-eng.deu"
    embeddings = tmp_path / "emb.npy"
    code = cli_main(["embed", "--model", str(out), "--pretokenized", "-q",
                     "-i", str(REFERENCE / "tatoeba" / f"{name}.bpe"), "-o", str(embeddings)])
    assert code == 0
    assert np.abs(np.load(embeddings) - reference_embeddings(name)).max() <= 1e-5


def test_converted_weights_equal_checkpoint(tiny_dictionary_dir):
    checkpoint = load_laser_checkpoint(TINY_CHECKPOINT)
    model = LaserModel.from_pretrained(tiny_dictionary_dir)
    state = model.state_dict()
    for key, value in checkpoint["model"].items():
        assert torch.equal(state[key], value), key


def test_every_reference_embedding_reproduced(tiny_dictionary_dir):
    """All 224 Tatoeba reference files and the 7 edge files, through `encode(pretokenized=True)`."""
    encoder = LaserEncoder.from_pretrained(tiny_dictionary_dir)
    files = sorted((REFERENCE / "tatoeba").glob("*.bpe")) + sorted((REFERENCE / "edge").glob("*.bpe"))
    assert len(files) == 231
    worst = 0.0
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")[:-1]
        emb = encoder.encode(lines, pretokenized=True)
        worst = max(worst, float(np.abs(emb - reference_embeddings(path.stem)).max()))
    assert worst <= 1e-5


@pytest.mark.parametrize("content, match", [
    ("not a checkpoint", "could not be read"),
    (torch.zeros(3), "is not a LASER BiLSTM checkpoint"),
    ({"model": {}, "params": {}}, "is not a LASER BiLSTM checkpoint"),
    ({"model": {}, "params": {"num_embeddings": 4}, "dictionary": {}}, "lacks"),
])
def test_rejects_non_laser_files(tmp_path, content, match):
    path = tmp_path / "bad.pt"
    if isinstance(content, str):
        path.write_text(content)
    else:
        torch.save(content, path)
    with pytest.raises(NotALaserCheckpoint, match=match):
        load_laser_checkpoint(path)
    assert cli_main(["convert", str(path), str(tmp_path / "out")]) == 2


def test_rejects_wrong_dictionary_and_shapes(tmp_path):
    require_shared(TINY_CHECKPOINT)
    checkpoint = torch.load(TINY_CHECKPOINT, weights_only=True)
    bad = dict(checkpoint, dictionary={**checkpoint["dictionary"], "<unk>": 7, "x7": 3})
    torch.save(bad, tmp_path / "dict.pt")
    with pytest.raises(NotALaserCheckpoint, match="<unk>"):
        convert(tmp_path / "dict.pt", tmp_path / "o1")
    bad = dict(checkpoint, params={**checkpoint["params"], "hidden_size": 64})
    torch.save(bad, tmp_path / "shape.pt")
    with pytest.raises(NotALaserCheckpoint, match="shape"):
        convert(tmp_path / "shape.pt", tmp_path / "o2")


def test_argument_errors(tmp_path):
    require_shared(TINY_CHECKPOINT)
    with pytest.raises(ValueError, match="not both"):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes="a", spm_model="b")
    with pytest.raises(ValueError, match="both --bpe-codes and --bpe-vocab"):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes="a")
    with pytest.raises(FileNotFoundError):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes=tmp_path / "missing", bpe_vocab=tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        load_laser_checkpoint(tmp_path / "missing.pt")
