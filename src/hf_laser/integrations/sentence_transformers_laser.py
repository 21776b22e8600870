"""The sentence-transformers module of LASER directories: LASER preprocessing + BiLSTM + max-pool, with a language.

Every saved LASER encoder directory ships this file with a `modules.json` that names it (see
`integration_files.py`), so the directory is a sentence-transformers model, with or without hf_laser installed::

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("laser-93langs", trust_remote_code=True)
    emb = model.encode(["Bonjour le monde.", "Il pleut."], lang="fr")             # one language for the call
    emb = model.encode([{"text": "Hello.", "lang": "en"}, {"text": "Hallo.", "lang": "de"}])   # one per sentence
    model.similarity(emb, emb)                                                    # cosine

`trust_remote_code=True` is required: sentence-transformers >= 6 imports no module that is not its own without it,
even an installed one. The embeddings are `LaserModel`'s `pooler_output`, i.e. `LaserEncoder.encode`'s.

The language selects the LASER preprocessing (`lang` as in `LaserTokenizer`: a code, `"auto"`, one code per
sentence). sentence-transformers sorts and batches the sentences, so one language per sentence travels with the
sentence (`{"text": ..., "lang": ...}` items, which also works through `sentence_transformers.util` helpers and
the multi-process pool), not as a list argument. Without a language, the tokenizer's default language is used and
one warning says so.

A sentence of more than `max_seq_length` tokens (default 100,000, `</s>` included; None: no limit; a LASER3
transformer student's own limit, `config.max_positions`, where lower) is embedded as its first `max_seq_length - 1`
tokens + `</s>`, with a warning that names it, as `LaserEncoder.encode` does with `max_sentence_tokens`: the CPU
LSTM kernel (oneDNN) fails outright on sequences of about 260k tokens at hidden 512.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from sentence_transformers.base.modules import InputModule
from transformers import PretrainedConfig

from ..modeling.modeling_laser import LaserModel
from ..text.tokenization_laser import LaserTokenizer
from .sentence_transformers_inputs import PER_SENTENCE, caller_stacklevel, split_items

# = hf_laser.defaults.DEFAULT_MAX_SENTENCE_TOKENS (not imported: this file also runs as remote code without hf_laser)
DEFAULT_MAX_SEQ_LENGTH = 100_000
class LaserSentenceTransformerModule(InputModule):
    """A LASER encoder and its tokenizer as one sentence-transformers input module.

    `preprocess` turns sentences into LASER ids (`lang=` one code or `"auto"` for the call; items
    `{"text": ..., "lang": ...}` for one language per sentence, which take precedence); `forward` adds
    `token_embeddings` (the BiLSTM outputs) and `sentence_embedding` (their max-pool, LASER's embedding).
    """

    save_in_root = True
    forward_kwargs = {"lang"}  # lets SentenceTransformer.encode accept lang= (it is used in preprocess)

    def __init__(self, model: LaserModel, tokenizer: LaserTokenizer):
        super().__init__()
        if getattr(getattr(model, "config", None), "model_type", None) != "laser":
            raise ValueError(f"expected a LASER model (config.model_type 'laser'), got {type(model).__name__}")
        if not callable(getattr(tokenizer, "resolve_lang", None)):
            raise ValueError(f"expected a LASER tokenizer, got {type(tokenizer).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length: int | None = DEFAULT_MAX_SEQ_LENGTH
        config = model.config
        if getattr(config, "encoder_type", "bilstm") == "transformer":
            # a LASER3 student takes no more (its positions; `<s>` is prepended by the model)
            self.max_seq_length = min(DEFAULT_MAX_SEQ_LENGTH, config.max_positions - int(bool(config.prepend_bos)))
        self._warned_default_lang = False

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    def get_embedding_dimension(self) -> int:
        return self.model.config.embedding_dim

    def preprocess(self, inputs: Sequence, prompt: str | None = None, lang: str | None = None,
                   processing_kwargs: dict | None = None, **kwargs) -> dict[str, Any]:
        """LASER ids and attention mask of a batch. `kwargs` (e.g. `task` from `encode_query`) are not used: LASER
        encodes queries and documents alike."""
        if processing_kwargs:
            raise ValueError(f"processing_kwargs are not used by LASER (got {processing_kwargs!r:.80}); give the "
                             "language as lang=")
        if lang is not None and not isinstance(lang, str):
            raise TypeError(f"lang must be one language code (or 'auto') for the call; {PER_SENTENCE}")
        texts, langs = split_items(inputs, "LASER")
        if prompt:
            texts = [prompt + text for text in texts]
        langs = [lang if code is None else code for code in langs]
        if any(code is None for code in langs):
            default = self.tokenizer.default_lang
            if not self._warned_default_lang:
                self._warned_default_lang = True
                warnings.warn(
                    f"no lang given to encode(): the sentences are preprocessed as {default!r} (the tokenizer's "
                    f"default language); LASER's preprocessing depends on the language: pass lang='xx' (one code "
                    f"for the call, or lang='auto' to detect it per sentence), or {PER_SENTENCE}",
                    UserWarning, stacklevel=caller_stacklevel())
            langs = [default if code is None else code for code in langs]
        lang_arg = langs[0] if len(set(langs)) == 1 else langs
        ids = self.tokenizer(texts, lang=lang_arg)["input_ids"]
        limit = self.max_seq_length
        if limit is not None:
            if limit < 2:
                raise ValueError(f"max_seq_length must be at least 2 (one token and </s>) or None, got {limit}")
            cut = [(text, len(x)) for text, x in zip(texts, ids) if len(x) > limit]
            if cut:
                ids = [x[:limit - 1] + x[-1:] if len(x) > limit else x for x in ids]
                shown = ", ".join(f"{text[:40]!r}... ({n:,} tokens)" for text, n in cut[:5])
                warnings.warn(f"{len(cut)} sentence{'s' if len(cut) > 1 else ''} longer than max_seq_length={limit:,} "
                              f"embedded as first {limit - 1:,} tokens + </s>: {shown}{' ...' if len(cut) > 5 else ''} "
                              "(to embed them whole, raise model.max_seq_length or set it to None)",
                              UserWarning, stacklevel=caller_stacklevel())
        batch = self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = self.model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
        features["token_embeddings"] = out.last_hidden_state
        features["sentence_embedding"] = out.pooler_output
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        # weights are always safetensors (transformers 5)
        self.model.save_pretrained(output_path)
        self.tokenizer.save_pretrained(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             model_kwargs: dict | None = None, processor_kwargs: dict | None = None,
             config_kwargs: dict | None = None, backend: str = "torch", **kwargs) -> LaserSentenceTransformerModule:
        """Loads the model (strictly, see `LaserPreTrainedModel.from_pretrained`) and the tokenizer.

        `model_kwargs` (e.g. `{"dtype": torch.bfloat16}`) and `config_kwargs` go to `LaserModel.from_pretrained`,
        `processor_kwargs` (e.g. `{"lang": "de"}`, the default language) to `LaserTokenizer.from_pretrained`."""
        if backend != "torch":
            raise ValueError(f"the LASER module runs on the torch backend only, got backend={backend!r}")
        hub = {"subfolder": subfolder, "token": token, "cache_dir": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        model_type = PretrainedConfig.get_config_dict(model_name_or_path, **hub)[0].get("model_type")
        if model_type != "laser":
            raise ValueError(f"{model_name_or_path} is not a LASER directory (config.json model_type {model_type!r}, "
                             "expected 'laser')")
        model = LaserModel.from_pretrained(model_name_or_path, **hub, **(config_kwargs or {}), **(model_kwargs or {}))
        tokenizer = LaserTokenizer.from_pretrained(model_name_or_path, **hub, **(processor_kwargs or {}))
        return cls(model.eval(), tokenizer)

    def __repr__(self) -> str:
        config = self.model.config
        return (f"LaserSentenceTransformerModule(encoder={getattr(config, 'encoder_type', 'bilstm')}, "
                f"layers={config.num_layers}, hidden_size={config.hidden_size}, "
                f"embedding_dim={config.embedding_dim}, tokenizer={self.tokenizer.mode}, "
                f"default_lang={self.tokenizer.default_lang!r})")
