"""The torch-only inference path (`hf_laser.modeling.bilstm.LaserBiLSTM` with `PlainLaserConfig`, `LaserTextTokenizer`,
`LaserEncoder.from_pretrained(torch_only=True)`, used by the command line): the same embeddings, ids and model
identity as `LaserModel` + `LaserTokenizer`, a fall-back to their `from_pretrained` (and its error messages) for
anything but a plain directory, and a command line that never imports transformers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REFERENCE, read_lines, reference_embeddings
from safetensors.torch import load_file, save_file

from hf_laser import DEFAULT_MODEL
from hf_laser.modeling.bilstm import LaserBiLSTM
from hf_laser.encoder import LaserEncoder
from hf_laser.modeling.modeling_laser import LaserModel
from hf_laser.outputs import config_identity, model_sha256
from hf_laser.modeling.plain_config import LASER_CONFIG_DEFAULTS, PlainLaserConfig
from hf_laser.text.text_tokenizer import LaserTextTokenizer
from hf_laser.text.tokenization_laser import LaserTokenizer


@pytest.fixture(scope="module")
def fra_lines() -> list[str]:
    return read_lines(REFERENCE / "tatoeba" / "tatoeba.fra-eng.fra.bpe")


def test_reference_checkpoint_gives_the_original_embeddings(tiny_model_dir, fra_lines):
    light = LaserEncoder.from_pretrained(tiny_model_dir, torch_only=True, engine="torch")
    full = LaserEncoder.from_pretrained(tiny_model_dir, engine="torch")
    assert type(light.model) is LaserBiLSTM and type(full.model) is LaserModel
    emb = light.encode(fra_lines, pretokenized=True, max_tokens=300)  # many batches of mixed lengths: packing
    assert np.abs(emb - reference_embeddings("tatoeba.fra-eng.fra")).max() <= 1e-5
    assert np.array_equal(emb, full.encode(fra_lines, pretokenized=True, max_tokens=300))
    assert light.model_identity() == full.model_identity()
    # every value of the transformers-free config is LaserConfig's (name_or_path included); LaserConfig only adds
    # transformers' generic attributes, which the identity leaves out
    plain, config = light.model.config.to_dict(), full.model.config.to_dict()
    assert type(light.model.config) is PlainLaserConfig and {k: config[k] for k in plain} == plain
    assert config_identity(light.model.config) == config_identity(full.model.config)
    assert type(light.tokenizer) is LaserTextTokenizer and type(full.tokenizer) is LaserTokenizer
    # the hidden states too, padded on the left and on the right
    ids = torch.tensor([[1, 1, 7, 8, 2], [9, 10, 11, 12, 2]])
    for mask in (ids.ne(1), None):
        a, b = light.model(ids, attention_mask=mask), full.model(ids, attention_mask=mask)
        assert torch.equal(a.pooler_output, b.pooler_output) and torch.equal(a.last_hidden_state, b.last_hidden_state)


@pytest.mark.parametrize("mode", [{}, {"dtype": torch.bfloat16}, {"quantize": "int8"}])
def test_shipped_model_same_embeddings_in_every_mode(mode):
    sentences = ["Hello world.", "Where is the station?", "I do not know what you mean by that, my friend."]
    light = LaserEncoder.from_pretrained(DEFAULT_MODEL, torch_only=True, engine="torch", **mode)
    full = LaserEncoder.from_pretrained(DEFAULT_MODEL, engine="torch", **mode)
    assert type(light.model) is LaserBiLSTM and light.quantize == mode.get("quantize")
    assert np.array_equal(light.encode(sentences, lang="en"), full.encode(sentences, lang="en"))
    assert light.model_identity() == full.model_identity()


@pytest.mark.parametrize("shape", [dict(num_layers=1, bidirectional=True), dict(num_layers=3, bidirectional=True),
                                   dict(num_layers=2, bidirectional=False)])
def test_parameter_shapes_are_those_of_the_built_encoder(shape):
    from hf_laser.modeling.bilstm import parameter_shapes
    from hf_laser.modeling.configuration_laser import LaserConfig

    config = LaserConfig(vocab_size=30, embed_dim=6, hidden_size=5, **shape)
    built = {name: list(t.shape) for name, t in LaserBiLSTM(config).state_dict().items()}
    assert parameter_shapes(config) == built


def test_a_config_asking_for_huge_tensors_declines_without_allocating(tmp_path, tiny_model_dir):
    path = _copy(tiny_model_dir, tmp_path / "model")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 10**12}))  # 1e12 x embed_dim floats
    assert LaserBiLSTM.from_directory(path) is None


def test_loading_draws_nothing_from_the_global_rng(tiny_model_dir):
    before = torch.get_rng_state()
    LaserBiLSTM.from_directory(tiny_model_dir)
    assert torch.equal(before, torch.get_rng_state())


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("damage", ["missing", "extra", "shape", "nan", "vocab", "sharded", "int", "dtype"])
def test_anything_unusual_falls_back_to_the_strict_loader(tiny_model_dir, tmp_path, damage, capfd):
    """from_directory declines (None), and `torch_only=True` then raises exactly what `LaserModel` raises (or, where
    the directory is valid but unusual, loads it with `LaserModel`)."""
    path = _copy(tiny_model_dir, tmp_path / "model")
    weights = path / "model.safetensors"
    state = load_file(weights)
    if damage == "missing":
        state.pop(sorted(state)[-1])
    elif damage == "extra":
        state["lstm.weight_extra"] = torch.zeros(2)
    elif damage == "shape":
        name = sorted(state)[0]
        state[name] = torch.zeros(*[n + 1 for n in state[name].shape])
    elif damage == "nan":
        state["embed_tokens.weight"][5, 0] = float("nan")
    elif damage == "int":
        state["embed_tokens.weight"] = state["embed_tokens.weight"].to(torch.int32)
    if damage == "vocab":
        vocab = json.loads((path / "vocab.json").read_text())
        vocab["<extra-token>"] = len(vocab)
        (path / "vocab.json").write_text(json.dumps(vocab))
    elif damage == "sharded":
        weights.rename(path / "model-00001-of-00001.safetensors")
        (path / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in state}}))
    elif damage == "dtype":
        config = json.loads((path / "config.json").read_text())
        config["dtype"] = "bfloat16"
        (path / "config.json").write_text(json.dumps(config))
    else:
        save_file(state, weights)
    assert LaserBiLSTM.from_directory(path) is None
    if damage in ("sharded", "dtype"):  # valid, just not the plain case
        capfd.readouterr()
        encoder = LaserEncoder.from_pretrained(path, torch_only=True)
        assert type(encoder.model) is LaserModel
        assert "Loading weights" not in capfd.readouterr().err  # the command lines' quiet local loading
        from transformers.utils import logging as hf_logging

        assert hf_logging.is_progress_bar_enabled()  # and only while it loads
        return
    with pytest.raises(ValueError) as strict:
        LaserEncoder.from_pretrained(path)
    with pytest.raises(ValueError) as light:
        LaserEncoder.from_pretrained(path, torch_only=True)
    assert str(light.value) == str(strict.value)


def test_not_a_directory_or_no_weights_declines(tmp_path, tiny_model_dir):
    assert LaserBiLSTM.from_directory(tmp_path / "absent") is None
    path = _copy(tiny_model_dir, tmp_path / "model")
    (path / "model.safetensors").unlink()
    assert LaserBiLSTM.from_directory(path) is None
    for data in (b"\x08\x00\x00\x00\x00\x00\x00\x00{}",  # an empty header: not LASER
                 b"\xff" * 8 + b"{}",  # a header length beyond the file (damaged): not read
                 b"\x02\x00\x00\x00\x00\x00\x00\x00[]"):  # not a JSON object
        (path / "model.safetensors").write_bytes(data)
        assert LaserBiLSTM.from_directory(path) is None


@pytest.mark.parametrize("command", ["embed", "tokenize"])
def test_cli_never_imports_transformers(tmp_path, command):
    """`hf-laser embed` / `tokenize` with the shipped model: the output of the library path, and neither transformers
    (a third of a command's start-up) nor `torch._dynamo` in the process."""
    src = tmp_path / "in.txt"
    src.write_text("Hello world.\nGood morning.\n", encoding="utf-8")
    out = tmp_path / ("out.npy" if command == "embed" else "out.bpe")
    code = (f"import sys, runpy; sys.argv = ['hf-laser', '{command}', '--lang', 'en', '-i', sys.argv[1], '-o', "
            "sys.argv[2]]\ntry:\n    runpy.run_module('hf_laser.cli', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('transformers', any(m.split('.')[0] == 'transformers' for m in sys.modules))\n"
            "print('dynamo', 'torch._dynamo' in sys.modules)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # nor torch._dynamo (1-3 s), which building a model on the meta device imported
    assert result.stdout.strip().splitlines()[-2:] == ["transformers False", "dynamo False"]
    if command == "tokenize":
        tokenizer = LaserTokenizer.from_pretrained(DEFAULT_MODEL)
        assert out.read_text().splitlines() == tokenizer.pipeline.process(["Hello world.", "Good morning."], "en")
        return
    expected = LaserEncoder.from_pretrained(DEFAULT_MODEL).encode(["Hello world.", "Good morning."], lang="en")
    # (not bit-equal: the subprocess runs with its own number of torch threads, the test worker with one)
    assert np.abs(np.load(out) - expected).max() <= 1e-6


def test_plain_config_defaults_and_checks_are_laser_configs():
    import inspect

    from hf_laser.modeling.configuration_laser import LaserConfig

    params = inspect.signature(LaserConfig.__init__).parameters
    signature = {k: p.default for k, p in params.items() if k not in ("self", "kwargs")}
    # None stands for a list default in the signature; LaserConfig() holds the value
    assert {k: getattr(LaserConfig(), k) if v is None else v for k, v in signature.items()} == LASER_CONFIG_DEFAULTS
    for bad in ({"hidden_size": 0}, {"num_layers": 2.0}, {"classifier_mode": "triple"}):
        with pytest.raises(ValueError) as plain:
            PlainLaserConfig({"model_type": "laser", **bad})
        with pytest.raises(ValueError) as full:
            LaserConfig(**bad)
        assert str(plain.value) == str(full.value)
    with pytest.raises(ValueError, match="not a LASER config"):
        PlainLaserConfig({"model_type": "bert"})


def test_identity_covers_the_laser_parameters_not_transformers_generic_attributes(tiny_model_dir):
    from hf_laser.modeling.configuration_laser import LaserConfig

    model = LaserBiLSTM.from_directory(tiny_model_dir)
    before = model_sha256(model)
    model.config = LaserConfig.from_pretrained(tiny_model_dir)
    assert model_sha256(model) == before
    model.config.output_hidden_states = True  # a transformers attribute: not what the model computes
    assert model_sha256(model) == before
    model.config.padding_value = -1.0  # a LASER parameter
    assert model_sha256(model) != before


@pytest.fixture(params=["laser1", "laser2"])
def tokenizer_dir(request, tiny_model_dir, tiny_laser2_dir):
    return tiny_model_dir if request.param == "laser1" else tiny_laser2_dir


def test_plain_tokenizer_gives_laser_tokenizers_ids_and_identity(tokenizer_dir):
    plain, full = LaserTextTokenizer.from_directory(tokenizer_dir), LaserTokenizer.from_pretrained(tokenizer_dir)
    assert type(plain) is LaserTextTokenizer
    lines = ["Hello world.", "Où est la gare ?", "Das ist ein Test, nicht wahr?", "", "Ceci n'est pas une pipe."]
    langs = ["en", "fr", "de", "en", "fr"]
    assert plain.encode_lines(lines, lang=langs) == full.encode_lines(lines, lang=langs)
    assert plain.encode_lines(lines, lang="fr") == full.encode_lines(lines, lang="fr")
    assert plain.get_vocab() == full.get_vocab() and plain.default_lang == full.default_lang
    assert plain.mode == full.mode and plain._files == full._files
    from hf_laser.outputs import tokenizer_sha256

    assert tokenizer_sha256(plain, None) == tokenizer_sha256(full, None)


@pytest.mark.parametrize("change", ["class", "special", "added", "added-id", "added-key", "added-content", "setting",
                                    "no-vocab", "json"])
def test_plain_tokenizer_declines_anything_unusual(tiny_model_dir, tmp_path, change):
    """from_directory returns None, and `torch_only=True` then loads `LaserTokenizer` (or raises what it raises)."""
    path = _copy(tiny_model_dir, tmp_path / "model")
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if change == "class":
        config["tokenizer_class"] = "OtherTokenizer"
    elif change == "special":
        config["unk_token"] = "</s>"
    elif change == "added":
        config["added_tokens_decoder"]["99"] = {**config["added_tokens_decoder"]["3"], "content": "<mask>"}
    elif change == "added-id":
        config["added_tokens_decoder"]["7"] = config["added_tokens_decoder"].pop("3")
    elif change == "added-content":
        del config["added_tokens_decoder"]["3"]["content"]
    elif change == "added-key":
        config["added_tokens_decoder"]["three"] = config["added_tokens_decoder"].pop("3")
    elif change == "setting":
        config["do_lower_case"] = True
    elif change == "no-vocab":
        (path / "vocab.json").unlink()
    if change == "json":
        config_file.write_text("{not json")
    else:
        config_file.write_text(json.dumps(config))
    assert LaserTextTokenizer.from_directory(path) is None
    if change in ("special", "setting"):  # valid for LaserTokenizer, just not the plain case
        assert type(LaserEncoder.from_pretrained(path, torch_only=True).tokenizer) is LaserTokenizer


@pytest.mark.parametrize("torch_only", [False, True])
def test_a_tokenizer_that_cannot_be_loaded_is_an_error_not_a_dictionary_only_model(tiny_model_dir, tmp_path,
                                                                                      torch_only):
    path = _copy(tiny_model_dir, tmp_path / "model")
    (path / "bpe.fcodes").unlink()
    with pytest.raises((OSError, ValueError), match="bpe_codes_file|spm_model_file|bpe.fcodes"):
        LaserEncoder.from_pretrained(path, torch_only=torch_only)
