"""`SonarDecoderConfig`: the configuration of SONAR's text decoder (sentence embedding -> text), NLLB-200's decoder
conditioned on one vector.

Attribute names are `M2M100Config`'s (`d_model`, `decoder_layers`, `decoder_ffn_dim`...) so that transformers'
`M2M100DecoderLayer` is built from it as it is. Defaults are SONAR's "basic" text decoder
(`sonar/models/sonar_text/config.py`, `_register_sonar_text_decoder_configs`): 24 pre-norm layers of width 1,024,
feed-forward 8,192, 16 heads, ReLU, embeddings scaled by sqrt(d_model), fairseq's sinusoidal positions (offset 2),
a final layer norm, the output projection tied to the embedding table, 512 positions (`max_seq_len`: the longest
sequence generated, prompt included), and the tokenizer's vocabulary layout (`<pad>` 0, `<unk>` 1, `<s>` 2,
`</s>` 3, piece k at k + 1, the 202 language tags after the pieces).
"""

from __future__ import annotations

from transformers import PretrainedConfig

from .configuration_sonar import SonarConfig

__all__ = ["SonarDecoderConfig"]


class SonarDecoderConfig(PretrainedConfig):
    """Configuration of [`SonarDecoderModel`].

    Args:
        vocab_size: rows of the (tied) token embedding table (SONAR: 256,206).
        d_model: width of the decoder and of the sentence embeddings it reads.
        decoder_layers: number of pre-norm decoder layers (self-attention, attention to the sentence embedding,
            feed-forward).
        decoder_attention_heads: heads per attention; must divide `d_model`.
        decoder_ffn_dim: inner width of the feed-forward networks.
        activation_function: `"relu"` (SONAR) or `"gelu"`.
        max_position_embeddings: positions of the sinusoidal table and the longest sequence generated, the
            target-language prompt included (SONAR: 512, `ConditionalTransformerDecoderModel.max_target_seq_len`).
        position_offset: the step of the first token in the sinusoidal table (2, fairseq's legacy offset).
        scale_embedding: multiply the token embeddings by sqrt(d_model).
        dropout, attention_dropout, activation_dropout: dropout probabilities (training only).
        pad_token_id, unk_token_id, bos_token_id, eos_token_id: the tokenizer's ids (0, 1, 2, 3); generation never
            emits `<pad>`, can penalise `<unk>`, and ends a hypothesis at `</s>`.
    """

    model_type = "sonar_decoder"
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "decoder_attention_heads",
                     "num_hidden_layers": "decoder_layers"}

    def __init__(
        self,
        vocab_size: int = 256206,
        d_model: int = 1024,
        decoder_layers: int = 24,
        decoder_attention_heads: int = 16,
        decoder_ffn_dim: int = 8192,
        activation_function: str = "relu",
        max_position_embeddings: int = 512,
        position_offset: int = 2,
        scale_embedding: bool = True,
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        activation_dropout: float = 0.1,
        pad_token_id: int = 0,
        unk_token_id: int = 1,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        **kwargs,
    ):
        # the same checks as the encoder's (one place for them): build a SonarConfig of the same sizes
        SonarConfig(vocab_size=vocab_size, d_model=d_model, encoder_layers=decoder_layers,
                    encoder_attention_heads=decoder_attention_heads, encoder_ffn_dim=decoder_ffn_dim,
                    activation_function=activation_function, max_position_embeddings=max_position_embeddings,
                    position_offset=position_offset, scale_embedding=scale_embedding, dropout=dropout,
                    attention_dropout=attention_dropout, activation_dropout=activation_dropout,
                    pad_token_id=pad_token_id, unk_token_id=unk_token_id, bos_token_id=bos_token_id,
                    eos_token_id=eos_token_id)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.decoder_layers = decoder_layers
        self.decoder_attention_heads = decoder_attention_heads
        self.decoder_ffn_dim = decoder_ffn_dim
        self.activation_function = activation_function
        self.max_position_embeddings = max_position_embeddings
        self.position_offset = position_offset
        self.scale_embedding = scale_embedding
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation_dropout = float(activation_dropout)
        self.unk_token_id = unk_token_id
        kwargs.setdefault("tie_word_embeddings", True)
        kwargs.setdefault("is_decoder", True)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
