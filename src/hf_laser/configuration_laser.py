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
        **kwargs,
    ):
        check_laser_config_values(dict(classifier_mode=classifier_mode, vocab_size=vocab_size, embed_dim=embed_dim,
                                       hidden_size=hidden_size, num_layers=num_layers))
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
        super().__init__(
            pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs
        )

    @property
    def embedding_dim(self) -> int:
        """Dimension of the sentence embedding (`2 * hidden_size` for a bidirectional encoder)."""
        return self.hidden_size * (2 if self.bidirectional else 1)
