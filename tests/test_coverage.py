"""training/coverage.py: word coverage of Tatoeba by the training text, and the error split by coverage."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO, SHARED, require_shared
from training.coverage import (covered, coverage_row, length_matched_error, main, mean_row, to_markdown,
                               training_vocabularies, words)
from training.data import resolve_corpora

CONFIG = str(REPO / "training" / "configs" / "laser-mini.yaml")


def test_words_are_lowercased_word_runs():
    assert words("Du hast Recht.") == ["du", "hast", "recht"]
    assert words("L'été, 2024 — «ça va?»") == ["l", "été", "2024", "ça", "va"]


def test_training_vocabularies_merge_regional_variants_and_bitexts(tmp_path):
    multi = tmp_path / "multi"
    multi.mkdir()
    (multi / "en.txt").write_text("the cat\nthe dog\n")
    (multi / "pt.txt").write_text("o gato\n\n")
    with gzip.open(multi / "pt_BR.txt.gz", "wt") as f:
        f.write("o gato\no cão\n")
    bitext = tmp_path / "bi"
    bitext.mkdir()
    (bitext / "news.de-en.de").write_text("die Katze\n")
    (bitext / "news.de-en.en").write_text("The cat\n")
    vocab = training_vocabularies(resolve_corpora([str(multi), str(bitext)]), {"pt", "en"})
    assert vocab["pt"] == Counter({"o": 3, "gato": 2, "cão": 1})
    assert vocab["en"] == Counter({"the": 3, "cat": 2, "dog": 1})
    assert set(vocab) == {"pt", "en"}  # German is not asked for, so not counted


def test_covered_needs_every_word_min_count_times():
    vocab = Counter({"the": 5, "cat": 3, "dog": 1})
    assert covered(["The cat.", "The dog.", "A cat."], vocab, 3).tolist() == [True, False, False]
    assert covered(["The dog."], vocab, 1).tolist() == [True]


def test_length_matched_error_reweights_the_rest_to_the_covered_lengths():
    # covered pairs are all 2 words long; the rest: 2-word pairs all wrong, 9-word pairs all right
    lengths = np.array([2] * 4 + [2] * 5 + [9] * 20)
    part = np.array([True] * 4 + [False] * 25)
    wrong = np.array([False] * 4 + [True] * 5 + [False] * 20)
    assert 100 * wrong[~part].mean() == pytest.approx(20.0)  # raw: the long easy pairs hide the difference
    assert length_matched_error(wrong, lengths, part) == 100.0
    assert length_matched_error(wrong, lengths, part, min_pairs=6) is None  # too few 2-word pairs outside


def test_coverage_row_splits_errors_by_coverage():
    vocab_xx, vocab_en = Counter({"ja": 3, "nein": 3}), Counter({"yes": 3, "no": 3})
    xx, en = ["Ja", "Nein", "Vielleicht"], ["Yes", "No", "Maybe"]
    row = coverage_row(xx, en, vocab_xx, vocab_en, 3, np.array([False, True, True]), np.array([True, True, False]))
    assert row["n_covered"] == 2 and row["covered"] == pytest.approx(66.7)
    assert row["tatoeba_oov_tokens"] == pytest.approx(33.3)
    assert row["xx2en_error_covered"] == 50.0 and row["xx2en_error_rest"] == 100.0
    assert row["en2xx_error_covered"] == 100.0 and row["en2xx_error_rest"] == 0.0
    assert row["xx2en_error"] == pytest.approx(66.7)


def test_mean_row_averages_over_languages_and_is_the_last_markdown_row():
    vocab = Counter({"ja": 3, "nein": 3, "yes": 3, "no": 3})
    a = coverage_row(["Ja", "Nein"], ["Yes", "No"], vocab, vocab, 3, np.array([False, True]), np.array([True, True]))
    b = coverage_row(["Ja", "Vielleicht"], ["Yes", "Maybe"], vocab, vocab, 3, np.array([True, True]),
                     np.array([False, False]))
    mean = mean_row({"languages": {"deu": a, "nld": b}})
    assert mean["xx2en_error"] == 75.0 and mean["covered"] == 75.0
    assert mean["xx2en_error_covered"] == 75.0  # (50 + 100) / 2
    assert mean["xx2en_error_rest"] is None  # deu has no uncovered pair: no mean rather than a wrong one
    markdown = to_markdown({"min_count": 3, "model": "m", "languages": {"deu": a, "nld": b}}).splitlines()
    assert markdown[-1].startswith("| **mean** |") and "| 75.0 % |" in markdown[-1]


def test_retrieval_errors_returns_which_pairs_were_missed():
    from evaluation.tatoeba import retrieval_errors

    x = np.eye(6, dtype=np.float32)
    perm = np.array([1, 0, 2, 3, 4, 5])
    out = retrieval_errors(x, x[perm], return_wrong=True)
    assert out["xx2en_wrong"].tolist() == [True, True, False, False, False, False]
    assert out["xx2en_errors"] == 2 == out["xx2en_wrong"].sum()
    assert "xx2en_wrong" not in retrieval_errors(x, x[perm])


def test_refuses_languages_written_without_spaces(capsys):
    with pytest.raises(SystemExit):
        main(["--config", CONFIG, "--langs", "cmn", "--tatoeba-dir", "."])
    assert "cmn" in capsys.readouterr().err


def test_shipped_model_on_real_data_agrees_with_the_tatoeba_evaluation(tmp_path, tatoeba_split):
    """End to end on the shipped model and the real corpora: the overall error is the Tatoeba evaluation's."""
    tatoeba = SHARED / "data" / "tatoeba" / "v1"
    require_shared(tatoeba, SHARED / "data" / "parallel" / "train")
    from evaluation.cache import EmbeddingCache
    from evaluation.tatoeba import evaluate_tatoeba
    from hf_laser import LaserEncoder

    # the config names the git-ignored data/tatoeba-split/train of a working tree: use the fixture's split instead
    config = yaml.safe_load(Path(CONFIG).read_text())
    split_entries = [i for i, c in enumerate(config["data"]["corpora"]) if str(c).endswith("tatoeba-split/train")]
    assert len(split_entries) == 1, config["data"]["corpora"]
    config["data"]["corpora"][split_entries[0]] = str(tatoeba_split / "train")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))

    out = tmp_path / "out"
    assert main(["--config", str(config_path), "--langs", "deu", "--tatoeba-dir", str(tatoeba), "--output-dir", str(out)]) == 0
    row = json.loads((out / "coverage.json").read_text())["languages"]["deu"]
    expected = evaluate_tatoeba(EmbeddingCache(LaserEncoder.from_pretrained(), enabled=False, show_progress=False),
                                ["deu"], folder=tatoeba, show_progress=False, log=lambda *_: None)["deu"]
    assert row["xx2en_error"] == pytest.approx(expected["xx2en_error"], abs=0.05)
    assert row["en2xx_error"] == pytest.approx(expected["en2xx_error"], abs=0.05)
    assert row["n"] == 1000 and 0 < row["n_covered"] < 1000 and row["training_words"] > 100_000
    assert "| deu |" in (out / "coverage.md").read_text()
