"""The LASER BiLSTM encoder's computation in plain PyTorch (no transformers), and a light loader for inference.

[`BiLSTMEncoderMixin`] holds the layers (`embed_tokens`, `lstm`, `dropout`) and the forward computation; the
transformers model [`~modeling_laser.LaserModel`] and the torch-only [`LaserBiLSTM`] both use it, so their
parameter names, state dicts and embeddings are the same. [`LaserBiLSTM.from_directory`] loads a plain LASER
directory (one `model.safetensors` that matches its config, read into [`~plain_config.PlainLaserConfig`]) without
importing transformers, about half of a command line's start-up; anything else is left to
`LaserModel.from_pretrained` and its checks.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .plain_weights import parameter_shapes, read_plain_weights, vocab_problems  # noqa: F401 (re-exported)


@contextmanager
def ieee_fp32_lstm(x: torch.Tensor, allow_tf32: bool = False):
    """Runs the fp32 LSTM calls inside it in IEEE fp32 on a CUDA device.

    PyTorch lets cuDNN compute fp32 RNNs with TF32 tensor cores by default (`torch.backends.cudnn.rnn.fp32_precision
    == "tf32"`): on Ampere and later GPUs their products keep 10 mantissa bits, an error of ~1e-3 where fp32 gives
    ~1e-7, so a GPU would no longer give the original's embeddings. The flag is set for the call and restored
    after it; nothing changes on the CPU, for bf16/fp16 inputs or under autocast, or with `allow_tf32=True`.
    """
    if allow_tf32 or not x.is_cuda or x.dtype != torch.float32 or torch.is_autocast_enabled(x.device.type):
        yield  # (under autocast the LSTM runs in bf16/fp16 anyway)
        return
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):
        holder, name, exact = rnn, "fp32_precision", "ieee"
    else:  # torch < 2.9: one legacy flag for cuDNN convolutions and RNNs
        holder, name, exact = torch.backends.cudnn, "allow_tf32", False
    previous = getattr(holder, name)
    setattr(holder, name, exact)
    try:
        yield
    finally:
        setattr(holder, name, previous)


@contextmanager
def cpu_autocast_lstm(x: torch.Tensor):
    """Runs the LSTM calls inside it without oneDNN when `x` is on the CPU under autocast.

    Under CPU autocast PyTorch sends an unpacked LSTM to oneDNN's bf16 kernel, which does not exist on CPUs without
    native bf16 (e.g. AMD EPYC before Zen 4): the call fails with "could not create a primitive descriptor for the
    LSTM forward propagation primitive". PyTorch's own kernel (the one packed sequences already use) computes the
    same bf16 LSTM on every CPU. Nothing changes outside CPU autocast.
    """
    if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        yield
        return
    previous = torch.backends.mkldnn.enabled  # (mkldnn.flags() would also reset the other oneDNN flags)
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = previous


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


class BiLSTMEncoderMixin:
    """Token embeddings → multi-layer (Bi)LSTM from zero states → max-pool over time, on an `nn.Module` with a
    `config` ([`LaserConfig`] or [`~plain_config.PlainLaserConfig`]). See [`~modeling_laser.LaserModel`] for the
    behaviour."""

    def build_encoder(self, config) -> None:
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
        self.allow_tf32 = False  # a run-time choice, not saved with the model

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

    def encode_tokens(self, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`(last_hidden_state, pooler_output)`: `(batch, seq_len, 2 * hidden_size)` BiLSTM outputs at the input
        positions (padding holds `config.padding_value`) and `(batch, 2 * hidden_size)` sentence embeddings."""
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

        padded = not bool(mask.all())
        ids, order = input_ids, None
        positions = torch.arange(seq_len, device=input_ids.device)[None, :]
        if padded and not torch.equal(mask, positions < lengths[:, None]):
            # Padding before or inside a sentence: move its tokens to the front (LaserEncoder's batches, padded on
            # the right already, skip the reordering and its inverse).
            ids, order = right_align(input_ids, mask)

        x = self.dropout(self.embed_tokens(ids))
        with ieee_fp32_lstm(x, self.allow_tf32), cpu_autocast_lstm(x):
            if not padded:
                # No padding: the fused (cuDNN / oneDNN) kernel runs on the plain tensor, same result as packing.
                out, _ = self.lstm(x)
            else:
                packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
                out, _ = self.lstm(packed)
        if padded:
            out, _ = pad_packed_sequence(
                out, batch_first=True, padding_value=self.config.padding_value, total_length=seq_len
            )
        out = self.dropout(out)

        # The original masks by token id (`tokens == <pad>`), which also covers a literal <pad> inside a sentence.
        pool_mask = ids.eq(self.config.pad_token_id)
        if padded:
            pool_mask |= positions >= lengths[:, None]
        if bool(pool_mask.any()):
            pooled = out.float().masked_fill(pool_mask.unsqueeze(-1), float("-inf")).max(dim=1).values.to(out.dtype)
        else:
            pooled = out.max(dim=1).values

        if order is not None:
            out = torch.empty_like(out).scatter_(1, order.unsqueeze(-1).expand(-1, -1, dim), out)
        return out, pooled


@dataclass
class BiLSTMOutput:
    """What [`LaserBiLSTM`] returns: the fields of `BaseModelOutputWithPooling` that LASER fills."""

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor


class LaserBiLSTM(BiLSTMEncoderMixin, nn.Module):
    """The LASER encoder as a plain `nn.Module`, for inference: same layers, state dict and embeddings as
    [`~modeling_laser.LaserModel`], without transformers' model machinery (loading, saving, the Hub)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.build_encoder(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> BiLSTMOutput:
        return BiLSTMOutput(*self.encode_tokens(input_ids, attention_mask))

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> LaserBiLSTM | None:
        """The model of a local LASER directory, in float32, or None when the directory is anything but the plain
        case: one `model.safetensors` whose tensor names, shapes and floating-point dtypes are exactly the config's,
        with finite values, a float32 config and a `vocab.json` that agrees with it. None means "load it with
        `LaserModel.from_pretrained`", whose strict checks then explain what is wrong."""
        read = read_plain_weights(path)
        if read is None:
            return None
        config, arrays = read
        state = {k: torch.from_numpy(v) for k, v in arrays.items()}
        # Built on the CPU, not on the meta device: initialising meta tensors runs PyTorch's Python decompositions,
        # which import torch._dynamo (1-3 s of a command's start-up). fork_rng: the caller's global RNG is untouched.
        with torch.random.fork_rng(devices=[]):
            model = cls(config)
        model.load_state_dict(state, strict=True)
        return model.eval()
