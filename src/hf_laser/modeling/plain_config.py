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
    "quant_noise": False,
}
ENCODER_TYPES = ("bilstm", "transformer")
# what a transformer student computes (transformer.py's ACTIVATIONS, fairseq's names), its poolings and positions
TRANSFORMER_ACTIVATIONS = ("relu", "relu_squared", "gelu", "gelu_fast", "gelu_accurate", "tanh", "linear")
TRANSFORMER_POOLINGS = ("max", "cls")
TRANSFORMER_POSITIONS = ("sinusoidal", "learned", "none")

# Limits on what an untrusted configuration or checkpoint may ask for (docs/convert.md, "Untrusted inputs"); each
# is raised with the environment variable of its name (a positive integer).
LIMITS = {
    # the parameters a configuration implies, allocated when the model is built (before its weights are read)
    "HF_LASER_MAX_PARAMETERS": 2_000_000_000,
    # a LASER3 checkpoint's pickle: opcodes, distinct global names, values and nesting of its configuration
    "HF_LASER_MAX_PICKLE_OPS": 2_000_000,
    "HF_LASER_MAX_PICKLE_GLOBALS": 256,
    "HF_LASER_MAX_CONFIG_VALUES": 100_000,
    "HF_LASER_MAX_CONFIG_DEPTH": 64,
}
# (low, high) of the integer sizes (fixed: far beyond any LASER model; the parameter count bounds them together)
INT_RANGES = {
    "vocab_size": (1, 1 << 24), "embed_dim": (1, 1 << 16), "hidden_size": (1, 1 << 16), "num_layers": (1, 1024),
    "attention_heads": (1, 1 << 16), "ffn_dim": (1, 1 << 20), "max_positions": (1, 1 << 24),
}
FLOAT_RANGES = {"dropout": (0.0, 1.0), "attention_dropout": (0.0, 1.0), "activation_dropout": (0.0, 1.0),
                "layer_norm_eps": (0.0, 1.0)}
TRANSFORMER_FLAGS = ("normalize_before", "scale_embedding", "layernorm_embedding", "final_layer_norm",
                     "prepend_bos", "quant_noise")


def limit(name: str) -> int:
    """The limit `name` (`LIMITS`), or the positive integer its environment variable gives."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return LIMITS[name]
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={text!r}: expected a positive integer (default {LIMITS[name]:_})")
    return value


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(values: dict, name: str, low: int, high: int) -> int:
    value = values[name]
    if not is_int(value) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low:,} to {high:,}, got {value!r}")
    return value


def parameter_count(values: dict) -> int:
    """The number of encoder parameters a configuration's sizes imply (the embeddings and the layers)."""
    vocab, dim, layers = values["vocab_size"], values["embed_dim"], values["num_layers"]
    if values.get("encoder_type", "bilstm") == "transformer":
        ffn, positions = values["ffn_dim"], values["max_positions"]
        per_layer = 4 * (dim * dim + dim) + 2 * dim * ffn + ffn + dim + 4 * dim
        learned = (positions + 2) * dim if values.get("position_embedding_type") == "learned" else 0
        return vocab * dim + learned + layers * per_layer + 4 * dim + dim * dim
    hidden = values["hidden_size"]
    directions = 2 if values.get("bidirectional", True) else 1
    first = 4 * hidden * (dim + hidden + 2)
    rest = 4 * hidden * (hidden * directions + hidden + 2)
    return vocab * dim + directions * (first + (layers - 1) * rest)


def check_laser_config_values(values: dict) -> None:
    """The checks `LaserConfig` makes of its arguments (ValueError naming the field and what it may be): types,
    ranges, and the parameters the sizes imply (`HF_LASER_MAX_PARAMETERS`), before anything is allocated."""
    if values.get("encoder_type", "bilstm") not in ENCODER_TYPES:
        raise ValueError(f"encoder_type must be one of {ENCODER_TYPES}, got {values['encoder_type']!r}")
    if values["classifier_mode"] not in ("single", "pair"):
        raise ValueError(f"classifier_mode must be 'single' or 'pair', got {values['classifier_mode']!r}")
    for name in ("vocab_size", "embed_dim", "hidden_size", "num_layers"):
        _check_int(values, name, *INT_RANGES[name])
    transformer = values.get("encoder_type", "bilstm") == "transformer"
    if transformer:
        for name in ("attention_heads", "ffn_dim", "max_positions"):
            _check_int(values, name, *INT_RANGES[name])
        if values["embed_dim"] % values["attention_heads"]:
            raise ValueError(f"attention_heads must divide embed_dim {values['embed_dim']}, got "
                             f"{values['attention_heads']!r}")
        for name, allowed in (("activation_function", TRANSFORMER_ACTIVATIONS), ("pooling", TRANSFORMER_POOLINGS),
                              ("position_embedding_type", TRANSFORMER_POSITIONS)):
            if not isinstance(values[name], str) or values[name] not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {values[name]!r}")
        for name in TRANSFORMER_FLAGS:
            if not isinstance(values.get(name, False), bool):
                raise ValueError(f"{name} must be true or false, got {values[name]!r}")
        for name, (low, high) in FLOAT_RANGES.items():
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high or (
                    name == "layer_norm_eps" and value <= 0):
                raise ValueError(f"{name} must be a number from {low} to {high}, got {value!r}")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"):
        value = values.get(name)
        if value is not None and (not is_int(value) or not 0 <= value < values["vocab_size"]):
            raise ValueError(f"{name} must be an integer from 0 to vocab_size - 1 ({values['vocab_size'] - 1:,}), "
                             f"got {value!r}")
    count, most = parameter_count(values), limit("HF_LASER_MAX_PARAMETERS")
    if count > most:
        raise ValueError(f"the configuration's sizes imply {count:,} parameters, more than HF_LASER_MAX_PARAMETERS="
                         f"{most:,} (vocab_size {values['vocab_size']:,}, embed_dim {values['embed_dim']:,}, "
                         f"num_layers {values['num_layers']:,}); raise that environment variable for a model "
                         "this large")


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
            try:
                values = json.load(f)
            except RecursionError:
                raise ValueError(f"{path}/config.json is nested too deeply to be a LASER config") from None
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
