"""What the sentence-transformers modules of LASER and SONAR directories share: an input module of a model and its
tokenizer that takes a language per sentence (`{"text": ..., "lang": ...}` items, or `lang=` for the call), and
warnings attributed to the caller's line. Copied into every directory beside the module that imports it (remote
code), so it imports nothing of hf_laser."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import sentence_transformers
import torch
from sentence_transformers.base.modules import InputModule
from transformers import PretrainedConfig

__all__ = ["PER_SENTENCE", "LanguageInputModule", "caller_stacklevel", "split_items"]

PER_SENTENCE = ("one language per sentence goes with the sentence: encode([{'text': sentence, 'lang': code}, ...]) "
                "(sentence-transformers reorders and batches the inputs, so a list would not stay aligned)")
# frames of these files are skipped when a warning is attributed to the caller's line
_INTERNAL = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                  for path in (__file__, torch.__file__, sentence_transformers.__file__))


def caller_stacklevel() -> int:
    """`stacklevel` for a warning issued by the caller of this function: the first frame outside these modules,
    sentence-transformers and torch."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level


def split_items(inputs: Sequence, model: str) -> tuple[list[str], list[str | None]]:
    """`(texts, langs)` of a batch of sentences (str) or `{"text": ..., "lang": ...}` items (lang None: not given)."""
    texts, langs = [], []
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            texts.append(item)
            langs.append(None)
        elif isinstance(item, dict) and "text" in item and set(item) <= {"text", "lang"}:
            if not isinstance(item["text"], str):
                raise TypeError(f"input {i}: 'text' is {type(item['text']).__name__}, expected str")
            texts.append(item["text"])
            langs.append(item.get("lang"))
        else:
            raise TypeError(f"input {i} is {type(item).__name__} {item!r:.60}: {model} takes a sentence (str) or "
                            "{'text': sentence, 'lang': code}")
    return texts, langs


class LanguageInputModule(InputModule):
    """A model (whose output has `last_hidden_state` and `pooler_output`) and its tokenizer as one
    sentence-transformers input module, with a language per sentence. Subclasses say what the model is (`NAME`,
    `MODEL_TYPE`, `model_class`, `tokenizer_class`), what the default language is and how a batch becomes ids."""

    save_in_root = True
    forward_kwargs = {"lang"}  # lets SentenceTransformer.encode accept lang= (it is used in preprocess)
    NAME = MODEL_TYPE = ""
    model_class = tokenizer_class = None

    def __init__(self, model, tokenizer):
        super().__init__()
        if getattr(getattr(model, "config", None), "model_type", None) != self.MODEL_TYPE:
            raise ValueError(f"expected a {self.NAME} model (config.model_type {self.MODEL_TYPE!r}), got "
                             f"{type(model).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self._warned_default_lang = False

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    def default_lang(self) -> str:
        raise NotImplementedError

    def default_lang_message(self, default: str) -> str:
        raise NotImplementedError

    def batch_ids(self, texts: list[str], langs: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def preprocess(self, inputs: Sequence, prompt: str | None = None, lang: str | None = None,
                   processing_kwargs: dict | None = None, **kwargs) -> dict[str, Any]:
        """Ids and attention mask of a batch. `kwargs` (e.g. `task` from `encode_query`) are not used: queries and
        documents are encoded alike."""
        if processing_kwargs:
            raise ValueError(f"processing_kwargs are not used by {self.NAME} (got {processing_kwargs!r:.80}); give "
                             "the language as lang=")
        if lang is not None and not isinstance(lang, str):
            raise TypeError(f"lang must be one language code (or 'auto') for the call; {PER_SENTENCE}")
        texts, langs = split_items(inputs, self.NAME)
        if prompt:
            texts = [prompt + text for text in texts]
        langs = [lang if code is None else code for code in langs]
        if any(code is None for code in langs):
            default = self.default_lang()
            if not self._warned_default_lang:
                self._warned_default_lang = True
                warnings.warn(self.default_lang_message(default), UserWarning, stacklevel=caller_stacklevel())
            langs = [default if code is None else code for code in langs]
        batch = self.tokenizer.pad({"input_ids": self.batch_ids(texts, langs)}, padding=True, return_tensors="pt")
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
             config_kwargs: dict | None = None, backend: str = "torch", **kwargs):
        """Loads the model (`model_kwargs`, e.g. `{"dtype": torch.bfloat16}`, and `config_kwargs` go to its
        `from_pretrained`) and the tokenizer (`processor_kwargs`, e.g. the default language)."""
        if backend != "torch":
            raise ValueError(f"the {cls.NAME} module runs on the torch backend only, got backend={backend!r}")
        hub = {"subfolder": subfolder, "token": token, "cache_dir": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        model_type = PretrainedConfig.get_config_dict(model_name_or_path, **hub)[0].get("model_type")
        if model_type != cls.MODEL_TYPE:
            raise ValueError(f"{model_name_or_path} is not a {cls.NAME} directory (config.json model_type "
                             f"{model_type!r}, expected {cls.MODEL_TYPE!r})")
        model = cls.model_class.from_pretrained(model_name_or_path, **hub, **(config_kwargs or {}),
                                                **(model_kwargs or {}))
        tokenizer = cls.tokenizer_class.from_pretrained(model_name_or_path, **hub, **(processor_kwargs or {}))
        return cls(model.eval(), tokenizer)
