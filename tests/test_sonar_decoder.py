"""SONAR's text decoder without fairseq2: conversion, fairseq2's beam search and texts, the API and `hf-laser decode`.

The reference is tests/fixtures/sonar/decoder.json.gz, written by make_decoder_fixtures.py there with the original
code (SONAR's decoder factory and `EmbeddingToTextModelPipeline` on fairseq2 0.8.1): for a small and a full-size
random decoder (weights from `random_sonar_state` and a seed, the `</s>` row scaled so that hypotheses end before the
length limit), every hypothesis of every input (ids, score, per-step scores) and the texts, for the pipeline's
defaults, greedy search and every generator option. The inputs are the encoder fixtures' embeddings (small.npy,
full.npy). Neither fairseq2 nor ../shared is needed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sonar_helpers import decoder_record, decoder_state, write_small_decoder_checkpoint

from hf_laser.checkpoints.sonar import NotASonarCheckpoint, sonar_checkpoint_kind
from hf_laser.checkpoints.sonar_decoder import (
    convert_sonar_decoder,
    map_sonar_decoder_state,
    sonar_decoder_config_from_state,
)
from hf_laser.decoder import SonarTextDecoder
from hf_laser.text.text_tokenizer import LaserInputError
from hf_laser.modeling.modeling_sonar_decoder import SonarDecoderModel, new_decoder_cache
from hf_laser.modeling.sonar_generation import GenerationOptions

FIXTURES = Path(__file__).parent / "fixtures" / "sonar"
SPM = FIXTURES / "stand-in.spm.model"
SCORE_TOLERANCE = 1e-4  # scores are sums of up to 512 log-probabilities (float32)


@pytest.fixture(scope="module")
def record() -> dict:
    return decoder_record()


@pytest.fixture(scope="module")
def random_state():
    return decoder_state


@pytest.fixture(scope="module")
def small_dir(random_state, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sonar-decoder")
    checkpoint = write_small_decoder_checkpoint(tmp / "sonar_text_decoder.pt")
    return convert_sonar_decoder(checkpoint, SPM, tmp / "small", num_attention_heads=4)


@pytest.fixture(scope="module")
def small(small_dir) -> SonarTextDecoder:
    return SonarTextDecoder.from_pretrained(small_dir)


def options(run: dict) -> dict:
    opts = dict(run["options"])
    if "max_gen_len" in opts:
        opts["max_gen_len"] = tuple(opts["max_gen_len"])
    return opts


def check_run(decoder: SonarTextDecoder, run: dict, embeddings: np.ndarray, rows: list[int] | None = None,
              **kwargs) -> None:
    rows = list(range(len(run["rows"]))) if rows is None else rows
    got = decoder.generate(embeddings[[run["rows"][r] for r in rows]], run["lang"], **options(run), **kwargs)
    for r, beam in zip(rows, got):
        expected = run["hypotheses"][r]
        assert [h.ids for h in beam] == [h["ids"] for h in expected], f"{run['name']} input {r}"
        for h, e in zip(beam, expected):
            assert abs(h.score - e["score"]) <= SCORE_TOLERANCE
            np.testing.assert_allclose(h.step_scores, e["step_scores"], rtol=0, atol=SCORE_TOLERANCE)
            assert decoder.tokenizer.decode(h.ids) == e["text"]
        assert decoder.tokenizer.decode(beam[0].ids) == run["texts"][r]


@pytest.mark.parametrize("name", ["small-default", "small-greedy", "small-options", "small-sharp"])
def test_small_decoder_matches_the_original(record, small, name):
    run = next(r for r in record["runs"] if r["name"] == name)
    check_run(small, run, np.load(FIXTURES / run["input"]))


def test_fixture_covers_what_it_should(record):
    """The reference exercises endings by `</s>` before the limit, endings at the limit, and every beam size."""
    lengths = {r["name"]: [len(beam[0]["ids"]) for beam in r["hypotheses"]] for r in record["runs"]}
    assert min(lengths["small-default"]) < 192 and max(lengths["small-greedy"]) == 192
    assert {len(beam) for r in record["runs"] for beam in r["hypotheses"]} >= {1, 3, 4, 5}
    tags = [i for r in record["runs"] for beam in r["hypotheses"] for h in beam for i in h["ids"] if i > 8000]
    assert tags, "no language tag or internal symbol among the hypotheses"


def test_text_of_special_symbols_is_fairseq2s(record, small):
    """<pad>, <unk>, <s>, </s>, tags and internal symbols anywhere in a sequence: fairseq2's decoder's text."""
    cases = record["decode_cases"]
    assert any(1 in ids for ids, _ in cases) and any(2 in ids for ids, _ in cases)
    for ids, text in cases:
        assert small.tokenizer.decode(ids) == text, ids
    with pytest.raises(ValueError, match="outside the vocabulary"):
        small.tokenizer.decode([8206])


@pytest.mark.slow
def test_full_size_decoder_matches_the_original(record, random_state):
    state = random_state("full")
    config = sonar_decoder_config_from_state(state)  # 16 heads: 1024 / 64
    assert (config.decoder_layers, config.d_model, config.decoder_ffn_dim, config.decoder_attention_heads) == \
        (24, 1024, 8192, 16)
    model = SonarDecoderModel(config)
    model.load_state_dict(map_sonar_decoder_state(state, config), strict=True)
    del state
    from hf_laser.text.sonar_text_tokenizer import SonarTextTokenizer

    decoder = SonarTextDecoder(model, SonarTextTokenizer(SPM))
    embeddings = np.load(FIXTURES / "full.npy")
    for run in record["runs"]:
        if run["decoder"] == "full":
            check_run(decoder, run, embeddings, rows=[0, 1, 4, 9])


def test_batches_do_not_change_the_result(record, small):
    run = next(r for r in record["runs"] if r["name"] == "small-options")
    check_run(small, run, np.load(FIXTURES / run["input"]), rows=list(range(7)), batch_size=1)
    check_run(small, run, np.load(FIXTURES / run["input"]), rows=list(range(7)), batch_size=7)


def test_language_names_and_prompt(record, small):
    assert small.target_prefix("fra_Latn") == record["small"]["prefix"]["fra_Latn"]
    assert small.target_prefix("French") == small.target_prefix("fr") == small.target_prefix("fra_Latn")
    with pytest.raises(LaserInputError, match="SONAR has no language"):
        small.target_prefix("xx")


def test_teacher_forcing_equals_step_by_step(small):
    """All positions at once (causal mask) give the logits one id at a time with the cache gives."""
    model = small.model
    emb = torch.from_numpy(np.load(FIXTURES / "small.npy")[:3])
    ids = torch.tensor([[3, 8057, 100, 200, 300, 5, 6]] * 3)
    with torch.inference_mode():
        whole = model(ids, emb).logits
        cache = new_decoder_cache()
        steps = torch.cat([model(ids[:, i:i + 1], emb, past_key_values=cache).logits for i in range(ids.shape[1])],
                          dim=1)
    torch.testing.assert_close(whole, steps, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="one id at a time"):
        model(ids[:, :2], emb, past_key_values=cache)


@pytest.mark.parametrize("kwargs, match", [
    ({"beam_size": 0}, "beam_size"), ({"min_gen_len": 0}, "min_gen_len"), ({"max_gen_len": 5}, "max_gen_len"),
    ({"max_seq_len": 1}, "max_seq_len"), ({"temperature": 0}, "temperature"),
])
def test_options_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GenerationOptions(**kwargs)


def test_limits_as_fairseq2s(small):
    emb = np.load(FIXTURES / "small.npy")[:2]
    with pytest.raises(ValueError, match="min_gen_len"):
        small.generate(emb, "eng_Latn", min_gen_len=300)  # more than 1 x 64 + 128
    with pytest.raises(ValueError, match="prompt"):
        small.generate(emb, "eng_Latn", max_seq_len=2)
    # the longest output: min(max_seq_len, 2 + int(a x dim + b)) ids, the prompt included
    beams = small.generate(emb, "eng_Latn", beam_size=1, max_gen_len=(0.0, 3))
    assert all(len(b[0].ids) <= 3 for b in beams)


def test_bad_embeddings_refused(small):
    with pytest.raises(LaserInputError, match=r"\(n, 64\)"):
        small.decode(np.zeros((2, 1024), dtype=np.float32), "eng_Latn")
    with pytest.raises(LaserInputError, match="NaN"):
        small.decode(np.full((1, 64), np.nan, dtype=np.float32), "eng_Latn")


@pytest.mark.parametrize("case", ["untied", "wrong-shape", "missing", "not-a-checkpoint", "vocabulary"])
def test_refused_checkpoints(case, random_state, tmp_path):
    state = {k: v.clone() for k, v in random_state("small").items()}
    spm = SPM
    if case == "untied":
        state["final_proj.weight"] = state["final_proj.weight"] + 1
        match = "ties them"
    elif case == "wrong-shape":
        state["decoder.layers.1.ffn.inner_proj.weight"] = torch.zeros(7, 64)
        match = "shape"
    elif case == "missing":
        del state["decoder.layers.0.encoder_decoder_attn.v_proj.bias"]
        match = "missing"
    elif case == "not-a-checkpoint":
        state = None
        match = "is not a SONAR text decoder checkpoint"
    else:
        state["decoder_frontend.embed.weight"] = state["decoder_frontend.embed.weight"][:-1].clone()
        state["final_proj.weight"] = state["decoder_frontend.embed.weight"]
        match = "rows"
    path = tmp_path / "decoder.pt"
    torch.save({"weights": 1} if state is None else {"model": state}, path)
    with pytest.raises(NotASonarCheckpoint, match=match):
        convert_sonar_decoder(path, spm, tmp_path / "out", num_attention_heads=4)
    assert not (tmp_path / "out").exists()


def test_cli_convert_and_decode(record, tmp_path):
    checkpoint = write_small_decoder_checkpoint(tmp_path / "sonar_text_decoder.pt")
    assert sonar_checkpoint_kind(checkpoint) == "decoder"
    cli = [sys.executable, "-m", "hf_laser.cli"]
    done = subprocess.run(cli + ["convert", str(checkpoint), str(tmp_path / "dec"), "--spm-model", str(SPM),
                                 "--attention-heads", "4"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "SONAR text decoder" in done.stderr and "CC BY-NC 4.0" in done.stderr
    assert "cc-by-nc-4.0" in (tmp_path / "dec" / "README.md").read_text()
    run = next(r for r in record["runs"] if r["name"] == "small-options")
    np.save(tmp_path / "emb.npy", np.load(FIXTURES / "small.npy")[run["rows"][:6]])
    opts = run["options"]
    done = subprocess.run(cli + ["decode", "--model", str(tmp_path / "dec"), "--lang", "zho_Hans", "-i", str(tmp_path / "emb.npy"), "-o",
                                 str(tmp_path / "out.txt"), "--beam-size", str(opts["beam_size"]),
                                 "--min-gen-len", str(opts["min_gen_len"]), "--max-seq-len",
                                 str(opts["max_seq_len"]), "--len-penalty", str(opts["len_penalty"]),
                                 "--unk-penalty", str(opts["unk_penalty"])], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "".join(t + "\n" for t in run["texts"][:6])


def test_cli_decode_refusals(small_dir, tmp_path):
    cli = [sys.executable, "-m", "hf_laser.cli", "decode", "--model", str(small_dir), "--lang", "eng_Latn"]
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    np.save(tmp_path / "ints.npy", np.zeros((2, 64), dtype=np.int64))
    np.save(tmp_path / "wide.npy", np.zeros((2, 1024), dtype=np.float32))
    for name, match in (("bad.npy", "not a .npy file"), ("ints.npy", "2-d float array"),
                        ("wide.npy", "dimension 1024, the decoder reads 64"), ("absent.npy", "not found")):
        done = subprocess.run(cli + ["-i", str(tmp_path / name)], capture_output=True, text=True)
        assert done.returncode == 2, (name, done.stderr)
        assert match in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    np.save(tmp_path / "ok.npy", np.zeros((1, 64), dtype=np.float32))
    done = subprocess.run(cli[:-1] + ["xx", "-i", str(tmp_path / "ok.npy")], capture_output=True, text=True)
    assert done.returncode == 2 and "SONAR has no language 'xx'" in done.stderr
