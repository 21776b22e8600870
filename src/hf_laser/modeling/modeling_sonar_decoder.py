"""SONAR's text decoder in transformers (`SonarDecoderModel`): what `sonar.nn.conditional_decoder_model.
ConditionalTransformerDecoderModel`, built by `SonarTextDecoderFactory` (sonar-space 0.5, fairseq2 0.8), computes,
without fairseq2.

    ids (N, T) -> embeddings * sqrt(d) + sinusoidal positions (fairseq's offset)    [TransformerEmbeddingFrontend]
               -> N pre-norm layers: x + self_attn(LN(x)) (causal),               [StandardTransformerDecoderLayer, PRE]
                                     x + attn(LN(x), the sentence embedding),
                                     x + ffn(LN(x))
               -> final layer norm -> x @ embed_tokens.weight^T (tied, no bias)     [TiedProjection]

The sentence embedding is the encoder output as it is (no normalisation; `normalize_emb` is False in SONAR's
decoders), one position long: every query attends to it with weight 1.

Reused from transformers as they are: `M2M100DecoderLayer` (pre-norm, q/k/v/out projections with biases, scaled
dot-product attention with scale head_dim^-0.5, ReLU feed-forward, layer norms with epsilon 1e-5: what fairseq2's
`StandardTransformerDecoderLayer(norm_order=PRE)` computes) and its key/value cache (`EncoderDecoderCache`).
Computed here instead: the frontend (fairseq2's sinusoidal table, `SonarSinusoidalPositions`, indexed by the step,
as fairseq2's incremental decoding does) and the tied projection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.models.m2m_100.modeling_m2m_100 import M2M100DecoderLayer
from transformers.utils import ModelOutput

from .configuration_sonar_decoder import SonarDecoderConfig
from .modeling_sonar import SonarSinusoidalPositions

__all__ = ["SonarDecoderModel", "SonarDecoderOutput", "new_decoder_cache"]


@dataclass
class SonarDecoderOutput(ModelOutput):
    """Output of [`SonarDecoderModel`].

    Args:
        logits: `(batch, seq_len, vocab_size)`: the next-token scores at every position given.
        past_key_values: the cache, holding the keys and values of every position seen so far (when one was given).
    """

    logits: torch.Tensor | None = None
    past_key_values: EncoderDecoderCache | None = None


def new_decoder_cache() -> EncoderDecoderCache:
    """An empty key/value cache for [`SonarDecoderModel.forward`] (self-attention, and the sentence embedding's
    keys and values computed once)."""
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


class SonarDecoderPreTrainedModel(PreTrainedModel):
    """Weights initialisation and loading for SONAR's text decoder."""

    config_class = SonarDecoderConfig
    config: SonarDecoderConfig
    base_model_prefix = "sonar_decoder"
    main_input_name = "input_ids"
    _no_split_modules = ["M2M100DecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False


class SonarDecoderModel(SonarDecoderPreTrainedModel):
    """SONAR's text decoder: a sentence embedding and the ids so far -> next-token scores.

    Parameter names: `embed_tokens.weight` `(vocab_size, d_model)` (the tokenizer's ids: `<pad>` 0, `<unk>` 1,
    `<s>` 2, `</s>` 3, piece k at k + 1, language tags after the pieces; also the output projection),
    `layers.{i}.*` (`M2M100DecoderLayer`'s: `self_attn`, `self_attn_layer_norm`, `encoder_attn`,
    `encoder_attn_layer_norm`, `fc1`, `fc2`, `final_layer_norm`), `layer_norm.*`.
    """

    def __init__(self, config: SonarDecoderConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = SonarSinusoidalPositions(config.d_model, config.max_position_embeddings,
                                                        config.position_offset)
        self.layers = nn.ModuleList([M2M100DecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor,
        sentence_embeddings: torch.Tensor,
        past_key_values: EncoderDecoderCache | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SonarDecoderOutput | tuple:
        """
        Args:
            input_ids: `(batch, seq_len)` the tokenizer's ids, no padding (SONAR's prompt is `</s> __lang__`).
            sentence_embeddings: `(batch, d_model)` or `(batch, 1, d_model)`: what the decoder is conditioned on.
            past_key_values: a cache from [`new_decoder_cache`], updated in place: `input_ids` continue the
                positions it holds (one id at a time once it holds any, as generation feeds them).

        Returns:
            [`SonarDecoderOutput`]: `logits` `(batch, seq_len, vocab_size)` in the model's dtype.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}")
        if sentence_embeddings.dim() == 2:
            sentence_embeddings = sentence_embeddings.unsqueeze(1)
        if (sentence_embeddings.dim() != 3 or sentence_embeddings.shape[1] != 1
                or sentence_embeddings.shape[0] != input_ids.shape[0]
                or sentence_embeddings.shape[2] != self.config.d_model):
            raise ValueError(f"sentence_embeddings must be (batch, {self.config.d_model}) with batch "
                             f"{input_ids.shape[0]}, got shape {tuple(sentence_embeddings.shape)}")
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        start = past_key_values.get_seq_length() if past_key_values is not None else 0
        length = input_ids.shape[1]
        if start + length > self.config.max_position_embeddings:
            raise ValueError(f"position {start + length - 1} is past the decoder's {self.config.max_position_embeddings}"
                             f" positions")
        if start and length > 1:
            raise ValueError("with a cache that holds positions, give one id at a time")

        # fairseq2's TransformerEmbeddingFrontend: embed, * sqrt(d), + positions (the steps start .. start + T - 1)
        # added in float32
        embeds = self.embed_tokens(input_ids)
        if self.embed_scale != 1.0:
            embeds = embeds * self.embed_scale
        positions = self.embed_positions.table(input_ids.device)[start + 1:start + 1 + length]
        hidden = (embeds.float() + positions).type_as(embeds)
        hidden = nn.functional.dropout(hidden, p=self.config.dropout, training=self.training)
        memory = sentence_embeddings.to(hidden.dtype)

        mask = None
        if length > 1:  # causal; one id at a time needs none (it sees every cached position)
            mask = torch.full((length, length), float("-inf"), dtype=hidden.dtype, device=hidden.device).triu(1)
            mask = mask[None, None].expand(input_ids.shape[0], 1, length, length)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, encoder_hidden_states=memory, cache=past_key_values,
                           use_cache=past_key_values is not None, **kwargs)
        hidden = self.layer_norm(hidden)
        logits = nn.functional.linear(hidden, self.embed_tokens.weight)  # fairseq2's TiedProjection, bias None
        if not return_dict:
            return (logits, past_key_values) if past_key_values is not None else (logits,)
        return SonarDecoderOutput(logits=logits, past_key_values=past_key_values)
