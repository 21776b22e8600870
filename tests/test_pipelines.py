"""Raw text → embeddings through AutoTokenizer/AutoModel, LaserEncoder and the pipelines (end-to-end fidelity)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SHARED, read_lines, reference_embeddings
from transformers import AutoModel, AutoTokenizer, pipeline

import hf_laser  # noqa: F401  (registers the Auto classes and the pipeline)
from hf_laser import LaserEncoder, LaserModel, LaserTokenizer

TATOEBA = SHARED / "data" / "tatoeba" / "v1"


def raw(name: str, n: int = 100) -> list[str]:
    return read_lines(TATOEBA / name)[:n]


def test_auto_classes_from_converted_dir(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModel.from_pretrained(tiny_model_dir)
    assert isinstance(tokenizer, LaserTokenizer) and isinstance(model, LaserModel)
    lines = raw("tatoeba.deu-eng.deu", 20)
    for side in ("right", "left"):
        tokenizer.padding_side = side
        batch = tokenizer(lines, lang="de", padding=True, return_tensors="pt")
        with torch.no_grad():
            emb = model(**batch).pooler_output.numpy()
        assert np.abs(emb - reference_embeddings("tatoeba.deu-eng.deu")[:20]).max() <= 1e-5


@pytest.mark.parametrize("name, lang", [("tatoeba.fra-eng.fra", "fr"), ("tatoeba.cmn-eng.cmn", "zh"),
                                        ("tatoeba.jpn-eng.jpn", "ja"), ("tatoeba.ell-eng.ell", "el"),
                                        ("tatoeba.rus-eng.eng", "en")])
def test_encoder_raw_text_matches_reference(tiny_model_dir, name, lang):
    encoder = LaserEncoder.from_pretrained(tiny_model_dir)
    emb = encoder.encode(raw(name), lang=lang)
    assert np.abs(emb - reference_embeddings(name)).max() <= 1e-5


def test_encoder_per_sentence_languages(tiny_model_dir):
    encoder = LaserEncoder.from_pretrained(tiny_model_dir)
    fr, el = raw("tatoeba.fra-eng.fra", 10), raw("tatoeba.ell-eng.ell", 10)
    emb = encoder.encode(fr + el, lang=["fr"] * 10 + ["el"] * 10)
    ref = np.concatenate([reference_embeddings("tatoeba.fra-eng.fra")[:10],
                          reference_embeddings("tatoeba.ell-eng.ell")[:10]])
    assert np.abs(emb - ref).max() <= 1e-5


def test_sentence_embedding_pipeline(tiny_model_dir):
    embed = pipeline("laser-sentence-embedding", model=str(tiny_model_dir))
    lines = raw("tatoeba.spa-eng.spa", 6)
    ref = reference_embeddings("tatoeba.spa-eng.spa")[:6]
    got = np.array(embed(lines, lang="es"))
    assert got.shape == (6, 96) and np.abs(got - ref).max() <= 1e-5
    one = embed(lines[0], lang="es", normalize=True, return_tensors=True)
    assert isinstance(one, torch.Tensor) and abs(float(one.norm()) - 1) < 1e-5
    mixed = np.array(embed(lines[:2] + raw("tatoeba.ell-eng.ell", 1), lang=["es", "es", "el"]))
    assert np.abs(mixed[2] - reference_embeddings("tatoeba.ell-eng.ell")[0]).max() <= 1e-5
    with pytest.raises(ValueError, match="same length"):
        embed(lines[:2], lang=["es"])


def test_feature_extraction_pipeline(tiny_model_dir):
    """The directory's own feature-extraction pipeline (config.json `custom_pipelines`) takes `lang=`."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="trust_remote_code"):
        pipeline("feature-extraction", model=str(tiny_model_dir))
    extract = pipeline("feature-extraction", model=str(tiny_model_dir), trust_remote_code=True)
    assert type(extract).__name__ == "LaserFeatureExtractionPipeline"
    line = raw("tatoeba.fra-eng.fra", 1)[0]
    features = np.array(extract(line, lang="fr"))[0]
    n_tokens = len(tokenizer(line, lang="fr")["input_ids"])
    assert features.shape == (n_tokens, 96)
    # max over the token features is the sentence embedding
    assert np.abs(features.max(0) - reference_embeddings("tatoeba.fra-eng.fra")[0]).max() <= 1e-5
    # the stock pipeline's tokenize_kwargs still work, and one language per sentence
    assert np.array_equal(np.array(extract(line, tokenize_kwargs={"lang": "fr"}))[0], features)
    el = raw("tatoeba.ell-eng.ell", 1)[0]
    both = extract([line, el], lang=["fr", "el"])
    assert np.abs(np.array(both[1])[0].max(0) - reference_embeddings("tatoeba.ell-eng.ell")[0]).max() <= 1e-5
    with pytest.raises(TypeError, match="unexpected arguments"):
        extract(line, language="fr")


def test_cli_embed_raw_text(tiny_model_dir, tmp_path):
    from hf_laser.cli import main

    out = tmp_path / "e.npy"
    assert main(["embed", "--model", str(tiny_model_dir), "--lang", "it", "-q",
                 "-i", str(TATOEBA / "tatoeba.ita-eng.ita"), "-o", str(out)]) == 0
    emb = np.load(out)
    assert emb.shape == (len(read_lines(TATOEBA / "tatoeba.ita-eng.ita")), 96)
    assert np.abs(emb[:100] - reference_embeddings("tatoeba.ita-eng.ita")).max() <= 1e-5


def test_laser2_raw_text_matches_reference(tiny_laser2_dir):
    encoder = LaserEncoder.from_pretrained(tiny_laser2_dir)
    # stock LASER2 normalises punctuation with -l en; the reference used each file's language
    for name, lang in [("tatoeba.fra-eng.fra", "fr"), ("tatoeba.deu-eng.eng", "en"),
                       ("tatoeba.cmn-eng.cmn", "cmn")]:
        emb = encoder.encode(raw(name), lang=lang)
        assert np.abs(emb - reference_embeddings(name, laser2=True)).max() <= 1e-5, name
