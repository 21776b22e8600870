"""Every directory hf_laser writes is a sentence-transformers model that gives LASER's embeddings (with hf_laser
installed; `test_remote_code.py` does the same where it is not): the module in `sentence_transformers_laser.py`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED, read_lines, reference_embeddings

pytest.importorskip("sentence_transformers", reason="needs sentence-transformers (pip install -e '.[dev]')")
from sentence_transformers import SentenceTransformer, util  # noqa: E402

import hf_laser  # noqa: E402
from hf_laser import LaserConfig, LaserEncoder, LaserForPreTraining, LaserModel, LaserTokenizer  # noqa: E402

TATOEBA = SHARED / "data" / "tatoeba" / "v1"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(directory) -> SentenceTransformer:
    return SentenceTransformer(str(directory), trust_remote_code=True, device="cpu")


def tatoeba(name: str, n: int = 30) -> list[str]:
    return read_lines(TATOEBA / name)[:n]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> SentenceTransformer:
    return load(tiny_model_dir)


@pytest.fixture(scope="module")
def mini() -> SentenceTransformer:
    return load(hf_laser.DEFAULT_MODEL)


# ---------------------------------------------------------------------------------------------- every writer
def saved_by_save_pretrained(source, out: Path) -> Path:
    LaserTokenizer.from_pretrained(source).save_pretrained(out)  # tokenizer first: the order does not matter
    LaserModel.from_pretrained(source).save_pretrained(out)
    return out


def saved_by_training_export(source, out: Path) -> Path:
    """What training/train.py does with a trained `LaserForPreTraining`: `save_encoder` + the tokenizer."""
    torch.manual_seed(0)
    config = LaserConfig.from_pretrained(source, decoder_num_layers=1, target_languages=["en"])
    LaserForPreTraining(config).save_encoder(out)
    LaserTokenizer.from_pretrained(source).save_pretrained(out)
    return out


@pytest.mark.parametrize("writer", ["convert", "convert-laser2", "save_pretrained", "training export",
                                    "shipped default", "SentenceTransformer.save"])
def test_every_written_directory_is_a_sentence_transformer(writer, tiny_model_dir, tiny_laser2_dir, tmp_path):
    directory = {
        "convert": lambda: tiny_model_dir,
        "convert-laser2": lambda: tiny_laser2_dir,
        "save_pretrained": lambda: saved_by_save_pretrained(tiny_model_dir, tmp_path / "saved"),
        "training export": lambda: saved_by_training_export(tiny_model_dir, tmp_path / "final"),
        # the shipped directory holds no code (hf_laser registers `laser`): written for the Hub by save_pretrained
        "shipped default": lambda: saved_by_save_pretrained(hf_laser.DEFAULT_MODEL, tmp_path / "shipped"),
        "SentenceTransformer.save": lambda: (load(tiny_model_dir).save(str(tmp_path / "st")), tmp_path / "st")[1],
    }[writer]()
    assert json.loads((directory / "modules.json").read_text())[0]["type"] == \
        "sentence_transformers_laser.LaserSentenceTransformerModule"
    config = json.loads((directory / "config.json").read_text())
    assert config["custom_pipelines"]["feature-extraction"]["impl"] == "pipeline_laser.LaserFeatureExtractionPipeline"
    assert config["auto_map"]["AutoTokenizer"] == ["tokenization_laser.LaserTokenizer", None]
    for name in ("pipeline_laser.py", "sentence_transformers_laser.py", "tokenization_laser.py", "modeling_laser.py"):
        assert (directory / name).is_file(), name
    model, encoder = load(directory), LaserEncoder.from_pretrained(directory)
    assert model.get_embedding_dimension() == encoder.dim == encoder.model.config.embedding_dim
    sentences = tatoeba("tatoeba.fra-eng.fra") + tatoeba("tatoeba.ell-eng.ell", 10)
    langs = ["fr"] * 30 + ["el"] * 10
    got = model.encode([{"text": s, "lang": code} for s, code in zip(sentences, langs)], batch_size=8)
    assert got.shape == (40, encoder.dim)
    assert np.abs(got - encoder.encode(sentences, lang=langs)).max() <= 1e-6


def test_reference_embeddings_with_one_language_per_call(tiny):
    for name, lang in [("tatoeba.fra-eng.fra", "fr"), ("tatoeba.cmn-eng.cmn", "zh"), ("tatoeba.jpn-eng.jpn", "ja"),
                       ("tatoeba.ell-eng.ell", "el")]:
        got = tiny.encode(read_lines(TATOEBA / name)[:100], lang=lang)
        assert np.abs(got - reference_embeddings(name)).max() <= 1e-5, name


def test_tensors_similarity_and_query_document(tiny):
    lines = tatoeba("tatoeba.deu-eng.deu", 12)
    emb = tiny.encode(lines, lang="de", convert_to_tensor=True)
    assert isinstance(emb, torch.Tensor) and emb.shape == (12, 96)
    unit = torch.nn.functional.normalize(emb, dim=-1)
    torch.testing.assert_close(tiny.similarity(emb, emb), unit @ unit.T, atol=1e-6, rtol=0)
    assert tiny.similarity_fn_name == "cosine"
    np.testing.assert_array_equal(tiny.encode_query(lines, lang="de"), emb.numpy())
    np.testing.assert_array_equal(tiny.encode_document(lines, lang="de"), emb.numpy())
    assert tiny.encode(lines[0], lang="de").shape == (96,)
    normalized = tiny.encode(lines, lang="de", normalize_embeddings=True)
    assert np.abs(np.linalg.norm(normalized, axis=1) - 1).max() < 1e-5


def test_util_mining_helpers_find_translations(mini):
    en, fr = (EXAMPLES / "en.txt").read_text().splitlines(), (EXAMPLES / "fr.txt").read_text().splitlines()
    n = len(en)
    hits = util.semantic_search(mini.encode(fr, lang="fr", convert_to_tensor=True),
                                mini.encode(en, lang="en", convert_to_tensor=True), top_k=1)
    assert sum(h[0]["corpus_id"] == i for i, h in enumerate(hits)) >= 6, hits
    items = [{"text": s, "lang": "en"} for s in en] + [{"text": s, "lang": "fr"} for s in fr]
    pairs = util.paraphrase_mining(mini, items, top_k=1)
    best = {}
    for score, i, j in pairs:  # best partner of every English sentence
        for a, b in ((i, j), (j, i)):
            if a < n and (a not in best or score > best[a][0]):
                best[a] = (score, b)
    assert sum(b == a + n for a, (_, b) in best.items()) >= 6, best


@pytest.mark.slow
def test_multi_process_pool(tiny):
    items = [{"text": s, "lang": "fr"} for s in tatoeba("tatoeba.fra-eng.fra", 12)] + \
            [{"text": s, "lang": "ja"} for s in tatoeba("tatoeba.jpn-eng.jpn", 12)]
    pool = tiny.start_multi_process_pool(["cpu", "cpu"])
    try:
        pooled = tiny.encode(items, pool=pool, chunk_size=5)
        one_lang = tiny.encode([item["text"] for item in items[:12]], pool=pool, chunk_size=5, lang="fr")
    finally:
        tiny.stop_multi_process_pool(pool)
    assert np.abs(pooled - tiny.encode(items)).max() <= 1e-6
    assert np.abs(one_lang - pooled[:12]).max() <= 1e-6


def test_overlong_sentence_is_truncated_like_laser_encoder(tiny_model_dir):
    model = load(tiny_model_dir)
    encoder = LaserEncoder.from_pretrained(tiny_model_dir)
    from hf_laser.encoder import DEFAULT_MAX_SENTENCE_TOKENS  # noqa: PLC0415
    from hf_laser.integrations.sentence_transformers_laser import DEFAULT_MAX_SEQ_LENGTH  # noqa: PLC0415

    assert model.max_seq_length == DEFAULT_MAX_SEQ_LENGTH == DEFAULT_MAX_SENTENCE_TOKENS
    lines = ["Il pleut.", " ".join(["maison"] * 40), "Bonjour le monde."]
    model.max_seq_length = 12
    with pytest.warns(UserWarning, match=r"1 sentence longer than max_seq_length=12 embedded as first 11 tokens "
                                         r"\+ </s>: 'maison maison") as record:
        got = model.encode(lines, lang="fr")
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = encoder.encode(lines, lang="fr", max_sentence_tokens=12)
    assert np.abs(got - expected).max() <= 1e-6
    model.max_seq_length = None  # no limit: the whole sentence, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        whole = model.encode(lines, lang="fr")
    assert np.abs(whole - encoder.encode(lines, lang="fr", max_sentence_tokens=None)).max() <= 1e-6
    assert np.abs(whole[1] - got[1]).max() > 1e-3 and np.abs(whole[[0, 2]] - got[[0, 2]]).max() <= 1e-6
    model.max_seq_length = 1
    with pytest.raises(ValueError, match="at least 2"):
        model.encode(lines, lang="fr")


# ---------------------------------------------------------------------------------------------- bad input
def test_no_language_uses_the_default_with_one_warning(tiny_model_dir):
    model = load(tiny_model_dir)
    lines = tatoeba("tatoeba.fra-eng.eng", 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = model.encode(lines, batch_size=4)
        model.encode(lines[:3])
    messages = [w for w in caught if "no lang given" in str(w.message)]
    assert len(messages) == 1 and messages[0].filename == __file__, [str(w.message) for w in caught]
    assert "'en'" in str(messages[0].message)
    np.testing.assert_array_equal(got, model.encode(lines, lang="en", batch_size=4))


def test_clear_errors(tiny, tiny_model_dir, tmp_path):
    lines = tatoeba("tatoeba.fra-eng.fra", 3)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(tiny_model_dir))
    with pytest.raises(TypeError, match="one language per sentence goes with the sentence"):
        tiny.encode(lines, lang=["fr", "fr", "fr"])
    with pytest.raises(ValueError, match="lang="):
        tiny.encode(lines, processing_kwargs={"text": {"lang": "fr"}})
    for item in (5, {"text": "Bonjour.", "language": "fr"}, {"text": 3, "lang": "fr"}):
        with pytest.raises(TypeError, match="LASER takes a sentence|expected str"):
            tiny.encode([item], lang="fr")
    with pytest.raises(TypeError, match="language code"):
        tiny.encode(lines, lang=[])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny.encode(lines, lang="qqx")
        tiny.encode(lines, lang="qqx")
    assert [str(w.message) for w in caught if "qqx" in str(w.message)] == [
        "unknown language code 'qqx': using the Moses defaults (English non-breaking prefixes, generic apostrophe "
        "rule, generic punctuation rules)"]
    # a directory of another model type
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (other / "modules.json").write_text((Path(tiny_model_dir) / "modules.json").read_text())
    for code in Path(tiny_model_dir).glob("*.py"):  # the module and the code it imports
        (other / code.name).write_bytes(code.read_bytes())
    with pytest.raises(ValueError, match="not a LASER directory"):
        load(other)
