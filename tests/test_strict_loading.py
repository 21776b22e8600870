"""Strict loading: a LASER directory whose weights do not match its config is an error, not a load-report warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import TINY_CHECKPOINT, require_shared
from safetensors.torch import load_file, save_file
from transformers import AutoModel

import hf_laser
from hf_laser import LaserConfig, LaserModel
from hf_laser.modeling.modeling_laser import LaserForPreTraining, LaserForSequenceClassification

SMALL = dict(vocab_size=20, embed_dim=4, hidden_size=5, num_layers=2, decoder_embed_dim=3, decoder_hidden_size=6,
             classifier_hidden_sizes=[4], num_labels=3)


def save(model, path: Path, vocab: bool = True) -> Path:
    model.save_pretrained(path)
    if vocab:  # what `hf-laser convert` / training write next to the weights
        tokens = ["<s>", "<pad>", "</s>", "<unk>"] + [f"t{i}" for i in range(model.config.vocab_size - 4)]
        (path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    return path


def encoder_dir(tmp_path: Path, **config) -> Path:
    torch.manual_seed(0)
    return save(LaserModel(LaserConfig(**{**SMALL, **config})), tmp_path / "encoder")


def edit_weights(path: Path, edit) -> Path:
    state = load_file(path / "model.safetensors")
    edit(state)
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    return path


def edit_config(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_intact_directories_load(tmp_path):
    path = encoder_dir(tmp_path)
    assert isinstance(LaserModel.from_pretrained(path), LaserModel)
    assert isinstance(AutoModel.from_pretrained(path), LaserModel)
    model, info = LaserModel.from_pretrained(path, output_loading_info=True)
    assert isinstance(model, LaserModel) and not info["missing_keys"] and not info["unexpected_keys"]


def test_missing_lstm_layer_is_an_error(tmp_path):
    path = edit_weights(encoder_dir(tmp_path), lambda s: [s.pop(k) for k in list(s) if k.endswith("_l1")])
    with pytest.raises(ValueError, match=r"missing tensors lstm\.bias_hh_l1, .*lstm\.weight_ih_l1.*strict=False"):
        LaserModel.from_pretrained(path)
    with pytest.raises(ValueError, match="missing tensors"):
        AutoModel.from_pretrained(path)
    # the escape hatch: transformers behaviour (newly initialised tensors, a load report on the log)
    assert isinstance(LaserModel.from_pretrained(path, strict=False), LaserModel)
    assert isinstance(AutoModel.from_pretrained(path, strict=False), LaserModel)


def test_unexpected_tensor_is_an_error(tmp_path):
    path = edit_weights(encoder_dir(tmp_path), lambda s: s.update({"extra.weight": torch.zeros(3)}))
    with pytest.raises(ValueError, match=r"unexpected tensors extra\.weight"):
        LaserModel.from_pretrained(path)


def test_config_with_fewer_layers_is_an_error(tmp_path):
    path = edit_config(encoder_dir(tmp_path), num_layers=1)
    with pytest.raises(ValueError, match=r"unexpected tensors lstm\.bias_hh_l1"):
        LaserModel.from_pretrained(path)


def test_config_with_other_size_is_an_error(tmp_path):
    path = edit_config(encoder_dir(tmp_path), hidden_size=6)
    with pytest.raises(ValueError, match=r"mis-shaped tensors: lstm\.bias_hh_l0 \(20,\) in the checkpoint vs \(24,\)"):
        LaserModel.from_pretrained(path)
    # transformers' own opt-in still works: mis-shaped tensors re-initialised
    model = LaserModel.from_pretrained(path, ignore_mismatched_sizes=True)
    assert model.lstm.weight_hh_l0.shape == (24, 6)


def test_integer_weights_are_an_error(tmp_path):
    path = edit_weights(encoder_dir(tmp_path), lambda s: s.update({"lstm.weight_hh_l1": s["lstm.weight_hh_l1"].long()}))
    with pytest.raises(ValueError, match=r"non-floating-point weights lstm\.weight_hh_l1 \(I64\)"):
        LaserModel.from_pretrained(path)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_an_error(tmp_path, value):
    def poison(state):
        state["lstm.weight_ih_l0"][0, 0] = value

    path = edit_weights(encoder_dir(tmp_path), poison)
    with pytest.raises(ValueError, match=r"NaN or infinite values in lstm\.weight_ih_l0"):
        LaserModel.from_pretrained(path)


def test_state_dict_argument_is_checked(tmp_path):
    path = encoder_dir(tmp_path)
    state = load_file(path / "model.safetensors")
    state["embed_tokens.weight"] = state["embed_tokens.weight"].long()
    with pytest.raises(ValueError, match=r"non-floating-point weights embed_tokens\.weight"):
        LaserModel.from_pretrained(None, config=LaserConfig.from_pretrained(path), state_dict=state)


@pytest.mark.parametrize("changes, match", [
    ({"pad_token_id": 0}, r"config\.pad_token_id is 0 but vocab\.json has '<pad>' -> 1"),
    ({"eos_token_id": 3}, r"config\.eos_token_id is 3 but vocab\.json has '</s>' -> 2"),
])
def test_special_ids_disagreeing_with_vocab_are_an_error(tmp_path, changes, match):
    path = edit_config(encoder_dir(tmp_path), **changes)
    with pytest.raises(ValueError, match=match):
        LaserModel.from_pretrained(path)


def test_vocab_size_disagreeing_with_vocab_is_an_error(tmp_path):
    path = encoder_dir(tmp_path)
    vocab = json.loads((path / "vocab.json").read_text())
    vocab["extra"] = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ValueError, match=r"config\.vocab_size is 20 but vocab\.json has 21 tokens"):
        LaserModel.from_pretrained(path)


def test_encoder_loads_out_of_pretraining_checkpoint(tmp_path):
    torch.manual_seed(0)
    pretraining = LaserForPreTraining(LaserConfig(**SMALL))
    path = save(pretraining, tmp_path / "pretraining")
    encoder = LaserModel.from_pretrained(path)  # decoder.* ignored: legitimate
    assert torch.equal(encoder.lstm.weight_ih_l1, pretraining.laser.lstm.weight_ih_l1)
    again = LaserForPreTraining.from_pretrained(path)
    assert torch.equal(again.decoder.init_state.weight, pretraining.decoder.init_state.weight)


def test_pretraining_from_encoder_gets_new_decoder_but_not_a_partial_one(tmp_path):
    path = encoder_dir(tmp_path)
    model = LaserForPreTraining.from_pretrained(path)  # the whole decoder is new: legitimate
    assert model.decoder is not None
    torch.manual_seed(0)
    partial = save(LaserForPreTraining(LaserConfig(**SMALL)), tmp_path / "pretraining")
    edit_weights(partial, lambda s: s.pop("decoder.init_state.weight"))
    with pytest.raises(ValueError, match=r"missing tensors decoder\.init_state\.weight"):
        LaserForPreTraining.from_pretrained(partial)


def test_classifier_from_encoder_gets_new_head_but_not_a_partial_one(tmp_path):
    path = encoder_dir(tmp_path)
    model = LaserForSequenceClassification.from_pretrained(path)  # the whole head is new: legitimate
    assert model.config.freeze_encoder and not any(p.requires_grad for p in model.laser.parameters())
    model, info = LaserForSequenceClassification.from_pretrained(path, output_loading_info=True)
    assert isinstance(model, LaserForSequenceClassification) and info["missing_keys"]
    clf = save(model, tmp_path / "clf")
    assert isinstance(LaserForSequenceClassification.from_pretrained(clf), LaserForSequenceClassification)
    edit_weights(clf, lambda s: s.pop("classifier.mlp.4.bias"))
    with pytest.raises(ValueError, match=r"missing tensors classifier\.mlp\.4\.bias"):
        LaserForSequenceClassification.from_pretrained(clf)
    edit_weights(clf, lambda s: s.pop("laser.lstm.weight_hh_l0"))
    with pytest.raises(ValueError, match=r"missing tensors .*laser\.lstm\.weight_hh_l0"):
        LaserForSequenceClassification.from_pretrained(clf)


def test_classifier_with_other_num_labels_needs_ignore_mismatched_sizes(tmp_path):
    clf = save(LaserForSequenceClassification(LaserConfig(**SMALL)), tmp_path / "clf")
    with pytest.raises(ValueError, match=r"mis-shaped tensors: classifier\.mlp\.4\.bias"):
        LaserForSequenceClassification.from_pretrained(clf, num_labels=5)
    model = LaserForSequenceClassification.from_pretrained(clf, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.mlp[-1].out_features == 5


def test_converted_reference_checkpoint_loads_strictly(tmp_path):
    require_shared(TINY_CHECKPOINT)
    from hf_laser.checkpoints.convert import convert

    out = convert(TINY_CHECKPOINT, tmp_path / "tiny", no_tokenizer=True)
    assert AutoModel.from_pretrained(out).config.vocab_size == 63021
    edit_config(out, pad_token_id=0)
    with pytest.raises(ValueError, match=r"config\.pad_token_id is 0 but vocab\.json has '<pad>' -> 1"):
        AutoModel.from_pretrained(out)


def test_remote_code_is_strict_too(tmp_path):
    """The copy of modeling_laser.py shipped next to the weights raises the same error without hf_laser."""
    path = edit_weights(encoder_dir(tmp_path), lambda s: s.pop("lstm.weight_hh_l1"))
    code = textwrap.dedent(f"""
        import sys
        src = {str(os.path.dirname(hf_laser.__file__))!r}
        sys.path = [p for p in sys.path if not (p and src.startswith(p))]
        sys.modules["hf_laser"] = None
        from transformers import AutoModel
        try:
            AutoModel.from_pretrained({str(path)!r}, trust_remote_code=True)
        except ValueError as err:
            print("REFUSED", err)
        model = AutoModel.from_pretrained({str(path)!r}, trust_remote_code=True, strict=False)
        assert "hf_laser" not in type(model).__module__, type(model).__module__
        print("LOADED")
    """)
    env = dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", PYTHONPATH="")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED" in result.stdout and "missing tensors lstm.weight_hh_l1" in result.stdout
    assert result.stdout.rstrip().endswith("LOADED")
