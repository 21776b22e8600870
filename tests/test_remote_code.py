"""Converted LASER directories used where hf_laser is not installed: bare virtual environments (`bare_venv.py`) with
only torch + transformers + safetensors (+ sentencepiece for LASER2, + sentence-transformers and jieba for the last
test) load config, model, classifier, tokenizer, the feature-extraction pipeline and the sentence-transformers model
from the code shipped in the directory, and give the original LASER embeddings."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
from bare_venv import make_bare_venv
from conftest import SHARED, read_lines, reference_embeddings

from hf_laser import LaserEncoder

TATOEBA = SHARED / "data" / "tatoeba" / "v1"
BARE = ["torch", "transformers", "safetensors"]


def run_in(python, tmp_path, code: str) -> dict:
    """Runs `code` with the venv's python (offline, fresh module cache, outside the repository); returns the JSON
    object it writes to `result.json` (stdout also gets transformers' trust_remote_code prompt)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run([str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))


def lines(name: str, n: int = 20) -> list[str]:
    return read_lines(TATOEBA / name)[:n]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    return make_bare_venv(tmp_path_factory.mktemp("venv-bare") / "venv", BARE)


def test_bare_environment_has_only_what_it_should(bare_python, tmp_path):
    found = run_in(bare_python, tmp_path, """
        import importlib.util, json
        names = ["torch", "transformers", "safetensors", "hf_laser", "sentencepiece", "sentence_transformers",
                 "jieba", "MeCab", "transliterate", "py3langid"]
        json.dump({n: importlib.util.find_spec(n) is not None for n in names}, open("result.json", "w"))
    """)
    assert found == {"torch": True, "transformers": True, "safetensors": True, "hf_laser": False,
                     "sentencepiece": False, "sentence_transformers": False, "jieba": False, "MeCab": False,
                     "transliterate": False, "py3langid": False}


def test_laser1_directory_without_hf_laser(bare_python, tiny_model_dir, tmp_path):
    fr, de = lines("tatoeba.fra-eng.fra"), lines("tatoeba.deu-eng.deu", 5)
    (tmp_path / "input.json").write_text(json.dumps({"fr": fr, "de": de}), encoding="utf-8")
    got = run_in(bare_python, tmp_path, f"""
        import json, warnings
        import torch
        from transformers import (AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer,
                                  pipeline)
        d = {str(tiny_model_dir)!r}
        text = json.load(open("input.json", encoding="utf-8"))
        out = {{}}
        config = AutoConfig.from_pretrained(d, trust_remote_code=True)
        model = AutoModel.from_pretrained(d, trust_remote_code=True).eval()
        classifier = AutoModelForSequenceClassification.from_pretrained(d, trust_remote_code=True, num_labels=3)
        tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
        out["classes"] = [type(x).__module__.split(".")[0] + ":" + type(x).__name__
                          for x in (config, model, classifier, tok)]
        batch = tok(text["fr"], lang="fr", padding=True, return_tensors="pt")
        with torch.no_grad():
            out["fr"] = model(**batch).pooler_output.tolist()
            out["logits_shape"] = list(classifier(**batch).logits.shape)
        extract = pipeline("feature-extraction", model=d, trust_remote_code=True)
        out["pipeline"] = type(extract).__name__
        out["pipeline_fr"] = [torch.tensor(f[0]).max(0).values.tolist() for f in extract(text["fr"][:3], lang="fr")]
        mixed = extract([text["fr"][0], text["de"][0]], lang=["fr", "de"])
        out["pipeline_mixed"] = [torch.tensor(f[0]).max(0).values.tolist() for f in mixed]
        try:
            pipeline("feature-extraction", model=d)
        except ValueError as err:
            out["pipeline_untrusted"] = str(err)
        for lang, sentence in (("zh", "我们明天去北京吧。"), ("auto", "Bonjour le monde.")):
            try:
                tok([sentence], lang=lang)
            except ImportError as err:
                out["missing_" + lang] = str(err)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tok(["hello"], lang="xq")
            tok(["hello again"], lang="xq")
        out["unknown_lang_warnings"] = [str(w.message) for w in caught]
        json.dump(out, open("result.json", "w"))
    """)
    assert got["classes"] == ["transformers_modules:LaserConfig", "transformers_modules:LaserModel",
                              "transformers_modules:LaserForSequenceClassification",
                              "transformers_modules:LaserTokenizer"]
    expected = LaserEncoder.from_pretrained(tiny_model_dir).encode(fr, lang="fr")
    assert np.abs(np.array(got["fr"]) - expected).max() <= 1e-6
    assert np.abs(np.array(got["fr"]) - reference_embeddings("tatoeba.fra-eng.fra")[:20]).max() <= 1e-5
    assert got["logits_shape"] == [20, 3]
    assert got["pipeline"] == "LaserFeatureExtractionPipeline"
    assert np.abs(np.array(got["pipeline_fr"]) - expected[:3]).max() <= 1e-6
    assert np.abs(np.array(got["pipeline_mixed"][1]) - reference_embeddings("tatoeba.deu-eng.deu")[0]).max() <= 1e-5
    assert "trust_remote_code" in got["pipeline_untrusted"]
    assert "jieba" in got["missing_zh"] and "py3langid" in got["missing_auto"]
    assert len(got["unknown_lang_warnings"]) == 1 and "unknown language code 'xq'" in got["unknown_lang_warnings"][0]


def test_shipped_model_written_by_save_pretrained_without_hf_laser(bare_python, tmp_path):
    """The shipped laser-mini holds no code; `save_pretrained` writes it from the package's sources, and the result
    loads where hf_laser is not installed and gives `LaserEncoder`'s embeddings."""
    import hf_laser
    from hf_laser import LaserModel, LaserTokenizer

    saved = tmp_path / "laser-mini"
    LaserModel.from_pretrained(hf_laser.DEFAULT_MODEL).save_pretrained(saved)
    LaserTokenizer.from_pretrained(hf_laser.DEFAULT_MODEL).save_pretrained(saved)
    fr = lines("tatoeba.fra-eng.fra", 10)
    (tmp_path / "input.json").write_text(json.dumps({"fr": fr}), encoding="utf-8")
    got = run_in(bare_python, tmp_path, f"""
        import json
        import torch
        from transformers import AutoModel, AutoTokenizer
        d = {str(saved)!r}
        text = json.load(open("input.json", encoding="utf-8"))
        model = AutoModel.from_pretrained(d, trust_remote_code=True).eval()
        tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
        with torch.no_grad():
            emb = model(**tok(text["fr"], lang="fr", padding=True, return_tensors="pt")).pooler_output
        json.dump({{"module": type(model).__module__.split(".")[0], "fr": emb.tolist()}}, open("result.json", "w"))
    """)
    assert got["module"] == "transformers_modules"
    expected = LaserEncoder.from_pretrained(hf_laser.DEFAULT_MODEL).encode(fr, lang="fr")
    assert np.abs(np.array(got["fr"]) - expected).max() <= 1e-6


def test_laser2_and_laser3_directories_with_sentencepiece_only(tiny_laser2_dir, tmp_path):
    from laser3_helpers import CVOCAB, FIXTURES, SPM, fixture_sentences

    from hf_laser.checkpoints.convert import convert

    python = make_bare_venv(tmp_path / "venv", BARE + ["sentencepiece"])
    fr = lines("tatoeba.fra-eng.fra", 100)
    # a LASER3 transformer student (pre-norm, learned positions, <s> prepended by the model, GELU)
    laser3 = convert(FIXTURES / "tiny-omegaconf.pt", tmp_path / "laser3", spm_model=SPM, spm_vocab=CVOCAB)
    (tmp_path / "input.json").write_text(json.dumps({"fr": fr, "laser3": fixture_sentences(40)}), encoding="utf-8")
    got = run_in(python, tmp_path, f"""
        import json
        import torch
        from transformers import AutoModel, AutoTokenizer
        text = json.load(open("input.json", encoding="utf-8"))
        out = {{}}
        for name, d, sentences in [("fr", {str(tiny_laser2_dir)!r}, text["fr"]),
                                   ("laser3", {str(laser3)!r}, text["laser3"])]:
            tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
            model = AutoModel.from_pretrained(d, trust_remote_code=True).eval()
            batch = tok(sentences, lang="fr", padding=True, return_tensors="pt")
            with torch.no_grad():
                out[name] = model(**batch).pooler_output.tolist()
            out[name + "-mode"] = tok.mode
        json.dump(out, open("result.json", "w"))
    """)
    assert got["fr-mode"] == got["laser3-mode"] == "laser2"
    assert np.abs(np.array(got["fr"]) - reference_embeddings("tatoeba.fra-eng.fra", laser2=True)).max() <= 1e-5
    # the original's embeddings (fairseq + laser_encoders), first 40 of its 200 sentences per language
    reference = np.load(FIXTURES / "tiny-omegaconf.npy").reshape(6, 200, -1)[:, :40].reshape(240, -1)
    assert np.abs(np.array(got["laser3"]) - reference).max() <= 1e-5


def test_sentence_transformers_without_hf_laser(tiny_model_dir, tmp_path):
    pytest.importorskip("sentence_transformers", reason="needs sentence-transformers (pip install -e '.[dev]')")
    python = make_bare_venv(tmp_path / "venv", BARE + ["sentence-transformers", "jieba"])
    fr, zh = lines("tatoeba.fra-eng.fra"), lines("tatoeba.cmn-eng.cmn", 10)
    (tmp_path / "input.json").write_text(json.dumps({"fr": fr, "zh": zh}), encoding="utf-8")
    got = run_in(python, tmp_path, f"""
        import json
        from sentence_transformers import SentenceTransformer
        d = {str(tiny_model_dir)!r}
        text = json.load(open("input.json", encoding="utf-8"))
        out = {{}}
        try:
            SentenceTransformer(d)
        except ValueError as err:
            out["untrusted"] = str(err)
        model = SentenceTransformer(d, trust_remote_code=True, device="cpu")
        out["module"] = type(model[0]).__module__.split(".")[0]
        out["dim"] = model.get_embedding_dimension()
        out["fr"] = model.encode(text["fr"], lang="fr").tolist()
        out["mixed"] = model.encode([{{"text": t, "lang": "zh"}} for t in text["zh"]]
                                    + [{{"text": t, "lang": "fr"}} for t in text["fr"][:3]]).tolist()
        json.dump(out, open("result.json", "w"))
    """)
    assert "trust_remote_code=True" in got["untrusted"]
    assert got["module"] == "transformers_modules" and got["dim"] == 96
    encoder = LaserEncoder.from_pretrained(tiny_model_dir)
    assert np.abs(np.array(got["fr"]) - encoder.encode(fr, lang="fr")).max() <= 1e-6
    expected = encoder.encode(zh + fr[:3], lang=["zh"] * len(zh) + ["fr"] * 3)
    assert np.abs(np.array(got["mixed"]) - expected).max() <= 1e-6
