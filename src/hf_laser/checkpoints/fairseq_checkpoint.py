"""LASER3 checkpoints (NLLB's per-language students, `laser3-LANG.v1.pt`) read as data, without fairseq or omegaconf.

A LASER3 transformer checkpoint is a `torch.save`'d dict with `cfg` (fairseq's configuration: `cfg["model"]` is an
`argparse.Namespace`, or omegaconf `DictConfig` objects) and `model` (the state dict of a fairseq
`TransformerEncoder`, sometimes still with a decoder's keys and an `encoder.` prefix). Loading it as fairseq does
would unpickle fairseq and omegaconf classes, i.e. run their code. Here it is loaded with
`torch.load(weights_only=True)`, and the only classes the file may name are stood in for by inert records
([`_Record`]: they keep the constructor arguments and state they are given, nothing else runs): `argparse.Namespace`,
omegaconf's containers, nodes and metadata, `typing.Any`, fairseq's configuration types (dataclasses and enums, seen
as type references in omegaconf metadata and as enum values), the builtin types and `collections.defaultdict`
(omegaconf's resolver cache; its factory can only be one of those types). Any other global is refused in
one line before anything is unpickled ([`NotALaser3Checkpoint`]). The records are then turned into plain Python
values ([`plain_value`]): a namespace or `DictConfig` into a dict, a `ListConfig` into a list, a node into its value,
an enum into its value, `${a.b}` interpolations resolved against the root configuration.

[`laser3_model_config`] maps the configuration to `LaserConfig` values the way laser_encoders'
`LaserTransformerEncoder` builds its model (fairseq's defaults for what the configuration leaves out), checked
against the weights.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import torch

from ..text.bpe import read_fields

# fairseq's `TransformerConfig` defaults for the keys LASER3 models use (`fairseq/models/transformer/
# transformer_config.py`, `TransformerConfig.from_namespace` fills whatever a namespace lacks with them)
FAIRSEQ_DEFAULTS = {
    "encoder_embed_dim": 512,
    "encoder_ffn_embed_dim": 2048,
    "encoder_layers": 6,
    "encoder_attention_heads": 8,
    "encoder_normalize_before": False,
    "encoder_learned_pos": False,
    "no_token_positional_embeddings": False,
    "no_scale_embedding": False,
    "layernorm_embedding": False,
    "max_source_positions": 1024,
    "activation_fn": "relu",
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
}
# what laser_encoders reads from cfg["model"] without a default
REQUIRED_KEYS = ("sentemb_criterion", "prepend_bos", "left_pad_source")
SENTEMB_CRITERIA = {"maxpool": "max", "cls": "cls"}
ACTIVATIONS = ("relu", "gelu")
# state-dict entries fairseq keeps that hold no weight (`version` buffers; sinusoidal tables of old releases)
BOOKKEEPING = re.compile(r"(^|\.)version$|^embed_positions\._float_tensor$|^embed_positions\.weights$")
# the prefixes laser_encoders keeps (and strips of "encoder.") when a checkpoint still has its decoder
ENCODER_PREFIXES = ("encoder.layer_norm", "encoder.layers", "encoder.embed", "encoder.version")

EXPECTED_FORMAT = (
    "a LASER3 transformer checkpoint: a torch.save'd dict with 'cfg' (fairseq's configuration, cfg['model'] an "
    "argparse.Namespace or omegaconf DictConfig with encoder_embed_dim, encoder_layers, ..., sentemb_criterion, "
    "prepend_bos, left_pad_source) and 'model' (a fairseq TransformerEncoder state dict)"
)


class NotALaser3Checkpoint(ValueError):
    """The file is not a LASER3 transformer checkpoint (or holds objects one does not have)."""

class _Record:
    """An inert stand-in for a class a checkpoint names: keeps what unpickling gives it, runs nothing."""

    qualname = "?"

    def __new__(cls, *args, **kwargs):
        record = object.__new__(cls)
        record.args, record.state = args, None
        return record

    def __init__(self, *args, **kwargs):  # a REDUCE call `cls(*args)`: the arguments are kept by __new__
        pass

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"<{self.qualname} args={self.args!r} state={self.state!r}>"


class _Any(_Record):
    """`typing.Any`, as omegaconf metadata names it."""

_RECORD_CLASSES: dict[str, type] = {}
_BUILTIN_TYPES = {f"builtins.{t.__name__}": t for t in (dict, list, tuple, set, str, int, float, bool, object)}
# omegaconf keeps its resolver cache in a defaultdict(dict): building one calls nothing but the builtin types above
_BUILTIN_TYPES["collections.defaultdict"] = defaultdict
_ALLOWED_PREFIXES = ("omegaconf.", "fairseq.")


def _record_class(qualname: str) -> type:
    if qualname not in _RECORD_CLASSES:
        _RECORD_CLASSES[qualname] = type(qualname.rsplit(".", 1)[-1], (_Record,), {"qualname": qualname})
    return _RECORD_CLASSES[qualname]


def _stand_ins(names: list[str]) -> list[tuple[object, str]]:
    """`(stand-in, name)` for every global the checkpoint names that a LASER3 checkpoint may hold; raises
    [`NotALaser3Checkpoint`] naming the first other one."""
    out = []
    for name in names:
        if name == "argparse.Namespace" or name.startswith(_ALLOWED_PREFIXES):
            out.append((_record_class(name), name))
        elif name == "typing.Any":
            out.append((_Any, name))
        elif name in _BUILTIN_TYPES:
            out.append((_BUILTIN_TYPES[name], name))
        else:
            raise NotALaser3Checkpoint(name)
    return out


def load_fairseq_checkpoint(path: str | Path) -> dict:
    """The checkpoint at `path` as plain data: a dict whose `cfg` is plain dicts / lists / values and whose `model`
    holds tensors (see the module docstring). Raises [`NotALaser3Checkpoint`] for a global outside the allow-list,
    FileNotFoundError when there is no file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception as err:  # noqa: BLE001 - not a torch.save file at all: the caller's message says what is expected
        raise NotALaser3Checkpoint(f"{path} could not be read as {EXPECTED_FORMAT}: "
                                   f"{' '.join(str(err).split()) or type(err).__name__}") from err
    try:
        stand_ins = _stand_ins(sorted(names))
    except NotALaser3Checkpoint as err:
        raise NotALaser3Checkpoint(
            f"{path} could not be read as {EXPECTED_FORMAT}: it holds a Python object a LASER3 checkpoint does not "
            f"have ({err}); hf-laser reads checkpoints as data and never runs code from them") from None
    with torch.serialization.safe_globals(stand_ins):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict):
        raise NotALaser3Checkpoint(f"{path} is not {EXPECTED_FORMAT}; found a {type(checkpoint).__name__}")
    if "cfg" in checkpoint:
        checkpoint = dict(checkpoint, cfg=plain_value(checkpoint["cfg"]))
    return checkpoint


def plain_value(value, root=None):
    """A value unpickled with the stand-ins as plain Python: dicts, lists, tuples, scalars and tensors."""
    if isinstance(value, _Record):
        name = value.qualname
        state = value.state if isinstance(value.state, dict) else {}
        if name == "argparse.Namespace":
            return {k: plain_value(v) for k, v in state.items()}
        if name.endswith("DictConfig"):
            content = state.get("_content")
            if not isinstance(content, dict):
                return content if content is None or isinstance(content, str) else plain_value(content)
            return {k: plain_value(v) for k, v in content.items()}
        if name.endswith("ListConfig"):
            content = state.get("_content")
            return [plain_value(v) for v in content] if isinstance(content, (list, tuple)) else content
        if name.startswith("omegaconf.nodes."):
            return plain_value(state.get("_val"))
        if len(value.args) == 1 and value.state is None:  # an enum member: `EnumClass(value)`
            return plain_value(value.args[0])
        raise NotALaser3Checkpoint(f"the configuration holds a {name} object, which a LASER3 configuration does not")
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    return value


_INTERPOLATION = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def config_value(cfg: dict, section: dict, key: str, default=None):
    """`section[key]`, a `${a.b}` interpolation resolved against `cfg` (fairseq's configurations point into their
    task and common sections this way); `default` when the key is absent or None."""
    value = section.get(key, default)
    for _ in range(10):
        match = _INTERPOLATION.match(value) if isinstance(value, str) else None
        if match is None:
            break
        node = cfg
        for part in match.group(1).split("."):
            node = node.get(part) if isinstance(node, dict) else None
        value = node
    else:
        raise NotALaser3Checkpoint(f"cfg['model'].{key} is an interpolation that does not end")
    if isinstance(value, str) and "${" in value:
        raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, an interpolation hf-laser cannot resolve")
    return default if value is None else value


def is_laser3_transformer(checkpoint: dict) -> bool:
    return isinstance(checkpoint, dict) and "cfg" in checkpoint and "model" in checkpoint and "params" not in checkpoint


def encoder_state(path, model_state: dict) -> dict:
    """The encoder's weights as laser_encoders loads them: a checkpoint that still has its decoder
    (`decoder.version`) keeps only the encoder's keys it names, without their `encoder.` prefix; fairseq's
    bookkeeping entries (`version` buffers, old sinusoidal tables) dropped."""
    if not isinstance(model_state, dict):
        raise NotALaser3Checkpoint(f"{path}: 'model' is a {type(model_state).__name__}, expected a state dict")
    state = dict(model_state)
    if "decoder.version" in state:
        state = {k.replace("encoder.", ""): v for k, v in state.items() if k.startswith(ENCODER_PREFIXES)}
    for key, tensor in state.items():
        if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
            raise NotALaser3Checkpoint(f"{path}: 'model' entry {key!r} is a {type(tensor).__name__}, expected a "
                                       "tensor")
    return {k: v for k, v in state.items() if not BOOKKEEPING.search(k)}


def _flag(value, key: str) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, expected true or false")


def laser3_model_config(path, cfg: dict, state: dict) -> dict:
    """`LaserConfig` arguments of a LASER3 transformer (plain `cfg`, encoder `state` from [`encoder_state`]).

    The sizes come from the weights and must agree with the configuration where it names them; the switches come
    from the configuration with fairseq's defaults, as `TransformerConfig.from_namespace` fills them."""
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(model, dict):
        raise NotALaser3Checkpoint(f"{path}: cfg['model'] is a {type(model).__name__}; expected {EXPECTED_FORMAT}")
    missing = [k for k in REQUIRED_KEYS if k not in model]
    if missing:
        raise NotALaser3Checkpoint(f"{path}: cfg['model'] lacks {missing} (laser_encoders reads them); expected "
                                   f"{EXPECTED_FORMAT}")

    def get(key):
        return config_value(cfg, model, key, FAIRSEQ_DEFAULTS.get(key))

    criterion = get("sentemb_criterion")
    if criterion not in SENTEMB_CRITERIA:
        raise NotALaser3Checkpoint(f"{path}: cfg['model'].sentemb_criterion is {criterion!r}, expected one of "
                                   f"{sorted(SENTEMB_CRITERIA)}")
    activation = get("activation_fn")
    if activation not in ACTIVATIONS:
        raise NotALaser3Checkpoint(f"{path}: cfg['model'].activation_fn is {activation!r}; hf-laser computes "
                                   f"{ACTIVATIONS} exactly as fairseq does, not that one")
    if "embed_tokens.weight" not in state:
        raise NotALaser3Checkpoint(f"{path}: 'model' lacks embed_tokens.weight; expected {EXPECTED_FORMAT}")
    vocab_size, dim = state["embed_tokens.weight"].shape
    layer_ids = sorted({int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d+)\.", k))})
    if layer_ids != list(range(len(layer_ids))):
        raise NotALaser3Checkpoint(f"{path}: the encoder layers in 'model' are {layer_ids}, expected 0..N-1")
    ffn_key = "layers.0.fc1.weight"
    if not layer_ids or ffn_key not in state:
        raise NotALaser3Checkpoint(f"{path}: 'model' has no encoder layers ({ffn_key}); expected {EXPECTED_FORMAT}")
    sizes = {"encoder_embed_dim": dim, "encoder_layers": len(layer_ids), "encoder_ffn_embed_dim":
             state[ffn_key].shape[0]}
    for key, found in sizes.items():
        named = model.get(key)
        if named is not None and config_value(cfg, model, key) != found:
            raise NotALaser3Checkpoint(f"{path}: cfg['model'].{key} is {named!r} but the weights have {found}")
    heads = get("encoder_attention_heads")
    normalize_before = _flag(get("encoder_normalize_before"), "encoder_normalize_before")
    positions = "none" if _flag(get("no_token_positional_embeddings"), "no_token_positional_embeddings") else (
        "learned" if _flag(get("encoder_learned_pos"), "encoder_learned_pos") else "sinusoidal")
    max_positions = get("max_source_positions")
    if positions == "learned" and "embed_positions.weight" in state:
        # fairseq: max_source_positions + padding_idx + 1 rows (padding_idx is 1)
        rows = state["embed_positions.weight"].shape[0]
        if rows != max_positions + 2:
            raise NotALaser3Checkpoint(f"{path}: embed_positions.weight has {rows} rows, cfg['model']."
                                       f"max_source_positions {max_positions} asks for {max_positions + 2}")
    prepend_bos = _flag(config_value(cfg, model, "prepend_bos"), "prepend_bos")
    if criterion == "cls" and not prepend_bos:
        raise NotALaser3Checkpoint(f"{path}: sentemb_criterion 'cls' takes the output at <s>, but prepend_bos is "
                                   "false: the original would give no embedding")
    return dict(
        encoder_type="transformer",
        vocab_size=int(vocab_size),
        embed_dim=int(dim),
        hidden_size=int(dim),
        num_layers=len(layer_ids),
        attention_heads=int(heads),
        ffn_dim=int(sizes["encoder_ffn_embed_dim"]),
        normalize_before=normalize_before,
        position_embedding_type=positions,
        max_positions=int(max_positions),
        scale_embedding=not _flag(get("no_scale_embedding"), "no_scale_embedding"),
        layernorm_embedding=_flag(get("layernorm_embedding"), "layernorm_embedding"),
        # fairseq builds the final norm for pre-norm models; laser_encoders adds one when the weights have it
        final_layer_norm=normalize_before or "layer_norm.weight" in state,
        activation_function=activation,
        dropout=float(get("dropout")),
        attention_dropout=float(get("attention_dropout")),
        activation_dropout=float(get("activation_dropout")),
        pooling=SENTEMB_CRITERIA[criterion],
        prepend_bos=prepend_bos,
        left_pad=_flag(config_value(cfg, model, "left_pad_source"), "left_pad_source"),
    )


def fairseq_dictionary(cvocab: str | Path, with_mask: bool) -> dict[str, int]:
    """fairseq's `Dictionary.load(cvocab)` as laser_encoders builds it: `<s> <pad> </s> <unk>` = 0..3, then the
    `piece count` lines in file order (a repeated piece is an error, as in fairseq), then `<mask>` when the
    checkpoint has a final layer norm (laser_encoders adds it then)."""

    dictionary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for fields in read_fields(cvocab, 2, "piece count"):
        piece = fields[0]
        if piece in dictionary:
            raise ValueError(f"{cvocab}: the piece {piece!r} appears twice (fairseq's Dictionary.load refuses that)")
        dictionary[piece] = len(dictionary)
    if with_mask and "<mask>" not in dictionary:
        dictionary["<mask>"] = len(dictionary)
    return dictionary
