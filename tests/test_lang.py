"""Languages: `lang="auto"` (detection per sentence), the default language and its warning, bad `lang` arguments."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import SHARED, read_lines

from hf_laser.text import langid

TATOEBA = SHARED / "data" / "tatoeba" / "v1"
ZH = "我们明天去北京吧。"
FR = "Nous irons à Paris demain, si tu veux bien."
EL = "Θα πάμε στην Αθήνα αύριο το πρωί."
JA = "明日は東京へ行きましょう。"
EN = "We will go to Paris tomorrow if you like."


def needs_preprocessing():
    pytest.importorskip("jieba")
    pytest.importorskip("MeCab")


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from hf_laser import LaserTokenizer

    return LaserTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    from hf_laser import LaserEncoder

    return LaserEncoder.from_pretrained(tiny_model_dir)


def lang_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if "no lang given" in str(w.message)]


def assert_warned_here(record, code: str):
    """One language warning, naming the detected code, attributed to this test file (the user's line)."""
    found = lang_warnings(record)
    assert len(found) == 1, [str(w.message) for w in record]
    w = found[0]
    assert issubclass(w.category, UserWarning)
    assert f"looks like {code!r}" in str(w.message) and "'en'" in str(w.message) and "lang=" in str(w.message)
    assert w.filename == __file__, f"warning attributed to {w.filename}:{w.lineno}"


# ------------------------------------------------------------------------------------------------ detection
def test_detect_maps_to_tokenizer_codes():
    assert langid.detect([FR, ZH, EL, JA, EN, "", "  123 !", "Guten Morgen, wie geht es dir heute?"]) == \
        ["fr", "zh", "el", "ja", "en", "en", "en", "de"]
    assert langid.detect(["", "42"], default="fr") == ["fr", "fr"]
    assert {"zh", "ja", "el", "en", "fr", "de", "nb"} <= langid.supported_codes()
    assert langid.is_auto("auto") and langid.is_auto(" AUTO ") and not langid.is_auto("en")
    assert langid.detector_version().startswith("py3langid ")


@pytest.mark.parametrize("iso3, code", [("cmn", "zh"), ("jpn", "ja"), ("ell", "el"), ("fra", "fr"), ("deu", "de")])
def test_detect_on_tatoeba(iso3, code):
    path = TATOEBA / f"tatoeba.{iso3}-eng.{iso3}"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    lines = read_lines(path)[:200]
    assert sum(c == code for c in langid.detect(lines)) >= 0.95 * len(lines)


# ------------------------------------------------------------------------------------------------ lang="auto"
def test_tokenizer_auto_equals_explicit_codes(tok):
    needs_preprocessing()
    texts = [FR, ZH, EL, JA, EN, ""]
    explicit = tok(texts, lang=["fr", "zh", "el", "ja", "en", "en"])["input_ids"]
    assert tok(texts, lang="auto")["input_ids"] == explicit
    assert tok.encode_lines(texts, "auto") == explicit
    assert tok.encode_lines(texts, "auto", num_proc=2, chunk_size=2) == explicit
    # "auto" inside a per-sentence list
    assert tok(texts, lang=["fr", "auto", "el", "auto", "en", "en"])["input_ids"] == explicit
    # zh is segmented into words (jieba), not characters
    assert tok.tokenize(ZH, lang="auto") == tok.tokenize(ZH, lang="zh") != tok.tokenize(ZH, lang="en")


def test_encoder_auto(encoder):
    needs_preprocessing()
    texts = [FR, ZH, EL, JA, EN]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = encoder.encode(texts, lang="auto")
    assert not lang_warnings(rec)
    np.testing.assert_array_equal(got, encoder.encode(texts, lang=["fr", "zh", "el", "ja", "en"]))


def test_encode_file_auto_records_the_detector(encoder, tmp_path):
    needs_preprocessing()
    src = tmp_path / "mixed.txt"
    src.write_text("\n".join([FR, ZH, EL, JA, EN]) + "\n", encoding="utf-8")
    out = encoder.encode_file(src, tmp_path / "e.npy", lang="auto")
    np.testing.assert_array_equal(np.asarray(out), encoder.encode([FR, ZH, EL, JA, EN], lang=["fr", "zh", "el",
                                                                                                "ja", "en"]))
    manifest = json.loads((tmp_path / "e.npy.manifest.json").read_text())
    assert manifest["identity"]["lang"] == f"auto ({langid.detector_version()})"


def test_cli_embed_lang(tiny_model_dir, tmp_path, capsys):
    from hf_laser.cli import main

    src = tmp_path / "in.txt"
    src.write_text(f"{FR}\n{EN}\n", encoding="utf-8")
    out = tmp_path / "e.npy"
    assert main(["embed", "--model", str(tiny_model_dir), "-i", str(src), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--lang" in err and "auto" in err
    assert not out.exists()
    assert main(["embed", "--model", str(tiny_model_dir), "--lang", "auto", "-i", str(src), "-o", str(out),
                 "-q"]) == 0
    assert np.load(out).shape == (2, 96)


def test_cli_similar_auto(tiny_model_dir, tmp_path, capsys):
    from hf_laser.cli import main

    target = tmp_path / "t.txt"
    target.write_text(f"{EN}\nThe cat sleeps.\n", encoding="utf-8")
    assert main(["similar", "--model", str(tiny_model_dir), "--text", FR, "--lang", "auto", "--target", str(target),
                 "--target-lang", "auto", "-k", "1"]) == 0
    assert FR in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ default language
def test_default_english_is_silent_and_unchanged(tok, encoder):
    lines = [EN, "Tom is reading a book in the garden.", "I don't know what you mean."]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ids = tok(lines)["input_ids"]
        emb = encoder.encode(lines)
    assert not lang_warnings(rec), [str(w.message) for w in rec]
    assert ids == tok(lines, lang="en")["input_ids"]
    np.testing.assert_array_equal(emb, encoder.encode(lines, lang="en"))


def test_default_warns_at_the_callers_line(tok, encoder, tmp_path):
    texts = [ZH, "他们明天不去上海。", "我们在北京学习中文。"]
    calls = {
        "tokenizer": lambda: tok(texts),
        "tokenizer one": lambda: tok(ZH),
        "encode_lines": lambda: tok.encode_lines(texts),
        "encode_lines iterator": lambda: tok.encode_lines(iter(texts)),
        "tokenize": lambda: tok.tokenize(ZH),
        "token_ids": lambda: encoder.token_ids(texts),
        "encode": lambda: encoder.encode(texts),
    }
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            call()
        assert_warned_here(rec, "zh")
    src = tmp_path / "zh.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        encoder.encode_file(src, tmp_path / "zh.npy")
    assert_warned_here(rec, "zh")
    # the default language was used, and is recorded as such
    assert json.loads((tmp_path / "zh.npy.manifest.json").read_text())["identity"]["lang"] == "en"


def test_explicit_lang_and_pretokenized_never_warn(tok, encoder):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        tok([ZH, FR], lang="en")
        tok([ZH], pretokenized="tok")
        tok.encode_lines([ZH], "auto")
        encoder.encode([ZH], lang="en")
        encoder.encode(["▁a b"], pretokenized=True)
    assert not lang_warnings(rec), [str(w.message) for w in rec]


def test_default_uses_the_configured_language(tiny_model_dir, tmp_path):
    from hf_laser import LaserTokenizer

    tok = LaserTokenizer.from_pretrained(tiny_model_dir)
    tok.lang = "fr"
    tok.save_pretrained(tmp_path)
    tok_fr = LaserTokenizer.from_pretrained(tmp_path)
    assert tok_fr.default_lang == "fr"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert tok_fr([FR])["input_ids"] == tok_fr([FR], lang="fr")["input_ids"]
    assert not lang_warnings(rec)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        tok_fr([ZH, "他们明天不去上海。"])
    found = lang_warnings(rec)
    assert len(found) == 1 and "'fr'" in str(found[0].message) and "'zh'" in str(found[0].message)


def test_pipeline_default_and_auto(tiny_model_dir):
    from transformers import pipeline

    import hf_laser  # noqa: F401

    needs_preprocessing()
    embed = pipeline("laser-sentence-embedding", model=str(tiny_model_dir))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        embed([ZH, "他们明天不去上海。"])
    assert_warned_here(rec, "zh")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        auto = np.array(embed([FR, ZH], lang="auto"))
    assert not lang_warnings(rec)
    np.testing.assert_allclose(auto, np.array(embed([FR, ZH], lang=["fr", "zh"])), atol=0)
    with pytest.raises(ValueError, match="got 1 languages for 2 sentences"):
        embed([FR, ZH], lang=["fr"])
    with pytest.raises(ValueError, match="position 1"):
        embed([FR, 3], lang="fr")


# ------------------------------------------------------------------------------------------------ bad arguments
def test_bad_lang_arguments(tok, encoder):
    for bad in (123, 1.5, {"fr": 1}, b"fr"):
        with pytest.raises((TypeError, ValueError), match="lang must be"):
            tok([FR], lang=bad)
        with pytest.raises((TypeError, ValueError), match="lang must be"):
            encoder.encode([FR], lang=bad)
    with pytest.raises(TypeError, match="lang must be"):  # not "'int' object is not iterable"
        encoder.encode(FR, lang=123)
    with pytest.raises(ValueError, match=r"lang\[1\]"):
        encoder.encode([FR, EN], lang=["fr", 7])
    with pytest.raises(ValueError, match="empty"):
        tok([FR], lang="")
    for call in (lambda: tok([FR, EN], lang=["fr"]), lambda: tok.encode_lines([FR, EN], ["fr"]),
                 lambda: encoder.encode([FR, EN], lang=["fr", "en", "de"]),
                 lambda: encoder.token_ids([FR, EN], ["fr"], pretokenized=True)):
        with pytest.raises(ValueError, match=r"got \d languages for 2 sentences"):
            call()
    with pytest.raises(ValueError, match="got 3 languages for 2 sentences"):
        tok.encode_lines(iter([FR, EN]), iter(["fr", "en", "de"]))
    with pytest.raises(ValueError, match="got 1 languages for 2 sentences"):
        tok.encode_lines(iter([FR, EN]), iter(["fr"]))


def test_bad_sentence_arguments(tok, encoder):
    with pytest.raises(ValueError, match="sentence 1 is int"):
        encoder.encode([FR, 3], lang="fr")
    with pytest.raises(ValueError, match="position 2"):
        tok([FR, EN, None], lang="en")
    with pytest.raises(ValueError, match="dict"):
        encoder.encode({"a": 1})
    with pytest.raises(ValueError, match="set"):
        encoder.encode({FR, EN}, lang="fr")
    with pytest.raises(ValueError, match="single str"):
        tok.encode_lines(FR, "fr")
    assert encoder.encode(iter([FR, EN]), lang="fr").shape == (2, 96)  # any other iterable is fine


def test_short_sentences_are_labelled_with_the_language_prior():
    """#47: "Es regnet." was labelled `wa` (Walloon) by `lang="auto"`: two words give the detector little evidence.
    The detector's probabilities are now weighted by how often languages are written (training/langid_prior.py);
    the prior is part of the detector's identity, so outputs labelled without it are not reused as its."""
    assert langid.detect(["Es regnet.", "Il pleut.", "Ich bin müde."]) == ["de", "fr", "de"]
    assert langid.classify("Es regnet.", alpha=0)[0] == "wa"  # (the detector alone)
    prior, alpha = langid.read_prior()
    assert 0 < alpha < 1 and abs(sum(prior.values()) - 1) < 1e-9 and prior["en"] > prior.get("wa", min(prior.values()))
    import hashlib

    digest = hashlib.sha256(langid.PRIOR_FILE.read_bytes()).hexdigest()[:12]
    assert langid.detector_version().endswith(f" + prior {digest}")
