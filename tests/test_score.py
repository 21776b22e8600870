"""`hf-laser score` and `hf_laser.mining.scoring` (#70): the margin over the corpus's own sentences against a
brute-force NumPy computation and against `mine`'s candidate scores, the command's outputs, identity and reuse,
model sets, the language check, and refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, require_shared

pytest.importorskip("faiss")

from hf_laser.mining import mine, pair_cosines, score_pairs

FLORES = SHARED / "data" / "parallel" / "valid" / "flores200-devtest"
REPO = Path(__file__).resolve().parents[1]


def brute_force(x, y, k, margin):
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    cos = xn.astype(np.float64) @ yn.astype(np.float64).T
    mx = np.sort(cos, axis=1)[:, -k:].mean(axis=1)      # NN_k(x_i) among all y_j
    my = np.sort(cos.T, axis=1)[:, -k:].mean(axis=1)    # NN_k(y_i) among all x_j
    a, b = np.diag(cos), (mx + my) / 2
    return a / b if margin == "ratio" else a - b


def corpus(n=300, d=24, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x + 0.9 * rng.normal(size=(n, d))).astype(np.float32)
    y[: n // 5] = rng.normal(size=(n // 5, d))  # misaligned pairs
    return x, y


@pytest.mark.parametrize("margin", ["ratio", "distance"])
@pytest.mark.parametrize("k", [1, 4, 7])
def test_margin_is_the_brute_force_definition(margin, k):
    x, y = corpus()
    expected = brute_force(x, y, k, margin)
    got = score_pairs(x, y, k=k, margin=margin)
    assert got.shape == (len(x),) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, atol=2e-6, rtol=0)
    # misaligned pairs score below the aligned ones
    assert np.median(got[:60]) < np.median(got[60:])


def test_cosine_is_the_pairs_cosine():
    x, y = corpus()
    expected = np.diag(x @ y.T) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    np.testing.assert_allclose(score_pairs(x, y, method="cosine"), expected, atol=1e-6)
    np.testing.assert_array_equal(pair_cosines(x, y), score_pairs(x, y, method="cosine"))


def test_scores_do_not_depend_on_batches_or_memory_maps(tmp_path):
    x, y = corpus(n=500)
    whole = score_pairs(x, y)
    out = np.lib.format.open_memmap(tmp_path / "s.npy", mode="w+", dtype=np.float64, shape=(len(x),))
    batched = score_pairs(x, y, query_batch_size=37, shard_size=101, knn_dir=tmp_path / "knn", out=out)
    assert batched is out
    np.testing.assert_array_equal(np.asarray(batched), whole)
    assert (tmp_path / "knn" / "x2y_sim.npy").is_file()


def test_margin_is_the_score_mine_gives_the_pair():
    x, y = corpus()
    scores = score_pairs(x, y)
    mined = {(i, j): s for s, i, j in mine(x, y, mode="forward")}
    same = [(scores[i], mined[(i, i)]) for i in range(len(x)) if (i, i) in mined]
    assert len(same) > 200
    np.testing.assert_array_equal(*zip(*same))


def test_refusals():
    x, y = corpus(n=10)
    with pytest.raises(ValueError, match="not aligned"):
        score_pairs(x, y[:9])
    with pytest.raises(ValueError, match="k=11"):
        score_pairs(x, y, k=11)
    with pytest.raises(ValueError, match="unknown scoring method"):
        score_pairs(x, y, method="bleu")
    with pytest.raises(ValueError, match="unknown margin"):
        score_pairs(x, y, margin="absolute")


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------


def hf_laser(*args, cwd=None, stdin=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "hf_laser.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, input=stdin, timeout=600)


def noisy_corpus(directory: Path, n=120, src="de"):
    """FLORES de-en pairs, one in four misaligned (its target from another sentence); its labels."""
    require_shared(FLORES / f"{src}.txt", FLORES / "en.txt")
    de = (FLORES / f"{src}.txt").read_text(encoding="utf-8").split("\n")[:n]
    en = (FLORES / "en.txt").read_text(encoding="utf-8").split("\n")[: 2 * n]
    tgt = [en[i] if i % 4 else en[n + i] for i in range(n)]
    (directory / f"c.{src}").write_text("".join(s + "\n" for s in de), encoding="utf-8")
    (directory / "c.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    (directory / "c.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(de, tgt)), encoding="utf-8")
    return np.array([i % 4 != 0 for i in range(n)])


def read_scores(path):
    return np.array([float(line) for line in Path(path).read_text().splitlines()])


def test_score_command_files_tsv_keep_removed_and_reuse(tmp_path):
    aligned = noisy_corpus(tmp_path)
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", "--keep", "k.tsv",
                 "--removed", "r.tsv", "--embed-dir", "emb", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    scores = read_scores(tmp_path / "s.txt")
    assert len(scores) == 120
    # nothing of the run's own left beside the embeddings (the kNN scratch directory, the scores' memory map)
    assert not list((tmp_path / "emb").glob("mine-scratch-*")) and not list((tmp_path / "emb").glob("scores-*"))
    # the margin tells the misaligned quarter apart (laser-mini)
    assert scores[~aligned].max() < np.median(scores[aligned])
    kept = (tmp_path / "k.tsv").read_text(encoding="utf-8").splitlines()
    removed = (tmp_path / "r.tsv").read_text(encoding="utf-8").splitlines()
    pairs = (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()
    assert kept == [p for p, s in zip(pairs, scores) if s >= 1.06]
    assert removed == [p for p, s in zip(pairs, scores) if s < 1.06]
    assert 0 < len(removed) < 120
    manifest = json.loads((tmp_path / "s.txt.manifest.json").read_text())
    assert manifest["format"] == "hf-laser-scores/1"
    assert manifest["identity"]["scoring"] == {"method": "margin", "margin": "ratio", "k": 4, "index": "flat",
                                               "nlist": None, "nprobe": None}
    assert manifest["identity"]["src"]["lang"] == "de" and len(manifest["identity"]["src"]["input_sha256"]) == 64

    # the same computation: reused (a new threshold is one pass over the files)
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", "--keep", "k2.tsv",
                 "--threshold", "1.2", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0 and "(reused)" in r.stderr, r.stderr
    assert (tmp_path / "k2.tsv").read_text(encoding="utf-8").splitlines() == [
        p for p, s in zip(pairs, scores) if s >= 1.2]
    # another k: recomputed, saying why
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", "-k", "3",
                 "--no-progress", "--embed-dir", "emb", cwd=tmp_path)
    assert r.returncode == 0 and "recomputing the scores" in r.stderr and "scoring" in r.stderr, r.stderr
    assert not np.array_equal(read_scores(tmp_path / "s.txt"), scores)
    # an edited scores file is not reused
    (tmp_path / "s.txt").write_text("9.0\n" * 120)
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", "-k", "3",
                 "--no-progress", "--embed-dir", "emb", cwd=tmp_path)
    assert r.returncode == 0 and "changed after its manifest" in r.stderr, r.stderr

    # the TSV (a file, and stdin) gives the same scores; stdout output
    r = hf_laser("score", "--tsv", "c.tsv", "--src-lang", "de", "--tgt-lang", "en", "-o", "-", "--no-progress",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.array([float(v) for v in r.stdout.split()]), scores)
    r = hf_laser("score", "--tsv", "-", "--src-lang", "de", "--tgt-lang", "en", "--keep", "-", "--no-progress",
                 cwd=tmp_path, stdin=(tmp_path / "c.tsv").read_text(encoding="utf-8"))
    assert r.returncode == 0 and r.stdout.splitlines() == kept, r.stderr


def test_score_command_cosine_model_set_and_language_check(tmp_path):
    require_shared(FLORES / "cy.txt")
    noisy_corpus(tmp_path, n=40, src="cy")
    lines = (tmp_path / "c.cy").read_text(encoding="utf-8").splitlines()
    fr = (FLORES / "fr.txt").read_text(encoding="utf-8").splitlines()
    lines[5] = fr[5]  # a French source sentence in a Welsh corpus
    (tmp_path / "c.cy").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    r = hf_laser("score", "c.cy", "c.en", "--model", "laser-mini-set", "--src-lang", "cy", "--tgt-lang", "en",
                 "--method", "cosine", "-o", "s.txt", "--keep", "k.tsv", "--threshold", "-1", "--check-lang",
                 "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    identity = json.loads((tmp_path / "s.txt.manifest.json").read_text())["identity"]
    # each side by the member of its language: the Welsh student and the default model
    assert identity["src"]["model"] != identity["tgt"]["model"]
    assert identity["scoring"] == {"method": "cosine"}
    kept = (tmp_path / "k.tsv").read_text(encoding="utf-8").splitlines()
    assert len(kept) < 40 and all(not k.startswith(fr[5]) for k in kept)
    assert "wrong language" in r.stderr


def test_score_command_refusals(tmp_path):
    noisy_corpus(tmp_path, n=8)
    (tmp_path / "bad.tsv").write_text("a\tb\nc\td\te\n")
    r = hf_laser("score", "--tsv", "bad.tsv", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", cwd=tmp_path)
    assert r.returncode == 2 and "line 2 of bad.tsv has 3 column(s)" in r.stderr, r.stderr
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "--method", "cosine", "--keep",
                 "k.tsv", cwd=tmp_path)
    assert r.returncode == 2 and "need a --threshold" in r.stderr, r.stderr
    (tmp_path / "short.en").write_text("one\n")
    r = hf_laser("score", "c.de", "short.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "s.txt", cwd=tmp_path)
    assert r.returncode == 2 and "not aligned" in r.stderr, r.stderr
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", cwd=tmp_path)
    assert r.returncode == 2 and "nothing to write" in r.stderr, r.stderr
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-o", "c.en", cwd=tmp_path)
    assert r.returncode == 2 and "different files" in r.stderr, r.stderr
    r = hf_laser("score", "c.de", "c.en", "--src-lang", "de", "--tgt-lang", "en", "-k", "9", "-o", "s.txt",
                 cwd=tmp_path)
    assert r.returncode == 2 and "-k 9 is larger than the corpus (8 pairs)" in r.stderr, r.stderr
    assert not (tmp_path / "s.txt").exists()
    # an empty corpus (a pipeline's filter may be handed nothing): empty outputs, not an error
    r = hf_laser("score", "--tsv", "-", "--src-lang", "de", "--tgt-lang", "en", "--keep", "-", cwd=tmp_path, stdin="")
    assert r.returncode == 0 and r.stdout == "" and "empty" in r.stderr, r.stderr


def test_score_files_and_score_sentences_agree(tmp_path):
    from hf_laser import LaserEncoder
    from hf_laser.mining import score_files, score_sentences

    encoder = LaserEncoder.from_pretrained("laser-mini")
    de = (REPO / "examples" / "de.txt").read_text(encoding="utf-8").splitlines()
    en = (REPO / "examples" / "en.txt").read_text(encoding="utf-8").splitlines()
    in_memory = score_sentences(encoder, de, en, src_lang="de", tgt_lang="en", k=3)
    on_disk = score_files(encoder, REPO / "examples" / "de.txt", REPO / "examples" / "en.txt", tmp_path,
                          src_lang="de", tgt_lang="en", k=3)
    np.testing.assert_allclose(np.asarray(on_disk), in_memory, atol=1e-5)
    assert (tmp_path / "src.npy.manifest.json").is_file() and (tmp_path / "knn" / "x2y_sim.npy").is_file()
    shuffled = score_sentences(encoder, de, en[1:] + en[:1], src_lang="de", tgt_lang="en", k=3)
    assert shuffled.max() < in_memory.min()  # misaligned pairs score below every aligned one
