"""Conversion of SONAR's text encoder (`sonar_text_encoder.pt`, fairseq2's format) into a transformers directory that
`SonarModel.from_pretrained` and `SonarTokenizer.from_pretrained` load.

The checkpoint is `{"model": state_dict}` with fairseq2's names (what `sonar.models.sonar_text.checkpoint.
_convert_sonar_text_encoder_checkpoint` returns unchanged: `encoder_frontend.embed.weight`, `encoder.layers.{i}.
self_attn.{q,k,v,output}_proj.*`, `...self_attn_layer_norm.*`, `...ffn.inner_proj.*`, `...ffn.output_proj.*`,
`...ffn_layer_norm.*`, `layer_norm.*`). It is read with `torch.load(weights_only=True, mmap=True)`: no code from the
file runs, and anything but a dict of tensors is refused. The embedding rows keep fairseq2's order (`SonarModel`
and `SonarTokenizer` use fairseq2's ids), so no row is permuted.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..errors import UsageError
from ..modeling.configuration_sonar import SonarConfig
from ..text.tokenization_sonar import SonarTokenizer
from .convert import _check_out_dir, _staged_directory

__all__ = ["NotASonarCheckpoint", "check_names_and_shapes", "convert_sonar", "is_sonar_checkpoint", "load_sonar_state", "map_sonar_state",
           "sonar_checkpoint_kind", "sonar_config_from_state"]

LICENCE = "cc-by-nc-4.0"  # SONAR's weights (facebookresearch/SONAR, README "License"); the code is MIT

EXPECTED_FORMAT = "a SONAR text encoder checkpoint ({'model': state dict with fairseq2's names}, torch.save)"
HEAD_DIM = 64  # SONAR's and NLLB's encoders: 1024 / 16 heads; the number of heads is not in the weights
_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.(.+)$")
_LAYER_NAMES = {  # fairseq2 -> transformers' M2M100EncoderLayer
    "self_attn_layer_norm": "self_attn_layer_norm",
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.output_proj": "self_attn.out_proj",
    "ffn_layer_norm": "final_layer_norm",
    "ffn.inner_proj": "fc1",
    "ffn.output_proj": "fc2",
}


class NotASonarCheckpoint(UsageError):
    """The file is not a SONAR text encoder checkpoint (or not one this converter knows)."""


def _names(keys, limit: int = 5) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def load_sonar_state(path: str | Path, expected_format: str = EXPECTED_FORMAT) -> dict:
    """The state dict of a `{"model": state_dict}` file, read without running code from it (memory-mapped).
    `expected_format` names what the file should be in the errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # pickle errors, zip errors, globals refused by the weights-only unpickler...
        text = " ".join(str(err).split())
        if "Weights only load failed" in text:
            detail = (text.split("WeightsUnpickler error:", 1)[-1].split(". ", 1)[0].strip()
                      if "WeightsUnpickler error:" in text else "objects other than tensors")
            raise NotASonarCheckpoint(f"{path} could not be read as {expected_format}: it holds Python objects a "
                                      f"checkpoint does not have ({detail}); hf-laser never runs code from a "
                                      f"checkpoint (weights_only=True)") from err
        raise NotASonarCheckpoint(f"{path} could not be read as {expected_format}: {text}") from err
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        found = (f"a dict with keys {_names(map(str, checkpoint))}" if isinstance(checkpoint, dict)
                 else f"a {type(checkpoint).__name__}")
        raise NotASonarCheckpoint(f"{path} is not {expected_format}; found {found}")
    state = checkpoint["model"]
    if not isinstance(state, dict) or not state:
        raise NotASonarCheckpoint(f"{path}: 'model' is {type(state).__name__}, expected a non-empty dict of tensors")
    not_tensors = [str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise NotASonarCheckpoint(f"{path}: 'model' must map names to tensors; not so for {_names(not_tensors)}")
    bad_dtype = [k for k, v in state.items() if not v.is_floating_point()]
    if bad_dtype:
        raise NotASonarCheckpoint(f"{path}: {_names(bad_dtype)} not floating-point tensors")
    return state


def sonar_config_from_state(state: dict, num_attention_heads: int | None = None, path: str | Path = "checkpoint"):
    """The `SonarConfig` the weights' shapes imply (SONAR's fixed settings for the rest: ReLU, pre-norm, 514
    positions, mean pooling). The heads are not in the weights: `num_attention_heads` or d_model / 64."""
    embed = state.get("encoder_frontend.embed.weight")
    if embed is None or embed.dim() != 2:
        raise NotASonarCheckpoint(f"{path}: no 2-d 'encoder_frontend.embed.weight'; expected {EXPECTED_FORMAT}")
    vocab_size, d_model = (int(n) for n in embed.shape)
    layers = {int(m.group(1)) for k in state if (m := _LAYER.match(k))}
    num_layers = max(layers) + 1 if layers else 0
    inner = state.get("encoder.layers.0.ffn.inner_proj.weight")
    ffn = int(inner.shape[0]) if inner is not None and inner.dim() == 2 else 4 * d_model
    heads = num_attention_heads if num_attention_heads is not None else max(1, d_model // HEAD_DIM)
    try:
        return SonarConfig(vocab_size=vocab_size, d_model=d_model, encoder_layers=num_layers,
                           encoder_attention_heads=heads, encoder_ffn_dim=ffn)
    except ValueError as err:
        raise NotASonarCheckpoint(f"{path}: {err}") from err


def expected_shapes(config) -> dict[str, tuple[int, ...]]:
    """fairseq2's names and shapes for a configuration."""
    d, f = config.d_model, config.encoder_ffn_dim
    shapes = {"encoder_frontend.embed.weight": (config.vocab_size, d)}
    for i in range(config.encoder_layers):
        p = f"encoder.layers.{i}."
        for name in ("self_attn_layer_norm", "ffn_layer_norm"):
            shapes[p + name + ".weight"] = shapes[p + name + ".bias"] = (d,)
        for name in ("q_proj", "k_proj", "v_proj", "output_proj"):
            shapes[p + f"self_attn.{name}.weight"] = (d, d)
            shapes[p + f"self_attn.{name}.bias"] = (d,)
        shapes[p + "ffn.inner_proj.weight"], shapes[p + "ffn.inner_proj.bias"] = (f, d), (f,)
        shapes[p + "ffn.output_proj.weight"], shapes[p + "ffn.output_proj.bias"] = (d, f), (d,)
    shapes["layer_norm.weight"] = shapes["layer_norm.bias"] = (d,)
    return shapes


def check_names_and_shapes(state: dict, expected: dict[str, tuple[int, ...]], path: str | Path, what: str,
                           sizes: str) -> None:
    """[`NotASonarCheckpoint`] unless `state` has exactly the names of `expected`, each of its shape (`what`: the
    kind of checkpoint; `sizes`: the configuration, said where a shape differs)."""
    unexpected = set(state) - set(expected)
    if unexpected:
        raise NotASonarCheckpoint(f"{path}: unexpected keys for {what}: {_names(unexpected)}")
    missing = set(expected) - set(state)
    if missing:
        raise NotASonarCheckpoint(f"{path}: missing keys: {_names(missing)}")
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise NotASonarCheckpoint(f"{path}: {key} has shape {tuple(state[key].shape)}, expected {shape} "
                                      f"({sizes})")


def map_sonar_state(state: dict, config, path: str | Path = "checkpoint") -> dict:
    """Checks every name and shape against `config` and renames fairseq2's names to `SonarModel`'s (float32)."""
    expected = expected_shapes(config)
    check_names_and_shapes(state, expected, path, "a SONAR text encoder", f"d_model {config.d_model}, ffn "
                           f"{config.encoder_ffn_dim}, vocabulary {config.vocab_size}")
    out = {}
    for key in expected:
        tensor = state[key]
        if key == "encoder_frontend.embed.weight":
            name = "embed_tokens.weight"
        elif m := _LAYER.match(key):
            module, _, leaf = m.group(2).rpartition(".")
            name = f"layers.{m.group(1)}.{_LAYER_NAMES[module]}.{leaf}"
        else:
            name = key  # layer_norm.*
        out[name] = tensor.to(torch.float32).contiguous()
    return out


def sonar_checkpoint_kind(path: str | Path) -> str | None:
    """"encoder" or "decoder" where `path` reads (weights only, memory-mapped) as `{"model": {...}}` with fairseq2's
    names of SONAR's text encoder or decoder; None otherwise."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - not a weights-only file (a LASER3 checkpoint's pickled config...): not SONAR
        return None
    state = checkpoint.get("model") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        return None
    if "encoder_frontend.embed.weight" in state:
        return "encoder"
    if "decoder_frontend.embed.weight" in state:
        return "decoder"
    return None


def is_sonar_checkpoint(path: str | Path) -> bool:
    """Whether `path` is SONAR's text encoder checkpoint ([`sonar_checkpoint_kind`])."""
    return sonar_checkpoint_kind(path) == "encoder"


def convert_sonar(checkpoint_path: str | Path, spm_model_path: str | Path, out_dir: str | Path, *,
                  num_attention_heads: int | None = None, langs=None, overwrite: bool = False,
                  model_card: bool = True) -> Path:
    """Writes `out_dir` (config.json, model.safetensors, the tokenizer files with the SentencePiece model, the code
    and `auto_map` for use without hf_laser, a model card naming the licence) from SONAR's `sonar_text_encoder.pt`
    and its SentencePiece model (`sentencepiece.source.256000.model`).

    Everything is checked before anything is written; the directory is written beside `out_dir` and moved into
    place at the end (a failed conversion leaves nothing). `num_attention_heads` defaults to d_model / 64 (16 for
    SONAR); `langs` to SONAR's 202 tags. The vocabulary the embedding table implies must be the tokenizer's
    (1 + pieces + languages + 3)."""
    checkpoint_path, spm_model_path, out_dir = Path(checkpoint_path), Path(spm_model_path), Path(out_dir)
    if not spm_model_path.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {spm_model_path}")
    _check_out_dir(out_dir, overwrite)
    state = load_sonar_state(checkpoint_path)
    config = sonar_config_from_state(state, num_attention_heads, checkpoint_path)
    try:
        tokenizer = SonarTokenizer(str(spm_model_path), langs=langs)
    except (RuntimeError, OSError, ValueError) as err:
        raise UsageError(f"{spm_model_path}: not SONAR's SentencePiece model: {' '.join(str(err).split())}") from err
    if tokenizer.vocab_size != config.vocab_size:
        raise NotASonarCheckpoint(
            f"{checkpoint_path}: the embedding table has {config.vocab_size} rows, the tokenizer "
            f"({spm_model_path.name}: {tokenizer._core.n_pieces} pieces + <pad> + {len(tokenizer.langs)} languages "
            f"+ 3) {tokenizer.vocab_size}")
    weights = map_sonar_state(state, config, checkpoint_path)
    config.architectures = ["SonarModel"]
    with _staged_directory(out_dir) as tmp_dir:
        config.save_pretrained(tmp_dir)
        save_file(weights, str(tmp_dir / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp_dir)  # + the integration files (integration_files.write_integration_files)
        if model_card:
            (tmp_dir / "README.md").write_text(sonar_model_card(out_dir.name, checkpoint_path.name, config),
                                                encoding="utf-8")
    return out_dir


def sonar_model_card(name: str, source: str, config) -> str:
    """The README.md of a converted SONAR directory: what it is, its licence, how to use it, where it came from."""
    return f"""---
license: {LICENCE}
library_name: transformers
tags: [sonar, sentence-embeddings, hf-laser]
pipeline_tag: feature-extraction
---

# {name}

SONAR's text encoder (Duquenne, Schwenk and Sagot, *SONAR: Sentence-Level Multimodal and Language-Agnostic
Representations*, 2023): NLLB-200's encoder, mean-pooled into one {config.d_model}-d vector per sentence, for 202
languages. Converted from `{source}` by hf_laser (`hf-laser convert` or `hf-laser download sonar`), without fairseq2;
its embeddings are the
original's (`sonar.inference_pipelines.text.TextToEmbeddingModelPipeline`) to float round-off (hf_laser's
docs/sonar.md says how this is checked).

**Licence**: Meta publishes SONAR's weights under CC BY-NC 4.0 (non-commercial use only), which this directory
keeps; the code that runs them is hf_laser's (BSD-3-Clause).

```python
from hf_laser import LaserEncoder

encoder = LaserEncoder.from_pretrained("{name}")
emb = encoder.encode(["Bonjour le monde.", "Hello world."], lang=["fra_Latn", "eng_Latn"])
```

Without hf_laser: `AutoModel.from_pretrained("{name}", trust_remote_code=True)` and `AutoTokenizer` (its
`lang=` is one of SONAR's tags), or `SentenceTransformer("{name}", trust_remote_code=True)`.

| | |
|---|---|
| layers x width | {config.encoder_layers} x {config.d_model} (feed-forward {config.encoder_ffn_dim}, {config.encoder_attention_heads} heads) |
| vocabulary | {config.vocab_size:,} (fairseq2's layout: `<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3, pieces, 202 language tags) |
| longest input | {config.max_position_embeddings} ids (longer text is cut as SONAR's pipeline cuts it) |
"""
