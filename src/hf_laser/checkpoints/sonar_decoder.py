"""Conversion of SONAR's text decoder (`sonar_text_decoder.pt`, fairseq2's format) into a directory that
`SonarDecoderModel.from_pretrained` and `hf_laser.SonarTextDecoder` load.

The checkpoint is `{"model": state_dict}` with fairseq2's names (what `sonar.models.sonar_text.checkpoint.
_convert_sonar_text_decoder_checkpoint` returns unchanged: `decoder_frontend.embed.weight`, `decoder.layers.{i}.
{self_attn,encoder_decoder_attn}.{q,k,v,output}_proj.*`, `...{self_attn,encoder_decoder_attn,ffn}_layer_norm.*`,
`...ffn.{inner,output}_proj.*`, `decoder.layer_norm.*`, and `final_proj.weight`, the same table as the
embeddings: fairseq2 ties them). Read as the encoder's is (`load_sonar_state`: weights only, no code from the
file); the embedding rows keep fairseq2's order.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..errors import UsageError
from ..modeling.configuration_sonar_decoder import SonarDecoderConfig
from ..text.sonar_text_tokenizer import SonarTextTokenizer
from .convert import _check_out_dir, _staged_directory
from .sonar import LICENCE, NotASonarCheckpoint, check_names_and_shapes, load_sonar_state

__all__ = ["convert_sonar_decoder", "is_sonar_decoder_state", "map_sonar_decoder_state",
           "sonar_decoder_config_from_state"]

EXPECTED_FORMAT = "a SONAR text decoder checkpoint ({'model': state dict with fairseq2's names}, torch.save)"
HEAD_DIM = 64  # SONAR's and NLLB's decoders: 1024 / 16 heads; the number of heads is not in the weights
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_LAYER_NAMES = {  # fairseq2 -> transformers' M2M100DecoderLayer
    "self_attn_layer_norm": "self_attn_layer_norm",
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.output_proj": "self_attn.out_proj",
    "encoder_decoder_attn_layer_norm": "encoder_attn_layer_norm",
    "encoder_decoder_attn.q_proj": "encoder_attn.q_proj",
    "encoder_decoder_attn.k_proj": "encoder_attn.k_proj",
    "encoder_decoder_attn.v_proj": "encoder_attn.v_proj",
    "encoder_decoder_attn.output_proj": "encoder_attn.out_proj",
    "ffn_layer_norm": "final_layer_norm",
    "ffn.inner_proj": "fc1",
    "ffn.output_proj": "fc2",
}
SPM_FILE = "sentencepiece.bpe.model"


def is_sonar_decoder_state(state: dict) -> bool:
    return "decoder_frontend.embed.weight" in state


def sonar_decoder_config_from_state(state: dict, num_attention_heads: int | None = None,
                                    path: str | Path = "checkpoint") -> SonarDecoderConfig:
    """The `SonarDecoderConfig` the weights' shapes imply (SONAR's fixed settings for the rest). The heads are not
    in the weights: `num_attention_heads` or d_model / 64."""
    embed = state.get("decoder_frontend.embed.weight")
    if embed is None or embed.dim() != 2:
        raise NotASonarCheckpoint(f"{path}: no 2-d 'decoder_frontend.embed.weight'; expected {EXPECTED_FORMAT}")
    vocab_size, d_model = (int(n) for n in embed.shape)
    layers = {int(m.group(1)) for k in state if (m := _LAYER.match(k))}
    inner = state.get("decoder.layers.0.ffn.inner_proj.weight")
    ffn = int(inner.shape[0]) if inner is not None and inner.dim() == 2 else 4 * d_model
    heads = num_attention_heads if num_attention_heads is not None else max(1, d_model // HEAD_DIM)
    try:
        return SonarDecoderConfig(vocab_size=vocab_size, d_model=d_model, decoder_layers=max(layers) + 1 if layers
                                  else 0, decoder_attention_heads=heads, decoder_ffn_dim=ffn)
    except ValueError as err:
        raise NotASonarCheckpoint(f"{path}: {err}") from err


def _expected_shapes(config: SonarDecoderConfig) -> dict[str, tuple[int, ...]]:
    d, f = config.d_model, config.decoder_ffn_dim
    shapes = {"decoder_frontend.embed.weight": (config.vocab_size, d), "final_proj.weight": (config.vocab_size, d)}
    for i in range(config.decoder_layers):
        p = f"decoder.layers.{i}."
        for name in ("self_attn_layer_norm", "encoder_decoder_attn_layer_norm", "ffn_layer_norm"):
            shapes[p + name + ".weight"] = shapes[p + name + ".bias"] = (d,)
        for attn in ("self_attn", "encoder_decoder_attn"):
            for name in ("q_proj", "k_proj", "v_proj", "output_proj"):
                shapes[p + f"{attn}.{name}.weight"] = (d, d)
                shapes[p + f"{attn}.{name}.bias"] = (d,)
        shapes[p + "ffn.inner_proj.weight"], shapes[p + "ffn.inner_proj.bias"] = (f, d), (f,)
        shapes[p + "ffn.output_proj.weight"], shapes[p + "ffn.output_proj.bias"] = (d, f), (d,)
    shapes["decoder.layer_norm.weight"] = shapes["decoder.layer_norm.bias"] = (d,)
    return shapes


def map_sonar_decoder_state(state: dict, config: SonarDecoderConfig, path: str | Path = "checkpoint") -> dict:
    """Checks every name and shape against `config`, that the output projection is the embedding table (fairseq2
    ties them; a checkpoint where they differ is not one this model computes), and renames fairseq2's names to
    `SonarDecoderModel`'s (float32)."""
    expected = _expected_shapes(config)
    # a checkpoint saved from the tied model may hold the projection or not (it is the same tensor)
    state = dict(state)
    state.setdefault("final_proj.weight", state.get("decoder_frontend.embed.weight"))
    check_names_and_shapes(state, expected, path, "a SONAR text decoder", f"d_model {config.d_model}, ffn "
                           f"{config.decoder_ffn_dim}, vocabulary {config.vocab_size}")
    out = {}
    for key in expected:
        tensor = state[key]
        if key == "final_proj.weight":
            continue
        if key == "decoder_frontend.embed.weight":
            name = "embed_tokens.weight"
        elif m := _LAYER.match(key):
            module, _, leaf = m.group(2).rpartition(".")
            name = f"layers.{m.group(1)}.{_LAYER_NAMES[module]}.{leaf}"
        else:
            name = key.removeprefix("decoder.")  # layer_norm.*
        out[name] = tensor.to(torch.float32).contiguous()
    if not torch.equal(state["final_proj.weight"].to(torch.float32), out["embed_tokens.weight"]):
        raise NotASonarCheckpoint(f"{path}: final_proj.weight differs from decoder_frontend.embed.weight; SONAR's "
                                  f"decoder ties them")
    return out


def convert_sonar_decoder(checkpoint_path: str | Path, spm_model_path: str | Path, out_dir: str | Path, *,
                          num_attention_heads: int | None = None, langs=None, overwrite: bool = False,
                          model_card: bool = True) -> Path:
    """Writes `out_dir` (config.json, model.safetensors, the SentencePiece model, a model card naming the licence)
    from SONAR's `sonar_text_decoder.pt` and its SentencePiece model. Everything is checked before anything is
    written, and the directory moved into place at the end (a failed conversion leaves nothing)."""
    checkpoint_path, spm_model_path, out_dir = Path(checkpoint_path), Path(spm_model_path), Path(out_dir)
    if not spm_model_path.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {spm_model_path}")
    _check_out_dir(out_dir, overwrite)
    state = load_sonar_state(checkpoint_path, EXPECTED_FORMAT)
    config = sonar_decoder_config_from_state(state, num_attention_heads, checkpoint_path)
    try:
        tokenizer = SonarTextTokenizer(spm_model_path, langs=langs)
    except (RuntimeError, OSError, ValueError) as err:
        raise UsageError(f"{spm_model_path}: not SONAR's SentencePiece model: {' '.join(str(err).split())}") from err
    if tokenizer.vocab_size != config.vocab_size:
        raise NotASonarCheckpoint(f"{checkpoint_path}: the embedding table has {config.vocab_size} rows, the "
                                  f"tokenizer ({spm_model_path.name}) {tokenizer.vocab_size}")
    weights = map_sonar_decoder_state(state, config, checkpoint_path)
    config.architectures = ["SonarDecoderModel"]
    if langs is not None:
        config.langs = list(tokenizer.langs)
    with _staged_directory(out_dir) as tmp_dir:
        config.save_pretrained(tmp_dir)
        save_file(weights, str(tmp_dir / "model.safetensors"), metadata={"format": "pt"})
        (tmp_dir / SPM_FILE).write_bytes(spm_model_path.read_bytes())
        if model_card:
            (tmp_dir / "README.md").write_text(_model_card(out_dir.name, checkpoint_path.name, config),
                                                encoding="utf-8")
    return out_dir


def _model_card(name: str, source: str, config: SonarDecoderConfig) -> str:
    return f"""---
license: {LICENCE}
tags: [sonar, text-generation, hf-laser]
---

# {name}

SONAR's text decoder (Duquenne, Schwenk and Sagot 2023): a {config.d_model}-d SONAR sentence embedding -> text in
any of SONAR's 202 languages. Converted from `{source}` by hf_laser, without fairseq2; it generates what the
original (`sonar.inference_pipelines.text.EmbeddingToTextModelPipeline`) generates, beam search included (hf_laser's
docs/sonar.md says how this is checked).

**Licence**: Meta publishes SONAR's weights under CC BY-NC 4.0 (non-commercial use only), which this directory
keeps; the code that runs them is hf_laser's (BSD-3-Clause).

```python
from hf_laser import SonarTextDecoder

decoder = SonarTextDecoder.from_pretrained("{name}")
texts = decoder.decode(embeddings, lang="fra_Latn")   # embeddings: (n, {config.d_model}) from SONAR's encoder
```

Or `hf-laser decode --model {name} --lang fra_Latn -i embeddings.npy -o texts.txt`.

| | |
|---|---|
| layers x width | {config.decoder_layers} x {config.d_model} (feed-forward {config.decoder_ffn_dim}, {config.decoder_attention_heads} heads) |
| vocabulary | {config.vocab_size:,} (fairseq2's layout; the output projection is the embedding table) |
| longest output | {config.max_position_embeddings} ids, the two of the target-language prompt included |
"""
