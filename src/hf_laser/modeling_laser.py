"""PyTorch LASER model: the BiLSTM sentence encoder of Artetxe & Schwenk (2019).

This file only depends on `torch`, `transformers` and `configuration_laser.py`, so that it can be shipped next to the
weights and loaded with `trust_remote_code=True` where `hf_laser` is not installed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils.generic import can_return_tuple

from .configuration_laser import LaserConfig


class LaserPreTrainedModel(PreTrainedModel):
    """Base class: holds the config class, the weight initialisation and the loading conventions."""

    config_class = LaserConfig
    base_model_prefix = "laser"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = ["LaserEncoderLSTM"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        # fairseq's LSTM models (which LASER was trained with) draw every weight from U(-0.1, 0.1).
        r = self.config.init_range
        if isinstance(module, (nn.LSTM, nn.Linear, nn.Embedding)):
            for _, param in module.named_parameters(recurse=False):
                init.uniform_(param, -r, r)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            init.zeros_(module.weight[module.padding_idx])


def right_align(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Moves the attended tokens of every row to the front, keeping their order.

    Args:
        input_ids: `(batch, seq_len)` token ids, padded on any side.
        attention_mask: `(batch, seq_len)`, 1 for real tokens.

    Returns:
        `(ids, order)`: `ids` is right-padded `(batch, seq_len)`; `order[b, j]` is the input position that landed at
        `j`, so `out.scatter(1, order, x)` puts right-padded results back in the input layout.
    """
    order = torch.argsort((attention_mask == 0).to(torch.int8), dim=1, stable=True)
    return input_ids.gather(1, order), order


class LaserModel(LaserPreTrainedModel):
    r"""
    The LASER encoder: token embeddings → multi-layer (Bi)LSTM from zero states → max-pool over time.

    `pooler_output` is the LASER sentence embedding. Padding can be on either side and the batch need not be sorted:
    sequences are packed by their true lengths (from `attention_mask`), exactly like the original
    `SentenceEncoder`, so the embeddings do not depend on the batch composition.
    """

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.lstm = nn.LSTM(
            input_size=config.embed_dim,
            hidden_size=config.hidden_size,
            num_layers=config.num_layers,
            bidirectional=config.bidirectional,
            dropout=config.dropout if config.num_layers > 1 else 0.0,
            batch_first=True,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embed_tokens = value

    def _check_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
        if input_ids.dtype not in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"input_ids contain ids outside the vocabulary [0, {self.config.vocab_size}): "
                f"min {int(input_ids.min())}, max {int(input_ids.max())}"
            )
        if attention_mask is None:
            # Like the original encoder: padding is recognised by the <pad> id.
            return input_ids.ne(self.config.pad_token_id)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}"
            )
        return attention_mask.bool()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                LASER dictionary ids, each sentence ending with `</s>` (id 2), padded with `<pad>` (id 1) on any side.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding. When omitted, positions holding `<pad>` are padding.

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`] with
            - `last_hidden_state` (`(batch_size, sequence_length, 2 * hidden_size)`): top-layer BiLSTM outputs at the
              input positions; padded positions hold `config.padding_value`.
            - `pooler_output` (`(batch_size, 2 * hidden_size)`): the sentence embeddings (max over time).
        """
        mask = self._check_inputs(input_ids, attention_mask)
        batch_size, seq_len = input_ids.shape
        dim = self.config.embedding_dim
        if batch_size == 0 or seq_len == 0:
            raise ValueError(
                f"empty batch {tuple(input_ids.shape)}: every sentence needs at least its </s> token"
            )
        lengths = mask.sum(dim=1)
        if int(lengths.min()) == 0:
            raise ValueError("a sequence has no attended token; every LASER sentence ends with </s>")

        if bool(mask.all()):
            ids, order = input_ids, None
        else:
            ids, order = right_align(input_ids, mask)

        x = self.dropout(self.embed_tokens(ids))
        if order is None:
            # No padding: the fused (cuDNN / oneDNN) kernel runs on the plain tensor, same result as packing.
            out, _ = self.lstm(x)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = pad_packed_sequence(
                out, batch_first=True, padding_value=self.config.padding_value, total_length=seq_len
            )
        out = self.dropout(out)

        # The original masks by token id (`tokens == <pad>`), which also covers a literal <pad> inside a sentence.
        pool_mask = ids.eq(self.config.pad_token_id)
        if order is not None:
            pool_mask |= torch.arange(seq_len, device=ids.device)[None, :] >= lengths[:, None]
        if bool(pool_mask.any()):
            pooled = out.float().masked_fill(pool_mask.unsqueeze(-1), float("-inf")).max(dim=1).values.to(out.dtype)
        else:
            pooled = out.max(dim=1).values

        if order is not None:
            out = torch.empty_like(out).scatter_(1, order.unsqueeze(-1).expand(-1, -1, dim), out)
        return BaseModelOutputWithPooling(last_hidden_state=out, pooler_output=pooled)


__all__ = ["LaserPreTrainedModel", "LaserModel"]
