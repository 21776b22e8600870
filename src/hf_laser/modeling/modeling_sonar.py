"""SONAR's text encoder in transformers (`SonarModel`): what `sonar.models.sonar_text.SonarTextTransformerEncoderModel`
computes, built by `SonarTextEncoderFactory` (sonar-space 0.5, fairseq2 0.8), without fairseq2.

    ids (N, S) -> embeddings * sqrt(d) + sinusoidal positions (fairseq's offset)   [fairseq2 TransformerEmbeddingFrontend]
               -> N pre-norm layers (x + attn(LN(x)); x + ffn(LN(x)))              [StandardTransformerEncoderLayer, PRE]
               -> final layer norm                                                 [SonarTextTransformerEncoderModel.layer_norm]
               -> mean over the real tokens: sum / (length + 1e-7)                 [static_pooling, Pooling.MEAN]

Reused from transformers as they are: `M2M100EncoderLayer` (the pre-norm layer: q/k/v/out projections with biases,
scaled dot-product attention with scale head_dim^-0.5, ReLU feed-forward, layer norms with epsilon 1e-5: what
fairseq2's `StandardTransformerEncoderLayer(norm_order=PRE)` with `StandardMultiheadAttention`, `TorchSDPA` and
`StandardFeedForwardNetwork` computes) and `create_bidirectional_mask` (the padding mask). Computed here instead:
the frontend (see `SonarSinusoidalPositions` and `SonarModel.forward`) and the pooling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.m2m_100.modeling_m2m_100 import M2M100EncoderLayer
from transformers.utils import ModelOutput

from ..checkpoints.integration_files import write_integration_files
from .configuration_sonar import SonarConfig

__all__ = ["SonarModel", "SonarModelOutput", "SonarPreTrainedModel", "SonarSinusoidalPositions", "mean_pool"]


@dataclass
class SonarModelOutput(ModelOutput):
    """Output of [`SonarModel`].

    Args:
        last_hidden_state: `(batch, seq_len, d_model)`: the final layer norm's output at every position (padding
            positions included; they do not enter the pooling).
        pooler_output: `(batch, d_model)`: the sentence embeddings, SONAR's mean pooling.
        hidden_states: with `output_hidden_states=True`, `encoder_layers + 1` tensors `(batch, seq_len, d_model)`:
            the frontend's output and each layer's (before the final layer norm).
    """

    last_hidden_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class SonarSinusoidalPositions(nn.Module):
    """fairseq2's `SinusoidalPositionEncoder(encoding_dim=d, max_seq_len=L, _legacy_pad_idx=1)`: the token at
    position p (0-based) gets row p + 1 of a table whose row 0 is zero (padding) and whose row r >= 1 encodes the
    step r - 1 + offset (offset 2: fairseq's legacy `1 + pad_idx`): [sin(step * f_i)] ++ [cos(step * f_i)] with
    f_i = exp(i * -log(10000) / (d/2 - 1)).

    Not transformers' `M2M100SinusoidalPositionalEmbedding`: that one takes positions from `input_ids != pad` (with
    fairseq2's ids `<unk>` would be taken for padding, as its padding index must be 1 for the offset to be 2) and
    computes the frequencies as exp(i * -(log(10000) / (d/2 - 1))), which rounds differently in float32. This table
    is computed with fairseq2's operations in fairseq2's order (`_fill_sin_freq_table`), in float32.
    """

    def __init__(self, embedding_dim: int, max_positions: int, offset: int):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.max_positions = max_positions
        self.offset = offset
        self._tables: dict[torch.device, torch.Tensor] = {}  # not a buffer: nothing to load, nothing to initialise

    def table(self, device: torch.device) -> torch.Tensor:
        """`(max_positions + 1, embedding_dim)` float32, row 0 zero."""
        table = self._tables.get(device)
        if table is None:
            with torch.inference_mode(False):  # a cached table made under inference_mode must serve autograd too
                table = self._make_table(device)
            self._tables[device] = table
        return table

    def _make_table(self, device: torch.device) -> torch.Tensor:
        with torch.no_grad():
            num_sin = self.embedding_dim // 2
            table = torch.zeros(self.max_positions + 1, self.embedding_dim, dtype=torch.float32)
            steps = torch.arange(self.offset, self.offset + self.max_positions, dtype=torch.float32)
            indices = torch.arange(num_sin, dtype=torch.float32)
            freqs = torch.exp(indices * -math.log(10000.0) / (num_sin - 1))
            angles = torch.outer(steps, freqs)
            table[1:, :num_sin] = torch.sin(angles)
            table[1:, num_sin:] = torch.cos(angles)
            return table.to(device)

    def forward(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """`attention_mask` `(batch, seq_len)` (1 real, 0 padding; any side) -> `(batch, seq_len, embedding_dim)`
        float32 encodings, zero at padding positions."""
        mask = attention_mask.to(torch.long)
        positions = torch.cumsum(mask, dim=1) * mask  # 1, 2, ... on real tokens, 0 on padding
        return self.table(attention_mask.device)[positions]


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """SONAR's `Pooling.MEAN` (`SonarTextTransformerEncoderModel.static_pooling`): padding set to 0, the sum over the
    sequence times 1 / (length + 1e-7), the length in the hidden states' dtype. `(batch, seq_len, d)` ->
    `(batch, d)`."""
    mask = attention_mask.to(hidden.dtype)
    summed = (hidden * mask.unsqueeze(-1)).sum(dim=1)
    weights = 1.0 / (mask.sum(dim=1) + 1e-7)
    return summed * weights.unsqueeze(-1)


class SonarPreTrainedModel(PreTrainedModel):
    """Weights initialisation and loading for SONAR's text encoder."""

    config_class = SonarConfig
    config: SonarConfig
    base_model_prefix = "sonar"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["M2M100EncoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False

    def save_pretrained(self, save_directory, *args, is_main_process: bool = True, **kwargs):
        """`PreTrainedModel.save_pretrained`, plus what makes the directory work without hf_laser
        (`integration_files.py`: `auto_map`, this code, and the sentence-transformers files once the tokenizer is
        saved too)."""
        super().save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
        if is_main_process:
            write_integration_files(save_directory)


class SonarModel(SonarPreTrainedModel):
    """SONAR's text encoder: token ids -> token states and sentence embeddings (mean pooling).

    Parameter names: `embed_tokens.weight` `(vocab_size, d_model)` (fairseq2's row layout: `<pad>` 0, `<unk>` 1,
    `<s>` 2, `</s>` 3, piece k at k + 1, language tags after the pieces), `layers.{i}.*` (`M2M100EncoderLayer`'s:
    `self_attn.{q,k,v,out}_proj`, `self_attn_layer_norm`, `fc1`, `fc2`, `final_layer_norm`), `layer_norm.*`.
    """

    def __init__(self, config: SonarConfig):
        super().__init__(config)
        # fairseq2's StandardEmbedding passes pad_idx to F.embedding, which only changes gradients: none here
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = SonarSinusoidalPositions(config.d_model, config.max_position_embeddings,
                                                        config.position_offset)
        self.layers = nn.ModuleList([M2M100EncoderLayer(config) for _ in range(config.encoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SonarModelOutput | tuple:
        """
        Args:
            input_ids: `(batch, seq_len)` fairseq2's ids (`SonarTokenizer`), at most `max_position_embeddings` (514)
                per row.
            attention_mask: `(batch, seq_len)`, 1 on real tokens, 0 on padding (either side); all ones if None.
            output_hidden_states: also return the frontend's and every layer's outputs.

        Returns:
            [`SonarModelOutput`]: `last_hidden_state` `(batch, seq_len, d_model)`, `pooler_output` `(batch, d_model)`
            (the sentence embeddings).
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        elif attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids "
                             f"{tuple(input_ids.shape)}")
        longest = int(attention_mask.sum(dim=1).max()) if input_ids.numel() else 0
        if longest > self.config.max_position_embeddings:
            raise ValueError(f"a sequence has {longest} ids, more than the encoder's {self.config.max_position_embeddings}"
                             f" positions (the tokenizer truncates with truncation=True)")
        output_hidden_states = (output_hidden_states if output_hidden_states is not None
                                else self.config.output_hidden_states)
        return_dict = return_dict if return_dict is not None else self.config.return_dict

        # fairseq2's TransformerEmbeddingFrontend: embed, * sqrt(d) (a Python float), + positions added in float32
        embeds = self.embed_tokens(input_ids)
        if self.embed_scale != 1.0:
            embeds = embeds * self.embed_scale
        hidden = (embeds.float() + self.embed_positions(attention_mask)).type_as(embeds)
        hidden = nn.functional.dropout(hidden, p=self.config.dropout, training=self.training)

        mask_4d = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        all_hidden = (hidden,) if output_hidden_states else None
        for layer in self.layers:
            hidden = layer(hidden, mask_4d, **kwargs)
            if output_hidden_states:
                all_hidden += (hidden,)
        hidden = self.layer_norm(hidden)
        pooled = mean_pool(hidden, attention_mask)
        if not return_dict:
            return tuple(v for v in (hidden, pooled, all_hidden) if v is not None)
        return SonarModelOutput(last_hidden_state=hidden, pooler_output=pooled, hidden_states=all_hidden)

