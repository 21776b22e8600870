"""LASER model configuration."""

from __future__ import annotations

from transformers import PretrainedConfig

from .plain_config import check_laser_config_values


class LaserConfig(PretrainedConfig):
    r"""
    Configuration of a LASER BiLSTM sentence encoder (Artetxe & Schwenk, 2019) and, for training, of its
    auxiliary LSTM decoder and of the classification heads built on the sentence embedding.

    The defaults are the published LASER encoder (`bilstm.93langs.2018-12-26.pt`): 5 BiLSTM layers of 512 units per
    direction on 320-d token embeddings, giving 1024-d sentence embeddings.

    Args:
        vocab_size (`int`, *optional*, defaults to 73640):
            Size of the joint vocabulary (the checkpoint's `num_embeddings`, special tokens included).
        embed_dim (`int`, *optional*, defaults to 320):
            Size of the token embeddings fed to the BiLSTM.
        hidden_size (`int`, *optional*, defaults to 512):
            LSTM units **per direction**. The sentence embedding has `hidden_size * 2` dimensions when bidirectional
            (see [`~LaserConfig.embedding_dim`]).
        num_layers (`int`, *optional*, defaults to 5):
            Number of stacked LSTM layers in the encoder.
        bidirectional (`bool`, *optional*, defaults to `True`):
            Whether the encoder LSTM is bidirectional.
        padding_value (`float`, *optional*, defaults to 0.0):
            Value of padded positions in `last_hidden_state` (they are excluded from the max-pool).
        left_pad (`bool`, *optional*, defaults to `True`):
            Stored for fidelity with the original checkpoint `params`; the model accepts any padding side.
        dropout (`float`, *optional*, defaults to 0.1):
            Dropout on embeddings and LSTM outputs, encoder and decoder (training only; the paper used 0.1).
        decoder_embed_dim (`int`, *optional*, defaults to 320):
            Size of the decoder's target-token embeddings.
        decoder_hidden_size (`int`, *optional*, defaults to 2048):
            Units of the decoder LSTM.
        decoder_num_layers (`int`, *optional*, defaults to 1):
            Layers of the decoder LSTM; 0 builds `LaserForPreTraining` without a decoder (ranking-only training).
        lang_embed_dim (`int`, *optional*, defaults to 32):
            Size of the target-language-id embedding fed to the decoder at every step.
        target_languages (`list[str]`, *optional*, defaults to `["en", "es"]`):
            Target languages of the decoder (the paper decodes into English and Spanish). Their index is the language
            id given to the decoder.
        init_range (`float`, *optional*, defaults to 0.1):
            Weights are initialised uniformly in `[-init_range, init_range]`, as fairseq's LSTM models do.
        classifier_hidden_sizes (`list[int]`, *optional*, defaults to `[512, 384]`):
            Hidden layers of the MLP of [`LaserForSequenceClassification`] (the paper's XNLI setting; MLDoc used `[10]`).
        classifier_mode (`str`, *optional*, defaults to `"single"`):
            `"single"` classifies one sentence embedding; `"pair"` classifies `(p, h, p*h, |p-h|)` of two sentences.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout inside the classification MLP.
        freeze_encoder (`bool`, *optional*, defaults to `True`):
            Whether [`LaserForSequenceClassification`] keeps the encoder frozen (the paper's zero-shot setting).
        pad_token_id / bos_token_id / eos_token_id / unk_token_id (`int`):
            Ids of `<pad>`, `<s>`, `</s>`, `<unk>` in the LASER dictionary (1, 0, 2, 3).
        encoder_type (`str`, *optional*, defaults to `"bilstm"`):
            `"bilstm"` (LASER1, LASER2, laser-mini and LASER3's BiLSTM students) or `"transformer"` (LASER3's
            transformer students: fairseq's `TransformerEncoder`, see `transformer.py`). For a transformer,
            `embed_dim` is the model width, `num_layers` the number of layers, the sentence embedding has `embed_dim`
            dimensions, and `hidden_size` / `bidirectional` / `padding_value` are unused.
        attention_heads (`int`, *optional*, defaults to 16), ffn_dim (`int`, *optional*, defaults to 4096):
            Transformer only: attention heads and feed-forward width (fairseq's `encoder_attention_heads`,
            `encoder_ffn_embed_dim`).
        normalize_before (`bool`, *optional*, defaults to `False`):
            Transformer only: layer norm before each block (pre-norm) instead of after it (fairseq's default).
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            Transformer only: `"sinusoidal"`, `"learned"` (fairseq's `encoder_learned_pos`) or `"none"`.
        max_positions (`int`, *optional*, defaults to 1024):
            Transformer only: fairseq's `max_source_positions` (the length limit of learned positions).
        scale_embedding (`bool`, *optional*, defaults to `True`):
            Transformer only: token embeddings multiplied by `sqrt(embed_dim)` (fairseq's `no_scale_embedding` off).
        layernorm_embedding (`bool`, *optional*, defaults to `False`):
            Transformer only: a layer norm after the embeddings.
        final_layer_norm (`bool`, *optional*, defaults to `False`):
            Transformer only: a layer norm after the last layer.
        activation_function (`str`, *optional*, defaults to `"relu"`):
            Transformer only: `"relu"` or `"gelu"`.
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Transformer only.
        activation_dropout (`float`, *optional*, defaults to 0.0):
            Transformer only.
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            Transformer only.
        pooling (`str`, *optional*, defaults to `"max"`):
            Transformer only: the sentence embedding is the max over the tokens (`"max"`, LASER3's `maxpool`) or the
            output at `<s>` (`"cls"`, which needs `prepend_bos`).
        prepend_bos (`bool`, *optional*, defaults to `False`):
            Transformer only: the model puts `<s>` in front of every sentence it is given (input ids stay what every
            LASER tokenizer gives: pieces + `</s>`), as LASER3's `SentenceEncoder` does.
        quant_noise (`bool`, *optional*, defaults to `False`):
            Transformer only: the bias-free `embed_dim x embed_dim` linear map fairseq puts after the embeddings of a
            model trained with `quant_noise_pq > 0` (`quant_noise.weight`; the noise acts in training only).

    Every value is checked when the configuration is built (types, ranges, and the parameters the sizes imply,
    at most `HF_LASER_MAX_PARAMETERS`): a wrong one is a `ValueError` naming the field and what it may be, before
    anything is allocated (docs/convert.md, "Untrusted inputs").

    Example:

    ```python
    >>> from hf_laser import LaserConfig, LaserModel
    >>> config = LaserConfig(vocab_size=1000, embed_dim=32, hidden_size=48, num_layers=2)
    >>> model = LaserModel(config)
    >>> config.embedding_dim
    96
    ```
    """

    model_type = "laser"

    def __init__(
        self,
        vocab_size: int = 73640,
        embed_dim: int = 320,
        hidden_size: int = 512,
        num_layers: int = 5,
        bidirectional: bool = True,
        padding_value: float = 0.0,
        left_pad: bool = True,
        dropout: float = 0.1,
        decoder_embed_dim: int = 320,
        decoder_hidden_size: int = 2048,
        decoder_num_layers: int = 1,
        lang_embed_dim: int = 32,
        target_languages: list[str] | None = None,
        init_range: float = 0.1,
        classifier_hidden_sizes: list[int] | None = None,
        classifier_mode: str = "single",
        classifier_dropout: float = 0.1,
        freeze_encoder: bool = True,
        pad_token_id: int = 1,
        bos_token_id: int = 0,
        eos_token_id: int = 2,
        unk_token_id: int = 3,
        encoder_type: str = "bilstm",
        attention_heads: int = 16,
        ffn_dim: int = 4096,
        normalize_before: bool = False,
        position_embedding_type: str = "sinusoidal",
        max_positions: int = 1024,
        scale_embedding: bool = True,
        layernorm_embedding: bool = False,
        final_layer_norm: bool = False,
        activation_function: str = "relu",
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
        pooling: str = "max",
        prepend_bos: bool = False,
        quant_noise: bool = False,
        **kwargs,
    ):
        check_laser_config_values(dict(
            classifier_mode=classifier_mode, vocab_size=vocab_size, embed_dim=embed_dim, hidden_size=hidden_size,
            num_layers=num_layers, bidirectional=bidirectional, encoder_type=encoder_type,
            attention_heads=attention_heads, ffn_dim=ffn_dim, normalize_before=normalize_before,
            position_embedding_type=position_embedding_type, max_positions=max_positions,
            scale_embedding=scale_embedding, layernorm_embedding=layernorm_embedding,
            final_layer_norm=final_layer_norm, activation_function=activation_function, dropout=dropout,
            attention_dropout=attention_dropout, activation_dropout=activation_dropout, layer_norm_eps=layer_norm_eps,
            pooling=pooling, prepend_bos=prepend_bos, quant_noise=quant_noise, pad_token_id=pad_token_id,
            bos_token_id=bos_token_id, eos_token_id=eos_token_id, unk_token_id=unk_token_id))
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.padding_value = padding_value
        self.left_pad = left_pad
        self.dropout = dropout
        self.decoder_embed_dim = decoder_embed_dim
        self.decoder_hidden_size = decoder_hidden_size
        self.decoder_num_layers = decoder_num_layers
        self.lang_embed_dim = lang_embed_dim
        self.target_languages = list(target_languages) if target_languages is not None else ["en", "es"]
        self.init_range = init_range
        self.classifier_hidden_sizes = (
            list(classifier_hidden_sizes) if classifier_hidden_sizes is not None else [512, 384]
        )
        self.classifier_mode = classifier_mode
        self.classifier_dropout = classifier_dropout
        self.freeze_encoder = freeze_encoder
        self.unk_token_id = unk_token_id
        self.encoder_type = encoder_type
        self.attention_heads = attention_heads
        self.ffn_dim = ffn_dim
        self.normalize_before = normalize_before
        self.position_embedding_type = position_embedding_type
        self.max_positions = max_positions
        self.scale_embedding = scale_embedding
        self.layernorm_embedding = layernorm_embedding
        self.final_layer_norm = final_layer_norm
        self.activation_function = activation_function
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.layer_norm_eps = layer_norm_eps
        self.pooling = pooling
        self.prepend_bos = prepend_bos
        self.quant_noise = quant_noise
        super().__init__(
            pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs
        )

    @classmethod
    def _dict_from_json_file(cls, json_file):
        # a JSON nesting bomb is one line (ValueError), not the RecursionError of json or of transformers' decoding
        try:
            values = super()._dict_from_json_file(json_file)
        except RecursionError:
            raise ValueError(f"{json_file} is nested too deeply to be a LASER config") from None
        if not isinstance(values, dict):
            raise ValueError(f"{json_file} is not a JSON object (a LASER config is one)")
        return values

    @property
    def embedding_dim(self) -> int:
        """Dimension of the sentence embedding (`2 * hidden_size` for a bidirectional encoder, `embed_dim` for a
        transformer)."""
        if self.encoder_type == "transformer":
            return self.embed_dim
        return self.hidden_size * (2 if self.bidirectional else 1)
