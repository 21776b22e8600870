"""fastBPE port (LASER1) and SentencePiece step (LASER2) against the reference outputs, bit for bit."""

from __future__ import annotations

import pytest
from conftest import BPE_CODES, BPE_VOCAB, LASER2, REFERENCE, SHARED, require_shared

from hf_laser.text.bpe import FastBPE, read_codes, read_vocab, split_symbols
from hf_laser.text.tokenization_laser import read_lines as stream_lines

TATOEBA_RAW = SHARED / "data" / "tatoeba" / "v1"
EDGE_LANGS = ["en", "fr", "de", "el", "zh", "ja", "ru"]


def read_lines(path) -> list[str]:
    """Lines split on '\\n' only (edge.txt has CR, U+2028 ... inside lines)."""
    return list(stream_lines(path))


@pytest.fixture(scope="module")
def bpe() -> FastBPE:
    require_shared(BPE_CODES, BPE_VOCAB)
    return FastBPE(BPE_CODES, BPE_VOCAB)


def tatoeba_langs() -> dict[str, str]:
    rows = [line.split("\t") for line in read_lines(REFERENCE / "tatoeba_langs.tsv")[1:]]
    return {iso3: lang for iso3, lang in rows}


def _diff(got: list[str], ref: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, ref)):
        if a != b:
            return f"line {i + 1}: {a!r} != {b!r}"
    return f"{len(got)} lines != {len(ref)} lines"


def test_tatoeba_tok_to_bpe_all_files_identical(bpe):
    files = sorted((REFERENCE / "tatoeba").glob("*.tok"))
    assert len(files) == 224
    bad = []
    for f in files:
        got = bpe.apply_lines(read_lines(f))
        ref = read_lines(f.with_suffix(".bpe"))
        if got != ref:
            bad.append(f"{f.name}: {_diff(got, ref)}")
    assert not bad, bad[:5]


@pytest.mark.parametrize("lang", EDGE_LANGS)
def test_edge_tok_to_bpe_identical(bpe, lang):
    tok = REFERENCE / "edge" / f"edge.{lang}.tok"
    got = bpe.apply_lines(read_lines(tok))
    ref = read_lines(tok.with_suffix(".bpe"))
    assert len(got) == 63
    assert got == ref, _diff(got, ref)


def test_whole_text_and_file_mode_match_binary(bpe, tmp_path):
    """`apply` on a whole text with '\\n' and `apply_file` give the reference bytes."""
    tok = REFERENCE / "edge" / "edge.ja.tok"
    ref = (REFERENCE / "edge" / "edge.ja.bpe").read_bytes()
    text = tok.read_text(encoding="utf-8")
    assert (bpe.apply(text[:-1]) + "\n").encode() == ref
    out = tmp_path / "out.bpe"
    bpe.apply_file(tok, out)
    assert out.read_bytes() == ref
    # the binary drops a last word that no separator follows
    (tmp_path / "noeol.tok").write_text("le ciel\nla terre", encoding="utf-8")
    bpe.apply_file(tmp_path / "noeol.tok", out)
    assert out.read_text(encoding="utf-8") == "le ci@@ el\nla "


def test_separators_are_copied_and_only_space_newline_separate(bpe):
    assert bpe.apply("") == ""
    assert bpe.apply("  la  terre ") == "  la  ter@@ re "
    # tab and no-break space are word characters for fastBPE
    assert bpe.apply("la\tterre") == bpe.apply_word("la\tterre")
    assert bpe.apply("\u00a0\u00a0 ") == "\u00a0@@ \u00a0 "


def test_vocab_restriction_splits_back(bpe):
    plain = FastBPE(BPE_CODES)
    # merged subwords the vocabulary lacks (in that position) are split back along their merges
    assert plain.apply_word("buckled") == "buck@@ led"
    assert bpe.apply_word("buckled") == "bu@@ ck@@ led"
    assert plain.apply_word("гато") == "гато"
    assert bpe.apply_word("гато") == "гат@@ о"
    assert plain.apply("au commencement") == bpe.apply("au commencement") == "au commen@@ c@@ ement"


def test_decompose_semantics_on_toy_codes(tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("a b 9\nab c</w> 8\nb c 7\n", encoding="utf-8")
    vocab = tmp_path / "vocab"
    vocab.write_text("a@@ 5\nb@@ 4\nc 3\nbc 2\n", encoding="utf-8")
    assert FastBPE(codes).apply_word("abc") == "abc"
    # abc</w> -> (ab, c</w>); ab@@ missing -> (a, b); a@@, b@@ and final c are in the vocab
    assert FastBPE(codes, vocab).apply_word("abc") == "a@@ b@@ c"
    # rank order: (a, b) before (b, c); all occurrences of the best pair merge in one pass
    assert FastBPE(codes).apply_word("ababc") == "ab@@ abc"
    assert FastBPE(codes).apply("bc  bcb") == "b@@ c  bc@@ b"


def test_codes_and_vocab_files_are_split_like_fastbpe(tmp_path):
    """Fields split on ' ' only, empty fields and empty lines skipped, a CR or tab kept in its field; a line with
    the wrong number of fields is an error naming the file and line."""
    codes = tmp_path / "codes"
    codes.write_bytes(b"a b 9\n\n  ab  c</w>   8 \nb\tc d\r 7\n \n")
    assert read_codes(codes) == [("a", "b"), ("ab", "c</w>"), ("b\tc", "d\r")]
    vocab = tmp_path / "vocab"
    vocab.write_bytes(b"a@@ 5\nb@@  4\n\n\xc3\xa9 3")  # no final newline; a UTF-8 token
    assert read_vocab(vocab) == {"a@@": 5, "b@@": 4, "\u00e9": 3}
    vocab.write_bytes(b"a@@ 5\nb@@ 4 extra\n")
    with pytest.raises(ValueError, match=r"vocab:2: expected 'token count', got 'b@@ 4 extra'"):
        read_vocab(vocab)
    codes.write_bytes(b"a b 9\nab\n")
    with pytest.raises(ValueError, match=r"codes:2: expected 'left right count'"):
        read_codes(codes)


def test_split_symbols_follows_utf8_lead_bytes():
    assert split_symbols("été") == ["é", "t", "é"]
    # surrogate-escaped continuation bytes stay with the previous symbol, lead bytes start one
    assert split_symbols("a\udc80\udcc3b") == ["a\udc80", "\udcc3", "b"]
    # the C loop stops at NUL: the rest of the word is one symbol
    assert split_symbols("ab\x00cd") == ["a", "b\x00cd"]
    assert split_symbols("\x00cd") == ["\x00cd"]


def test_cache_does_not_change_results():
    require_shared(BPE_CODES, BPE_VOCAB)
    small = FastBPE(BPE_CODES, BPE_VOCAB, cache_size=3)
    lines = read_lines(REFERENCE / "tatoeba" / "tatoeba.deu-eng.deu.tok")
    assert small.apply_lines(lines) == read_lines(REFERENCE / "tatoeba" / "tatoeba.deu-eng.deu.bpe")
    assert len(small._cache) <= 3


# ------------------------------------------------------------------------- SentencePiece
@pytest.fixture(scope="module")
def spm_pipeline():
    require_shared(LASER2 / "laser2-ref.spm")
    from hf_laser.text.tokenization_laser import LaserTextPipeline

    return LaserTextPipeline(spm_model=LASER2 / "laser2-ref.spm")


def test_spm_pieces_are_whitespace_free_and_unknown_runs_merged(spm_pipeline):
    line = spm_pipeline.subword_line("j'aime la 🍕🍕 !")
    assert "🍕🍕" in line.split()
    assert spm_pipeline.subword_lines(["", "   "]) == ["", ""]


def test_spm_end_to_end_tatoeba(spm_pipeline):
    """raw Tatoeba (first 100 lines) -> LaserPreprocessor(mode='laser2', L) -> SPM == reference .spm."""
    pytest.importorskip("hf_laser.text.preprocessing", reason="needs hf_laser.text.preprocessing")
    require_shared(TATOEBA_RAW)
    langs = tatoeba_langs()
    files = sorted((LASER2 / "tatoeba").glob("*.spm"))
    assert len(files) == 224
    bad = []
    for f in files:
        name = f.name[: -len(".spm")]
        raw = read_lines(TATOEBA_RAW / name)[:100]
        got = spm_pipeline.process(raw, langs[name.rsplit(".", 1)[1]], stage="bpe")
        ref = read_lines(f)
        if got != ref:
            bad.append(f"{name}: {_diff(got, ref)}")
    assert not bad, bad[:5]


@pytest.mark.parametrize("lang", EDGE_LANGS)
def test_spm_end_to_end_edge(spm_pipeline, lang):
    pytest.importorskip("hf_laser.text.preprocessing", reason="needs hf_laser.text.preprocessing")
    raw = read_lines(REFERENCE / "edge" / "edge.txt")
    assert len(raw) == 63
    got = spm_pipeline.process(raw, lang, stage="bpe")
    ref = read_lines(LASER2 / "edge" / f"edge.{lang}.spm")
    assert got == ref, _diff(got, ref)
