"""The weights of a plain LASER directory read without torch or transformers, for the light loaders
([`~bilstm.LaserBiLSTM`] in PyTorch, [`~bilstm_numpy.NumpyLaserBiLSTM`] in NumPy).

"Plain" is the common case: one `model.safetensors` whose tensor names, shapes and floating-point dtypes are exactly
the encoder's for its `config.json` (a float32 config), finite values, and a `vocab.json` that agrees with the config.
Anything else gives None: `LaserModel.from_pretrained` then loads the directory and its strict checks say what is
wrong.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from .plain_config import PlainLaserConfig

# safetensors dtype → (stored numpy dtype, bytes per value); BF16 has no numpy dtype: read as uint16, widened below
_STORED = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2), "BF16": (np.dtype("<u2"), 2)}


def parameter_shapes(config) -> dict[str, list[int]]:
    """The state-dict shapes of the encoder `BiLSTMEncoderMixin.build_encoder` builds for `config` (nn.LSTM's names),
    without building it; tests/test_torch_only.py checks them against the built module."""
    hidden, directions = config.hidden_size, 2 if config.bidirectional else 1
    shapes = {"embed_tokens.weight": [config.vocab_size, config.embed_dim]}
    for layer in range(config.num_layers):
        for suffix in ("", "_reverse")[:directions]:
            inputs = config.embed_dim if layer == 0 else hidden * directions
            shapes[f"lstm.weight_ih_l{layer}{suffix}"] = [4 * hidden, inputs]
            shapes[f"lstm.weight_hh_l{layer}{suffix}"] = [4 * hidden, hidden]
            shapes[f"lstm.bias_ih_l{layer}{suffix}"] = [4 * hidden]
            shapes[f"lstm.bias_hh_l{layer}{suffix}"] = [4 * hidden]
    return shapes


def vocab_problems(config, path, subfolder: str = "") -> list[str]:
    """Where the `vocab.json` next to the weights disagrees with the config on the special ids or the size."""
    if path is None or not os.path.isdir(os.path.join(str(path), subfolder or "")):
        return []
    vocab_file = os.path.join(str(path), subfolder or "", "vocab.json")
    if not os.path.isfile(vocab_file):
        return []
    try:
        with open(vocab_file, encoding="utf-8") as f:
            vocab = json.load(f)
    except (OSError, ValueError) as err:
        return [f"vocab.json cannot be read ({err})"]
    if not isinstance(vocab, dict):
        return ["vocab.json is not a token -> id mapping"]
    problems = []
    for token, attr in (("<pad>", "pad_token_id"), ("</s>", "eos_token_id"), ("<unk>", "unk_token_id"),
                        ("<s>", "bos_token_id")):
        want = getattr(config, attr, None)
        if token in vocab and want is not None and vocab[token] != want:
            problems.append(f"config.{attr} is {want} but vocab.json has {token!r} -> {vocab[token]}")
    if len(vocab) != config.vocab_size:
        problems.append(f"config.vocab_size is {config.vocab_size} but vocab.json has {len(vocab)} tokens")
    return problems


def read_plain_weights(path: str | os.PathLike):
    """`(config, state)` of a plain LASER directory: its [`~plain_config.PlainLaserConfig`] and its weights as
    float32 NumPy arrays (float16 / bfloat16 files widened exactly), in the file's tensor order; None when the
    directory is anything but the plain case (see the module docstring)."""

    path = os.fspath(path)
    weights = os.path.join(path, "model.safetensors")
    if not (os.path.isdir(path) and os.path.isfile(weights) and os.path.isfile(os.path.join(path, "config.json"))):
        return None
    try:
        config = PlainLaserConfig.from_directory(path)  # not LaserConfig: that would import transformers
        file_size = os.path.getsize(weights)
        with open(weights, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > file_size - 8:  # a damaged file: not a header length to allocate
                return None
            header = json.loads(f.read(size))
        header = {k: v for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, AttributeError, struct.error):
        return None
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
    if str(dtype) not in ("float32", "torch.float32"):
        return None
    # The shapes are checked before anything is allocated (a damaged config may ask for terabytes)
    try:
        if {k: v.get("shape") for k, v in header.items()} != parameter_shapes(config) or any(
                v.get("dtype") not in _STORED for v in header.values()):
            return None
    except AttributeError:  # an entry that is not an object
        return None
    if vocab_problems(config, path):
        return None
    data_start = 8 + size
    try:
        with open(weights, "rb") as f:
            f.seek(data_start)
            data = f.read()
    except OSError:
        return None
    state = {}
    for name, entry in header.items():
        stored, itemsize = _STORED[entry["dtype"]]
        offsets, shape = entry.get("data_offsets"), entry["shape"]
        count = int(np.prod(shape, dtype=np.int64))
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= len(data) or offsets[1] - offsets[0] != count * itemsize):
            return None  # a damaged file
        values = np.frombuffer(data, dtype=stored, count=count, offset=offsets[0]).reshape(shape)
        if entry["dtype"] == "BF16":  # bfloat16 is the top half of a float32: widening is a shift
            values = (values.astype(np.uint32) << 16).view(np.float32)
        state[name] = np.array(values, dtype=np.float32)  # a writable, aligned float32 copy
        if not np.isfinite(state[name]).all():
            return None
    return config, state
