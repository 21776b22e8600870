"""`python -m evaluation.tatoeba --auto-lang`: Tatoeba errors with `lang="auto"` next to those with the true codes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from conftest import REPO, SHARED, require_shared

sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/
TATOEBA = SHARED / "data" / "tatoeba" / "v1"


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    from hf_laser.encoder import LaserEncoder

    return LaserEncoder.from_pretrained(tiny_model_dir)


@pytest.fixture()
def folder(tmp_path):
    """The first 40 pairs of three Tatoeba languages (ja: MeCab, which detection must pick for auto to match)."""
    require_shared(TATOEBA)
    for lang in ("fra", "deu", "jpn"):
        for side in (lang, "eng"):
            lines = (TATOEBA / f"tatoeba.{lang}-eng.{side}").read_text(encoding="utf-8").split("\n")[:40]
            (tmp_path / f"tatoeba.{lang}-eng.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def _errors(encoder, folder, lang, code, eng_code):
    from evaluation.tatoeba import retrieval_errors, tatoeba_paths

    src, tgt = tatoeba_paths(folder, lang)
    read = lambda p: p.read_text(encoding="utf-8").split("\n")[:-1]  # noqa: E731
    e = retrieval_errors(encoder.encode(read(src), lang=code), encoder.encode(read(tgt), lang=eng_code))
    return [round(100 * e["xx2en_errors"] / e["n"], 2), round(100 * e["en2xx_errors"] / e["n"], 2)]


def test_auto_lang_errors_are_those_of_detected_languages(encoder, folder, tmp_path):
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import auto_lang_comparison, evaluate_tatoeba

    cache = EmbeddingCache(encoder, tmp_path / "cache", show_progress=False)
    calls, embed_file = [], cache.embed_file
    cache.embed_file = lambda path, lang, **kw: calls.append((path.name, lang)) or embed_file(path, lang, **kw)
    # jpn is evaluated with a wrong "true" code here, to see that auto does not use the true codes
    res = evaluate_tatoeba(cache, ["fra", "deu", "jpn"], folder=folder, auto_lang=True, lang_map={"jpn": "en"},
                           show_progress=False, log=lambda m: None)
    assert calls == [(f"tatoeba.{lang}-eng.{side}", code) for lang, true in (("fra", "fr"), ("deu", "de"),
                                                                             ("jpn", "en"))
                     for side, code in ((lang, true), ("eng", "en"), (lang, "auto"), ("eng", "auto"))]
    for lang, code in (("fra", "fr"), ("deu", "de"), ("jpn", "en")):
        row = res[lang]
        assert [row["xx2en_error"], row["en2xx_error"]] == _errors(encoder, folder, lang, code, "en")
        assert [row["xx2en_error_auto"], row["en2xx_error_auto"]] == _errors(encoder, folder, lang, "auto", "auto")
    assert res["average"]["xx2en_error_auto"] == round(np.mean([res[x]["xx2en_error_auto"] for x in
                                                                ("fra", "deu", "jpn")]), 2)
    cmp = auto_lang_comparison(res)
    assert cmp["languages"] == 3 and cmp["worse"] + cmp["better"] + cmp["same"] == 3
    assert cmp["average"]["en2xx_error_auto"] == res["average"]["en2xx_error_auto"]
    plain = evaluate_tatoeba(cache, ["fra"], folder=folder, show_progress=False, log=lambda m: None)
    assert "xx2en_error_auto" not in plain["fra"]
    with pytest.raises(ValueError, match="auto_lang=True"):
        auto_lang_comparison(plain)
    with pytest.raises(ValueError, match="raw text"):
        evaluate_tatoeba(cache, ["fra"], folder=folder, auto_lang=True, pretokenized=True)


def test_auto_lang_comparison_counts_and_ranks():
    from evaluation.tatoeba import auto_lang_comparison

    def row(a, b, c, d):
        return {"xx2en_error": a, "en2xx_error": b, "xx2en_error_auto": c, "en2xx_error_auto": d, "n": 10}

    res = {"aaa": row(10, 10, 10, 10), "bbb": row(10, 20, 30, 20), "ccc": row(50, 50, 40, 50),
           "ddd": row(0, 0, 0, 10), "average": {}}
    cmp = auto_lang_comparison(res, worst=5)
    assert (cmp["worse"], cmp["better"], cmp["same"]) == (2, 1, 1)
    assert [r["lang"] for r in cmp["largest_increase"]] == ["bbb", "ddd"]  # +20, +10 points
    assert cmp["average"] == {"xx2en_error": 17.5, "xx2en_error_auto": 20.0, "en2xx_error": 20.0,
                              "en2xx_error_auto": 22.5}


def test_cli_writes_the_comparison(tiny_model_dir, folder, tmp_path, capsys):
    from evaluation.tatoeba import main

    out = tmp_path / "res.json"
    assert main(["--model", str(tiny_model_dir), "--tatoeba-dir", str(folder), "--langs", "fra", "--auto-lang",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["auto_lang"]["languages"] == 1 and "xx2en_error_auto" in saved["tatoeba"]["fra"]
    assert "lang='auto' vs the true language codes, 1 Tatoeba languages" in capsys.readouterr().err
