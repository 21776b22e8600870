"""Over-long inputs do not stop a run: MeCab input is segmented in `mecab -b 50000` pieces, and a sentence over
`max_sentence_tokens` is embedded truncated, with a warning naming it, while the other sentences are untouched."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hf_laser import cli
from hf_laser.cli import main as cli_main
from hf_laser.encoder import DEFAULT_MAX_SENTENCE_TOKENS, LaserEncoder
from hf_laser.text.preprocessing import MECAB_PIECE_BYTES, LaserPreprocessor, mecab_pieces


def test_mecab_pieces_cut_like_mecab_b_but_between_characters():
    assert MECAB_PIECE_BYTES == 49_999  # mecab -b 50000 reads with istream::getline(buf, 50000)
    assert mecab_pieces("a" * 49_999) == ["a" * 49_999]
    assert mecab_pieces("a" * 50_001) == ["a" * 49_999, "aa"]  # where the original cuts too (ASCII)
    line = "あ" * 20_000  # 3 bytes each: byte 49,999 falls inside the 16,667th character
    pieces = mecab_pieces(line)
    assert [len(p) for p in pieces] == [16_666, 3_334]
    mixed = "日本語のテキスト a1 " * 9_000  # 252,000 bytes
    pieces = mecab_pieces(mixed)
    assert "".join(pieces) == mixed
    assert all(MECAB_PIECE_BYTES - 2 <= len(p.encode()) <= MECAB_PIECE_BYTES for p in pieces[:-1])
    assert len(pieces) == 6


def test_japanese_line_too_long_for_mecab_is_segmented_in_pieces():
    MeCab = pytest.importorskip("MeCab")
    ipadic = pytest.importorskip("ipadic")
    line = "a1" * 80_000  # 160,000 characters: one MeCab call returns None on it (then: AttributeError)
    tagger = MeCab.Tagger(ipadic.MECAB_ARGS + " -Owakati")
    assert tagger.parse(line) is None  # the failure being guarded against
    out = LaserPreprocessor("ja")(line)
    expected = "".join(tagger.parse(piece)[:-1] for piece in mecab_pieces(line))
    assert out == expected and len(out.split()) > 1
    # a Japanese line under the limit is one piece, as before
    short = "私は東京で日本語を勉強しています。"
    assert LaserPreprocessor("ja")(short) == tagger.parse(short)[:-1].lower()


@pytest.fixture(scope="module")
def encoder(tiny_dictionary_dir) -> LaserEncoder:
    return LaserEncoder.from_pretrained(tiny_dictionary_dir, engine="torch")


def test_overlong_sentence_is_truncated_with_a_warning_naming_it(encoder):
    eos = encoder.eos_id
    n = 300_000  # ~1 MB of text: oneDNN cannot run it at LASER's size ("could not create a primitive")
    rng = np.random.default_rng(0)
    long_ids = rng.integers(4, 1000, n).tolist() + [eos]
    short_ids = [[5, 6, eos], [7, eos]]
    with pytest.warns(UserWarning, match=r"1 sentence longer than max_sentence_tokens=100,000 embedded as its "
                                         r"first 99,999 tokens \+ </s>: sentence 1 \(300,001 tokens\)"):
        emb = encoder.encode_ids([short_ids[0], long_ids, short_ids[1]]).numpy()
    assert DEFAULT_MAX_SENTENCE_TOKENS == cli.DEFAULT_MAX_SENTENCE_TOKENS == 100_000  # as README and --help say
    truncated = encoder.encode_ids([long_ids[:99_999] + [eos]]).numpy()
    np.testing.assert_array_equal(emb[1], truncated[0])
    np.testing.assert_array_equal(emb[[0, 2]], encoder.encode_ids(short_ids).numpy())  # others untouched

    # a sentence at the limit is not cut (and gives no warning); None lifts the limit
    at_limit = long_ids[:9] + [eos]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        whole = encoder.encode_ids([at_limit], max_sentence_tokens=10).numpy()
        np.testing.assert_array_equal(whole, encoder.encode_ids([at_limit], max_sentence_tokens=None).numpy())
    with pytest.warns(UserWarning, match=r"2 sentences .* their first 4 tokens \+ </s>: sentence 0 \(10 tokens\), "
                                         r"sentence 2 \(10 tokens\)"):
        cut = encoder.encode_ids([at_limit, [5, eos], at_limit], max_sentence_tokens=5).numpy()
    np.testing.assert_array_equal(cut, encoder.encode_ids([at_limit[:4] + [eos], [5, eos], at_limit[:4] + [eos]]))
    with pytest.raises(ValueError, match="at least 2"):
        encoder.encode_ids([at_limit], max_sentence_tokens=1)


def test_encode_and_file_name_the_truncated_line(encoder, tmp_path, capsys):
    lines = ["5 6", " ".join(["7"] * 30), "8 9"]
    with pytest.warns(UserWarning, match=r"sentence 1 \(31 tokens\)") as record:
        emb = encoder.encode(lines, pretokenized=True, max_sentence_tokens=20)
    assert record[0].filename == __file__  # at the caller's line
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"line 2 \(31 tokens\).*in\.txt"):  # in the 2nd chunk: numbered in the file
        out = encoder.encode_file(src, tmp_path / "out.npy", pretokenized=True, max_sentence_tokens=20, chunk_lines=1)
    np.testing.assert_allclose(np.asarray(out), emb, atol=1e-6)  # other batches: other round-off
    # the limit is part of what the output was computed from
    encoder.encode_file(src, tmp_path / "out.npy", pretokenized=True, max_sentence_tokens=None)
    assert "max_sentence_tokens 20 -> null" in capsys.readouterr().err


def test_cli_embed_reports_the_line_and_embeds_the_rest(tiny_dictionary_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("5 6\n" + " ".join(["7"] * 30) + "\n8 9\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert cli_main(["embed", "--model", str(tiny_dictionary_dir), "--pretokenized", "-i", str(src), "-o", str(out),
                     "--max-sentence-tokens", "20"]) == 0
    err = capsys.readouterr().err
    assert "hf-laser embed: 1 sentence longer than max_sentence_tokens=20 embedded as its first 19 tokens + </s>: " \
           f"line 2 (31 tokens)" in err and str(src) in err
    assert np.load(out).shape == (3, 96)
    assert cli_main(["embed", "--model", str(tiny_dictionary_dir), "--pretokenized", "-i", str(src), "-o", str(out),
                     "--max-sentence-tokens", "0"]) == 0
    assert "max_sentence_tokens" in capsys.readouterr().err  # recomputed: the limit changed


def test_mine_and_embed_shards_take_the_limit_and_keep_it_in_their_identity(tiny_dictionary_dir, encoder, tmp_path,
                                                                          capsys):
    pytest.importorskip("faiss")
    from hf_laser import mining as M  # noqa: PLC0415

    lines = ["5 6", " ".join(["7"] * 30), "8 9"]
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tgt.write_text("9 8\n6 5\n7 7 7\n", encoding="utf-8")
    shards = tmp_path / "shards"
    embed_shards = ["embed-shards", "--model", str(tiny_dictionary_dir), "--pretokenized", "--no-progress",
                    "--embed-dir", str(shards), "--max-sentence-tokens", "20", "--input", "xx"]
    with pytest.warns(UserWarning, match=r"max_sentence_tokens=20 embedded as its first 19 tokens \+ </s>: line 2"):
        assert cli_main(embed_shards + [str(src)]) == 0
    assert cli_main(embed_shards + [str(tgt)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = encoder.encode(lines, pretokenized=True, max_sentence_tokens=20)
    loaded = M.load_embedding_shards(shards, src, "xx")
    np.testing.assert_allclose(loaded.to_numpy(), expected, atol=1e-6, rtol=0)

    mine = ["mine", str(src), str(tgt), "--model", str(tiny_dictionary_dir), "--pretokenized", "--src-lang", "xx",
            "--tgt-lang", "xx", "-k", "2", "--knn-device", "cpu", "--no-progress", "--embed-dir", str(shards),
            "-o", str(tmp_path / "pairs.tsv")]
    # the same limit: the shards are used; the default limit: they are stale, and mine says why
    assert cli_main(mine + ["--max-sentence-tokens", "20"]) == 0
    assert "using 1 embedding shard(s)" in capsys.readouterr().err
    assert cli_main(mine) == 0
    err = capsys.readouterr().err
    assert "stale embedding shards" in err and "max_sentence_tokens 20 -> " in err
