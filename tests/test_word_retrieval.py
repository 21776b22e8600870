"""evaluation/word_retrieval.py: words → BPE spans, word vectors, CSLS, test-pair bookkeeping with a known answer,
and eflomal links on a synthetic word-for-word translation (skipped without eflomal)."""

from __future__ import annotations

import importlib.util
import random
import sys
from types import SimpleNamespace

import pytest
import torch

from conftest import REPO

sys.path.insert(0, str(REPO))  # the evaluation/ package lives next to src/

from evaluation import word_retrieval as wr  # noqa: E402

needs_eflomal = pytest.mark.skipif(importlib.util.find_spec("eflomal") is None,
                                   reason='needs eflomal (pip install "hf-laser[align]")')

LINES = ["The cat sleeps on the old house.", "Tom is not a dog, is he?", "A big red house; no team."]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from hf_laser import LaserModel, LaserTokenizer
    from hf_laser.encoder import LaserEncoder

    return (LaserModel.from_pretrained(tiny_model_dir).eval(), LaserTokenizer.from_pretrained(tiny_model_dir),
            LaserEncoder.from_pretrained(tiny_model_dir))


# ---------------------------------------------------------------------------------------------- real model
def test_word_pieces_are_the_sentence_tokenisation(tiny):
    _, tokenizer, encoder = tiny
    words = wr.laser_words(tokenizer, LINES, "en")
    assert words[0][:2] == ["the", "cat"]  # lowercased Moses tokens
    pieces = wr.word_pieces(tokenizer, words)
    assert pieces.ids == encoder.token_ids(LINES, "en")
    for ids, spans, ws in zip(pieces.ids, pieces.spans, words):
        assert len(spans) == len(ws) and spans[0][0] == 0 and spans[-1][1] == len(ids) - 1  # then </s>
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(spans, spans[1:]))
    assert any(b - a > 1 for spans in pieces.spans for a, b in spans)  # some word has several pieces


def test_word_vectors_pool_the_pieces_states(tiny):
    model, tokenizer, _ = tiny
    pieces = wr.word_pieces(tokenizer, wr.laser_words(tokenizer, LINES, "en"))
    with torch.inference_mode():
        mean = wr.word_vectors(model, pieces)
        first = wr.word_vectors(model, pieces, pooling="first")
        one_by_one = wr.word_vectors(model, pieces, max_tokens=1)  # every sentence its own batch
        subset = wr.word_vectors(model, pieces, sentences=[2, 0], words=[[3, 1], [0]])
        for s, ids in enumerate(pieces.ids):
            hidden = model(torch.tensor([ids])).last_hidden_state[0]
            for w, (a, b) in enumerate(pieces.spans[s]):
                torch.testing.assert_close(mean[s][w], hidden[a:b].mean(0), atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(first[s][w], hidden[a], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(one_by_one[s], mean[s], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(subset[0], mean[2][[3, 1]])
    torch.testing.assert_close(subset[1], mean[0][[0]])
    with pytest.raises(ValueError, match="pooling"):
        wr.word_vectors(model, pieces, pooling="max")


# ---------------------------------------------------------------------------------------------- CSLS
def test_csls_retrieve():
    eye = torch.eye(6)
    assert wr.csls_retrieve(eye, eye, k=3).tolist() == list(range(6))
    # queries e_i + 1.5 e_0: the candidate e_0 is every query's cosine nearest neighbour, CSLS sees through the hub
    queries = torch.nn.functional.normalize(eye + 1.5 * eye[0], dim=-1)
    queries[0] = eye[0]
    assert (queries @ eye.T).argmax(1).tolist() == [0] * 6
    assert wr.csls_retrieve(queries, eye, k=3).tolist() == list(range(6))
    with pytest.raises(ValueError, match="queries and candidates"):
        wr.csls_retrieve(torch.zeros(0, 6), eye)


# ---------------------------------------------------------------------------------------------- bookkeeping
class ConceptModel(torch.nn.Module):
    """A perfectly 'aligned' fake encoder: every token's state is the one-hot vector of its concept."""

    def __init__(self, concept_of_id: list[int]):
        super().__init__()
        self.config = SimpleNamespace(pad_token_id=0)
        self.table = torch.nn.Parameter(torch.eye(max(concept_of_id) + 1)[concept_of_id], requires_grad=False)

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(last_hidden_state=self.table[input_ids])


class WordTokenizer:
    """Each word is one piece; ids from a fixed vocabulary."""

    unk_token, eos_token = "<unk>", "</s>"

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab
        self.pipeline = SimpleNamespace(subword_tokens=lambda lines: [line.split() for line in lines])

    def get_vocab(self):
        return self.vocab


def test_retrieval_known_answer_and_exclusions():
    """Source word k and its linked target word share a concept, except in 4 of the 12 pairs where the target
    carries the next misaligned pair's concept: accuracy is then exactly 8/12 both ways, for every pair a distinct
    concept, so the non-contextual set is the same."""
    n = 12
    src = [[f"s{2 * i}", f"s{2 * i + 1}"] for i in range(n // 2)]
    tgt = [[f"t{2 * i + 1}", f"t{2 * i}"] for i in range(n // 2)]  # reversed word order
    links = [[(0, 1), (1, 0)] for _ in range(n // 2)]
    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2, **{f"s{k}": 3 + k for k in range(n)},
             **{f"t{k}": 3 + n + k for k in range(n)}}
    concept = {i: i for i in range(3)}
    wrong = [1, 4, 7, 10]
    for k in range(n):
        concept[vocab[f"s{k}"]] = 3 + k
        concept[vocab[f"t{k}"]] = 3 + (wrong[(wrong.index(k) + 1) % 4] if k in wrong else k)
    model = ConceptModel([concept[i] for i in range(len(vocab))])
    bitext = wr.AlignedBitext("xx", "en", src, tgt, links)
    res = wr.evaluate_word_retrieval(model, WordTokenizer(vocab), bitext, k=3)
    assert res["pairs"] == {"links": 12, "exact_match": 0, "seen_in_training": 0, "pairs": 12}
    for direction in ("src2tgt", "tgt2src"):
        assert res[direction]["contextual"] == pytest.approx(100 * 8 / 12, abs=0.01)
        assert res[direction]["non_contextual"] == pytest.approx(100 * 8 / 12, abs=0.01)
        assert res[direction]["n_contextual"] == res[direction]["n_non_contextual"] == 12
    # excluding pairs seen in training (two of the wrong ones) and an exact string match
    src[0][0] = tgt[0][1] = "same"
    vocab["same"] = len(vocab)
    model = ConceptModel([concept.get(i, 3) for i in range(len(vocab))])
    res = wr.evaluate_word_retrieval(model, WordTokenizer(vocab), bitext, k=3, exclude={("s1", "t1"), ("s4", "t4")})
    assert res["pairs"] == {"links": 12, "exact_match": 1, "seen_in_training": 2, "pairs": 9}
    with pytest.raises(ValueError, match="no word pair left"):
        wr.retrieval_pairs(wr.AlignedBitext("xx", "en", [["a"]], [["a"]], [[(0, 0)]]))


def test_non_contextual_uses_first_occurrence_of_each_type():
    pairs = [(0, 0, 0), (0, 1, 1), (1, 0, 0), (1, 1, 1)]
    words = [["a", "b"], ["a", "c"]]
    assert wr._first_of_each_type(pairs, words, 1) == [0, 1, 3]


def test_word_pair_files_round_trip(tmp_path):
    pairs = {("haus", "house"), ("katze", "cat")}
    path = wr.write_word_pairs(tmp_path / "p" / "de-en.tsv", pairs)
    assert path.read_text() == "haus\thouse\nkatze\tcat\n"
    assert wr.read_word_pairs(path) == pairs
    path.write_text("broken line\n")
    with pytest.raises(ValueError, match="de-en.tsv:1"):
        wr.read_word_pairs(path)


# ---------------------------------------------------------------------------------------------- eflomal
@needs_eflomal
def test_eflomal_recovers_a_word_for_word_translation():
    """Target = a word-for-word translation with the first two words swapped: the intersection links are
    one-to-one and nearly all correct."""
    rng = random.Random(0)
    vocab = [f"w{k}" for k in range(40)]
    src, tgt, gold = [], [], []
    for _ in range(400):
        s = rng.sample(vocab, rng.randint(3, 7))
        t = [w.replace("w", "v") for w in s]
        t[0], t[1] = t[1], t[0]
        src.append(s)
        tgt.append(t)
        gold.append({(0, 1), (1, 0)} | {(i, i) for i in range(2, len(s))})
    src.append(["w1"])
    tgt.append([])  # an empty side: no link
    links = wr.eflomal_links(src, tgt)
    assert links[-1] == []
    total = sum(len(x) for x in links)
    correct = sum(len(set(x) & g) for x, g in zip(links, gold))
    for x in links:
        assert len({i for i, _ in x}) == len(x) == len({j for _, j in x})  # one-to-one
    assert total >= 0.9 * sum(len(g) for g in gold) and correct >= 0.95 * total


@needs_eflomal
def test_align_bitext_bad_input(tiny):
    _, tokenizer, _ = tiny
    with pytest.raises(ValueError, match="line-aligned"):
        wr.align_bitext(tokenizer, ["a b"], [], "en", "en")
    with pytest.raises(ValueError, match="words on both sides"):
        wr.align_bitext(tokenizer, ["", "  "], ["a", ""], "en", "en")
    messages = []
    bitext = wr.align_bitext(tokenizer, LINES + [""], LINES + ["tom ."], "en", "en", log=messages.append)
    assert bitext.stats["empty_side"] == 1 and len(bitext.links) == 4 and bitext.links[3] == []
    assert "1 sentence pair(s) with an empty side" in messages[0]
