"""hf_laser.integrations.mteb: MTEB runs LASER with each task's languages, offline, on local copies of the datasets in MTEB's
layout (evaluation/mteb_local.py): Tatoeba equals evaluation/tatoeba.py, BUCC equals a direct nearest-neighbour
search, and STS / classification / retrieval calls are preprocessed in their subset's languages."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from conftest import REPO, SHARED, read_lines, require_shared

pytest.importorskip("mteb", reason="needs mteb (pip install -e '.[dev]')")
sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/
import mteb  # noqa: E402

import hf_laser  # noqa: E402
from evaluation.mteb_local import (  # noqa: E402
    bucc_dataset,
    bucc_v2_dataset,
    compare_tatoeba,
    local_task,
    write_dataset,
)
from evaluation.tatoeba import TATOEBA_LANGS, tatoeba_paths  # noqa: E402
from hf_laser import LaserEncoder  # noqa: E402
from hf_laser.integrations.mteb import LaserMTEBEncoder, identify_language, subset_languages, texts_sha256  # noqa: E402

TATOEBA = SHARED / "data" / "tatoeba" / "v1"
MINING = SHARED / "data" / "mining"
FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def encoder() -> LaserEncoder:
    return LaserEncoder.from_pretrained(hf_laser.DEFAULT_MODEL)


# ---------------------------------------------------------------------------------------------- languages
def test_tatoeba_subsets_map_to_the_languages_of_evaluation_tatoeba():
    task = mteb.get_task("Tatoeba")
    assert len(task.metadata.eval_langs) == 112
    for subset in task.metadata.eval_langs:
        assert subset_languages(task.metadata, subset) == [TATOEBA_LANGS[subset.split("-")[0]], "en"], subset


def test_column_languages_on_all_of_tatoeba():
    """Both sides of every Tatoeba pair are identified as their own language of the subset (module docstring)."""
    require_shared(TATOEBA)
    task = mteb.get_task("Tatoeba")
    wrong = []
    for subset in task.metadata.eval_langs:
        candidates = subset_languages(task.metadata, subset)
        for path, expected in zip(tatoeba_paths(TATOEBA, subset.split("-")[0]), candidates):
            found = identify_language(list(read_lines(path)), candidates)
            if found != expected:
                wrong.append((path.name, expected, found))
    assert not wrong


def test_identification_that_cannot_tell_is_an_error_and_overrides_win(encoder):
    task = mteb.get_task("Tatoeba", hf_subsets=["fra-eng"])
    with pytest.raises(ValueError, match="lang_overrides"):
        identify_language(["12345", "67 89"], ["fr", "en"])
    model = LaserMTEBEncoder(encoder=encoder, lang_overrides={("Tatoeba", "fra-eng"): "fr"})
    assert model.language(["12345"], task.metadata, "fra-eng") == "fr"


def test_not_a_laser_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not a LASER directory"):
        LaserMTEBEncoder(str(tmp_path))


# ---------------------------------------------------------------------------------------------- bitext mining
def test_tatoeba_through_mteb_equals_evaluation_tatoeba(encoder, tmp_path):
    require_shared(TATOEBA)
    langs = ["fra", "cmn", "jpn", "ell", "kzj"]
    result = compare_tatoeba(encoder, TATOEBA, tmp_path, langs, log=lambda *a: None)
    assert result["differing"] == [], result
    for lang in langs:
        row = result[lang]
        assert row["mteb_xx2en_errors"] == row["tatoeba_py_xx2en_errors"]
        assert (row["mteb_lang_xx"], row["mteb_lang_en"]) == (TATOEBA_LANGS[lang], "en")
    # laser-mini retrieves French far better than chance (its card: 18.9 % xx->en error)
    assert result["fra"]["mteb_accuracy"] > 0.7


def nearest_neighbour_accuracy(src: np.ndarray, tgt: np.ndarray, gold: list[tuple[int, int]]) -> float:
    x = src / np.linalg.norm(src, axis=1, keepdims=True)
    y = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    best = (x @ y.T).argmax(axis=1)
    return float(np.mean([best[i] == j for i, j in gold]))


def first_english(configs: dict, n: int) -> dict:
    """A `mteb/BUCC`-layout dataset cut to the first `n` English sentences (and the gold pairs among them)."""
    import datasets

    out = {}
    for pair, splits in configs.items():
        row = splits["test"][0]
        gold = [[i, j] for i, j in row["gold"] if j <= n]
        out[pair] = {"test": datasets.Dataset.from_dict(
            {"sentence1": [row["sentence1"]], "sentence2": [row["sentence2"][:n]], "gold": [gold]})}
    return out


@pytest.mark.parametrize("name", ["BUCC", "BUCC.v2"])
def test_bucc(name, encoder, tmp_path):
    require_shared(MINING)
    # BUCC: every English sentence is a candidate; 1,000 of the 4,000 of the sample split keep the test short
    data = first_english(bucc_dataset(MINING), 1000) if name == "BUCC" else bucc_v2_dataset(MINING)
    task = local_task(name, *write_dataset(data, tmp_path, name), hf_subsets=["de-en", "zh-en"])
    model = LaserMTEBEncoder(encoder=encoder)
    # the result files MTEB writes (what `ResultCache.submit_results` submits), under the model's name and revision
    cache = mteb.ResultCache(tmp_path / "mteb-results")
    scores = {row["hf_subset"]: row for row in
              mteb.evaluate(model, task, cache=cache, show_progress_bar=False).task_results[0].scores["test"]}
    meta = model.mteb_model_meta
    assert meta.name == "hf_laser/laser-mini" and meta.revision == encoder.model_identity()["model"][:12]
    saved = json.loads(cache.get_task_result_path(name, meta.name, meta.revision).read_text())
    assert {row["hf_subset"] for row in saved["scores"]["test"]} == {"de-en", "zh-en"}
    assert sorted(scores) == ["de-en", "zh-en"]
    assert sorted((e["subset"], e["lang"]) for e in model.language_log) == [
        ("de-en", "de"), ("de-en", "en"), ("zh-en", "en"), ("zh-en", "zh")]
    for pair in scores:
        row = data
        if name == "BUCC":
            data_row = row[pair]["test"][0]
            gold = [(k, j - 1) for k, (_, j) in enumerate(data_row["gold"])]
            src = [data_row["sentence1"][i - 1] for i, _ in data_row["gold"]]  # MTEB keeps the gold source sentences
            tgt = data_row["sentence2"]
        else:
            rows = row["default"]["test"].filter(lambda r: r["lang"] == pair)
            src, tgt, gold = rows["sentence1"], rows["sentence2"], [(k, k) for k in range(len(rows))]
        expected = nearest_neighbour_accuracy(encoder.encode(src, lang=pair[:2]), encoder.encode(tgt, lang="en"),
                                              gold)
        assert scores[pair]["accuracy"] == pytest.approx(expected, abs=1e-9), pair


# ---------------------------------------------------------------------------------------------- other task types
def flores(code: str, n: int) -> list[str]:
    return read_lines(FLORES / f"{code}.txt")[:n]


def sts17_dataset() -> dict:
    """Sentence pairs from FLORES: translations (score 5) and unrelated sentences (score 0)."""
    import datasets

    rows = {"sentence1": [], "sentence2": [], "score": [], "lang": []}
    for subset, (a, b) in {"en-de": ("en", "de"), "es-en": ("es", "en")}.items():
        left, right = flores(a, 40), flores(b, 40)
        rows["sentence1"] += left
        rows["sentence2"] += right[:20] + right[21:40] + right[:1]  # 20 translations, then shifted: unrelated
        rows["score"] += [5.0] * 20 + [0.0] * 20
        rows["lang"] += [subset] * 40
    return {"default": {"test": datasets.Dataset.from_dict(rows)}}


def massive_dataset() -> dict:
    """Tatoeba sentences labelled by whether their English translation is a question."""
    import datasets

    rows = {"text": [], "label": [], "lang": []}
    splits = {"train": slice(0, 300), "test": slice(300, 450)}
    out = {}
    for split, part in splits.items():
        rows = {"text": [], "label": [], "lang": []}
        for lang, xxx in (("de", "deu"), ("ja", "jpn")):
            src, tgt = tatoeba_paths(TATOEBA, xxx)
            rows["text"] += read_lines(src)[part]
            rows["label"] += [int(t.rstrip().endswith("?")) for t in read_lines(tgt)[part]]
            rows["lang"] += [lang] * len(read_lines(src)[part])
        out[split] = datasets.Dataset.from_dict(rows)
    return {"default": out}


def xpqa_dataset() -> dict:
    """Queries in German or French, an English corpus (FLORES); the relevant document is the translation."""
    import datasets

    out = {}
    for subset, code in (("deu-eng", "de"), ("fra-eng", "fr")):
        english = flores("en", 150)
        out[f"{subset}-corpus"] = {"test": datasets.Dataset.from_dict(
            {"id": [f"d{i}" for i in range(150)], "text": english})}
        out[f"{subset}-queries"] = {"test": datasets.Dataset.from_dict(
            {"id": [f"q{i}" for i in range(40)], "text": flores(code, 40)})}
        out[f"{subset}-qrels"] = {"test": datasets.Dataset.from_dict(
            {"query-id": [f"q{i}" for i in range(40)], "corpus-id": [f"d{i}" for i in range(40)],
             "score": [1] * 40})}
    return out


def test_sts_classification_retrieval_are_preprocessed_in_their_languages(encoder, tmp_path):
    require_shared(TATOEBA, FLORES)
    sts = local_task("STS17", *write_dataset(sts17_dataset(), tmp_path, "sts17"), hf_subsets=["en-de", "es-en"])
    massive = local_task("MassiveIntentClassification", *write_dataset(massive_dataset(), tmp_path, "massive"),
                         hf_subsets=["de", "ja"], eval_splits=["test"])
    xpqa = local_task("XPQARetrieval", *write_dataset(xpqa_dataset(), tmp_path, "xpqa"),
                      hf_subsets=["deu-eng", "fra-eng"])
    model = LaserMTEBEncoder(encoder=encoder)
    result = mteb.evaluate(model, [sts, massive, xpqa], cache=None, show_progress_bar=False)
    scores = {r.task_name: {row["hf_subset"]: row for row in r.scores["test"]} for r in result.task_results}
    calls = {}
    for entry in model.language_log:
        calls.setdefault((entry["task"], entry["subset"]), set()).add(entry["lang"])
    assert calls == {("STS17", "en-de"): {"en", "de"}, ("STS17", "es-en"): {"es", "en"},
                     ("MassiveIntentClassification", "de"): {"de"}, ("MassiveIntentClassification", "ja"): {"ja"},
                     ("XPQARetrieval", "deu-eng"): {"de", "en"}, ("XPQARetrieval", "fra-eng"): {"fr", "en"}}
    # each STS side was preprocessed in its own language
    by_texts = {e["texts_sha256"]: e["lang"] for e in model.language_log if e["task"] == "STS17"}
    assert by_texts[texts_sha256(flores("de", 40)[:20] + flores("de", 40)[21:40] + flores("de", 1))] == "de"
    assert by_texts[texts_sha256(flores("en", 40))] == "en"
    # translations score higher than unrelated pairs; queries find their translation more often than chance
    assert all(row["cosine_spearman"] > 0.5 for row in scores["STS17"].values()), scores["STS17"]
    assert all(row["recall_at_10"] > 10 / 150 for row in scores["XPQARetrieval"].values()), scores["XPQARetrieval"]
    assert set(scores["MassiveIntentClassification"]) == {"de", "ja"}
