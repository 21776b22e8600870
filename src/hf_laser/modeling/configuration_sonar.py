"""`SonarConfig`: the configuration of SONAR's text encoder (Duquenne et al. 2023, "SONAR: Sentence-Level Multimodal
and Language-Agnostic Representations"), NLLB-200's encoder with mean pooling.

The attribute names are `M2M100Config`'s (`d_model`, `encoder_layers`, `encoder_ffn_dim`...) so that transformers'
`M2M100EncoderLayer` is built from this configuration as it is. Defaults are SONAR's "basic" text encoder
(`sonar/models/sonar_text/config.py`, `_register_sonar_text_encoder_configs`): 24 pre-norm layers of width 1,024,
feed-forward 8,192, 16 heads, ReLU, embeddings scaled by sqrt(d_model), fairseq's sinusoidal positions, a final
layer norm, mean pooling, 514 positions, and fairseq2's vocabulary layout (`<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3,
SentencePiece piece k at k + 1, the 202 language tags after the pieces).
"""

from __future__ import annotations

from transformers import PretrainedConfig

__all__ = ["SonarConfig"]

_ACTIVATIONS = ("relu", "gelu")


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"SonarConfig: {name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"SonarConfig: {name} must be >= {minimum}, got {value}")
    return value


def _check_probability(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"SonarConfig: {name} must be a number in [0, 1), got {value!r}")
    return float(value)


class SonarConfig(PretrainedConfig):
    """Configuration of [`SonarModel`].

    Args:
        vocab_size: rows of the token embedding table (SONAR: 256,206 = 1 `<pad>` + 256,000 pieces + 202 language
            tags + 3 internal symbols).
        d_model: width of the encoder.
        encoder_layers: number of (pre-norm) transformer layers.
        encoder_attention_heads: attention heads per layer; must divide `d_model`.
        encoder_ffn_dim: inner width of the feed-forward networks.
        activation_function: `"relu"` (SONAR) or `"gelu"`.
        max_position_embeddings: the longest input in ids (SONAR: 512 + pad index 1 + 1 = 514, fairseq2's
            `SinusoidalPositionEncoder.max_seq_len`); longer inputs are refused by the model (the tokenizer cuts them).
        position_offset: the step of the first token in the sinusoidal table (fairseq's legacy offset,
            `1 + _legacy_pad_idx` = 2 in SONAR).
        scale_embedding: multiply the token embeddings by sqrt(d_model).
        pooling: `"mean"`: the sentence vector is the mean of the final layer's outputs over every real token
            (language tag and `</s>` included).
        dropout, attention_dropout, activation_dropout: dropout probabilities (training only).
        pad_token_id, unk_token_id, bos_token_id, eos_token_id: fairseq2's ids (0, 1, 2, 3).
    """

    model_type = "sonar"
    # every layer norm has epsilon 1e-5, fairseq2's `StandardLayerNorm` default and `M2M100EncoderLayer`'s
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads",
                     "num_hidden_layers": "encoder_layers"}

    def __init__(
        self,
        vocab_size: int = 256206,
        d_model: int = 1024,
        encoder_layers: int = 24,
        encoder_attention_heads: int = 16,
        encoder_ffn_dim: int = 8192,
        activation_function: str = "relu",
        max_position_embeddings: int = 514,
        position_offset: int = 2,
        scale_embedding: bool = True,
        pooling: str = "mean",
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        pad_token_id: int = 0,
        unk_token_id: int = 1,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        **kwargs,
    ):
        self.vocab_size = _check_int("vocab_size", vocab_size, 5)
        self.d_model = _check_int("d_model", d_model, 2)
        if d_model % 2:
            raise ValueError(f"SonarConfig: d_model must be even (sinusoidal positions), got {d_model}")
        self.encoder_layers = _check_int("encoder_layers", encoder_layers, 0)
        self.encoder_attention_heads = _check_int("encoder_attention_heads", encoder_attention_heads, 1)
        if d_model % encoder_attention_heads:
            raise ValueError(f"SonarConfig: encoder_attention_heads ({encoder_attention_heads}) must divide d_model "
                             f"({d_model})")
        self.encoder_ffn_dim = _check_int("encoder_ffn_dim", encoder_ffn_dim, 1)
        if activation_function not in _ACTIVATIONS:
            raise ValueError(f"SonarConfig: activation_function must be one of {_ACTIVATIONS}, got "
                             f"{activation_function!r}")
        self.activation_function = activation_function
        self.max_position_embeddings = _check_int("max_position_embeddings", max_position_embeddings, 1)
        self.position_offset = _check_int("position_offset", position_offset, 0)
        if not isinstance(scale_embedding, bool):
            raise ValueError(f"SonarConfig: scale_embedding must be a bool, got {scale_embedding!r}")
        self.scale_embedding = scale_embedding
        if pooling != "mean":
            raise ValueError(f"SonarConfig: pooling must be 'mean' (SONAR's text encoders), got {pooling!r}")
        self.pooling = pooling
        self.dropout = _check_probability("dropout", dropout)
        self.attention_dropout = _check_probability("attention_dropout", attention_dropout)
        self.activation_dropout = _check_probability("activation_dropout", activation_dropout)
        ids = {"pad_token_id": pad_token_id, "unk_token_id": unk_token_id, "bos_token_id": bos_token_id,
               "eos_token_id": eos_token_id}
        for name, value in ids.items():
            _check_int(name, value, 0)
            if value >= vocab_size:
                raise ValueError(f"SonarConfig: {name} ({value}) must be < vocab_size ({vocab_size})")
        self.unk_token_id = unk_token_id
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)

    @property
    def embedding_dim(self) -> int:
        """Dimension of the sentence embeddings (the mean of the final layer's outputs): `d_model`."""
        return self.d_model
