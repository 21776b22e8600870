"""Every `hf-laser` subcommand reports a user error (missing input, bad model directory, bad language, no --lang) as
one line on stderr with exit status 2, never a traceback; `hf-laser tokenize` requires --lang like `hf-laser embed`."""

from __future__ import annotations

import pytest

from hf_laser.cli import main as cli_main
from hf_laser.commands.mine import main as mining_main


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture()
def text(tmp_path):
    path = tmp_path / "fr.txt"
    path.write_text("Bonjour le monde.\nIl fait beau.\n", encoding="utf-8")
    return path


def test_tokenize_requires_lang_like_embed(tiny_model_dir, text, tmp_path, capsys):
    out = tmp_path / "out.txt"
    for command in (["tokenize", "--model", str(tiny_model_dir)], ["embed", "--model", str(tiny_model_dir)]):
        assert cli_main([*command, "-i", str(text), "-o", str(out)]) == 2
        line = error_line(capsys)
        assert line.startswith(f"hf-laser {command[0]}: error: --lang is required") and "--lang auto" in line
    assert not out.exists()
    from hf_laser.commands.tokenize import main as _main  # python -m hf_laser.commands.tokenize: the same rule

    assert _main(["--model", str(tiny_model_dir), "-i", str(text), "-o", str(out)]) == 2
    assert "--lang is required" in error_line(capsys)
    assert cli_main(["tokenize", "--model", str(tiny_model_dir), "--lang", "auto", "--stage", "tok",
                     "-i", str(text), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == "bonjour le monde .\nil fait beau .\n"


def test_tokenize_user_errors(tiny_model_dir, text, tmp_path, capsys):
    base = ["tokenize", "--lang", "fr", "-o", str(tmp_path / "out.txt")]
    assert cli_main([*base, "--model", str(tiny_model_dir), "-i", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in error_line(capsys)
    assert cli_main([*base, "--model", str(tmp_path / "nope"), "-i", str(text)]) == 2
    assert error_line(capsys).startswith(f"hf-laser tokenize: error: model directory not found: {tmp_path / 'nope'} (")
    assert cli_main([*base, "--model", str(text), "-i", str(text)]) == 2
    assert "is a file, not a model directory" in error_line(capsys)
    assert cli_main(["tokenize", "--lang", "", "--model", str(tiny_model_dir), "-i", str(text)]) == 2
    assert "lang is an empty string" in error_line(capsys)


def test_similar_user_errors(tiny_model_dir, text, tmp_path, capsys):
    base = ["similar", "--target-lang", "en", "--target", str(text)]
    assert cli_main([*base, "--lang", "fr", "-i", str(tmp_path / "missing.txt"), "--model", str(tiny_model_dir)]) == 2
    assert "missing.txt not found" in error_line(capsys)
    assert cli_main([*base, "--lang", "fr", "-i", str(text), "--model", str(tmp_path / "nope")]) == 2
    assert error_line(capsys).startswith(f"hf-laser similar: error: model directory not found: {tmp_path / 'nope'} (")
    assert cli_main([*base, "--lang", "", "-i", str(text), "--model", str(tiny_model_dir)]) == 2
    assert "lang is an empty string" in error_line(capsys)


@pytest.mark.parametrize("entry", ["hf-laser", "python -m hf_laser.mining"])
def test_embed_shards_user_errors(entry, tiny_model_dir, text, tmp_path, capsys):
    def run(*args):
        argv = ["embed-shards", "--embed-dir", str(tmp_path / "shards"), "--no-progress", *args]
        return cli_main(argv) if entry == "hf-laser" else mining_main(argv)

    who = "hf-laser embed-shards" if entry == "hf-laser" else "hf_laser.mining embed-shards"
    assert run("--model", str(tiny_model_dir), "--input", "fr", str(tmp_path / "missing.txt")) == 2
    assert error_line(capsys) == f"{who}: error: input file not found: {tmp_path / 'missing.txt'}"
    assert run("--model", str(tiny_model_dir), "--input", "fr", str(tmp_path)) == 2
    assert error_line(capsys) == (f"{who}: error: input {tmp_path} is not a file (a directory of Parquet files is "
                                  "embedded with --ray)")
    assert run("--model", str(tmp_path / "nope"), "--input", "fr", str(text)) == 2
    assert error_line(capsys).startswith(f"{who}: error: model directory not found: {tmp_path / 'nope'} (")
    (tmp_path / "not_a_model").mkdir()
    assert run("--model", str(tmp_path / "not_a_model"), "--input", "fr", str(text)) == 2
    assert "is not a LASER model directory: it has no config.json" in error_line(capsys)
    assert run("--model", str(tiny_model_dir), "--input", "", str(text)) == 2
    assert error_line(capsys) == (f"{who}: error: lang is an empty string; expected a language code (e.g. 'fr'), "
                                  "'auto' (detect it per sentence), or a list with one code per sentence")
    assert not (tmp_path / "shards").exists()  # nothing was started
    assert run("--model", str(tiny_model_dir), "--input", "fr", str(text)) == 0
    assert "shards done; complete" in capsys.readouterr().err


def test_mine_bad_language(tiny_model_dir, text, tmp_path, capsys):
    pytest.importorskip("faiss")
    assert cli_main(["mine", "--model", str(tiny_model_dir), "--src-lang", "", "--tgt-lang", "fr", str(text),
                     str(text), "-o", str(tmp_path / "pairs.tsv"), "--no-progress"]) == 2
    assert "lang is an empty string" in error_line(capsys)


def test_unexpected_os_errors_are_one_line_too(capsys):
    from hf_laser import cli

    def fail(args):
        raise OSError("could not reach the Hub")

    assert cli.run_cli("hf-laser x", fail, None) == 1
    assert error_line(capsys) == "hf-laser x: error: could not reach the Hub"

    def bug(args):
        raise KeyError("a bug keeps its traceback")

    with pytest.raises(KeyError):
        cli.run_cli("hf-laser x", bug, None)


def test_half_precision_on_a_cpu_without_native_support_is_announced(monkeypatch, capsys):
    import torch

    from hf_laser import DEFAULT_MODEL
    from hf_laser.commands.common import load_encoder_for_cli, slow_cpu_dtype_message

    for name, native in (("_is_mkldnn_bf16_supported", False), ("_is_mkldnn_fp16_supported", True)):
        monkeypatch.setattr(torch.ops.mkldnn, name, lambda native=native: native)
    message = slow_cpu_dtype_message(torch.bfloat16, "cpu")
    assert "no native bfloat16" in message and "--int8" in message
    assert slow_cpu_dtype_message(torch.float16, "cpu") is None  # this "CPU" has fp16
    assert slow_cpu_dtype_message(torch.float32, "cpu") is None
    assert slow_cpu_dtype_message(torch.bfloat16, "cuda") is None  # GPUs are not concerned
    encoder = load_encoder_for_cli(DEFAULT_MODEL, "hf-laser embed", dtype=torch.bfloat16, device="cpu")
    assert f"hf-laser embed: {message}" in capsys.readouterr().err
    assert next(encoder.model.parameters()).dtype == torch.bfloat16  # announced, not changed
    load_encoder_for_cli(DEFAULT_MODEL, "hf-laser embed", device="cpu")
    assert "native" not in capsys.readouterr().err


@pytest.mark.parametrize("model", ["/no/such/dir", "laser-93langs", "./laser-93langs"])
def test_python_api_missing_model_is_as_clear_as_the_cli(model):
    """#47: `LaserEncoder.from_pretrained("/no/such/dir")` raised huggingface_hub's "Repo id must be in the form
    'repo_name'...", and a bare name retried the Hub 5 times (~23 s) when offline; now the CLI's one line, at once,
    without contacting the Hub (a Hub model is 'owner/name')."""
    from hf_laser import LaserEncoder

    with pytest.raises(FileNotFoundError, match=f"^model directory not found: {model} \\(a Hub model is 'owner/name'"):
        LaserEncoder.from_pretrained(model)


@pytest.mark.parametrize("lang", ["francais", "fr,en", "../etc", ["fr", "francais"]])
def test_python_api_language_rule_is_the_cli_one(lang):
    """#47: `--lang francais` was exit 2 in the CLI but `encode(lang="francais")` only warned and embedded with the
    Moses defaults; now one rule (hf_laser.text.languages.check_language): a code, a name, or auto; anything else is an
    error, in the encoder and in the tokenizer."""
    from hf_laser import DEFAULT_MODEL, LaserEncoder
    from hf_laser.text.text_tokenizer import LaserInputError, LaserTextTokenizer

    texts = ["Bonjour.", "Merci."] if isinstance(lang, list) else ["Bonjour."]
    with pytest.raises(LaserInputError, match="is not a language code"):
        LaserTextTokenizer.from_directory(DEFAULT_MODEL).encode_lines(texts, lang=lang)
    with pytest.raises(ValueError, match="is not a language code"):
        LaserEncoder.from_pretrained(DEFAULT_MODEL).encode(texts, lang=lang)


def test_python_api_takes_language_names_as_the_cli_does():
    from hf_laser import DEFAULT_MODEL, LaserEncoder

    encoder = LaserEncoder.from_pretrained(DEFAULT_MODEL)
    assert encoder.encode(["Bonjour."], lang="French").tobytes() == encoder.encode(["Bonjour."], lang="fr").tobytes()
