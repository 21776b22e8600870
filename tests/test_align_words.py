"""training/align_words.py: the paper's loss, and a short fine-tuning run on a synthetic word-for-word bitext with the
tiny reference model (needs eflomal; skipped without it)."""

from __future__ import annotations

import importlib.util
import json
import random
import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("eflomal") is None or
                                importlib.util.find_spec("accelerate") is None,
                                reason='needs eflomal and accelerate (pip install "hf-laser[align,train]")')

EN = ["the", "cat", "dog", "house", "is", "big", "red", "small", "old", "new", "tree", "car", "sees", "has"]
DE = ["die", "katze", "hund", "haus", "ist", "groß", "rot", "klein", "alt", "neu", "baum", "auto", "sieht", "hat"]


def _write_bitext(folder, n=160, seed=0):
    rng = random.Random(seed)
    de, en = [], []
    for _ in range(n):
        idx = rng.sample(range(len(EN)), rng.randint(3, 6))
        en.append(" ".join(EN[i] for i in idx) + " .")
        de.append(" ".join(DE[i] for i in idx) + " .")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "toy.de-en.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    (folder / "toy.de-en.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    return folder


def test_alignment_loss_terms(tiny_model_dir):
    from evaluation.word_retrieval import WordPieces
    from hf_laser import LaserModel
    from training.align_words import AlignedPairs, alignment_loss

    model = LaserModel.from_pretrained(tiny_model_dir).eval()
    data = AlignedPairs()
    xx = WordPieces([[5, 6, 7, 2], [8, 9, 2]], [[(0, 1), (1, 3)], [(0, 2)]])
    en = WordPieces([[10, 11, 2], [12, 13, 14, 2]], [[(0, 1), (1, 2)], [(0, 1), (1, 3)]])
    kept = data.add("xx", xx, en, [[(0, 1), (1, 0)], [(0, 1)]], max_pieces=100)
    assert kept == {"pairs": 2, "no_link": 0, "too_long": 0, "links": 3}
    with torch.no_grad():
        loss, terms = alignment_loss(model, model, data, [0, 1], reg_weight=1.0, pooling="mean", max_tokens=1000)
        h_xx = [model(torch.tensor([ids])).last_hidden_state[0] for ids in xx.ids]
        h_en = [model(torch.tensor([ids])).last_hidden_state[0] for ids in en.ids]
    expected = ((h_xx[0][0] - h_en[0][1]).pow(2).sum() + (h_xx[0][1:3].mean(0) - h_en[0][0]).pow(2).sum()
                + (h_xx[1][0:2].mean(0) - h_en[1][1:3].mean(0)).pow(2).sum()) / 2
    assert terms["reg"] == pytest.approx(0.0, abs=1e-9) and terms["links"] == 3  # its own initial model
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    dropped = data.add("xx", xx, en, [[], [(0, 0)]], max_pieces=3)
    assert dropped == {"pairs": 0, "no_link": 1, "too_long": 1, "links": 0}


def test_fine_tuning_run(tiny_model_dir, tmp_path):
    from hf_laser.encoder import LaserEncoder
    from training.align_words import main

    corpus = _write_bitext(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(["--model", str(tiny_model_dir), "--langs", "de", "--corpus", str(corpus), "--output-dir", str(out),
                 "--epochs", "4", "--batch-size", "16", "--lr", "0.01", "--log-every", "1"]) == 0
    info = json.loads((out / "final" / "alignment.json").read_text())
    assert info["steps"] == 4 * (info["data"]["de"]["kept_pairs"] // 16) and info["languages"] == ["de"]
    pairs = (out / "aligned_word_pairs" / "de-en.tsv").read_text().splitlines()
    assert "katze\tcat" in pairs and "hund\tdog" in pairs
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    first, last = rows[0], rows[-1]
    assert first["reg"] == pytest.approx(0.0, abs=1e-9) and last["reg"] > 1e-6
    assert last["align_per_link"] < 0.5 * first["align_per_link"]  # aligned words moved together
    encoder = LaserEncoder.from_pretrained(out / "final")  # a normal LASER directory
    assert encoder.encode(["the cat ."], lang="en").shape == (1, encoder.dim)
    assert "word alignment" in (out / "final" / "README.md").read_text()


def test_bad_arguments(tiny_model_dir, tmp_path):
    from training.align_words import main

    corpus = _write_bitext(tmp_path / "corpus", n=20)
    with pytest.raises(SystemExit, match="not en itself"):
        main(["--model", str(tiny_model_dir), "--langs", "en", "--corpus", str(corpus), "--output-dir",
              str(tmp_path / "a")])
    with pytest.raises(ValueError, match="no fr-en sentence pair"):
        main(["--model", str(tiny_model_dir), "--langs", "fr", "--corpus", str(corpus), "--output-dir",
              str(tmp_path / "b")])
    with pytest.raises(ValueError, match="no full batch"):
        main(["--model", str(tiny_model_dir), "--langs", "de", "--corpus", str(corpus), "--output-dir",
              str(tmp_path / "c"), "--batch-size", "64"])
