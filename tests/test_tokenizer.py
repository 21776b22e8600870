"""LaserTokenizer: ids equal to the original encoder's, batching, langs, padding, save/load, Auto, CLI, bad input."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from conftest import BPE_CODES, BPE_VOCAB, LASER2, REFERENCE, REPO, SHARED, TINY_CHECKPOINT, require_shared

from hf_laser.text.tokenization_laser import LaserTextPipeline, LaserTokenizer, read_lines as stream_lines


def read_lines(path) -> list[str]:
    """Lines split on '\\n' only (edge.txt has CR, U+2028 ... inside lines)."""
    return list(stream_lines(path))


TATOEBA_RAW = SHARED / "data" / "tatoeba" / "v1"
LASER2_CKPT = LASER2 / "laser2-ref-tiny.pt"
LASER2_SPM = LASER2 / "laser2-ref.spm"


def needs_preprocessing():
    pytest.importorskip("hf_laser.text.preprocessing", reason="needs hf_laser.text.preprocessing")


def tatoeba_langs() -> dict[str, str]:
    rows = [line.split("\t") for line in read_lines(REFERENCE / "tatoeba_langs.tsv")[1:]]
    return {iso3: lang for iso3, lang in rows}


@pytest.fixture(scope="module")
def dictionary() -> dict[str, int]:
    require_shared(TINY_CHECKPOINT)
    return torch.load(TINY_CHECKPOINT, weights_only=True)["dictionary"]


@pytest.fixture(scope="module")
def tok(dictionary) -> LaserTokenizer:
    require_shared(BPE_CODES, BPE_VOCAB)
    return LaserTokenizer.from_laser_files(dictionary, bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)


@pytest.fixture(scope="module")
def laser2_dictionary() -> dict[str, int]:
    require_shared(LASER2_CKPT)
    return torch.load(LASER2_CKPT, weights_only=True)["dictionary"]


@pytest.fixture(scope="module")
def tok2(laser2_dictionary) -> LaserTokenizer:
    require_shared(LASER2_SPM)
    return LaserTokenizer.from_laser_files(laser2_dictionary, spm_model=LASER2_SPM)


def ref_ids(lines: list[str], dictionary: dict[str, int]) -> list[list[int]]:
    """What LASER's SentenceEncoder does with a .bpe/.spm line."""
    return [[dictionary.get(t, 3) for t in line.strip().split()] + [2] for line in lines]


# ------------------------------------------------------------------ ids == original encoder
def test_tok_files_to_ids_equal_reference(tok, dictionary):
    """All 224 reference .tok files (+ the 7 edge files) -> ids == ids of the reference .bpe."""
    files = sorted((REFERENCE / "tatoeba").glob("*.tok")) + sorted((REFERENCE / "edge").glob("*.tok"))
    assert len(files) == 231
    for f in files:
        got = tok.encode_lines(read_lines(f), pretokenized="tok")
        assert got == ref_ids(read_lines(f.with_suffix(".bpe")), dictionary), f.name


def test_raw_tatoeba_to_ids_equal_reference(tok, dictionary):
    """End to end: raw Tatoeba text -> LaserTokenizer ids == ids of the reference .bpe (all 224 files)."""
    needs_preprocessing()
    require_shared(TATOEBA_RAW)
    langs = tatoeba_langs()
    n = 0
    for f in sorted((REFERENCE / "tatoeba").glob("*.bpe")):
        name = f.name[: -len(".bpe")]
        raw = read_lines(TATOEBA_RAW / name)[:100]
        got = tok(raw, lang=langs[name.rsplit(".", 1)[1]])["input_ids"]
        assert got == ref_ids(read_lines(f), dictionary), name
        n += len(raw)
    assert n == 22400


@pytest.mark.parametrize("lang", ["en", "fr", "de", "el", "zh", "ja", "ru"])
def test_raw_edge_to_ids_equal_reference(tok, dictionary, lang):
    needs_preprocessing()
    raw = read_lines(REFERENCE / "edge" / "edge.txt")
    got = tok(raw, lang=lang)["input_ids"]
    assert got == ref_ids(read_lines(REFERENCE / "edge" / f"edge.{lang}.bpe"), dictionary)
    # empty / space-only lines -> </s> alone (line 29, no-break spaces, is text for Moses and fastBPE:
    # "\xa0@@ \xa0", which the original encoder's whitespace split turns into "@@" -> <unk> except for zh)
    assert [got[i] for i in (26, 27, 29, 30)] == [[2]] * 4


def test_laser2_spm_lines_to_ids_and_raw_end_to_end(tok2, laser2_dictionary):
    spm_files = sorted((LASER2 / "tatoeba").glob("*.spm"))
    for f in spm_files[:20]:
        lines = read_lines(f)
        assert tok2(lines, pretokenized=True)["input_ids"] == ref_ids(lines, laser2_dictionary)
    needs_preprocessing()
    langs = tatoeba_langs()
    for f in spm_files:
        name = f.name[: -len(".spm")]
        raw = read_lines(TATOEBA_RAW / name)[:100]
        got = tok2.encode_lines(raw, lang=langs[name.rsplit(".", 1)[1]])
        assert got == ref_ids(read_lines(f), laser2_dictionary), name
    raw = read_lines(REFERENCE / "edge" / "edge.txt")
    for lang in ["en", "zh", "ja"]:
        expected = ref_ids(read_lines(LASER2 / "edge" / f"edge.{lang}.spm"), laser2_dictionary)
        assert tok2(raw, lang=lang)["input_ids"] == expected


def test_per_sentence_langs_and_num_proc(tok, dictionary):
    files = ["tatoeba.fra-eng.fra", "tatoeba.deu-eng.deu", "tatoeba.ell-eng.ell", "tatoeba.cmn-eng.cmn"]
    langs = ["fr", "de", "el", "zh"]
    tok_lines, expected, line_langs = [], [], []
    for name, lang in zip(files, langs):
        tok_lines += read_lines(REFERENCE / "tatoeba" / f"{name}.tok")[:25]
        expected += ref_ids(read_lines(REFERENCE / "tatoeba" / f"{name}.bpe")[:25], dictionary)
        line_langs += [lang] * 25
    assert tok.encode_lines(tok_lines, pretokenized="tok", num_proc=2, chunk_size=7) == expected
    needs_preprocessing()
    raw = []
    for name in files:
        raw += read_lines(TATOEBA_RAW / name)[:25]
    # interleave so that neighbouring sentences have different languages
    order = sorted(range(len(raw)), key=lambda i: (i % 25, i))
    got = tok([raw[i] for i in order], lang=[line_langs[i] for i in order])["input_ids"]
    assert got == [expected[i] for i in order]
    assert tok.encode_lines(raw, line_langs, num_proc=2, chunk_size=10) == expected
    with pytest.raises(ValueError, match="languages"):
        tok(raw[:3], lang=["fr", "de"])


# ------------------------------------------------------------------ batching & padding
def test_padding_sides_tensors_and_truncation(tok):
    lines = ["le ciel", "au commencement , dieu créa le ciel et la terre .", ""]
    right = tok(lines, pretokenized="tok", padding=True, return_tensors="pt")
    left = tok(lines, pretokenized="tok", padding=True, padding_side="left", return_tensors="pt")
    plain = tok(lines, pretokenized="tok")["input_ids"]
    assert plain[2] == [2]
    width = max(len(x) for x in plain)
    assert right["input_ids"].shape == left["input_ids"].shape == (3, width)
    assert right["input_ids"].dtype == torch.long
    for i, ids in enumerate(plain):
        n = len(ids)
        assert right["input_ids"][i, :n].tolist() == ids
        assert right["input_ids"][i, n:].tolist() == [1] * (width - n)
        assert right["attention_mask"][i].tolist() == [1] * n + [0] * (width - n)
        assert left["input_ids"][i, width - n :].tolist() == ids
        assert left["attention_mask"][i].tolist() == [0] * (width - n) + [1] * n
    assert set(right.keys()) == {"input_ids", "attention_mask"}
    extra = tok(lines, pretokenized="tok", padding=True, padding_side="left", return_special_tokens_mask=True,
                return_length=True, return_tensors="np")
    assert extra["length"].tolist() == [len(x) for x in plain]
    assert extra["special_tokens_mask"][2].tolist() == [1] * width  # padding and </s>
    assert extra["special_tokens_mask"][0].tolist() == [1] * (width - 4) + [0, 0, 0, 1]
    assert tok(lines, pretokenized="tok", return_special_tokens_mask=True)["special_tokens_mask"][0] == [0, 0, 0, 1]
    # tokenizer-level padding side and pad_to_multiple_of
    tok.padding_side = "left"
    try:
        assert tok(lines, pretokenized="tok", padding=True)["input_ids"][0][0] == 1
    finally:
        tok.padding_side = "right"
    assert len(tok(lines, pretokenized="tok", padding=True, pad_to_multiple_of=8)["input_ids"][0]) % 8 == 0
    # truncation keeps </s> last
    cut = tok(lines, pretokenized="tok", truncation=True, max_length=4)["input_ids"]
    assert cut[1] == plain[1][:3] + [2] and cut[0] == plain[0]
    assert tok(lines[1], pretokenized="tok", add_special_tokens=False)["input_ids"] == plain[1][:-1]


def test_single_string_and_encode_and_tokenize(tok, dictionary):
    line = "au commencement , dieu créa le ciel et la terre ."
    single = tok(line, pretokenized="tok")
    assert single["input_ids"] == tok([line], pretokenized="tok")["input_ids"][0]
    assert tok(line, pretokenized="tok", return_tensors="pt")["input_ids"].shape == (1, len(single["input_ids"]))
    pieces = tok.tokenize(line, pretokenized="tok")
    assert pieces[:4] == ["au", "commen@@", "c@@", "ement"]
    assert tok.convert_tokens_to_ids(pieces) + [2] == single["input_ids"]
    assert tok.encode(line, pretokenized="tok") == single["input_ids"]
    # already BPE'd text: whitespace split, looked up as is (unknown -> <unk>)
    assert tok("commen@@ c@@ ement zzzqqq@@", pretokenized=True)["input_ids"] == [
        dictionary["commen@@"], dictionary["c@@"], dictionary["ement"], 3, 2]
    assert tok(["au", "commencement"], is_split_into_words=True)["input_ids"] == tok(
        "au commencement", pretokenized="tok")["input_ids"]


def test_decode(tok, tok2):
    line = "au commencement , dieu créa le ciel et la terre ."
    ids = tok(line, pretokenized="tok")["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == line
    assert tok.decode(ids) == line + " </s>"
    batch = tok([line, "le ciel"], pretokenized="tok", padding=True)["input_ids"]
    assert tok.batch_decode(batch, skip_special_tokens=True) == [line, "le ciel"]
    spm_line = read_lines(LASER2 / "tatoeba" / "tatoeba.fra-eng.fra.spm")[0]
    ids2 = tok2(spm_line, pretokenized=True)["input_ids"]
    assert tok2.decode(ids2, skip_special_tokens=True) == "au commencement, dieu créa le ciel et la terre."


def test_bad_inputs(tok):
    with pytest.raises(TypeError, match="position 1"):
        tok(["ok", None], pretokenized="tok")
    with pytest.raises(TypeError, match="position 0"):
        tok(None)
    with pytest.raises(TypeError, match="position 2"):
        tok.encode_lines(["a", "b", 3], pretokenized="tok")
    with pytest.raises(TypeError):
        tok.tokenize(None)
    with pytest.raises(ValueError):
        tok(["a"], pretokenized="nonsense")
    assert tok("", pretokenized="tok")["input_ids"] == [2]
    assert tok([], pretokenized="tok")["input_ids"] == []
    needs_preprocessing()
    assert tok("")["input_ids"] == [2]
    assert tok(["", "   "])["input_ids"] == [[2], [2]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tok(["Hello world."], lang="xx-unknown")["input_ids"]
    assert out[0][-1] == 2 and len(out[0]) > 1


# ------------------------------------------------------------------ save / load / Auto
@pytest.mark.parametrize("which", ["laser1", "laser2"])
def test_save_load_round_trip(tok, tok2, which, tmp_path):
    t = tok if which == "laser1" else tok2
    t.lang = "fr"
    try:
        t.save_pretrained(tmp_path)
    finally:
        t.lang = "en"
    files = {p.name for p in tmp_path.iterdir()}
    assert {"vocab.json", "tokenizer_config.json"} <= files
    if which == "laser1":
        assert (tmp_path / "bpe.fcodes").read_bytes() == BPE_CODES.read_bytes()
        assert (tmp_path / "bpe.fvocab").read_bytes() == BPE_VOCAB.read_bytes()
        lines = read_lines(REFERENCE / "tatoeba" / "tatoeba.fra-eng.fra.tok")
    else:
        assert (tmp_path / "spm.model").read_bytes() == LASER2_SPM.read_bytes()
        lines = read_lines(LASER2 / "tatoeba" / "tatoeba.fra-eng.fra.spm")
    loaded = LaserTokenizer.from_pretrained(tmp_path)
    assert loaded.lang == "fr" and loaded.mode == which
    assert loaded.get_vocab() == t.get_vocab() and len(loaded) == len(t)
    kw = {"pretokenized": "tok"} if which == "laser1" else {"pretokenized": True}
    assert loaded(lines, **kw)["input_ids"] == t(lines, **kw)["input_ids"]
    assert (loaded.bos_token_id, loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 1, 2, 3)


def test_auto_tokenizer(tok, tmp_path):
    from transformers import AutoTokenizer

    from hf_laser import LaserConfig  # importing hf_laser registers LaserTokenizer with AutoTokenizer

    tok.save_pretrained(tmp_path / "tok_only")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok_only")
    assert type(loaded) is LaserTokenizer
    model_dir = tmp_path / "with_config"
    LaserConfig(vocab_size=len(tok), embed_dim=8, hidden_size=8, num_layers=1).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    loaded = AutoTokenizer.from_pretrained(model_dir)
    assert type(loaded) is LaserTokenizer
    assert loaded("le ciel", pretokenized="tok")["input_ids"] == tok("le ciel", pretokenized="tok")["input_ids"]


def test_auto_tokenizer_on_converted_dirs(tiny_model_dir, tiny_laser2_dir, dictionary, laser2_dictionary):
    from transformers import AutoTokenizer

    t1 = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert type(t1) is LaserTokenizer and t1.mode == "laser1"
    f = REFERENCE / "tatoeba" / "tatoeba.ita-eng.ita"
    assert t1(read_lines(f.with_name(f.name + ".tok")), pretokenized="tok")["input_ids"] == ref_ids(
        read_lines(f.with_name(f.name + ".bpe")), dictionary)
    t2 = AutoTokenizer.from_pretrained(tiny_laser2_dir)
    assert type(t2) is LaserTokenizer and t2.mode == "laser2"
    spm_lines = read_lines(LASER2 / "tatoeba" / "tatoeba.ita-eng.ita.spm")
    assert t2(spm_lines, pretokenized=True)["input_ids"] == ref_ids(spm_lines, laser2_dictionary)


def test_constructor_checks(dictionary, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        LaserTokenizer.from_laser_files(dictionary)
    with pytest.raises(ValueError, match="exactly one"):
        LaserTokenizer.from_laser_files(dictionary, bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB, spm_model=LASER2_SPM)
    with pytest.raises(ValueError, match="mode"):
        LaserTokenizer.from_laser_files(dictionary, bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB, mode="laser2")
    with pytest.raises(ValueError, match="not in the dictionary"):
        LaserTokenizer.from_laser_files({"a": 0}, bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)


# ------------------------------------------------------------------ streaming & CLI
ODD_LINES = ["le ciel\rest bleu", "a\u2028b", "c\x85d", "", "  ", "e\u2029f\x0cg", "dernière ligne"]


def test_iter_tokenize_file_keeps_line_alignment(tok, tmp_path):
    path = tmp_path / "odd.tok"
    path.write_bytes(("\n".join(ODD_LINES) + "\n").encode("utf-8") + b"bad \xff byte")
    lines = list(stream_lines(path))
    assert lines == ODD_LINES + ["bad \udcff byte"]
    out = list(tok.iter_tokenize_file(path, stage="bpe", pretokenized="tok"))
    assert len(out) == len(lines)
    assert out == tok.pipeline.process(lines, stage="bpe", pretokenized="tok")
    ids = list(tok.iter_tokenize_file(path, stage="ids", pretokenized="tok", num_proc=2, chunk_size=2))
    assert ids == tok.encode_lines(lines, pretokenized="tok")


def _run_cli(args, stdin: bytes) -> bytes:
    proc = subprocess.run(
        [sys.executable, "-m", "hf_laser.commands.tokenize", *args],
        input=stdin, capture_output=True, cwd=REPO, timeout=120,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def test_tokenize_cli_one_line_out_per_line_in(tmp_path, tiny_model_dir):
    needs_preprocessing()
    require_shared(BPE_CODES, BPE_VOCAB)
    raw = read_lines(REFERENCE / "edge" / "edge.txt")
    data = ("\n".join(raw + ODD_LINES) + "\n").encode("utf-8")
    n = len(raw) + len(ODD_LINES)
    out = _run_cli(["--bpe-codes", str(BPE_CODES), "--bpe-vocab", str(BPE_VOCAB), "--lang", "fr"], data)
    got = out.decode("utf-8").split("\n")
    assert got[-1] == "" and len(got) - 1 == n
    assert got[:63] == read_lines(REFERENCE / "edge" / "edge.fr.bpe")
    # files, tok stage, two processes
    (tmp_path / "in.txt").write_bytes(data)
    from hf_laser.commands.tokenize import main as _main

    assert _main(["--bpe-codes", str(BPE_CODES), "--bpe-vocab", str(BPE_VOCAB), "--lang", "fr", "--stage", "tok",
                  "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.tok"), "--num-proc", "2",
                  "--chunk-size", "16"]) == 0
    assert read_lines(tmp_path / "out.tok")[:63] == read_lines(REFERENCE / "edge" / "edge.fr.tok")
    assert len(read_lines(tmp_path / "out.tok")) == n
    # from a converted model directory
    assert _main(["--model", str(tiny_model_dir), "--lang", "ja", "-i", str(tmp_path / "in.txt"),
                  "-o", str(tmp_path / "out.bpe")]) == 0
    assert read_lines(tmp_path / "out.bpe")[:63] == read_lines(REFERENCE / "edge" / "edge.ja.bpe")
    # LASER2
    assert _main(["--spm-model", str(LASER2_SPM), "--lang", "fr", "-i", str(tmp_path / "in.txt"),
                  "-o", str(tmp_path / "out.spm")]) == 0
    assert read_lines(tmp_path / "out.spm")[:63] == read_lines(LASER2 / "edge" / "edge.fr.spm")
    assert len(read_lines(tmp_path / "out.spm")) == n


def test_pipeline_without_dictionary_pickles(tmp_path):
    import pickle

    require_shared(BPE_CODES, BPE_VOCAB)
    pipe = LaserTextPipeline(bpe_codes=BPE_CODES, bpe_vocab=BPE_VOCAB)
    clone = pickle.loads(pickle.dumps(pipe))
    lines = read_lines(REFERENCE / "tatoeba" / "tatoeba.rus-eng.rus.tok")
    assert clone.subword_lines(lines) == read_lines(REFERENCE / "tatoeba" / "tatoeba.rus-eng.rus.bpe")
