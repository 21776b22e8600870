"""SONAR's text encoder without fairseq2: conversion, fairseq2's token ids and the original's embeddings.

The references are in tests/fixtures/sonar (written by make_fixtures.py there with fairseq2 0.8.1 + sonar-space 0.5.0;
its README says what each file holds): a stand-in SentencePiece model in NLLB's layout, 1,044 lines (FLORES-200
devtest in 12 scripts + edge cases) with fairseq2's ids and language tags, a small random encoder's checkpoint and
embeddings, and the full-size encoder's key names, seed and embeddings of 79 lines. Neither fairseq2 nor
../shared is needed.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sonar_helpers import sonar_lines

from hf_laser.checkpoints.sonar import NotASonarCheckpoint, convert_sonar
from hf_laser.errors import UsageError, one_line
from hf_laser.modeling.configuration_sonar import SonarConfig
from hf_laser.modeling.modeling_sonar import SonarModel
from hf_laser.text.tokenization_sonar import MAX_LENGTH, SONAR_LANGS, SonarTokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "sonar"
SPM = FIXTURES / "stand-in.spm.model"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TOLERANCE = 1e-5  # max abs difference with the original, float32


@pytest.fixture(scope="module")
def record() -> dict:
    with gzip.open(FIXTURES / "lines.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def make_fixtures():
    """make_fixtures.py as a module (its `random_sonar_state` needs numpy and torch only; `main` is not run)."""
    spec = importlib.util.spec_from_file_location("sonar_make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tokenizer() -> SonarTokenizer:
    return SonarTokenizer(str(SPM))


@pytest.fixture(scope="module")
def small_dir(tmp_path_factory) -> Path:
    return convert_sonar(FIXTURES / "small.pt", SPM, tmp_path_factory.mktemp("sonar-small"), num_attention_heads=4)


def embed(model: SonarModel, tokenizer: SonarTokenizer, lines: list[str], langs: list[str],
          batch_size: int = 16) -> np.ndarray:
    """Sentence embeddings, batches of similar lengths (right padding), rows in the input order."""
    out = np.zeros((len(lines), model.config.d_model), dtype=np.float32)
    order = np.argsort([len(line) for line in lines], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            ids = [tokenizer.encode(lines[i], lang=langs[i]) for i in rows]
            width = max(map(len, ids))
            input_ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in ids])
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
            out[rows] = model(input_ids=input_ids, attention_mask=mask).pooler_output.numpy()
    return out


# ---------------------------------------------------------------------------------------------------- tokenizer
def test_token_ids_are_fairseq2s_on_every_line(record, tokenizer):
    assert tokenizer.vocab_size == record["vocab_info"]["size"] == 8206
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        record["vocab_info"]["pad_idx"], record["vocab_info"]["unk_idx"], record["vocab_info"]["bos_idx"],
        record["vocab_info"]["eos_idx"])
    assert tuple(record["langs_order"]) == SONAR_LANGS and len(SONAR_LANGS) == 202
    assert {lang: tokenizer.lang_id(lang) for lang in SONAR_LANGS} == record["lang_ids"]
    scripts = {lang.split("_")[1] for lang in record["langs"][:record["edge_start"]]}
    assert len(scripts) >= 5 and len(sonar_lines()) >= 1000
    mismatches = [i for i, (line, lang, ids) in enumerate(zip(sonar_lines(), record["langs"], record["ids"]))
                  if tokenizer.encode(line, lang=lang, truncation=False) != ids]
    assert not mismatches, f"{len(mismatches)} lines differ from fairseq2, first {mismatches[:5]}"


def test_truncation_is_the_pipelines(record, tokenizer):
    """The pipeline cuts the ids to 514: lang tag + 513 pieces, </s> dropped; shorter sequences untouched."""
    assert record["max_seq_len"] == MAX_LENGTH == tokenizer.model_max_length
    long_rows = [i for i, ids in enumerate(record["ids"]) if len(ids) > MAX_LENGTH]
    assert len(long_rows) >= 5
    for i in range(len(sonar_lines())):
        line, lang, ids = sonar_lines()[i], record["langs"][i], record["ids"][i]
        got = tokenizer(line, lang=lang)["input_ids"]
        assert got == ids[:MAX_LENGTH]
    for i in long_rows:
        got = tokenizer(sonar_lines()[i], lang=record["langs"][i])["input_ids"]
        assert len(got) == MAX_LENGTH and got[0] == tokenizer.lang_id(record["langs"][i]) and got[-1] != 3
    boundary = [len(ids) for ids in record["ids"] if 513 <= len(ids) <= 516]
    assert sorted(boundary) == [513, 514, 515, 516]
    assert len(tokenizer(sonar_lines()[long_rows[0]], lang="eng_Latn", truncation=False)["input_ids"]) > MAX_LENGTH


def test_empty_and_blank_lines(tokenizer):
    for text in ["", " ", "  \t  "]:
        assert tokenizer.encode(text, lang="zho_Hans") == [tokenizer.lang_id("zho_Hans"), 3]
    batch = tokenizer(["", "a b c"], lang="eng_Latn", padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[0] == 2 and batch["attention_mask"][0].tolist()[:3] == [1, 1, 0]


def test_tokenizer_api(tokenizer, tmp_path):
    assert tokenizer.src_lang == "eng_Latn"
    with pytest.raises(ValueError, match="unknown language 'xx_Latn'"):
        tokenizer.encode("a", lang="xx_Latn")
    # control-symbol strings in the text are text, as in fairseq2 (SentencePiece never matches control symbols)
    ids = tokenizer.encode("</s> __eng_Latn__ <pad>")
    assert ids.count(3) == 1 and ids.count(tokenizer.lang_id("eng_Latn")) == 1 and 0 not in ids
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, tokenizer.lang_id("fra_Latn")]) == [
        "<pad>", "<unk>", "<s>", "</s>", "__fra_Latn__"]
    tokenizer.save_pretrained(tmp_path)
    again = SonarTokenizer.from_pretrained(tmp_path)
    assert again.encode("Une phrase.", lang="fra_Latn") == tokenizer.encode("Une phrase.", lang="fra_Latn")


def test_transformers_nllb_tokenizer_differs(record, tmp_path):
    """What SonarTokenizer's docstring says of transformers' NllbTokenizer (v5: the `tokenizers` conversion of the
    SentencePiece model) on the stand-in model: the special ids are fairseq's (<s> 0, <pad> 1, </s> 2, <unk> 3), the
    language tags are not in a vocabulary built from the .model file alone, and the pieces agree with fairseq2's
    except on trailing whitespace (a final "▁" piece that SentencePiece does not produce)."""
    from transformers import NllbTokenizer

    (tmp_path / "sentencepiece.bpe.model").write_bytes(SPM.read_bytes())
    try:
        nllb = NllbTokenizer.from_pretrained(tmp_path, src_lang="eng_Latn")
    except Exception as err:  # a transformers without the conversion
        pytest.skip(f"NllbTokenizer unavailable: {one_line(err)}")
    assert [nllb.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>")] == [0, 1, 2, 3]
    fairseq_to_fairseq2 = {0: 2, 1: 0, 2: 3, 3: 1}
    differ = []
    for i, (line, ids) in enumerate(zip(sonar_lines(), record["ids"])):
        theirs = [fairseq_to_fairseq2.get(x, x) for x in nllb(line)["input_ids"]]
        if theirs[1:] != ids[1:]:  # all but the language tag
            differ.append(i)
    assert len(differ) < 10 and all(sonar_lines()[i] != sonar_lines()[i].rstrip() for i in differ), [
        sonar_lines()[i][-20:] for i in differ]


# ---------------------------------------------------------------------------------------------------- model
def test_small_encoder_matches_the_original(record, small_dir):
    model = SonarModel.from_pretrained(small_dir).eval()
    tokenizer = SonarTokenizer.from_pretrained(small_dir)
    assert model.config.d_model == 64 and model.config.encoder_layers == 2
    reference = np.load(FIXTURES / "small.npy")
    got = embed(model, tokenizer, sonar_lines(), record["langs"])
    diff = np.abs(got - reference).max(axis=1)
    assert reference.shape == (len(sonar_lines()), 64)
    assert diff.max() < TOLERANCE, f"max abs difference {diff.max():.3g} at line {int(diff.argmax())}"


def test_padding_does_not_change_embeddings(small_dir):
    model = SonarModel.from_pretrained(small_dir).eval()
    tokenizer = SonarTokenizer.from_pretrained(small_dir)
    lines = ["A short one.", "", "A somewhat longer sentence with more pieces than the first."]
    with torch.inference_mode():
        batch = tokenizer(lines, lang="eng_Latn", padding=True, return_tensors="pt")
        together = model(**batch).pooler_output
        alone = torch.cat([model(**tokenizer([x], lang="eng_Latn", return_tensors="pt")).pooler_output
                           for x in lines])
        left = tokenizer(lines, lang="eng_Latn", padding=True, padding_side="left", return_tensors="pt")
        left_out = model(**left).pooler_output
        out = model(**batch)
    assert torch.allclose(together, alone, atol=1e-6) and torch.allclose(left_out, alone, atol=1e-6)
    assert out.last_hidden_state.shape == (3, batch["input_ids"].shape[1], 64) and out.pooler_output.shape == (3, 64)
    with pytest.raises(ValueError, match="more than the encoder's 514 positions"):
        model(input_ids=torch.full((1, 515), 5))


@pytest.mark.slow
def test_full_size_encoder_matches_the_original(record, make_fixtures, tmp_path):
    """24 layers x 1024, ffn 8192, 16 heads: the weights rebuilt from the seed, written as fairseq2's file,
    converted, and compared on 52 of the 79 lines the fixture keeps (12 scripts, edge cases, a line cut to 514)."""
    keys = json.loads((FIXTURES / "full.keys.json").read_text())
    state = make_fixtures.random_sonar_state([(k, s) for k, s in keys["shapes"]], keys["seed"])
    torch.save({"model": state}, tmp_path / "sonar_text_encoder.pt")
    del state
    out = convert_sonar(tmp_path / "sonar_text_encoder.pt", SPM, tmp_path / "hf")
    (tmp_path / "sonar_text_encoder.pt").unlink()
    model = SonarModel.from_pretrained(out).eval()
    assert (model.config.encoder_layers, model.config.d_model, model.config.encoder_ffn_dim,
            model.config.encoder_attention_heads) == (24, 1024, 8192, 16)
    reference = np.load(FIXTURES / "full.npy")
    assert reference.shape == (len(record["full_rows"]), 1024)
    # to keep the test short: 3 FLORES lines per script, the short edge cases, and the line of 516 ids (cut to 514)
    ids, edge = record["ids"], record["edge_start"]
    keep = [k for k, i in enumerate(record["full_rows"])
            if (i < edge and i % 85 < 3) or (i >= edge and (len(ids[i]) <= 100 or len(ids[i]) == 516))]
    rows = [record["full_rows"][k] for k in keep]
    got = embed(model, SonarTokenizer.from_pretrained(out), [sonar_lines()[i] for i in rows],
                [record["langs"][i] for i in rows], batch_size=8)
    diff = np.abs(got - reference[keep]).max(axis=1)
    assert len(keep) == 52
    assert diff.max() < TOLERANCE, f"max abs difference {diff.max():.3g} at fixture row {int(diff.argmax())}"


# ---------------------------------------------------------------------------------------------------- refused files
def _small_state() -> dict:
    return torch.load(FIXTURES / "small.pt", weights_only=True)["model"]


class _Global:
    pass


@pytest.mark.parametrize("case", ["not-a-dict", "global", "wrong-shape", "missing-key", "unexpected-key",
                                  "no-model", "not-tensors", "text-file"])
def test_refused_files(case, tmp_path):
    path = tmp_path / "bad.pt"
    state = _small_state()
    if case == "not-a-dict":
        torch.save([1, 2, 3], path)
        match = "not a SONAR text encoder checkpoint.*found a list"
    elif case == "global":
        torch.save({"model": state, "extra": _Global()}, path)
        match = "holds Python objects a checkpoint does not have"
    elif case == "wrong-shape":
        state["encoder.layers.1.ffn.inner_proj.weight"] = torch.zeros(128, 32)
        torch.save({"model": state}, path)
        match = r"encoder.layers.1.ffn.inner_proj.weight has shape \(128, 32\), expected \(128, 64\)"
    elif case == "missing-key":
        del state["encoder.layers.0.self_attn.k_proj.bias"]
        torch.save({"model": state}, path)
        match = "missing keys: encoder.layers.0.self_attn.k_proj.bias"
    elif case == "unexpected-key":
        state["decoder.layer_norm.weight"] = torch.zeros(64)
        torch.save({"model": state}, path)
        match = "unexpected keys for a SONAR text encoder: decoder.layer_norm.weight"
    elif case == "no-model":
        torch.save({"state_dict": state}, path)
        match = "found a dict with keys state_dict"
    elif case == "not-tensors":
        state["layer_norm.weight"] = [1.0] * 64
        torch.save({"model": state}, path)
        match = "must map names to tensors; not so for layer_norm.weight"
    else:
        path.write_text("hello\n")
        match = "could not be read as a SONAR text encoder checkpoint"
    with pytest.raises(NotASonarCheckpoint, match=match) as info:
        convert_sonar(path, SPM, tmp_path / "out", num_attention_heads=4)
    assert isinstance(info.value, UsageError) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_vocabulary_mismatch_and_missing_files(tmp_path):
    state = _small_state()
    state["encoder_frontend.embed.weight"] = state["encoder_frontend.embed.weight"][:-3]
    torch.save({"model": state}, tmp_path / "short.pt")
    with pytest.raises(NotASonarCheckpoint, match="embedding table has 8203 rows, the tokenizer .* 8206"):
        convert_sonar(tmp_path / "short.pt", SPM, tmp_path / "out", num_attention_heads=4)
    with pytest.raises(FileNotFoundError):
        convert_sonar(tmp_path / "absent.pt", SPM, tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        convert_sonar(FIXTURES / "small.pt", tmp_path / "absent.model", tmp_path / "out")


# ---------------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("kwargs, match", [
    ({"d_model": 63}, "d_model must be even"),
    ({"d_model": 64, "encoder_attention_heads": 5}, "must divide d_model"),
    ({"encoder_layers": -1}, "encoder_layers must be >= 0"),
    ({"vocab_size": "8"}, "vocab_size must be an integer"),
    ({"activation_function": "tanh"}, "activation_function must be one of"),
    ({"dropout": 1.5}, r"dropout must be a number in \[0, 1\)"),
    ({"pooling": "max"}, "pooling must be 'mean'"),
    ({"vocab_size": 10, "pad_token_id": 10}, r"pad_token_id \(10\) must be < vocab_size"),
    ({"scale_embedding": 1}, "scale_embedding must be a bool"),
])
def test_config_checks(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        SonarConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_config_round_trip(tmp_path):
    config = SonarConfig(vocab_size=100, d_model=32, encoder_layers=1, encoder_attention_heads=4, encoder_ffn_dim=8)
    config.save_pretrained(tmp_path)
    again = SonarConfig.from_pretrained(tmp_path)
    assert again.model_type == "sonar" and again.to_dict()["d_model"] == 32 and again.hidden_size == 32


# ---------------------------------------------------------------------------------------------------- real data
def test_flores_lines_in_the_fixture_are_the_shared_ones(record):
    flores = SHARED / "data" / "parallel" / "valid" / "flores200-devtest" / "en.txt"
    if not flores.is_file():
        pytest.skip(f"../shared is absent ({flores} not found): the fixture's lines cannot be traced to it")
    english = flores.read_text(encoding="utf-8").split("\n")
    rows = [i for i, lang in enumerate(record["langs"][:record["edge_start"]]) if lang == "eng_Latn"]
    assert [sonar_lines()[i] for i in rows] == english[:len(rows)]
