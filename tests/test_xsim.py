"""evaluation/xsim.py: N-way similarity search on synthetic multi-parallel sets with known answers, bad input, and
the `evaluation.run --tasks xsim` outputs (tiny random reference model, pre-tokenised text)."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/

from evaluation import xsim  # noqa: E402

WORDS = ["the", "cat", "dog", "house", "is", "a", "tom", "not", "no", "team", "big", "red", "war", "game"]


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + " .")
    return sorted(out)


def _write(folder, files: dict[str, list[str]]):
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in files.items():
        (folder / f"{lang}.txt").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    return folder


def _random_unit(n, dim, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=-1)


# ---------------------------------------------------------------------------------------------- search, known answers
def test_identical_languages_have_no_error():
    base = _random_unit(50, 16, 0)
    res = xsim.search_errors(torch.stack([base, base, base]), margin=True, show_progress=False)
    assert res["errors"].sum() == 0 and res["errors_margin"].sum() == 0
    assert res["pooled_errors"].tolist() == [0, 0, 0]  # a sentence never finds itself; its copy is a translation


def test_permuted_language_error_is_its_non_fixed_points():
    n = 40
    base = _random_unit(n, 16, 1)
    perm = torch.arange(n)
    perm[:10] = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 0])  # a 10-cycle: 10 rows moved, 30 fixed
    moved = torch.nn.functional.normalize(base[perm] + 0.05 * _random_unit(n, 16, 9), dim=-1)  # no exact ties
    emb = torch.stack([base, moved, base])
    res = xsim.search_errors(emb, margin=True, show_progress=False)
    expected = np.array([[0, 10, 0], [10, 0, 10], [0, 10, 0]])
    np.testing.assert_array_equal(res["errors"], expected)
    np.testing.assert_array_equal(res["errors_margin"], expected)
    # pooled: languages 0 and 2 find each other (same row); a moved row of language 1 finds the row it came from
    assert res["pooled_errors"].tolist() == [0, 10, 0]
    summary = xsim.summarize(["a", "b", "c"], res)
    assert summary["pairs"] == 6
    assert summary["average"] == pytest.approx(100 * 40 / 6 / n, abs=0.01)  # four pairs of 10/40 over six
    assert summary["per_language"]["b"]["as_source"] == 25.0 and summary["per_language"]["a"]["as_source"] == 12.5
    assert summary["per_language"]["b"]["as_target"] == 25.0
    assert summary["matrix"][0][0] is None and summary["matrix"][0][1] == 25.0


def test_blocks_and_brute_force_agree():
    """Small blocks (one target language at a time) give the same counts as a direct per-pair computation."""
    n_langs, n = 5, 30
    base = _random_unit(n, 8, 2)
    emb = torch.stack([torch.nn.functional.normalize(base + 0.6 * _random_unit(n, 8, 10 + i), dim=-1)
                       for i in range(n_langs)])
    big = xsim.search_errors(emb, margin=True, show_progress=False)
    small = xsim.search_errors(emb, margin=True, block_elements=n * n, show_progress=False)
    for key in ("errors", "errors_margin", "pooled_errors"):
        np.testing.assert_array_equal(big[key], small[key])
    assert big["errors"].sum() > 0  # noisy enough to make errors
    for s in range(n_langs):
        for t in range(n_langs):
            if s != t:
                sims = emb[s] @ emb[t].T
                assert big["errors"][s, t] == int((sims.argmax(1) != torch.arange(n)).sum())
                knn_x = sims.topk(4, dim=1).values.mean(1)
                knn_y = sims.topk(4, dim=0).values.mean(0)
                score = sims / ((knn_x[:, None] + knn_y[None, :]) / 2)
                assert big["errors_margin"][s, t] == int((score.argmax(1) != torch.arange(n)).sum())
    flat = emb.reshape(-1, 8)
    sims = flat @ flat.T
    sims.fill_diagonal_(-float("inf"))
    found_row = sims.argmax(1) % n
    pooled = (found_row != torch.arange(n).repeat(n_langs)).reshape(n_langs, n).sum(1)
    assert big["pooled_errors"].tolist() == pooled.tolist()


def test_margin_corrects_a_hub():
    """A hub (a target close to every source) is the cosine nearest neighbour of every source; the ratio margin
    discounts it: sources e_i + 1.5 e_0, targets e_i, the hub e_0 (the translation of source e_0)."""
    n = 12
    eye = torch.eye(n)
    src = torch.nn.functional.normalize(eye + 1.5 * eye[0], dim=-1)
    src[0] = eye[0]
    res = xsim.search_errors(torch.stack([src, eye]), margin=True, show_progress=False)
    assert res["errors"][0, 1] == n - 1 and res["errors_margin"][0, 1] == 0


def test_bad_embeddings():
    with pytest.raises(ValueError, match="n_langs >= 2"):
        xsim.search_errors(torch.zeros(1, 3, 4), show_progress=False)
    bad = torch.ones(2, 3, 4)
    bad[1, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        xsim.search_errors(bad, show_progress=False)


# ---------------------------------------------------------------------------------------------- data checks
def test_load_checks_line_counts_empty_languages_and_lines(tmp_path):
    s = _sentences(6)
    folder = _write(tmp_path / "counts", {"aa": s, "bb": s[:5], "cc": s})
    with pytest.raises(ValueError, match=r"same number of lines.*bb\.txt \(5\)"):
        xsim.load_multiparallel(folder, log=lambda m: None)
    folder = _write(tmp_path / "nosent", {"aa": s, "bb": [""] * 6})
    with pytest.raises(ValueError, match=r"without any sentence.*bb\.txt"):
        xsim.load_multiparallel(folder, log=lambda m: None)
    folder = _write(tmp_path / "emptyfile", {"aa": s, "bb": []})
    with pytest.raises(ValueError, match=r"without any sentence.*bb\.txt"):
        xsim.load_multiparallel(folder, log=lambda m: None)
    folder = _write(tmp_path / "holes", {"aa": s, "bb": s[:2] + [""] + s[3:]})
    with pytest.raises(ValueError, match=r"empty lines.*bb\.txt: 1 \(first line 3\).*--drop-empty"):
        xsim.load_multiparallel(folder, log=lambda m: None)
    data = xsim.load_multiparallel(folder, drop_empty=True, log=lambda m: None)
    assert data.rows.tolist() == [0, 1, 3, 4, 5] and data.texts["aa"] == s[:2] + s[3:]
    assert data.report["dropped_empty_rows"] == 1
    with pytest.raises(ValueError, match="at least 2 languages"):
        xsim.load_multiparallel(folder, ["aa"], log=lambda m: None)
    with pytest.raises(ValueError, match=r"no file for language\(s\) \['zz'\]"):
        xsim.load_multiparallel(folder, ["aa", "zz"], log=lambda m: None)
    with pytest.raises(FileNotFoundError):
        xsim.load_multiparallel(tmp_path / "missing", log=lambda m: None)


def test_duplicates_are_counted_and_dropped(tmp_path):
    s = _sentences(8, seed=5)
    a = list(s)
    a[5] = a[2]  # within language aa: rows 3 and 6 (1-based) share a text
    b = list(s)
    b[7] = s[1]  # across languages: bb row 8 holds the text of aa/bb row 2
    folder = _write(tmp_path / "dups", {"aa": a, "bb": b})
    messages = []
    data = xsim.load_multiparallel(folder, log=messages.append)
    dup = data.report["duplicates"]
    assert dup["repeated_texts"] == 2 and dup["rows_to_drop"] == 2
    assert dup["within_language"] == {"aa": 1, "bb": 1}  # bb row 8 repeats bb row 2 as well
    assert data.n_sentences == 8 and "--drop-duplicates" in messages[0]
    data = xsim.load_multiparallel(folder, drop_duplicates=True, log=messages.append)
    assert data.rows.tolist() == [0, 1, 2, 3, 4, 6]
    assert data.report["dropped_duplicate_rows"] == 2
    for lines in data.texts.values():
        assert len(set(lines)) == len(lines)
    c = list(s)
    c[0], c[3] = "xyz .", s[0]  # only across languages: cc row 4 holds the text of aa row 1
    data = xsim.load_multiparallel(_write(tmp_path / "across", {"aa": s, "cc": c}), log=lambda m: None)
    assert data.report["duplicates"]["across_languages"] == {"cc": 1}
    assert data.report["duplicates"]["within_language"] == {}


def test_dominant_script():
    assert xsim.dominant_script(["Привет, мир", "да"]) == "Cyrillic"
    assert xsim.dominant_script(["hello 123"]) == "Latin"
    assert xsim.dominant_script(["123 !"]) == "?"


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def encoder(tiny_dictionary_dir):
    from hf_laser.encoder import LaserEncoder

    return LaserEncoder.from_pretrained(tiny_dictionary_dir)


def test_evaluate_identical_and_permuted_languages(encoder, tmp_path):
    """Real embeddings (tiny random model): copies of a language have 0 % error; a language whose lines are
    permuted has exactly the share of moved lines as error against each copy."""
    from evaluation.cache import EmbeddingCache

    n = 24
    s = _sentences(n, seed=7)
    order = list(range(n))
    order[:6] = [3, 4, 5, 0, 1, 2]  # 6 lines moved
    folder = _write(tmp_path / "set", {"aa": s, "bb": s, "cc": [s[i] for i in order]})
    (tmp_path / "langs.tsv").write_text("code\tiso639_3\tscript\tname\naa\taaa\tLatn\tLang A\n", encoding="utf-8")
    cache = EmbeddingCache(encoder, tmp_path / "cache", show_progress=False)
    res = xsim.evaluate_xsim(cache, folder, margin=True, pretokenized=True, langs_tsv=tmp_path / "langs.tsv",
                             out_dir=tmp_path / "out", show_progress=False, log=lambda m: None)
    m = res["matrix"]
    assert m[0][1] == 0.0 and m[1][0] == 0.0
    assert m[0][2] == m[2][0] == m[1][2] == m[2][1] == 25.0
    assert res["average"] == pytest.approx(100 / 6, abs=0.01)
    # a moved line of cc finds its copies in aa and bb, on another row; aa's pooled search has ties (cc holds copies
    # of its lines on other rows), which the duplicate report points out
    assert res["per_language"]["cc"]["pooled"] == 25.0
    assert res["data"]["duplicates"]["repeated_texts"] == 6 and res["data"]["duplicates"]["rows_to_drop"] == 3
    out = tmp_path / "out"
    doc = json.loads((out / "xsim.json").read_text())
    assert doc["language_info"]["aa"] == {"script": "Latn", "name": "Lang A"}
    assert doc["language_info"]["bb"]["script"] == "Latin"  # not in langs.tsv: detected from the text
    rows = (out / "xsim_matrix.csv").read_text().splitlines()
    assert rows[0] == "source \\ target,aa,bb,cc" and rows[3] == "cc,25.00,25.00,"
    assert (out / "xsim_heatmap.png").stat().st_size > 1000
    table = (out / "xsim_languages.md").read_text()
    assert "| aa | Lang A | Latn | 12.50 | 12.50 | " in table and "as target, margin (%)" in table


def test_evaluation_run_task(tiny_dictionary_dir, tmp_path):
    from evaluation.run import main

    s = _sentences(12, seed=9)
    folder = _write(tmp_path / "set", {"aa": s, "bb": s[::-1], "cc": s})
    out = tmp_path / "results"
    rc = main(["--model", str(tiny_dictionary_dir), "--tasks", "xsim", "--xsim-dir", str(folder), "--pretokenized",
               "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())["xsim"]
    assert res["languages"] == 3 and res["n_sentences"] == 12
    # bb is reversed (12 lines, no fixed point): every pair with bb is wrong on all lines
    assert res["per_language"]["bb"]["as_source"] == 100.0 and res["per_language"]["aa"]["as_source"] == 50.0
    assert "N-way similarity search" in (out / "results.md").read_text()
    info = json.loads((out / "results_info.json").read_text())["tasks"]["xsim"]
    assert info["files"]["heatmap"] == "xsim/xsim_heatmap.png" and (out / "xsim" / "xsim_heatmap.png").is_file()
    bad = _write(tmp_path / "bad", {"aa": s, "bb": s[:-1]})
    assert main(["--model", str(tiny_dictionary_dir), "--tasks", "xsim", "--xsim-dir", str(bad), "--pretokenized",
                 "--out", str(out), "--no-cache", "-q"]) == 2
