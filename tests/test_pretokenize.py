"""training/pretokenize.py: corpora written as BPE tokens train on exactly the pairs of the raw corpora, and a run
refuses pretokenized data it cannot vouch for (no manifest, another tokenizer, a file the manifest does not list or
that changed since it was written)."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO
from test_training import WORDS, cipher, write

sys.path.insert(0, str(REPO))
from training.data import PRETOKENIZED_MANIFEST, prepare_training_data, prepare_valid_data  # noqa: E402
from training.learn_bpe import learn_bpe  # noqa: E402
from training.pretokenize import main as pretokenize_main  # noqa: E402
from training.train import get_tokenizer, load_config  # noqa: E402


def _bpe(tmp_path_factory, merges: int, seed: int):
    rng = np.random.default_rng(seed)
    en = [" ".join(rng.choice(WORDS, size=6)) + "." for _ in range(300)]
    xx = [" ".join(cipher(w, 1) for w in s[:-1].split()) for s in en]
    out = tmp_path_factory.mktemp(f"bpe{merges}")
    return learn_bpe({"en": en, "fr": xx}, out, merges=merges, log=lambda _: None), out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Raw corpora (a gzip bitext folder with empty sides, a multi-parallel folder with missing lines and a language
    the run does not use), a validation folder, a config, and that config pretokenized."""
    root = tmp_path_factory.mktemp("pretok")
    tokenizer, tok_dir = _bpe(tmp_path_factory, 120, 5)
    rng = np.random.default_rng(0)
    en = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(60)]
    fr = [" ".join(cipher(w, 1) for w in s.split()) for s in en]
    fr[3], en[7] = "", ""
    fr[5] = "\u200b"  # not empty, but no token after preprocessing
    (root / "bi").mkdir()
    for lang, lines in (("fr", fr), ("en", en)):
        with gzip.open(root / "bi" / f"news.fr-en.{lang}.gz", "wt", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        write(root / "mp" / f"{lang}.txt", [line if i % 9 else "" for i, line in enumerate(lines)])
    write(root / "mp" / "de.txt", en)  # not a language of the run: not written
    for lang, lines in (("en", en[:20]), ("fr", fr[:20]), ("de", en[:20])):
        write(root / "valid" / f"{lang}.txt", lines)
    cfg = {"data": {"corpora": [str(root / "bi"), {"path": str(root / "mp"), "name": "multi"}],
                    "source_languages": ["fr"], "target_languages": ["en"], "max_length": 30,
                    "cache_dir": str(root / "cache")},
           "tokenizer": {"path": str(tok_dir)},
           "training": {"max_steps": 10},
           "validation": {"path": str(root / "valid")}}
    (root / "raw.yaml").write_text(yaml.safe_dump(cfg))
    assert pretokenize_main(["--config", str(root / "raw.yaml"), "--output-dir", str(root / "pre")]) == 0
    return root, tokenizer


def _pairs(data):
    return sorted((data.directions[d], tuple(data.tokens.get(s)), tuple(data.tokens.get(t)))
                  for s, t, d in zip(data.src, data.tgt, data.direction))


def test_pretokenized_corpora_give_the_raw_corpora_pairs(setup):
    root, tokenizer = setup
    raw_cfg, pre_cfg = load_config(root / "raw.yaml"), load_config(root / "pre" / "config.yaml")
    assert pre_cfg["data"]["pretokenized"] and pre_cfg["validation"]["pretokenized"]
    assert sorted(p.name for p in (root / "pre" / "mp").iterdir()) == [PRETOKENIZED_MANIFEST, "en.txt", "fr.txt"]
    raw = prepare_training_data(raw_cfg["data"], tokenizer, log=lambda _: None)
    pre = prepare_training_data(pre_cfg["data"], tokenizer, log=lambda _: None)
    assert pre.path != raw.path  # its own cache entry
    assert len(raw) > 80 and _pairs(pre) == _pairs(raw)
    # the line without tokens is skipped either way: raw as an empty pair (in both corpora); pretokenized it is an
    # empty line, still an empty pair in the bitext but a missing line in the multi-parallel folder
    assert raw.stats["skipped"]["empty"] == 4 and pre.stats["skipped"]["empty"] == 3
    assert pre.stats["missing"] == raw.stats["missing"] + 1
    manifest = json.loads((root / "pre" / "bi" / PRETOKENIZED_MANIFEST).read_text())
    assert manifest["files"]["news.fr-en.fr"]["empty_after_preprocessing"] == 1
    rv = prepare_valid_data(raw_cfg["validation"], ["fr", "en"], tokenizer, cache_dir=root / "cache")
    pv = prepare_valid_data(pre_cfg["validation"], ["fr", "en"], tokenizer, cache_dir=root / "cache")
    assert rv.rows.keys() == pv.rows.keys()
    assert [list(rv.tokens.get(i)) for i in range(len(rv.tokens))] == [list(pv.tokens.get(i))
                                                                       for i in range(len(pv.tokens))]


def test_pretokenized_bitexts_between_source_languages_are_kept_with_bitext_pairs_all(setup, tmp_path):
    """With `data.bitext_pairs: all` a bitext of two source languages is trained on, so it is written too (without
    the option only bitexts with a target language are)."""
    root, tokenizer = setup
    rng = np.random.default_rng(1)
    en = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(40)]
    sides = {"fr": [" ".join(cipher(w, 1) for w in s.split()) for s in en],
             "de": [" ".join(cipher(w, 2) for w in s.split()) for s in en]}
    for lang, lines in sides.items():
        write(tmp_path / "talks" / f"talk.de-fr.{lang}", lines)
    cfg = {"data": {"corpora": [str(root / "bi"), str(tmp_path / "talks")], "source_languages": ["fr", "de"],
                    "target_languages": ["en"], "bitext_pairs": "all", "max_length": 30,
                    "cache_dir": str(tmp_path / "cache")},
           "tokenizer": {"path": load_config(root / "pre" / "config.yaml")["tokenizer"]["path"]},
           "training": {"max_steps": 10, "objective": "ranking"}}
    (tmp_path / "raw.yaml").write_text(yaml.safe_dump(cfg))
    assert pretokenize_main(["--config", str(tmp_path / "raw.yaml"), "--output-dir", str(tmp_path / "pre")]) == 0
    assert sorted(p.name for p in (tmp_path / "pre" / "talks").iterdir()) == [
        PRETOKENIZED_MANIFEST, "talk.de-fr.de", "talk.de-fr.fr"]
    raw = prepare_training_data(load_config(tmp_path / "raw.yaml")["data"], tokenizer, log=lambda _: None)
    pre = prepare_training_data(load_config(tmp_path / "pre" / "config.yaml")["data"], tokenizer, log=lambda _: None)
    assert {("de", "fr"), ("fr", "de")} & set(pre.directions)
    assert _pairs(pre) == _pairs(raw)


def test_pretokenized_data_without_a_matching_manifest_is_refused(setup, tmp_path, tmp_path_factory):
    root, tokenizer = setup
    pre_cfg = load_config(root / "pre" / "config.yaml")
    other, _ = _bpe(tmp_path_factory, 60, 6)
    with pytest.raises(ValueError, match="another tokenizer"):
        prepare_training_data(pre_cfg["data"], other, log=lambda _: None)
    copy = tmp_path / "mp"
    shutil.copytree(root / "pre" / "mp", copy)
    cfg = dict(pre_cfg["data"], corpora=[str(copy)], cache_dir=str(tmp_path / "cache"))
    shutil.copy(root / "mp" / "en.txt", copy / "es.txt")  # a raw file dropped in: not listed
    with pytest.raises(ValueError, match="es.txt is not listed"):
        prepare_training_data(dict(cfg, target_languages=["en", "es"]), tokenizer, log=lambda _: None)
    (copy / "es.txt").unlink()
    with (copy / "fr.txt").open("a", encoding="utf-8") as fh:  # an edited file: its sha256 no longer matches
        fh.write("qnem\n")
    with pytest.raises(ValueError, match="fr.txt changed since"):
        prepare_training_data(cfg, tokenizer, log=lambda _: None)
    (copy / PRETOKENIZED_MANIFEST).unlink()
    with pytest.raises(ValueError, match="has no .hf_laser_pretokenized.json"):
        prepare_training_data(cfg, tokenizer, log=lambda _: None)
    with pytest.raises(ValueError, match="has no .hf_laser_pretokenized.json"):  # raw text declared pretokenized
        prepare_valid_data(dict(pre_cfg["validation"], path=str(root / "valid")), ["fr", "en"], tokenizer,
                           cache_dir=tmp_path / "cache")


def test_pretokenized_data_needs_the_tokenizer_it_was_written_with(setup, tmp_path):
    root, _ = setup
    cfg = load_config(root / "pre" / "config.yaml")
    cfg["tokenizer"]["path"] = None
    with pytest.raises(ValueError, match="needs tokenizer.path"):
        get_tokenizer(cfg, tmp_path, print)


def test_small_and_large_files_give_the_same_bpe(setup, monkeypatch):
    """A file under SMALL_FILE_LINES is processed in this process; a larger one in workers: the same lines."""
    import training.pretokenize as pretokenize

    _, tokenizer = setup
    rng = np.random.default_rng(2)
    lines = [" ".join(cipher(w, 1) for w in rng.choice(WORDS, size=rng.integers(1, 8))) for _ in range(2500)]
    lines[10] = ""
    here = pretokenize.bpe_lines(lines, "fr", tokenizer, num_proc=2)
    monkeypatch.setattr(pretokenize, "SMALL_FILE_LINES", 0)
    workers = pretokenize.bpe_lines(lines, "fr", tokenizer, num_proc=2)
    assert here == workers and here[10] == "" and all(here[i] for i in range(len(lines)) if i != 10)
