"""A LASER `config.json` read without transformers, for the plain-PyTorch encoder ([`~bilstm.LaserBiLSTM`]).

[`~configuration_laser.LaserConfig`] is the transformers configuration; importing transformers is a third of a
command's start-up, so the command line reads a plain directory's `config.json` into [`PlainLaserConfig`]: the same
LASER parameters and defaults (`LASER_CONFIG_DEFAULTS`, tested equal to `LaserConfig`'s signature), the same checks.
"""

from __future__ import annotations

import json
import os

# `LaserConfig.__init__`'s parameters and their defaults (tests/test_torch_only.py compares the two)
LASER_CONFIG_DEFAULTS = {
    "vocab_size": 73640,
    "embed_dim": 320,
    "hidden_size": 512,
    "num_layers": 5,
    "bidirectional": True,
    "padding_value": 0.0,
    "left_pad": True,
    "dropout": 0.1,
    "decoder_embed_dim": 320,
    "decoder_hidden_size": 2048,
    "decoder_num_layers": 1,
    "lang_embed_dim": 32,
    "target_languages": ["en", "es"],
    "init_range": 0.1,
    "classifier_hidden_sizes": [512, 384],
    "classifier_mode": "single",
    "classifier_dropout": 0.1,
    "freeze_encoder": True,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "unk_token_id": 3,
    "encoder_type": "bilstm",
    "attention_heads": 16,
    "ffn_dim": 4096,
    "normalize_before": False,
    "position_embedding_type": "sinusoidal",
    "max_positions": 1024,
    "scale_embedding": True,
    "layernorm_embedding": False,
    "final_layer_norm": False,
    "activation_function": "relu",
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "layer_norm_eps": 1e-5,
    "pooling": "max",
    "prepend_bos": False,
}
ENCODER_TYPES = ("bilstm", "transformer")


def check_laser_config_values(values: dict) -> None:
    """The checks `LaserConfig` makes of its arguments (ValueError)."""
    if values.get("encoder_type", "bilstm") not in ENCODER_TYPES:
        raise ValueError(f"encoder_type must be one of {ENCODER_TYPES}, got {values['encoder_type']!r}")
    if values["classifier_mode"] not in ("single", "pair"):
        raise ValueError(f"classifier_mode must be 'single' or 'pair', got {values['classifier_mode']!r}")
    for name in ("vocab_size", "embed_dim", "hidden_size", "num_layers"):
        value = values[name]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


class PlainLaserConfig:
    """The values of a LASER `config.json` as attributes (the LASER parameters, defaults filled in, and whatever
    else the file holds, e.g. `dtype`), like `LaserConfig.from_pretrained` gives them.

    Args:
        values: the file's JSON object; its `model_type` must be `"laser"`.
        name_or_path: where it was read from (`config.name_or_path`, as transformers records it).
    """

    model_type = "laser"

    def __init__(self, values: dict, name_or_path: str = ""):
        if values.get("model_type") != "laser":
            raise ValueError(f"not a LASER config (model_type {values.get('model_type')!r})")
        merged = {**LASER_CONFIG_DEFAULTS, **values}
        check_laser_config_values(merged)
        for key, value in merged.items():
            setattr(self, key, value)
        self.name_or_path = name_or_path

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> PlainLaserConfig:
        """Reads `path/config.json` (OSError when absent, ValueError when not a LASER config)."""
        path = os.fspath(path)
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            values = json.load(f)
        if not isinstance(values, dict):
            raise ValueError(f"{path}/config.json is not a JSON object")
        return cls(values, name_or_path=path)

    @property
    def embedding_dim(self) -> int:
        """Dimension of the sentence embedding (`2 * hidden_size` for a bidirectional encoder, `embed_dim` for a
        transformer)."""
        if self.encoder_type == "transformer":
            return self.embed_dim
        return self.hidden_size * (2 if self.bidirectional else 1)

    def to_dict(self) -> dict:
        values = {k: v for k, v in vars(self).items() if k != "name_or_path"}
        return {**values, "model_type": self.model_type, "_name_or_path": self.name_or_path}
