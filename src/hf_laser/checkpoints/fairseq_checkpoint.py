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

Before anything is unpickled, the pickle's opcodes are read without running them ([`scan_checkpoint`]): the
global names it may use, a bounded number of opcodes and distinct names, and the tensors it declares (a storage
larger than its record in the file, a view reaching outside its storage, a zero-stride view of more elements than
its storage holds) are refused then, so nothing a file declares is allocated beyond what the file holds. The
configuration is then read with shared values kept shared, within a bound on values and nesting, and a cycle is
refused (`plain_config.LIMITS`, raised with environment variables; docs/convert.md, "Untrusted inputs").

[`laser3_model_config`] maps the configuration to `LaserConfig` values the way laser_encoders'
`LaserTransformerEncoder` builds its model (fairseq's defaults for what the configuration leaves out), checked
against the weights.
"""

from __future__ import annotations

import io
import math
import pickletools
import re
import zipfile
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from ..modeling.plain_config import INT_RANGES, TRANSFORMER_ACTIVATIONS, limit
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
ACTIVATIONS = TRANSFORMER_ACTIVATIONS
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

# the builtin types omegaconf metadata names (as type references): inert stand-ins too, so that no call of one
# computes anything (`str` of a shared structure takes exponential time)
_BUILTIN_NAMES = tuple(f"builtins.{t.__name__}" for t in (dict, list, tuple, str, int, float, bool, object))
_ALLOWED_PREFIXES = ("omegaconf.", "fairseq.")
# numpy scalars, dtypes and arrays (a training checkpoint's `extra_state` holds some): stand-ins read as plain values
_NUMPY_NAMES = {f"numpy.{core}.multiarray.{name}" for core in ("core", "_core") for name in ("scalar", "_reconstruct")}
_NUMPY_NAMES |= {"numpy.dtype", "numpy.ndarray"}
# what torch.save writes for tensors and plain containers; any other name torch would accept is refused here
# (`bytearray(3e9)` allocates 3 GB, sparse / quantized / nested rebuilds build what no LASER3 file holds)
_TORCH_NAMES = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor", "torch._utils._rebuild_parameter",
                "torch._utils._rebuild_parameter_with_state", "collections.OrderedDict", "collections.Counter",
                "_codecs.encode", "builtins.set", "builtins.frozenset", "builtins.complex", "torch.Size",
                "torch.device", "torch.storage.UntypedStorage"}
_STORAGE_TYPE = re.compile(r"^torch\.(\w*)Storage$")
_ELEMENT_SIZES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                  "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Untyped": 1, "QInt8": 1,
                  "QUInt8": 1, "QInt32": 4, "Float8_e4m3fn": 1, "Float8_e5m2": 1}
_TORCH_DTYPE = re.compile(r"^torch\.(float|bfloat|int|uint|bool|complex)\w*$")


def _allowed_name(name: str) -> bool:
    return (name == "argparse.Namespace" or name.startswith(_ALLOWED_PREFIXES) or name in _BUILTIN_NAMES
            or name in ("typing.Any", "collections.defaultdict") or name in _NUMPY_NAMES or name in _TORCH_NAMES
            or bool(_STORAGE_TYPE.match(name) and _STORAGE_TYPE.match(name).group(1) in _ELEMENT_SIZES)
            or bool(_TORCH_DTYPE.match(name)))


def _stand_ins(names) -> list[tuple[object, str]]:
    """`(stand-in, name)` for every global the checkpoint names that is read through a stand-in; the classes are
    made for this one load (none accumulates in the process). Raises [`NotALaser3Checkpoint`] naming the first
    name outside the allow-list."""
    out = []
    for name in sorted(names):
        if not _allowed_name(name):
            raise NotALaser3Checkpoint(name)
        if name == "typing.Any":
            out.append((_Any, name))
        elif name == "collections.defaultdict":
            out.append((defaultdict, name))
        elif name == "argparse.Namespace" or name.startswith(_ALLOWED_PREFIXES) or name in _BUILTIN_NAMES \
                or name in _NUMPY_NAMES:
            out.append((type(name.rsplit(".", 1)[-1], (_Record,), {"qualname": name}), name))
    return out


class _Bounded:
    """A file read no further than its end, whatever length a pickle opcode declares (no huge read buffer)."""

    def __init__(self, f, end: int):
        self.f, self.end = f, end

    def tell(self):
        return self.f.tell()

    def read(self, n=-1):
        left = max(0, self.end - self.f.tell())
        return self.f.read(left if n is None or n < 0 else min(n, left))

    def readline(self, size=-1):
        return self.f.readline(max(0, min(self.end - self.f.tell(), 4096)))


_TORCH_OPS = {"PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
              "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE",
              "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE",
              "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1"}
_OPAQUE = object()


class _Storage:
    __slots__ = ("elements",)

    def __init__(self, elements: int):
        self.elements = elements


def _scan_pickle(f, end: int, storage_bytes, budget: dict, check_names: bool = True) -> set[str]:
    """The global names of the pickle at `f` (read up to `end`), its opcodes followed on a symbolic stack without
    running anything: the opcodes torch's weights-only unpickler takes, at most HF_LASER_MAX_PICKLE_OPS of them
    (`budget`, shared by the pickles of one file) and HF_LASER_MAX_PICKLE_GLOBALS distinct names; every storage
    declared no larger than `storage_bytes(key, nbytes)` allows and every tensor inside its storage."""
    names: set[str] = set()
    stack: list = []
    metastack: list = []
    memo: dict = {}
    max_globals = limit("HF_LASER_MAX_PICKLE_GLOBALS")
    try:
        for op, arg, _pos in pickletools.genops(_Bounded(f, end)):
            budget["ops"] -= 1
            if budget["ops"] < 0:
                raise NotALaser3Checkpoint(f"its pickle has more than HF_LASER_MAX_PICKLE_OPS="
                                           f"{limit('HF_LASER_MAX_PICKLE_OPS'):,} opcodes (raise that environment "
                                           "variable for a file this large)")
            name = op.name
            if name not in _TORCH_OPS:
                raise NotALaser3Checkpoint(f"its pickle uses the opcode {name}, which torch.save does not write")
            if name == "STOP":
                return names
            if name == "GLOBAL":
                module, _, attr = arg.partition(" ")
                # Python 2 names, mapped as torch's unpickler maps them (`__builtin__.dict` is `builtins.dict`)
                module, attr = NAME_MAPPING.get((module, attr), (IMPORT_MAPPING.get(module, module), attr))
                full = f"{module}.{attr}"
                if full not in names:
                    budget["names"].add(full)
                    if full == "builtins.bytearray" or (check_names and not _allowed_name(full)):
                        raise NotALaser3Checkpoint(f"it holds a Python object a LASER3 checkpoint does not have "
                                                   f"({full})")
                    names.add(full)
                    if len(names) > max_globals:
                        raise NotALaser3Checkpoint(f"its pickle names more than HF_LASER_MAX_PICKLE_GLOBALS="
                                                   f"{max_globals:,} distinct globals")
                stack.append(("global", full))
            elif name == "MARK":
                metastack.append(stack)
                stack = []
            elif name in ("TUPLE", "APPENDS", "SETITEMS"):
                items, stack = stack, metastack.pop()
                if name == "TUPLE":
                    stack.append(tuple(items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name in ("BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET"):
                stack.append(memo[arg])
            elif name in ("NONE", "NEWFALSE", "NEWTRUE"):
                stack.append({"NONE": None, "NEWFALSE": False, "NEWTRUE": True}[name])
            elif name in ("BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING"):
                stack.append(arg)
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
                stack.append(_OPAQUE)
            elif name in ("APPEND", "BUILD"):
                stack.pop()
            elif name == "SETITEM":
                del stack[-2:]
            elif name == "NEWOBJ":
                del stack[-2:]
                stack.append(_OPAQUE)
            elif name == "BINPERSID":
                stack.append(_persistent_storage(stack.pop(), storage_bytes))
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                if func in (("global", "torch._utils._rebuild_tensor_v2"), ("global", "torch._utils._rebuild_tensor")):
                    _check_tensor_view(args)
                stack.append(_OPAQUE)
            elif name == "PROTO":
                pass
    except (IndexError, KeyError, ValueError, TypeError) as err:
        if isinstance(err, NotALaser3Checkpoint):
            raise
        raise NotALaser3Checkpoint(f"its pickle is damaged ({type(err).__name__}: {err})") from None
    raise NotALaser3Checkpoint("its pickle ends before its STOP opcode (a truncated file)")


def _persistent_storage(pid, storage_bytes) -> _Storage:
    if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")
            and isinstance(pid[1], tuple) and pid[1][:1] == ("global",)):
        raise NotALaser3Checkpoint("its pickle holds a persistent id that is no tensor storage")
    match = _STORAGE_TYPE.match(pid[1][1])
    size = _ELEMENT_SIZES.get(match.group(1) if match else "")
    numel = pid[4]
    if size is None or not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
        raise NotALaser3Checkpoint(f"its pickle declares a storage {pid[1][1]} of {numel!r} elements")
    available = storage_bytes(pid[2], numel * size)
    if numel * size > available:
        raise NotALaser3Checkpoint(f"its pickle declares a tensor storage of {numel * size:,} bytes, but the file "
                                   f"holds {available:,} for it (a damaged or crafted file)")
    return _Storage(numel)


def _check_tensor_view(args) -> None:
    if not (isinstance(args, tuple) and len(args) >= 4 and isinstance(args[0], _Storage)):
        return  # not a plain storage view: torch's own checks apply
    storage, offset, size, stride = args[:4]
    if not (isinstance(offset, int) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) and all(isinstance(v, int) and v >= 0 for v in (offset, *size, *stride))):
        raise NotALaser3Checkpoint(f"its pickle declares a tensor of size {size!r}, stride {stride!r}, offset "
                                   f"{offset!r}")
    numel = math.prod(size)
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if numel else 0
    if numel > storage.elements or extent > storage.elements:
        raise NotALaser3Checkpoint(f"its pickle declares a tensor of {numel:,} elements (size {size}, stride "
                                   f"{stride}) over a storage of {storage.elements:,}: a damaged or crafted file")


def scan_checkpoint(path: str | Path, check_names: bool = True) -> set[str]:
    """The global names a `torch.save` file's pickles use, read as opcodes without running anything; refuses
    ([`NotALaser3Checkpoint`], the reason only, with `.names`: those seen until then) what [`_scan_pickle`]
    refuses, and names outside the allow-list unless `check_names` is false (then only `bytearray`, whose call
    allocates what its argument says). Both of torch's formats: the zip archive (`data.pkl`, storages as records)
    and the legacy one (torch < 1.6: pickles, then the storages)."""
    budget = {"ops": limit("HF_LASER_MAX_PICKLE_OPS"), "names": set()}
    try:
        return _scan_file(Path(path), budget, check_names)
    except NotALaser3Checkpoint as err:
        err.names = budget["names"]
        raise


def _scan_file(path: Path, budget: dict, check_names: bool) -> set[str]:
    file_size = path.stat().st_size
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            pickles = [n for n in infos if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pickles) != 1:
                raise NotALaser3Checkpoint(f"the zip archive has {len(pickles)} data.pkl records, torch.save writes 1")
            prefix = pickles[0][: -len("data.pkl")]
            for info in infos.values():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > file_size:
                    raise NotALaser3Checkpoint(f"the record {info.filename} is compressed or larger than the file; "
                                               "torch.save stores its records as they are")

            def storage_bytes(key, _nbytes):
                info = infos.get(f"{prefix}data/{key}")
                return 0 if info is None else info.file_size

            with archive.open(pickles[0]) as raw:
                data = raw.read()
            return _scan_pickle(io.BytesIO(data), len(data), storage_bytes, budget, check_names)
    with open(path, "rb") as f:
        # the legacy format: magic number, protocol version, system info, the object, the storage keys, storages
        for _ in range(3):
            _scan_pickle(f, file_size, lambda key, nbytes: file_size, budget, check_names)
        names = _scan_pickle(f, file_size, lambda key, nbytes: file_size, budget, check_names)
    return names


def load_fairseq_checkpoint(path: str | Path) -> dict:
    """The checkpoint at `path` as plain data: a dict whose `cfg` is plain dicts / lists / values and whose `model`
    holds tensors (see the module docstring). Raises [`NotALaser3Checkpoint`] (one line) for a global outside the
    allow-list, a file beyond the limits, or one torch cannot read; FileNotFoundError when there is no file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        names = scan_checkpoint(path)
        stand_ins = _stand_ins(names)
    except NotALaser3Checkpoint as err:
        raise NotALaser3Checkpoint(f"{path} could not be read as {EXPECTED_FORMAT}: {err}"
                                   + ("; hf-laser reads checkpoints as data and never runs code from them"
                                      if "Python object" in str(err) else "")) from None
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        raise NotALaser3Checkpoint(f"{path} could not be read as {EXPECTED_FORMAT}: "
                                   f"{' '.join(str(err).split()) or type(err).__name__}") from None
    try:
        with torch.serialization.safe_globals(stand_ins):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (Exception, RecursionError) as err:  # noqa: BLE001 - whatever torch raises, in one line
        text = " ".join(str(err).split())
        text = text.split("WeightsUnpickler error:", 1)[-1].split(". ", 1)[0].strip() or type(err).__name__
        raise NotALaser3Checkpoint(f"{path} could not be read as {EXPECTED_FORMAT}: {text}") from None
    if not isinstance(checkpoint, dict):
        raise NotALaser3Checkpoint(f"{path} is not {EXPECTED_FORMAT}; found a {type(checkpoint).__name__}")
    if "cfg" in checkpoint:
        try:
            cfg = plain_value(checkpoint["cfg"])
        except NotALaser3Checkpoint as err:
            raise NotALaser3Checkpoint(f"{path}: {err}") from None
        checkpoint = dict(checkpoint, cfg=cfg)
    return checkpoint


_SIMPLE_DTYPE_KINDS = "biufc"


def _numpy_dtype(record) -> np.dtype | None:
    """A numpy dtype stand-in (`numpy.dtype('f8', False, True)` + its state) as the dtype, plain number kinds only."""
    if not (isinstance(record, _Record) and record.qualname == "numpy.dtype" and record.args
            and isinstance(record.args[0], str) and len(record.args[0]) <= 8):
        return None
    try:
        dtype = np.dtype(record.args[0])
    except TypeError:
        return None
    state = record.state
    if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
        dtype = dtype.newbyteorder(state[1])
    return dtype if dtype.kind in _SIMPLE_DTYPE_KINDS else None


def _numpy_value(record):
    """A numpy dtype, scalar or array stand-in as a plain value (its name, a Python number, a list), or None when
    it is not plain numbers."""
    name = record.qualname
    if name == "numpy.dtype":
        dtype = _numpy_dtype(record)
        return None if dtype is None else dtype.name
    if name.endswith(".scalar") and len(record.args) == 2 and isinstance(record.args[1], bytes):
        dtype = _numpy_dtype(record.args[0])
        if dtype is not None and len(record.args[1]) == dtype.itemsize:
            return np.frombuffer(record.args[1], dtype=dtype)[0].item()
        return None
    if name.endswith("._reconstruct") and isinstance(record.state, tuple) and len(record.state) == 5:
        _version, shape, dtype_record, fortran, raw = record.state
        dtype = _numpy_dtype(dtype_record)
        if (dtype is None or not isinstance(raw, bytes) or not isinstance(shape, tuple)
                or not all(isinstance(n, int) and n >= 0 for n in shape)
                or math.prod(shape) * dtype.itemsize != len(raw)):
            return None
        return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C").tolist()
    return None


_MISSING = object()


def plain_value(value, root=None):
    """A value unpickled with the stand-ins as plain Python: dicts, lists, tuples, scalars and tensors. Shared
    values stay shared (converted once), at most HF_LASER_MAX_CONFIG_VALUES values and HF_LASER_MAX_CONFIG_DEPTH
    levels; a value that contains itself is refused ([`NotALaser3Checkpoint`])."""
    state = {"left": limit("HF_LASER_MAX_CONFIG_VALUES"), "depth": limit("HF_LASER_MAX_CONFIG_DEPTH")}
    return _plain(value, {}, set(), 0, state)


def _plain(value, memo: dict, active: set, depth: int, state: dict):
    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.Tensor)):
        return value
    key = id(value)
    if key in active:
        raise NotALaser3Checkpoint("the configuration contains itself (a self-referencing value), which a LASER3 "
                                   "configuration does not")
    if key in memo:
        return memo[key][0]
    if depth >= state["depth"]:
        raise NotALaser3Checkpoint(f"the configuration is nested deeper than HF_LASER_MAX_CONFIG_DEPTH="
                                   f"{state['depth']:,} levels")
    state["left"] -= 1
    if state["left"] < 0:
        raise NotALaser3Checkpoint(f"the configuration holds more than HF_LASER_MAX_CONFIG_VALUES="
                                   f"{limit('HF_LASER_MAX_CONFIG_VALUES'):,} values")
    active.add(key)
    try:
        out = _plain_container(value, memo, active, depth, state)
    finally:
        active.discard(key)
    memo[key] = (out, value)  # the value kept alive: its id is not reused while the memo lives
    return out


def _plain_container(value, memo, active, depth, state):
    def sub(v):
        return _plain(v, memo, active, depth + 1, state)

    if isinstance(value, _Record):
        name = value.qualname
        record_state = value.state if isinstance(value.state, dict) else {}
        if name == "argparse.Namespace":
            return {k: sub(v) for k, v in record_state.items()}
        if name.endswith("DictConfig"):
            content = record_state.get("_content")
            if not isinstance(content, dict):
                return content if content is None or isinstance(content, str) else sub(content)
            return {k: sub(v) for k, v in content.items()}
        if name.endswith("ListConfig"):
            content = record_state.get("_content")
            return [sub(v) for v in content] if isinstance(content, (list, tuple)) else content
        if name.startswith("omegaconf.nodes."):
            return sub(record_state.get("_val"))
        if name.startswith("numpy."):
            plain = _numpy_value(value)
            if plain is None:
                raise NotALaser3Checkpoint(f"the configuration holds a {name} object that is not plain numbers")
            return plain
        if name.startswith("fairseq.") and len(value.args) == 1 and value.state is None:
            return sub(value.args[0])  # an enum member: `EnumClass(value)`
        raise NotALaser3Checkpoint(f"the configuration holds a {name} object, which a LASER3 configuration does not")
    if isinstance(value, dict):
        return {k: sub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(sub(v) for v in value)
    return value


_INTERPOLATION = re.compile(r"^\$\{([A-Za-z_][\w.]*)\}$")


def config_value(cfg: dict, section: dict, key: str, default=None):
    """`section[key]`, a `${a.b}` interpolation resolved against `cfg` (fairseq's configurations point into their
    task and common sections this way); `default` when the key is absent or None. An interpolation that names
    nothing is refused, as omegaconf would fail on it."""
    value = section.get(key, default)
    for _ in range(10):
        match = _INTERPOLATION.match(value) if isinstance(value, str) else None
        if match is None:
            break
        node = cfg
        for part in match.group(1).split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, an interpolation that names nothing "
                                           "in the configuration (omegaconf would fail on it)")
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
    if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, expected true or false")


def _integer(value, key: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, expected an integer from {low:,} to {high:,}")
    return value


def _number(value, key: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise NotALaser3Checkpoint(f"cfg['model'].{key} is {value!r}, expected a number from {low} to {high}")
    return float(value)


def laser3_model_config(path, cfg: dict, state: dict) -> dict:
    """`LaserConfig` arguments of a LASER3 transformer (plain `cfg`, encoder `state` from [`encoder_state`]).

    The sizes come from the weights and must agree with the configuration where it names them; the switches come
    from the configuration with fairseq's defaults, as `TransformerConfig.from_namespace` fills them. Every value
    is checked for its type and range (one line naming the field) before anything is built."""
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if not isinstance(model, dict):
        raise NotALaser3Checkpoint(f"{path}: cfg['model'] is a {type(model).__name__}; expected {EXPECTED_FORMAT}")
    missing = [k for k in REQUIRED_KEYS if k not in model]
    if missing:
        raise NotALaser3Checkpoint(f"{path}: cfg['model'] lacks {missing} (laser_encoders reads them); expected "
                                   f"{EXPECTED_FORMAT}")
    try:
        return _laser3_model_config(path, cfg, model, state)
    except NotALaser3Checkpoint as err:
        text = str(err)
        raise NotALaser3Checkpoint(text if text.startswith(str(path)) else f"{path}: {text}") from None


def _laser3_model_config(path, cfg: dict, model: dict, state: dict) -> dict:
    def get(key):
        return config_value(cfg, model, key, FAIRSEQ_DEFAULTS.get(key))

    criterion = get("sentemb_criterion")
    if not isinstance(criterion, str) or criterion not in SENTEMB_CRITERIA:
        raise NotALaser3Checkpoint(f"cfg['model'].sentemb_criterion is {criterion!r}, expected one of "
                                   f"{sorted(SENTEMB_CRITERIA)}")
    activation = get("activation_fn")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        why = (" (fairseq 0.12's get_activation_fn returns the class nn.SiLU for it: the original fails on the first "
               "sentence)" if activation == "swish" else "")
        raise NotALaser3Checkpoint(f"cfg['model'].activation_fn is {activation!r}{why}; expected one of "
                                   f"{list(ACTIVATIONS)} (fairseq's, computed as it does)")
    embed = state.get("embed_tokens.weight")
    if embed is None or embed.dim() != 2:
        raise NotALaser3Checkpoint(f"'model' lacks a 2-d embed_tokens.weight; expected {EXPECTED_FORMAT}")
    vocab_size, dim = (int(n) for n in embed.shape)
    layer_ids = sorted({int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d{1,6})\.", k))})
    if layer_ids != list(range(len(layer_ids))):
        shown = layer_ids if len(layer_ids) <= 10 else [*layer_ids[:10], "..."]
        raise NotALaser3Checkpoint(f"the encoder layers in 'model' are {shown}, expected 0..N-1")
    ffn_key = "layers.0.fc1.weight"
    if not layer_ids or ffn_key not in state or state[ffn_key].dim() != 2:
        raise NotALaser3Checkpoint(f"'model' has no encoder layers ({ffn_key}); expected {EXPECTED_FORMAT}")
    sizes = {"encoder_embed_dim": dim, "encoder_layers": len(layer_ids), "encoder_ffn_embed_dim":
             int(state[ffn_key].shape[0])}
    for key, found in sizes.items():
        if model.get(key) is not None:
            named = config_value(cfg, model, key)
            if type(named) is not int or named != found:
                raise NotALaser3Checkpoint(f"cfg['model'].{key} is {named!r} but the weights have {found}")
    heads = _integer(get("encoder_attention_heads"), "encoder_attention_heads", 1, dim)
    if dim % heads:
        raise NotALaser3Checkpoint(f"cfg['model'].encoder_attention_heads is {heads}, which does not divide the "
                                   f"width {dim} (expected a divisor of it)")
    normalize_before = _flag(get("encoder_normalize_before"), "encoder_normalize_before")
    positions = "none" if _flag(get("no_token_positional_embeddings"), "no_token_positional_embeddings") else (
        "learned" if _flag(get("encoder_learned_pos"), "encoder_learned_pos") else "sinusoidal")
    max_positions = _integer(get("max_source_positions"), "max_source_positions", 1, INT_RANGES["max_positions"][1])
    if positions == "learned" and "embed_positions.weight" in state:
        # fairseq: max_source_positions + padding_idx + 1 rows (padding_idx is 1)
        rows = state["embed_positions.weight"].shape[0]
        if rows != max_positions + 2:
            raise NotALaser3Checkpoint(f"embed_positions.weight has {rows} rows, cfg['model']."
                                       f"max_source_positions {max_positions} asks for {max_positions + 2}")
    prepend_bos = _flag(config_value(cfg, model, "prepend_bos"), "prepend_bos")
    if criterion == "cls" and not prepend_bos:
        raise NotALaser3Checkpoint("sentemb_criterion 'cls' takes the output at <s>, but prepend_bos is false: the "
                                   "original would give no embedding")
    if normalize_before and "layer_norm.weight" not in state:
        raise NotALaser3Checkpoint("cfg['model'].encoder_normalize_before is true (pre-norm), so fairseq's encoder "
                                   "has a final layer_norm, but the weights have none (layer_norm.weight): the "
                                   "original fails to load this checkpoint")
    quant_noise_pq = _number(config_value(cfg, model, "quant_noise_pq", 0.0), "quant_noise_pq", 0.0, 1.0)
    adaptive_input = _flag(config_value(cfg, model, "adaptive_input", False), "adaptive_input")
    return dict(
        encoder_type="transformer",
        vocab_size=vocab_size,
        embed_dim=dim,
        hidden_size=dim,
        num_layers=len(layer_ids),
        attention_heads=heads,
        ffn_dim=sizes["encoder_ffn_embed_dim"],
        normalize_before=normalize_before,
        position_embedding_type=positions,
        max_positions=max_positions,
        scale_embedding=not _flag(get("no_scale_embedding"), "no_scale_embedding"),
        layernorm_embedding=_flag(get("layernorm_embedding"), "layernorm_embedding"),
        # fairseq builds the final norm for pre-norm models; laser_encoders adds one when the weights have it
        final_layer_norm=normalize_before or "layer_norm.weight" in state,
        activation_function=activation,
        dropout=_number(get("dropout"), "dropout", 0.0, 1.0),
        attention_dropout=_number(get("attention_dropout"), "attention_dropout", 0.0, 1.0),
        activation_dropout=_number(get("activation_dropout"), "activation_dropout", 0.0, 1.0),
        pooling=SENTEMB_CRITERIA[criterion],
        prepend_bos=prepend_bos,
        left_pad=_flag(config_value(cfg, model, "left_pad_source"), "left_pad_source"),
        # fairseq's encoder: `quant_noise_pq > 0` (without adaptive input) adds a linear map after the embeddings
        quant_noise=quant_noise_pq > 0 and not adaptive_input,
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
