"""LASER3 transformer students without fairseq: conversion, tokenization and embeddings against the original code.

The fixtures in tests/fixtures/laser3/ were written by `make_fixtures.py` there with fairseq (`fairseq-fixed`) and
laser_encoders (see its README): for four full-size random students (12 x 1024, as NLLB's), the original's
embeddings of 180 Tatoeba sentences in six scripts; for a small student whose configuration is omegaconf objects
and whose state still has its decoder, the original's embeddings of 1,200; and laser_encoders' tokenization of
every line of the seven Tatoeba files used. The full-size checkpoints are rebuilt here from the seed and the
recorded names and shapes (`random_student.py`), so no fairseq is needed.
"""

from __future__ import annotations

import argparse
import gzip
import json

import numpy as np
import pytest
import torch

from hf_laser import LaserEncoder
from hf_laser.checkpoints.convert import NotALaserCheckpoint, TokenizerMismatch, convert, is_laser3_file

from laser3_helpers import (CVOCAB, FIXTURE_SPEC, FIXTURES, RANDOM_STUDENT, SPM, fixture_sentences,
                            full_size_checkpoint, require_shared, tatoeba_lines, tiny_namespace_checkpoint)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """`variant -> converted directory`, built on first use (a full-size checkpoint takes ~0.5 GB while built)."""
    require_shared()
    root = tmp_path_factory.mktemp("laser3")
    done = {}

    def get(variant):
        if variant not in done:
            ckpt = full_size_checkpoint(root / f"{variant}.pt", variant)
            done[variant] = convert(ckpt, root / variant, spm_model=SPM, spm_vocab=CVOCAB)
            ckpt.unlink()
        return done[variant]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(FIXTURE_SPEC.VARIANTS))
def test_full_size_students_embed_as_the_original(converted, variant):
    out = converted(variant)
    config = json.loads((out / "config.json").read_text())
    assert config["encoder_type"] == "transformer" and config["embed_dim"] == 1024 and config["num_layers"] == 12
    encoder = LaserEncoder.from_pretrained(out)
    emb = encoder.encode(fixture_sentences(FIXTURE_SPEC.FIXTURE_LINES), lang="en")
    reference = np.load(FIXTURES / f"{variant}.npy")
    assert emb.shape == reference.shape == (6 * FIXTURE_SPEC.FIXTURE_LINES, 1024)
    assert float(np.abs(emb - reference).max()) <= 1e-5


def test_omegaconf_checkpoint_with_decoder_embeds_as_the_original(tmp_path):
    require_shared()
    ckpt = FIXTURES / "tiny-omegaconf.pt"
    assert is_laser3_file(ckpt)
    out = convert(ckpt, tmp_path / "tiny", spm_model=SPM, spm_vocab=CVOCAB)
    config = json.loads((out / "config.json").read_text())
    assert (config["normalize_before"], config["final_layer_norm"], config["position_embedding_type"],
            config["pooling"], config["prepend_bos"], config["activation_function"]) == (
        True, True, "learned", "max", True, "gelu")
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab["<mask>"] == len(vocab) - 1  # laser_encoders adds it for a model with a final layer norm
    emb = LaserEncoder.from_pretrained(out).encode(fixture_sentences(FIXTURE_SPEC.EMBED_LINES), lang="en")
    reference = np.load(FIXTURES / "tiny-omegaconf.npy")
    assert emb.shape == reference.shape == (1200, 32)
    assert float(np.abs(emb - reference).max()) <= 1e-5


def test_tokenization_is_laser_encoders(tmp_path):
    require_shared()
    from hf_laser.text.text_tokenizer import LaserTextTokenizer

    out = convert(FIXTURES / "tiny-omegaconf.pt", tmp_path / "tiny", spm_model=SPM, spm_vocab=CVOCAB)
    pipeline = LaserTextTokenizer.from_directory(out).pipeline
    with gzip.open(FIXTURES / "tokenized.json.gz", "rt", encoding="utf-8") as f:
        reference = json.load(f)
    assert len(reference) == 7
    for name, expected in reference.items():
        lang = name.rsplit(".", 1)[-1]
        found = pipeline.process(tatoeba_lines(name), lang)  # the language does not matter: English rules for all
        assert len(found) == len(expected)
        diff = [(i, a, b) for i, (a, b) in enumerate(zip(found, expected)) if a != b]
        assert not diff, f"{name}: {len(diff)} lines differ, first {diff[0]}"


# ------------------------------------------------------------------------------------------------- refusals
def test_small_namespace_checkpoint_converts_and_loads_with_automodel(tmp_path):
    require_shared()
    from transformers import AutoModel

    out = convert(tiny_namespace_checkpoint(tmp_path / "s.pt"), tmp_path / "s", spm_model=SPM, spm_vocab=CVOCAB)
    model = AutoModel.from_pretrained(out)
    encoder = LaserEncoder.from_pretrained(out)
    ids = encoder.token_ids(["Bonjour le monde."], lang="fr")
    with torch.no_grad():
        pooled = model(torch.tensor(ids)).pooler_output.numpy()
    np.testing.assert_allclose(pooled, encoder.encode(["Bonjour le monde."], lang="fr"), atol=1e-6)


@pytest.mark.parametrize("overrides, error, match", [
    ({"sentemb_criterion": "mean"}, NotALaserCheckpoint, "sentemb_criterion"),
    ({"sentemb_criterion": "cls", "prepend_bos": False}, NotALaserCheckpoint, "prepend_bos"),
    ({"activation_fn": "swish"}, NotALaserCheckpoint, "activation_fn"),
    ({"encoder_embed_dim": 64}, NotALaserCheckpoint, "encoder_embed_dim is 64 but the weights have 32"),
])
def test_wrong_configurations_are_refused(tmp_path, overrides, error, match):
    require_shared()
    with pytest.raises(error, match=match):
        convert(tiny_namespace_checkpoint(tmp_path / "s.pt", **overrides), tmp_path / "o", spm_model=SPM,
                spm_vocab=CVOCAB)
    assert not (tmp_path / "o").exists()


def test_wrong_cvocab_and_missing_cvocab_are_refused(tmp_path):
    require_shared()
    ckpt = tiny_namespace_checkpoint(tmp_path / "s.pt")
    short = tmp_path / "short.cvocab"
    short.write_text("".join(CVOCAB.read_text(encoding="utf-8").splitlines(keepends=True)[:-3]), encoding="utf-8")
    with pytest.raises(TokenizerMismatch, match="7998 entries .* 8001 rows"):
        convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=short)
    with pytest.raises(ValueError, match="its dictionary is the .cvocab"):
        convert(ckpt, tmp_path / "o", spm_model=SPM)
    with pytest.raises(ValueError, match="not BPE ones"):
        convert(ckpt, tmp_path / "o", bpe_codes=SPM, bpe_vocab=CVOCAB)


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_objects_outside_the_allow_list_are_refused_unread(tmp_path, capsys):
    require_shared()
    ckpt = tmp_path / "evil.pt"
    cfg = argparse.Namespace(**json.loads((FIXTURES / "cls.cfg.json").read_text()))
    cfg.payload = _Payload()
    torch.save({"cfg": {"model": cfg}, "model": {}}, ckpt)
    with pytest.raises(ValueError, match=r"holds a Python object a LASER3 checkpoint does not have "
                                         r"\(builtins\.print\).*never runs code"):
        convert(ckpt, tmp_path / "o", spm_model=SPM, spm_vocab=CVOCAB)
    assert "must never run" not in capsys.readouterr().out


def test_a_student_directory_in_pipelines_and_sentence_transformers(tmp_path):
    require_shared()
    from transformers import pipeline

    import hf_laser.integrations.pipelines  # noqa: F401 (registers the task)

    out = convert(FIXTURES / "tiny-omegaconf.pt", tmp_path / "tiny", spm_model=SPM, spm_vocab=CVOCAB)
    sentences = fixture_sentences(3)
    expected = LaserEncoder.from_pretrained(out).encode(sentences, lang="en")
    embed = pipeline("laser-sentence-embedding", model=str(out))
    np.testing.assert_allclose(np.array(embed(sentences, lang="en")), expected, atol=1e-6)
    st = pytest.importorskip("sentence_transformers", reason="needs the sentence-transformers extra")
    model = st.SentenceTransformer(str(out), trust_remote_code=True)
    np.testing.assert_allclose(model.encode(sentences, lang="en"), expected, atol=1e-6)
    assert model[0].max_seq_length == 511  # learned positions up to 512, <s> prepended
    with pytest.warns(UserWarning, match="longer than max_seq_length=511"):
        model.encode([" ".join(["bonjour"] * 600)], lang="fr")


def test_sentences_longer_than_the_students_positions_are_cut_with_a_warning(tmp_path):
    require_shared()
    out = convert(FIXTURES / "tiny-omegaconf.pt", tmp_path / "tiny", spm_model=SPM, spm_vocab=CVOCAB)
    encoder = LaserEncoder.from_pretrained(out)  # learned positions up to 512, <s> prepended: 511 ids
    long = " ".join(["bonjour"] * 600)
    ids = encoder.token_ids([long], lang="fr")[0]
    assert len(ids) > 511
    with pytest.warns(UserWarning, match=r"longer than this model's limit of 511 tokens \(config.max_positions\) "
                                         r"embedded as its first 510 tokens \+ </s>"):
        emb = encoder.encode([long, "Bonjour."], lang="fr", max_sentence_tokens=None)
    np.testing.assert_allclose(emb[0], encoder.encode_ids([ids[:510] + ids[-1:]])[0].numpy(), atol=1e-6)
    text = tmp_path / "long.txt"
    text.write_text(f"Bonjour.\n{long}\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"line 2 \([\d,]+ tokens\).*split such lines"):
        out_emb = encoder.encode_file(text, tmp_path / "long.npy", lang="fr")
    np.testing.assert_allclose(np.asarray(out_emb), emb[::-1], atol=1e-6)
