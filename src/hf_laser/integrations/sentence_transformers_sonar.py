"""The sentence-transformers module of SONAR directories: SONAR's tokenizer + text encoder + mean pooling, with a
language per sentence.

Every converted SONAR directory ships this file with a `modules.json` that names it (`integration_files.py`), so
the directory is a sentence-transformers model, with or without hf_laser installed::

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("sonar-text-encoder", trust_remote_code=True)
    emb = model.encode(["Bonjour le monde.", "Il pleut."], lang="fra_Latn")            # one language for the call
    emb = model.encode([{"text": "Hello.", "lang": "eng_Latn"}, {"text": "Hallo.", "lang": "deu_Latn"}])

SONAR needs every sentence's language: its ids begin with the language's tag. `lang` is one of SONAR's tags
(`fra_Latn`); with hf_laser installed any name hf_laser takes (`fr`, `French`, `auto`) is mapped to one
(`hf_laser.text.sonar_languages`). Without a language, the tokenizer's `src_lang` (default `eng_Latn`) is used and
one warning says so. The embeddings are `SonarModel`'s `pooler_output`, i.e. `LaserEncoder.encode`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from sentence_transformers.base.modules import InputModule
from transformers import PretrainedConfig

from ..modeling.modeling_sonar import SonarModel
from ..text.tokenization_sonar import SonarTokenizer
from .sentence_transformers_inputs import PER_SENTENCE, caller_stacklevel, split_items

try:  # language names and lang="auto" where hf_laser is installed; SONAR's tags alone where it is not
    from hf_laser.text.sonar_languages import SonarLineTokenizer, sonar_tag
except ImportError:
    SonarLineTokenizer = sonar_tag = None


class SonarSentenceTransformerModule(InputModule):
    """SONAR's text encoder and tokenizer as one sentence-transformers input module: `preprocess` turns sentences
    into SONAR's ids (`lang=` for the call, or `{"text", "lang"}` items); `forward` adds `token_embeddings` and
    `sentence_embedding` (the mean over every real token, SONAR's embedding)."""

    save_in_root = True
    forward_kwargs = {"lang"}

    def __init__(self, model: SonarModel, tokenizer: SonarTokenizer):
        super().__init__()
        if getattr(getattr(model, "config", None), "model_type", None) != "sonar":
            raise ValueError(f"expected a SONAR model (config.model_type 'sonar'), got {type(model).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = model.config.max_position_embeddings
        self._warned_default_lang = False
        self._lines = SonarLineTokenizer(tokenizer._core) if SonarLineTokenizer is not None else None

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    def get_embedding_dimension(self) -> int:
        return self.model.config.d_model

    def _tag(self, lang: str) -> str:
        if lang in self.tokenizer.langs or sonar_tag is None:
            return lang  # (an unknown tag is the tokenizer's one-line error)
        return sonar_tag(lang, self.tokenizer.langs)

    def preprocess(self, inputs: Sequence, prompt: str | None = None, lang: str | None = None,
                   processing_kwargs: dict | None = None, **kwargs) -> dict[str, Any]:
        """SONAR's ids and attention mask of a batch (`kwargs` such as `task` are not used)."""
        if processing_kwargs:
            raise ValueError(f"processing_kwargs are not used by SONAR (got {processing_kwargs!r:.80}); give the "
                             "language as lang=")
        if lang is not None and not isinstance(lang, str):
            raise TypeError(f"lang must be one language (or 'auto') for the call; {PER_SENTENCE}")
        texts, langs = split_items(inputs, "SONAR")
        if prompt:
            texts = [prompt + text for text in texts]
        langs = [lang if code is None else code for code in langs]
        if any(code is None for code in langs):
            default = self.tokenizer.src_lang
            if not self._warned_default_lang:
                self._warned_default_lang = True
                warnings.warn(f"no lang given to encode(): the sentences are embedded as {default!r} (the "
                              f"tokenizer's src_lang); SONAR's embedding depends on the language tag: pass lang= "
                              f"(one language for the call), or {PER_SENTENCE}", UserWarning,
                              stacklevel=caller_stacklevel())
            langs = [default if code is None else code for code in langs]
        if self._lines is not None:  # hf_laser: names, ISO codes and "auto" as everywhere in hf_laser
            ids = self._lines.encode_lines(texts, lang=langs)
        else:
            ids = [self.tokenizer.encode(text, lang=self._tag(code)) for text, code in zip(texts, langs)]
        ids = [x[:self.max_seq_length] for x in ids]  # SONAR's pipeline cut (already so at the default 514)
        batch = self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = self.model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
        features["token_embeddings"] = out.last_hidden_state
        features["sentence_embedding"] = out.pooler_output
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.model.save_pretrained(output_path)
        self.tokenizer.save_pretrained(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             model_kwargs: dict | None = None, processor_kwargs: dict | None = None,
             config_kwargs: dict | None = None, backend: str = "torch", **kwargs) -> SonarSentenceTransformerModule:
        if backend != "torch":
            raise ValueError(f"the SONAR module runs on the torch backend only, got backend={backend!r}")
        hub = {"subfolder": subfolder, "token": token, "cache_dir": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        model_type = PretrainedConfig.get_config_dict(model_name_or_path, **hub)[0].get("model_type")
        if model_type != "sonar":
            raise ValueError(f"{model_name_or_path} is not a SONAR directory (config.json model_type {model_type!r})")
        model = SonarModel.from_pretrained(model_name_or_path, **hub, **(config_kwargs or {}), **(model_kwargs or {}))
        tokenizer = SonarTokenizer.from_pretrained(model_name_or_path, **hub, **(processor_kwargs or {}))
        return cls(model.eval(), tokenizer)

    def __repr__(self) -> str:
        config = self.model.config
        return (f"SonarSentenceTransformerModule(layers={config.encoder_layers}, d_model={config.d_model}, "
                f"default_lang={self.tokenizer.src_lang!r})")
