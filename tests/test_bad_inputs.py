"""Malformed inputs give a clear error naming what is wrong, or a documented result: a corrupt .gz training file,
invalid UTF-8 in the text, a dict or non-integer ids given to the encoder."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
from conftest import BPE_CODES, BPE_VOCAB, LASER2, require_shared

from hf_laser.encoder import LaserEncoder


def test_corrupt_gzip_training_file_names_the_file(tmp_path):
    from training.data import read_text_lines

    lines = [f"sentence {i} with some words {i * 7919 % 1000}" for i in range(3000)]
    good = tmp_path / "good.en.gz"
    good.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert read_text_lines(good) == lines
    data = good.read_bytes()
    damaged = {
        "truncated.en.gz": data[: len(data) // 2],  # EOFError
        "flipped.en.gz": data[:100] + bytes(b ^ 0xFF for b in data[100:400]) + data[400:],  # zlib.error / CRC
        "plain.en.gz": b"not gzip at all\n",  # gzip.BadGzipFile
    }
    for name, content in damaged.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError, match=re.escape(f"{path} is not a valid gzip file (")) as info:
            read_text_lines(path)
        assert "truncated or damaged" in str(info.value)


def _tokenize(args, src, out):
    from hf_laser.commands.tokenize import main as _main

    assert _main([*args, "--lang", "fr", "-i", str(src), "-o", str(out)]) == 0
    return out.read_bytes()


@pytest.mark.parametrize("mode", ["laser1", "laser2"])
def test_invalid_utf8_becomes_spaces(mode, tmp_path):
    require_shared(BPE_CODES, BPE_VOCAB, LASER2)
    args = (["--bpe-codes", str(BPE_CODES), "--bpe-vocab", str(BPE_VOCAB)] if mode == "laser1"
            else ["--spm-model", str(LASER2 / "laser2-ref.spm")])
    bad, spaced = tmp_path / "bad.txt", tmp_path / "spaced.txt"
    bad.write_bytes(b"caf\xc3 bad \xff\xfe byte\n")  # a cut UTF-8 sequence and two invalid bytes
    spaced.write_bytes(b"caf  bad   byte\n")  # the same with a space for each invalid byte
    got = _tokenize(args, bad, tmp_path / "bad.out")
    assert got == _tokenize(args, spaced, tmp_path / "spaced.out")
    assert b"\xff" not in got and b"\xc3 " not in got
    if mode == "laser1":
        assert _tokenize([*args, "--stage", "tok"], bad, tmp_path / "bad.tok") == b"caf bad byte\n"


def test_invalid_utf8_passes_through_bpe_of_tokenized_text(tmp_path):
    require_shared(BPE_CODES, BPE_VOCAB)
    from hf_laser.text.tokenization_laser import LaserTextPipeline

    pipeline = LaserTextPipeline(bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)
    assert pipeline.process(["bad \udcff byte"], stage="bpe", pretokenized="tok") == ["bad \udcff by@@ te"]
    assert pipeline.process(["bad \udcff byte"], stage="bpe") == ["bad by@@ te"]


@pytest.fixture(scope="module")
def encoder(tiny_dictionary_dir) -> LaserEncoder:
    return LaserEncoder.from_pretrained(tiny_dictionary_dir)


def test_encoder_rejects_dicts_and_non_integer_ids_naming_the_sentence(encoder):
    eos = encoder.eos_id
    for bad in ({"a": 1}, {(5, eos)}, "5 2"):
        with pytest.raises(ValueError, match=f"expected a list of token-id sequences, got {type(bad).__name__}"):
            encoder.encode_ids(bad)
        with pytest.raises(TypeError):  # LaserInputError is both
            encoder.encode_ids(bad)
    with pytest.raises(ValueError, match="expected a list of sentences.*got dict"):
        encoder.encode({"a": 1}, pretokenized=True)
    cases = [
        ([[5, eos], "5 2"], r"sentence 1 is str, expected a sequence of token ids"),
        ([[5, eos], 7], r"sentence 1 is int, expected a sequence of token ids"),
        ([[5, eos], ["5", eos]], r"sentence 1 holds '5' \(str\); expected integer token ids"),  # not read as 5
        ([[5, eos], [6, eos], [2.5, eos]], r"sentence 2 holds 2.5 \(float\)"),  # not truncated to 2
        ([[[5], eos]], r"sentence 0 holds \[5\] \(list\)"),
    ]
    for ids, message in cases:
        with pytest.raises(ValueError, match=message):
            encoder.encode_ids(ids)
    # numpy integers are ids like ints
    np.testing.assert_array_equal(encoder.encode_ids([np.array([5, eos])]), encoder.encode_ids([[5, eos]]))
