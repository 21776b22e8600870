"""Issue #24, items 3-6: damaged model files, odd inputs and arguments give one line on stderr (exit 2 for the
user's mistake, 1 for I/O), no traceback; streams are read like stdin; arguments are checked before any file is
created; the encoder survives a device it cannot use."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, fra_file, read_lines

from hf_laser.cli import main as cli_main
from hf_laser.encoder import LaserEncoder




@pytest.fixture
def fr(tmp_path) -> Path:
    return fra_file(tmp_path / "fr.txt", 20)


def one_error(capsys, start: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(start), err
    return err[0]


def embed(*args) -> int:
    return cli_main(["embed", *map(str, args), "--no-progress"])


# ------------------------------------------------------------------------------------------------ item 3
@pytest.mark.parametrize("damage", ["truncated", "empty", "random"])
def test_damaged_safetensors_is_one_line(tiny_model_dir, fr, tmp_path, capsys, damage):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "random": os.urandom(4096)}[damage])
    with pytest.raises(OSError, match="model.safetensors. is damaged"):
        LaserEncoder.from_pretrained(model)
    capsys.readouterr()
    assert embed("--model", model, "--lang", "fr", "-i", fr, "-o", tmp_path / "o.npy") == 2
    line = one_error(capsys, "hf-laser embed: error: cannot load the model")
    assert "is damaged: truncated, empty or not a safetensors file" in line and "download or convert" in line


def test_missing_tensor_is_one_line_without_the_load_report(tiny_model_dir, fr, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    tensors = load_file(model / "model.safetensors")
    dropped = sorted(tensors)[-1]
    del tensors[dropped]
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    assert embed("--model", model, "--lang", "fr", "-i", fr, "-o", tmp_path / "o.npy") == 2
    captured = capsys.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "missing tensors" in err[0], err


def test_unlimited_sentence_too_long_for_the_kernel_is_one_line(encoder, tmp_path, monkeypatch, capsys):
    """`--max-sentence-tokens 0` with a 640k-token line: oneDNN's "could not create a primitive" (simulated: the
    tiny model's kernel would need millions of tokens) becomes a message that says what to do."""
    src = tmp_path / "long.txt"
    src.write_text("a b c\n" + "x " * 5000 + "\n", encoding="utf-8")
    real = type(encoder.model).forward

    def forward(self, input_ids, *a, **k):
        if input_ids.shape[1] > 1000:
            raise RuntimeError("could not create a primitive")
        return real(self, input_ids, *a, **k)

    monkeypatch.setattr(type(encoder.model), "forward", forward)
    with pytest.raises(ValueError, match="too long for the CPU LSTM kernel.*max-sentence-tokens"):
        encoder.encode_file(src, tmp_path / "o.npy", lang="en", max_sentence_tokens=None)


# ------------------------------------------------------------------------------------------------ item 4
def test_pipe_input_is_read_as_a_stream(tiny_model_dir, encoder, fr, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(fr.read_bytes()))
    writer.start()
    out = tmp_path / "o.npy"
    assert embed("--model", tiny_model_dir, "--lang", "fr", "-i", fifo, "-o", out) == 0
    writer.join()
    np.testing.assert_allclose(np.load(out), encoder.encode(read_lines(fr), lang="fr"), atol=1e-5, rtol=0)
    writer = threading.Thread(target=lambda: fifo.write_bytes(fr.read_bytes()))
    writer.start()
    assert embed("--model", tiny_model_dir, "--lang", "fr", "-i", fifo, "-o", out) == 0
    writer.join()
    assert f"input from a pipe ({fifo}) is never resumed" in capsys.readouterr().err


def test_full_disk_while_spooling_stdin_names_the_temporary_directory(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import io
    import sys

    def full(src, dst, length=0):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hello\n")))
    assert embed("--model", tiny_model_dir, "--lang", "en", "-o", tmp_path / "o.npy") == 1
    line = one_error(capsys, "hf-laser embed: error: No space left on device while copying stdin")
    assert "TMPDIR" in line


def test_encode_file_of_a_directory_says_so(encoder, tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory, not a text file"):
        encoder.encode_file(tmp_path, tmp_path / "o.npy", lang="en")


def test_convert_never_suggests_weights_only_false(tmp_path):
    from hf_laser.checkpoints.convert import NotALaserCheckpoint, load_laser_checkpoint

    ckpt = tmp_path / "evil.pt"
    torch.save({"params": {}, "model": {}, "dictionary": {}, "payload": threading.Lock}, ckpt)
    with pytest.raises(NotALaserCheckpoint) as info:
        load_laser_checkpoint(ckpt)
    message = str(info.value)
    assert "weights_only=True and never runs code" in message
    assert "weights_only` set to `False" not in message and "weights_only=False" not in message


# ------------------------------------------------------------------------------------------------ item 5
def test_meta_device_leaves_the_encoder_usable(encoder):
    with pytest.raises(ValueError, match="device='meta' holds no data"):
        encoder.encode(["Bonjour."], lang="fr", device="meta")
    assert encoder.device.type == "cpu"
    assert encoder.encode(["Bonjour."], lang="fr").shape == (1, encoder.dim)


# ------------------------------------------------------------------------------------------------ item 6
@pytest.mark.parametrize("lang", ["francais", "fr,en", "123", "../etc"])  # (english names such as "french" are languages)
def test_bad_language_argument_is_one_line(tiny_model_dir, fr, tmp_path, capsys, lang):
    assert embed("--model", tiny_model_dir, "--lang", lang, "-i", fr, "-o", tmp_path / "o.npy") == 2
    one_error(capsys, f"hf-laser embed: error: --lang {lang!r} is not a language code")
    assert not list(tmp_path.glob("o.npy*"))


def test_iso_code_without_rules_is_one_clean_line(tiny_model_dir, fr, tmp_path, capsys, recwarn):
    assert embed("--model", tiny_model_dir, "--lang", "haw", "-i", fr, "-o", tmp_path / "o.npy") == 0
    err = capsys.readouterr().err
    assert "hf-laser embed: note: no LASER preprocessing rules for language 'haw'" in err
    assert "UserWarning" not in err and not [w for w in recwarn if "haw" in str(w.message)]


def test_bad_device_is_one_line(tiny_model_dir, fr, tmp_path, capsys):
    assert embed("--model", tiny_model_dir, "--lang", "fr", "-i", fr, "-o", tmp_path / "o.npy", "--device",
                 "gpu") == 2
    one_error(capsys, "hf-laser embed: error: --device 'gpu' is not a device")


def test_output_in_a_missing_directory_is_refused_before_the_work(tiny_model_dir, fr, tmp_path, capsys):
    missing = tmp_path / "nonexistent" / "dir"
    assert embed("--model", tiny_model_dir, "--lang", "fr", "-i", fr, "-o", missing / "out.npy") == 2
    one_error(capsys, f"hf-laser embed: error: the directory of -o {missing / 'out.npy'} does not exist")
    assert cli_main(["mine", str(fr), str(fr), "--model", str(tiny_model_dir), "--src-lang", "fr", "--tgt-lang",
                     "fr", "-o", str(missing / "pairs.tsv")]) == 2
    one_error(capsys, "hf-laser mine: error: the directory of -o")
    assert not (tmp_path / "nonexistent").exists()


def test_binary_input_is_embedded_with_a_warning(tiny_model_dir, tmp_path, capsys):
    elf = tmp_path / "program"
    elf.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8 + b"\n\x00\xff\n")
    assert embed("--model", tiny_model_dir, "--lang", "en", "-i", elf, "-o", tmp_path / "o.npy") == 0
    assert "does not look like text (it holds NUL bytes: a binary file?)" in capsys.readouterr().err


def test_invalid_max_tokens_leaves_no_files(tiny_model_dir, fr, tmp_path, capsys, encoder):
    assert embed("--model", tiny_model_dir, "--lang", "fr", "-i", fr, "-o", tmp_path / "x.npy",
                 "--max-tokens", "0") == 2
    one_error(capsys, "hf-laser embed: error: --max-tokens must be positive")
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        encoder.encode_file(fr, tmp_path / "x.npy", lang="fr", max_tokens=0)
    assert not list(tmp_path.glob("x.npy*"))


def test_tokenize_missing_input_says_input_file_not_found(tiny_model_dir, tmp_path, capsys):
    assert cli_main(["tokenize", "--model", str(tiny_model_dir), "--lang", "en", "-i", str(tmp_path / "nope.txt"),
                     "-o", str(tmp_path / "o.txt")]) == 2
    assert one_error(capsys, "hf-laser tokenize: error:") == \
        f"hf-laser tokenize: error: input file not found: {tmp_path / 'nope.txt'}"


def test_converted_directory_follows_the_umask(tiny_model_dir):
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(tiny_model_dir.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tiny_model_dir / "model.safetensors").stat().st_mode) == 0o666 & ~umask


def test_similar_auto_labels_the_detected_language(tiny_model_dir, tmp_path, capsys):
    target = tmp_path / "t.txt"
    target.write_text("Où est la gare ?\nDer Zug ist spät.\n", encoding="utf-8")
    assert cli_main(["similar", "--model", str(tiny_model_dir), "--lang", "auto", "--text",
                     "Where is the railway station, please?", "--target-lang", "auto", "--target", str(target),
                     "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "[auto]" not in out and "[en] Where is the railway station" in out
    assert "[fr] Où est la gare ?" in out and "[de] Der Zug ist spät." in out


def test_mine_offers_overwrite_not_a_python_argument(tiny_model_dir, fr, tmp_path, capsys):
    pytest.importorskip("faiss")
    args = ["mine", str(fr), str(fr), "--model", str(tiny_model_dir), "--src-lang", "fr", "--tgt-lang", "fr",
            "--knn-device", "cpu", "--no-progress", "--embed-dir", str(tmp_path / "emb"), "-o", str(tmp_path / "p")]
    assert cli_main(args) == 0
    err = capsys.readouterr().err
    assert "resume=False" not in err and "reused (--overwrite recomputes it)" in err  # the second side reuses
    assert cli_main(args + ["--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "recomputing" in err and "(--overwrite)" in err


def test_docs_pool_snippet_is_guarded():
    readme = (REPO / "docs" / "sentence-transformers.md").read_text(encoding="utf-8")
    snippet = readme[readme.index("start_multi_process_pool") - 200: readme.index("start_multi_process_pool")]
    assert 'if __name__ == "__main__":' in snippet


def test_interrupt_inside_a_lazy_import_is_an_interrupt(capsys):
    from hf_laser.errors import run_cli

    def importing():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise ImportError("Could not import module 'PreTrainedModel'") from err

    assert run_cli("hf-laser embed", importing) == 130
    assert one_error(capsys, "hf-laser embed: interrupted")


def test_shards_manifest_with_wrong_field_types_is_stale(encoder, fr, tmp_path):
    import json

    from hf_laser import mining as M

    shards = tmp_path / "shards"
    manifest = M.embed_shards(encoder, fr, shards, "fr", rank=0, world_size=1, num_shards=2)
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "identity": [1]}))
    with pytest.raises(M.StaleEmbeddingsError, match="unreadable"):
        M.load_embedding_shards(shards, fr, "fr")


@pytest.mark.slow
def test_embed_shards_workers_do_not_repeat_the_default_model_notice(fr, tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))
    proc = subprocess.run([sys.executable, "-m", "hf_laser.cli", "embed-shards", "--embed-dir", str(tmp_path / "e"),
                           "--input", "fr", str(fr), "--nproc", "2", "--device", "cpu", "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("no model given, using the shipped default model") == 1, proc.stderr


def test_tokenizer_caches_are_bounded_in_size_not_only_in_entries(monkeypatch):
    """#52 D2: a 4,000,002-character word was kept in the word caches (20 MB a request, forever: 738 -> 1,264 MB RSS
    on a server after five of them). Long words are not cached, and the caches are cleared past a size in
    characters; the ids do not change."""
    import hf_laser.text.bpe as B
    import hf_laser.text.text_tokenizer as T
    from hf_laser import DEFAULT_MODEL
    from hf_laser.text.text_tokenizer import LaserTextTokenizer

    tok = LaserTextTokenizer.from_directory(DEFAULT_MODEL)
    core, bpe = tok._core, tok._core.pipeline.bpe
    huge = "w0" + "a" * 4_000_000
    ids = tok.encode_lines([huge], lang="en")
    assert huge not in core._word_ids and huge not in bpe._cache
    assert ids == tok.encode_lines([huge], lang="en")
    monkeypatch.setattr(T, "_WORD_CACHE_UNITS", 1_000)
    monkeypatch.setattr(B, "CACHE_CHARS", 1_000)
    words = [f"word{i}" + "x" * 100 for i in range(200)]
    fresh = [core.tokens_to_ids(bpe.bpe_word(w).split()) for w in words]
    for w, expected in zip(words, fresh):
        assert tok.encode_lines([w], lang="en")[0][:-1] == expected
        bpe.apply_word(w)
        assert sum(len(k) + len(v) for k, v in core._word_ids.items()) <= 1_000 + 2 * 120
        assert sum(len(k) + len(v) for k, v in bpe._cache.items()) <= 1_000 + 2 * 600


def test_language_caches_hold_rule_sets_not_every_code_a_client_sends():
    """#52 D2: every distinct language code kept a Moses tokenizer, punctuation rules and a preprocessor forever
    (~10 KB each: a server sent 2,048 made-up codes per request grew without bound). Codes without rules of their
    own share one entry (the Moses defaults, the same output), and a pipeline keeps at most 256 preprocessors."""
    import itertools
    import string
    import warnings

    import hf_laser.text.preprocessing as P
    import hf_laser.text.text_tokenizer as T
    from hf_laser import DEFAULT_MODEL
    from hf_laser.text.text_tokenizer import LaserTextTokenizer

    tok = LaserTextTokenizer.from_directory(DEFAULT_MODEL)
    codes = ["".join(t) for t in itertools.islice(itertools.product(string.ascii_lowercase, repeat=3), 600)]
    sentence = "L'homme, « Mr. Smith », n'a pas 1,5 kg."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown codes
        ids = tok.encode_lines([sentence] * len(codes), lang=codes)
        generic = tok.encode_lines([sentence], lang="xx")[0]
    assert P._tokenizer.cache_info().currsize <= len(P.NONBREAKING_PREFIX_LANGS) + 4
    assert P._normalizer_blocks.cache_info().currsize <= len(P._NORMALIZER_LANGS) + 1
    assert len(tok._core.pipeline._preprocessors) <= T.MAX_CACHED_PREPROCESSORS
    known = {c for c in codes if P.normalize_lang(c) in P.KNOWN_CODES}
    assert all(row == generic for c, row in zip(codes, ids) if c not in known)
    for code in P.NONBREAKING_PREFIX_LANGS | {"en", "fr", "it", "ga"}:  # codes with rules of their own keep them
        assert P._tokenizer_rules_lang(code) == code
