"""Conversion of original LASER checkpoints: end to end through the CLI, fidelity, rejection of other files."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from conftest import BPE_CODES, BPE_VOCAB, LASER2, REFERENCE, TINY_CHECKPOINT, reference_embeddings, require_shared
from transformers import AutoModel

from hf_laser import LaserConfig, LaserModel
from hf_laser.cli import main as cli_main
from hf_laser.checkpoints.convert import NotALaserCheckpoint, TokenizerMismatch, convert, load_laser_checkpoint, verify_zip_crc
from hf_laser.encoder import LaserEncoder


def test_cli_convert_then_embed_reproduces_reference(tmp_path):
    require_shared(TINY_CHECKPOINT)
    out = tmp_path / "converted"
    result = subprocess.run([sys.executable, "-m", "hf_laser.checkpoints.convert", str(TINY_CHECKPOINT), str(out),
                             "--no-tokenizer"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert (out / "README.md").read_text().startswith("---")
    model = AutoModel.from_pretrained(out)
    assert isinstance(model, LaserModel)
    assert model.config.embedding_dim == 96 and model.config.vocab_size == 63021

    name = "tatoeba.deu-eng.deu"
    embeddings = tmp_path / "emb.npy"
    code = cli_main(["embed", "--model", str(out), "--pretokenized", "-q",
                     "-i", str(REFERENCE / "tatoeba" / f"{name}.bpe"), "-o", str(embeddings)])
    assert code == 0
    assert np.abs(np.load(embeddings) - reference_embeddings(name)).max() <= 1e-5


def test_converted_weights_equal_checkpoint(tiny_dictionary_dir):
    checkpoint = load_laser_checkpoint(TINY_CHECKPOINT)
    model = LaserModel.from_pretrained(tiny_dictionary_dir)
    state = model.state_dict()
    for key, value in checkpoint["model"].items():
        assert torch.equal(state[key], value), key


def test_every_reference_embedding_reproduced(tiny_dictionary_dir):
    """All 224 Tatoeba reference files and the 7 edge files, through `encode(pretokenized=True)`."""
    encoder = LaserEncoder.from_pretrained(tiny_dictionary_dir)
    files = sorted((REFERENCE / "tatoeba").glob("*.bpe")) + sorted((REFERENCE / "edge").glob("*.bpe"))
    assert len(files) == 231
    worst = 0.0
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")[:-1]
        emb = encoder.encode(lines, pretokenized=True)
        worst = max(worst, float(np.abs(emb - reference_embeddings(path.stem)).max()))
    assert worst <= 1e-5


@pytest.mark.parametrize("content, match", [
    ("not a checkpoint", "is not a PyTorch checkpoint \\(a text file"),
    (torch.zeros(3), "is not a LASER BiLSTM checkpoint"),
    ({"model": {}, "params": {}}, "is not a LASER BiLSTM checkpoint"),
    ({"model": {}, "params": {"num_embeddings": 4}, "dictionary": {}}, "lacks"),
])
def test_rejects_non_laser_files(tmp_path, content, match):
    path = tmp_path / "bad.pt"
    if isinstance(content, str):
        path.write_text(content)
    else:
        torch.save(content, path)
    with pytest.raises(NotALaserCheckpoint, match=match):
        load_laser_checkpoint(path)
    assert cli_main(["convert", str(path), str(tmp_path / "out"), "--no-tokenizer"]) == 2


def test_rejects_wrong_dictionary_and_shapes(tmp_path):
    require_shared(TINY_CHECKPOINT)
    checkpoint = torch.load(TINY_CHECKPOINT, weights_only=True)
    bad = dict(checkpoint, dictionary={**checkpoint["dictionary"], "<unk>": 7, "x7": 3})
    torch.save(bad, tmp_path / "dict.pt")
    with pytest.raises(NotALaserCheckpoint, match="<unk>"):
        convert(tmp_path / "dict.pt", tmp_path / "o1", no_tokenizer=True)
    bad = dict(checkpoint, params={**checkpoint["params"], "hidden_size": 64})
    torch.save(bad, tmp_path / "shape.pt")
    with pytest.raises(NotALaserCheckpoint, match="shape"):
        convert(tmp_path / "shape.pt", tmp_path / "o2", no_tokenizer=True)


def test_argument_errors(tmp_path):
    require_shared(TINY_CHECKPOINT)
    with pytest.raises(ValueError, match="not both"):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes="a", spm_model="b")
    with pytest.raises(ValueError, match="both --bpe-codes and --bpe-vocab"):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes="a")
    with pytest.raises(FileNotFoundError):
        convert(TINY_CHECKPOINT, tmp_path, bpe_codes=tmp_path / "missing", bpe_vocab=tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        load_laser_checkpoint(tmp_path / "missing.pt")


# ----------------------------------------------------------------------------------------------- conversion checks
TOKENS = ["a", "b", "ab", "c@@"]


def tiny_checkpoint(path, *, params=None, dictionary=None, state=None, legacy=False):
    """A LASER-format checkpoint with a 8-token dictionary (4 specials + TOKENS) and a 1-layer BiLSTM."""
    torch.manual_seed(0)
    model = LaserModel(LaserConfig(vocab_size=8, embed_dim=4, hidden_size=3, num_layers=1))
    checkpoint = {
        "params": {"num_embeddings": 8, "padding_idx": 1, "embed_dim": 4, "hidden_size": 3, "num_layers": 1,
                   "bidirectional": True, "left_pad": True, "padding_value": 0.0, **(params or {})},
        "dictionary": dictionary if dictionary is not None else
        {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + TOKENS)},
        "model": {k: v.clone() for k, v in model.state_dict().items()} if state is None else state,
    }
    torch.save(checkpoint, path, _use_new_zipfile_serialization=not legacy)
    return path


def bpe_files(tmp_path, tokens=TOKENS):
    codes, vocab = tmp_path / "x.fcodes", tmp_path / "x.fvocab"
    codes.write_text("a b</w> 5\n", encoding="utf-8")
    vocab.write_text("".join(f"{t} {10 - i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    return codes, vocab


def run_cli(args):
    result = subprocess.run([sys.executable, "-m", "hf_laser.checkpoints.convert", *map(str, args)], capture_output=True,
                            text=True)
    return result.returncode, result.stderr.strip()


def test_matching_bpe_files_convert(tmp_path):
    codes, vocab = bpe_files(tmp_path)
    out = convert(tiny_checkpoint(tmp_path / "ck.pt"), tmp_path / "out", bpe_codes=codes, bpe_vocab=vocab)
    assert (out / "bpe.fvocab").is_file() and LaserModel.from_pretrained(out).config.vocab_size == 8
    # fastBPE uses the fvocab as a set and the ids come from the dictionary: another line order is accepted
    _, shuffled = bpe_files(tmp_path / "..", tokens=TOKENS[::-1])
    convert(tmp_path / "ck.pt", tmp_path / "out2", bpe_codes=codes, bpe_vocab=shuffled)


@pytest.mark.parametrize("tokens, match", [
    (TOKENS[:-1], r"dictionary has 4 tokens .* the fvocab has 3; 1 dictionary tokens are not in the fvocab "
                  r"\(first: 'c@@'\)"),
    (TOKENS[:-1] + ["zz"], r"1 of the fvocab's tokens are not in the dictionary and would become <unk> "
                           r"\(first: 'zz'\)"),
])
def test_bpe_vocab_not_matching_dictionary_refused(tmp_path, tokens, match):
    codes, vocab = bpe_files(tmp_path, tokens)
    with pytest.raises(TokenizerMismatch, match=match):
        convert(tiny_checkpoint(tmp_path / "ck.pt"), tmp_path / "out", bpe_codes=codes, bpe_vocab=vocab)
    assert not (tmp_path / "out").exists()
    code, err = run_cli([tmp_path / "ck.pt", tmp_path / "out", "--bpe-codes", codes, "--bpe-vocab", vocab])
    assert code == 2 and len(err.splitlines()) == 1 and "do not belong to this checkpoint" in err, err


def test_laser1_checkpoint_with_laser2_spm_refused(tmp_path):
    require_shared(TINY_CHECKPOINT, LASER2 / "laser2-ref.spm")
    code, err = run_cli([TINY_CHECKPOINT, tmp_path / "out", "--spm-model", LASER2 / "laser2-ref.spm",
                         "--spm-vocab", LASER2 / "laser2-ref.cvocab"])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "SentencePiece files" in err and "would become <unk> (first: '▁'" in err
    assert not (tmp_path / "out").exists()


def test_laser2_checkpoint_with_laser1_bpe_refused(tmp_path):
    require_shared(LASER2 / "laser2-ref-tiny.pt", BPE_CODES, BPE_VOCAB)
    with pytest.raises(TokenizerMismatch, match=r"BPE files .* dictionary has 7997 tokens .* the fvocab has 63017"):
        convert(LASER2 / "laser2-ref-tiny.pt", tmp_path / "out", bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)
    code, err = run_cli([LASER2 / "laser2-ref-tiny.pt", tmp_path / "out", "--bpe-codes", BPE_CODES,
                         "--bpe-vocab", BPE_VOCAB])
    assert code == 2 and len(err.splitlines()) == 1 and "do not belong" in err, err


def test_cvocab_must_be_the_dictionary_in_order(tmp_path):
    require_shared(LASER2 / "laser2-ref-tiny.pt", LASER2 / "laser2-ref.cvocab")
    lines = (LASER2 / "laser2-ref.cvocab").read_text(encoding="utf-8").splitlines(keepends=True)
    swapped = tmp_path / "swapped.cvocab"
    swapped.write_text("".join([lines[1], lines[0]] + lines[2:]), encoding="utf-8")
    first, second = lines[0].split()[0], lines[1].split()[0]
    expected = f"first difference at entry 1: the dictionary has {first!r} (id 4), the cvocab has {second!r}"
    with pytest.raises(TokenizerMismatch, match=re.escape(expected)):
        convert(LASER2 / "laser2-ref-tiny.pt", tmp_path / "out", spm_model=LASER2 / "laser2-ref.spm",
                spm_vocab=swapped)


def test_tokenizer_required_unless_no_tokenizer(tmp_path):
    ck = tiny_checkpoint(tmp_path / "ck.pt")
    code, err = run_cli([ck, tmp_path / "out"])
    assert code == 2 and "a tokenizer is required" in err and "--no-tokenizer" in err, err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="a tokenizer is required"):
        convert(ck, tmp_path / "out", no_tokenizer=False)
    code, err = run_cli([ck, tmp_path / "out", "--no-tokenizer"])
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "vocab.json").read_text())["c@@"] == 7
    codes, vocab = bpe_files(tmp_path)
    with pytest.raises(ValueError, match="contradicts"):
        convert(ck, tmp_path / "o2", bpe_codes=codes, bpe_vocab=vocab, no_tokenizer=True)
    with pytest.raises(ValueError, match=r"a tokenizer is required: .*no_tokenizer=True"):  # as the CLI
        convert(ck, tmp_path / "o3")
    assert not (tmp_path / "o3").exists()


def test_non_empty_output_needs_overwrite(tmp_path):
    ck = tiny_checkpoint(tmp_path / "ck.pt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, err = run_cli([ck, out, "--no-tokenizer"])
    assert code == 2 and "is not empty" in err and "--overwrite" in err, err
    with pytest.raises(ValueError, match=r"overwrite=True"):
        convert(ck, out, no_tokenizer=True)
    assert (out / "keep.txt").read_text() == "mine"
    # a conversion that fails leaves the old directory as it was, even with --overwrite
    bad = tiny_checkpoint(tmp_path / "bad.pt", params={"hidden_size": "3"})
    assert run_cli([bad, out, "--no-tokenizer", "--overwrite"])[0] == 2
    assert (out / "keep.txt").read_text() == "mine"
    code, err = run_cli([ck, out, "--no-tokenizer", "--overwrite"])
    assert code == 0, err
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt", "ck.pt", "out"]  # no temporary leftovers
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        convert(ck, tmp_path / "file", no_tokenizer=True, overwrite=True)
    # an empty directory is fine without --overwrite
    (tmp_path / "empty").mkdir()
    assert convert(ck, tmp_path / "empty", no_tokenizer=True) == tmp_path / "empty"


def test_corrupted_checkpoint_refused_by_crc(tmp_path):
    require_shared(TINY_CHECKPOINT)
    data = bytearray(TINY_CHECKPOINT.read_bytes())
    start = len(data) // 2
    data[start:start + 4096] = bytes(b ^ 0xFF for b in data[start:start + 4096])
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(data))
    with pytest.raises(NotALaserCheckpoint, match=r"is damaged: CRC check failed for '.*data/\d+'"):
        load_laser_checkpoint(bad)
    code, err = run_cli([bad, tmp_path / "out", "--no-tokenizer"])
    assert code == 2 and len(err.splitlines()) == 1 and "CRC check failed" in err, err
    assert not (tmp_path / "out").exists()


def test_tiny_corrupted_and_legacy_checkpoints(tmp_path):
    ck = tiny_checkpoint(tmp_path / "ck.pt")
    assert verify_zip_crc(ck) is True
    with zipfile.ZipFile(ck) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)
    data = bytearray(ck.read_bytes())
    # local file header: 30 bytes, then the name and the extra field, then the (stored) tensor bytes
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    (tmp_path / "bad.pt").write_bytes(bytes(data))
    with pytest.raises(NotALaserCheckpoint, match="CRC check failed"):
        convert(tmp_path / "bad.pt", tmp_path / "o1", no_tokenizer=True)
    # legacy (pre-zip) format: nothing to check, converts
    legacy = tiny_checkpoint(tmp_path / "legacy.pt", legacy=True)
    assert verify_zip_crc(legacy) is False
    assert LaserModel.from_pretrained(convert(legacy, tmp_path / "o2", no_tokenizer=True)).config.vocab_size == 8


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_refused(tmp_path, value):
    torch.manual_seed(0)
    state = LaserModel(LaserConfig(vocab_size=8, embed_dim=4, hidden_size=3, num_layers=1)).state_dict()
    state = {k: v.clone() for k, v in state.items()}
    state["lstm.weight_hh_l0_reverse"][1, 2] = value
    ck = tiny_checkpoint(tmp_path / "ck.pt", state=state)
    with pytest.raises(NotALaserCheckpoint, match=r"NaN or infinite values in lstm\.weight_hh_l0_reverse"):
        convert(ck, tmp_path / "out", no_tokenizer=True)
    code, err = run_cli([ck, tmp_path / "out", "--no-tokenizer"])
    assert code == 2 and len(err.splitlines()) == 1 and "NaN or infinite" in err, err


SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


@pytest.mark.parametrize("kwargs, match", [
    ({"params": {"hidden_size": "3"}}, r"params\['hidden_size'\] is '3', expected a positive integer"),
    ({"params": {"num_layers": 0}}, r"params\['num_layers'\] is 0, expected a positive integer"),
    ({"params": {"num_embeddings": 8.0}}, r"params\['num_embeddings'\] is 8.0"),
    ({"params": {"padding_idx": None}}, r"params\['padding_idx'\] is None, expected an integer"),
    ({"params": {"bidirectional": "yes"}}, r"params\['bidirectional'\] is 'yes', expected true or false"),
    ({"params": {"padding_value": float("nan")}}, r"params\['padding_value'\] is nan, expected a finite number"),
    ({"dictionary": ["<s>", "<pad>"]}, r"'dictionary' is a list, expected a dict"),
    ({"dictionary": {**SPECIALS, "a": "4", "b": 5, "ab": 6, "c@@": 7}}, r"'dictionary' entry 'a' -> '4'"),
    ({"dictionary": {**SPECIALS, "a": 4, "b": 5, "ab": 6, "c@@": True}}, r"'dictionary' entry 'c@@' -> True"),
    ({"state": [1, 2]}, r"'model' is a list, expected a state dict"),
    ({"state": {"embed_tokens.weight": [0.0]}}, r"'model' entry 'embed_tokens.weight' is a list, expected a tensor"),
    ({"state": {"embed_tokens.weight": torch.zeros(8, 4, dtype=torch.long)}},
     r"weight embed_tokens.weight has dtype torch.int64, expected floating point"),
])
def test_malformed_entries_refused_in_one_line(tmp_path, kwargs, match):
    ck = tiny_checkpoint(tmp_path / "ck.pt", **kwargs)
    with pytest.raises(NotALaserCheckpoint, match=match):
        load_laser_checkpoint(ck)
    code, err = run_cli([ck, tmp_path / "out", "--no-tokenizer"])
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("hf-laser convert: error:"), err
    assert "Traceback" not in err


def test_params_must_be_a_dict(tmp_path):
    path = tmp_path / "ck.pt"
    torch.save({"params": [1, 2], "model": {}, "dictionary": {}}, path)
    with pytest.raises(NotALaserCheckpoint, match="'params' is a list, expected a dict"):
        load_laser_checkpoint(path)
    assert cli_main(["convert", str(path), str(tmp_path / "out"), "--no-tokenizer"]) == 2


def test_convert_checks_its_files_before_importing_torch(tmp_path):
    """#47: `hf-laser convert /nonexistent.pt ...` took ~10 s (torch imported first) to say `checkpoint not found`;
    the files are checked first now."""
    code = ("import sys; from hf_laser.cli import main; rc = main(['convert', sys.argv[1], sys.argv[2]]); "
            "print(rc, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nope.pt"), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.stdout.split() == ["2", "False"], run.stdout + run.stderr
    assert run.stderr.strip() == f"hf-laser convert: error: checkpoint not found: {tmp_path / 'nope.pt'}"


@pytest.mark.parametrize("content, kind", [(b"", "an empty file"), ("# vocabulary\nde 12\n".encode(), "a text file"),
                                           (b"\x89PNG\r\n\x1a\n" + bytes(40), "another binary format")])
def test_a_file_that_is_no_checkpoint_says_so(tmp_path, capsys, content, kind):
    """#47: converting a non-checkpoint showed torch's internal `Unsupported operand 76`."""
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(NotALaserCheckpoint, match=f"is not a PyTorch checkpoint \\({kind};"):
        load_laser_checkpoint(path)
    assert cli_main(["convert", str(path), str(tmp_path / "out"), "--no-tokenizer"]) == 2
    assert f"is not a PyTorch checkpoint ({kind};" in capsys.readouterr().err
