"""The LASER3 student encoder's computation in plain PyTorch: fairseq's `TransformerEncoder` as NLLB's per-language
LASER3 encoders use it (Heffernan et al., 2022), without fairseq.

[`TransformerEncoderMixin`] holds the layers and the forward computation of `LaserModel` when
`config.encoder_type == "transformer"`. Parameter names are fairseq's (`embed_tokens`, `embed_positions`,
`layernorm_embedding`, `layers.N.self_attn.{q,k,v,out}_proj`, `layers.N.self_attn_layer_norm`, `layers.N.fc1/fc2`,
`layers.N.final_layer_norm`, `layer_norm`), so a LASER3 checkpoint's state dict loads after dropping fairseq's
bookkeeping buffers.

What it computes, step for step as fairseq 0.12 and laser_encoders' `LaserTransformerEncoder`:

1. `<s>` in front of every sentence when `config.prepend_bos` (LASER3's `SentenceEncoder` adds it when it turns a
   `.spm` line into ids, so the ids a LASER tokenizer gives, pieces + `</s>`, are this model's input as for the
   BiLSTM);
2. token embeddings × `sqrt(embed_dim)` (unless `scale_embedding` is off) + positions (sinusoidal or learned), both
   fairseq's: positions count the non-`<pad>` tokens of a row and start at `pad_token_id + 1`, so they do not depend
   on the padding side; optional `layernorm_embedding`; with `quant_noise` (fairseq's `quant_noise_pq > 0`), the
   bias-free `dim x dim` linear map fairseq puts after the embeddings (`quant_noise.weight`: quant noise itself
   acts in training only, the map stays at inference); padded positions zeroed;
3. `num_layers` encoder layers, post-norm (fairseq's default) or pre-norm (`normalize_before`), self-attention with
   the padding masked, the feed-forward with fairseq's activation (relu, relu_squared, gelu, gelu_accurate = gelu_fast,
   tanh, linear);
4. the final `layer_norm` when the checkpoint has one (pre-norm models, and LASER3 checkpoints that add it);
5. the sentence embedding: the max over the non-`<pad>` positions (`pooling="max"`, fairseq's `maxpool`) or the
   output at `<s>` (`pooling="cls"`).

Why not transformers' own layers: `BartEncoderLayer` (post-norm) and `M2M100EncoderLayer` (pre-norm) have these
parameter names and arithmetic, but Bart's learned positions count from the start of the row whatever the padding
(fairseq counts non-pad tokens, so left-padded LASER3 batches would get other positions), each class fixes one
norm placement and one kind of positions where a LASER3 config chooses each, and their attention layers take
transformers' config and mask conventions, which change between releases. This file is the one small module that
covers every combination of a LASER3 configuration exactly, with `torch.nn.functional.scaled_dot_product_attention`
for the attention (the kernel fairseq's attention calls through `F.multi_head_attention_forward`).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def gelu_accurate(x: torch.Tensor) -> torch.Tensor:
    """fairseq's `gelu_accurate` (and `gelu_fast`): the tanh approximation, the same operations in the same order."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def relu_squared(x: torch.Tensor) -> torch.Tensor:
    """fairseq's `relu_squared`."""
    return F.relu(x).pow(2)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """fairseq's `gelu`: `F.gelu` computed in float32."""
    return F.gelu(x.float()).type_as(x)


def linear(x: torch.Tensor) -> torch.Tensor:
    return x


# fairseq 0.12's `utils.get_activation_fn`, every name it computes (its "swish" returns the class `nn.SiLU`, which
# fails on the first sentence: not a model the original embeds)
ACTIVATIONS = {"relu": F.relu, "relu_squared": relu_squared, "gelu": gelu, "gelu_fast": gelu_accurate,
               "gelu_accurate": gelu_accurate, "tanh": torch.tanh, "linear": linear}
POOLINGS = ("max", "cls")
POSITION_EMBEDDINGS = ("sinusoidal", "learned", "none")


def sinusoidal_positions(num_positions: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's `SinusoidalPositionalEmbedding.get_embedding` (tensor2tensor's layout: all sines, then all cosines),
    float32, row `padding_idx` zero. Computed with the same operations in the same order, so the same bits."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float) * -scale)
    angles = torch.arange(num_positions, dtype=torch.float).unsqueeze(1) * freqs.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(num_positions, -1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


def token_positions(token_mask: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """fairseq's `make_positions`: `padding_idx + 1, + 2, ...` over a row's real tokens, `padding_idx` elsewhere.

    Args:
        token_mask: `(batch, seq_len)` bool, True for real tokens.
    """
    mask = token_mask.int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class LaserSelfAttention(nn.Module):
    """Multi-head self-attention with fairseq's parameters (`q_proj`, `k_proj`, `v_proj`, `out_proj`, with bias)."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"embed_dim {dim} is not divisible by attention_heads {heads}")
        self.heads, self.head_dim, self.dropout = heads, dim // heads, dropout
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        """`x`: `(batch, seq_len, dim)`; `key_mask`: `(batch, 1, 1, seq_len)` bool, True where a key may be
        attended (None: every key)."""
        batch, length, dim = x.shape

        def heads(t):
            return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)), attn_mask=key_mask,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, dim))


class LaserTransformerLayer(nn.Module):
    """fairseq's `TransformerEncoderLayer`: self-attention and feed-forward blocks with residuals, each normalised
    after (post-norm) or before (pre-norm, `normalize_before`) the block."""

    def __init__(self, config):
        super().__init__()
        dim = config.embed_dim
        self.normalize_before = config.normalize_before
        self.self_attn = LaserSelfAttention(dim, config.attention_heads, config.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(dim, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.activation = ACTIVATIONS[config.activation_function]
        self.dropout = nn.Dropout(config.dropout)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, key_mask))
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout(self.activation(self.fc1(x))))
        x = residual + self.dropout(x)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class TransformerEncoderMixin:
    """Token embeddings + positions → transformer layers → max-pool or `<s>`, on an `nn.Module` with a `config`
    ([`~configuration_laser.LaserConfig`] with `encoder_type="transformer"`). See the module docstring."""

    def build_transformer_encoder(self, config) -> None:
        check_transformer_config(config)
        dim, pad = config.embed_dim, config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, dim, padding_idx=pad)
        self.embed_scale = math.sqrt(dim) if config.scale_embedding else 1.0
        if config.position_embedding_type == "learned":
            # fairseq's LearnedPositionalEmbedding: max_positions rows after the `padding_idx + 1` offset
            self.embed_positions = nn.Embedding(config.max_positions + pad + 1, dim, padding_idx=pad)
        else:
            self.embed_positions = None
        self.layernorm_embedding = nn.LayerNorm(dim, eps=config.layer_norm_eps) if config.layernorm_embedding \
            else None
        # fairseq's `quant_noise_pq > 0`: a bias-free linear map after the embeddings (its noise acts in training only)
        self.quant_noise = nn.Linear(dim, dim, bias=False) if getattr(config, "quant_noise", False) else None
        self.layers = nn.ModuleList(LaserTransformerLayer(config) for _ in range(config.num_layers))
        self.layer_norm = nn.LayerNorm(dim, eps=config.layer_norm_eps) if config.final_layer_norm else None
        self.dropout = nn.Dropout(config.dropout)
        self._sinusoids = torch.empty(0)  # computed on first use, grown as needed (not a parameter or buffer)

    def _positions(self, positions: torch.Tensor) -> torch.Tensor:
        if self.embed_positions is not None:
            return self.embed_positions(positions)
        needed = int(positions.max()) + 1
        if self._sinusoids.shape[0] < needed:
            # fairseq builds the table for max_source_positions and grows it for longer inputs; a row does not
            # depend on the table's size, so the rows needed (rounded up) are the same bits, and a configuration's
            # max_positions allocates nothing: any length is embedded, as by the original
            size = -(-needed // 256) * 256
            self._sinusoids = sinusoidal_positions(size, self.config.embed_dim, self.config.pad_token_id)
        table = self._sinusoids.to(device=positions.device)
        return F.embedding(positions, table).to(self.embed_tokens.weight.dtype)

    def encode_transformer_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(last_hidden_state, pooler_output)`: `(batch, seq_len', embed_dim)` outputs of the last layer
        (`seq_len' = seq_len + 1` with `prepend_bos`, the `<s>` first) and `(batch, embed_dim)` sentence embeddings."""
        config = self.config
        mask = self._check_inputs(input_ids, attention_mask)
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(f"empty batch {tuple(input_ids.shape)}: every sentence needs at least its </s> token")
        if int(mask.sum(dim=1).min()) == 0:
            raise ValueError("a sequence has no attended token; every LASER sentence ends with </s>")
        # like fairseq, a position is padding when its id is <pad> (a literal <pad> inside a sentence too)
        tokens = mask & input_ids.ne(config.pad_token_id)
        ids = input_ids.masked_fill(~tokens, config.pad_token_id)
        if config.prepend_bos:
            ids = torch.cat([ids.new_full((ids.shape[0], 1), config.bos_token_id), ids], dim=1)
            tokens = torch.cat([tokens.new_ones((tokens.shape[0], 1)), tokens], dim=1)
        if config.position_embedding_type == "learned" and int(tokens.sum(dim=1).max()) > config.max_positions:
            raise ValueError(f"a sentence has {int(tokens.sum(dim=1).max())} tokens (with <s>/</s>); this model's "
                             f"learned positions end at {config.max_positions} (config.max_positions)")
        x = self.embed_scale * self.embed_tokens(ids)
        if config.position_embedding_type != "none":
            x = x + self._positions(token_positions(tokens, config.pad_token_id))
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        padded = not bool(tokens.all())
        if padded:
            x = x * tokens.unsqueeze(-1).type_as(x)
        key_mask = tokens[:, None, None, :] if padded else None
        for layer in self.layers:
            x = layer(x, key_mask)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if config.pooling == "cls":
            pooled = x[:, 0]
        elif padded:
            pooled = x.float().masked_fill(~tokens.unsqueeze(-1), float("-inf")).max(dim=1).values.to(x.dtype)
        else:
            pooled = x.max(dim=1).values
        return x, pooled


def check_transformer_config(config) -> None:
    """The values a transformer `LaserConfig` must have (ValueError naming the first wrong one)."""
    if config.pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {config.pooling!r}")
    if config.pooling == "cls" and not config.prepend_bos:
        raise ValueError("pooling='cls' takes the output at <s>: it needs prepend_bos=True")
    if config.position_embedding_type not in POSITION_EMBEDDINGS:
        raise ValueError(f"position_embedding_type must be one of {POSITION_EMBEDDINGS}, "
                         f"got {config.position_embedding_type!r}")
    if config.activation_function not in ACTIVATIONS:
        raise ValueError(f"activation_function must be one of {tuple(ACTIVATIONS)}, got {config.activation_function!r}")
    for name in ("attention_heads", "ffn_dim", "max_positions"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if config.embed_dim % config.attention_heads:
        raise ValueError(f"embed_dim {config.embed_dim} is not divisible by attention_heads {config.attention_heads}")
