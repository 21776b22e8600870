"""A `transformers` pipeline that returns one LASER sentence embedding per input sentence.

After `import hf_laser`::

    from transformers import pipeline
    embed = pipeline("laser-sentence-embedding")             # the shipped laser-mini; or model="laser-93langs"
    embed("Bonjour le monde.", lang="fr")                   # list of 1024 floats
    embed(["Hello.", "Hallo."], lang=["en", "de"], normalize=True)
    embed(["Hello.", "我们明天去北京吧。"], lang="auto")      # language detected per sentence

Without `lang`, the tokenizer's default language (`en` unless the model directory configures another) is used and
a `UserWarning` says so when the sentences look like another language.

`pipeline("feature-extraction", model=..., tokenizer=...)` works as well and returns the token-level BiLSTM outputs
(`last_hidden_state`).

A model set (LASER2 + LASER3 students, `hf_laser.model_set`) is several models, which one transformers pipeline does
not hold: `laser_pipeline(SET_DIR)` gives a [`RoutedLaserPipeline`], the same call with each sentence embedded by the
pipeline of its language's model (`laser_pipeline(model_dir)` is `pipeline("laser-sentence-embedding", model_dir)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import Pipeline, pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from ..model_set import RoutedLaserEncoder
from ..modeling.modeling_laser import LaserModel
from ..modeling.modeling_sonar import SonarModel
from ..models import DEFAULT_MODEL, resolve
from ..text.sonar_languages import SonarLineTokenizer, is_sonar_directory
from ..text.text_tokenizer import LaserInputError, check_lang_argument, check_texts
from ..text.tokenization_sonar import SonarTokenizer

TASK = "laser-sentence-embedding"


class LaserSentenceEmbeddingPipeline(Pipeline):
    """Sentence embeddings (the max-pooled BiLSTM outputs, `pooler_output`) for raw text.

    Call arguments:
        lang (`str` or list of `str`): language of the input for the LASER preprocessing: a code, `"auto"` (detected
            per sentence) or one code per sentence. Default: the tokenizer's default language, with a warning when
            the sentences look like another one.
        normalize (`bool`): L2-normalise the embeddings.
        return_tensors (`bool`): return a `torch.Tensor` of shape `(dim,)` per sentence instead of a list of floats.
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    load_tokenizer = True

    def __call__(self, inputs: str | Sequence[str], lang: str | Sequence[str] | None = None, **kwargs):
        if isinstance(inputs, (list, tuple)):
            check_texts(inputs)
        if lang is not None and not isinstance(lang, str):
            # one language per sentence: pair them so each item carries its own code through batching
            if not isinstance(inputs, (list, tuple)):
                raise LaserInputError("a list of languages needs a list of sentences of the same length, got "
                                      f"{type(inputs).__name__} sentences")
            try:
                lang = check_lang_argument(lang, len(inputs))
            except LaserInputError as err:
                raise LaserInputError(f"{err} (a list of languages needs a list of sentences of the same length)") \
                    from None
            return super().__call__([{"text": t, "lang": code} for t, code in zip(inputs, lang)], **kwargs)
        resolve = getattr(self.tokenizer, "resolve_lang", None)
        if resolve is not None:
            sample = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, (list, tuple)) else ()
            # a generator or dataset is not sampled: the default language is used without a check
            lang = resolve(lang, sample)
        return super().__call__(inputs, lang=lang, **kwargs)

    def _sanitize_parameters(self, lang=None, normalize=None, return_tensors=None, **kwargs):
        preprocess = {"lang": lang} if lang is not None else {}
        postprocess = {}
        if normalize is not None:
            postprocess["normalize"] = normalize
        if return_tensors is not None:
            postprocess["return_tensors"] = return_tensors
        return preprocess, {}, postprocess

    def preprocess(self, inputs, lang=None) -> dict[str, torch.Tensor]:
        if isinstance(inputs, dict):
            inputs, lang = inputs["text"], inputs["lang"]
        if not isinstance(inputs, str):
            raise TypeError(f"expected a sentence (str), got {type(inputs).__name__}")
        if getattr(self.model.config, "model_type", None) == "sonar":
            # SONAR: its ids begin with the language's tag; names, ISO codes and "auto" as everywhere in hf_laser
            if getattr(self, "_sonar_lines", None) is None:
                self._sonar_lines = SonarLineTokenizer(self.tokenizer._core)
            ids = torch.tensor([self._sonar_lines.encode_lines([inputs], lang=lang)[0]])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        kwargs = {"lang": lang} if lang is not None else {}
        return self.tokenizer(inputs, return_tensors="pt", **kwargs)

    def _forward(self, model_inputs):
        return self.model(input_ids=model_inputs["input_ids"], attention_mask=model_inputs["attention_mask"])

    def postprocess(self, model_outputs, normalize: bool = False, return_tensors: bool = False):
        embedding = model_outputs.pooler_output[0].float()
        if normalize:
            embedding = torch.nn.functional.normalize(embedding, dim=-1)
        return embedding if return_tensors else embedding.tolist()


class RoutedLaserPipeline:
    """`laser-sentence-embedding` pipelines of a model set's members, called as one: `lang` (required: one code for
    all inputs or one per input) chooses each input's model as `RoutedLaserEncoder` does; the results come back in
    input order. Members' pipelines are built on first use with `pipeline_kwargs`."""

    def __init__(self, model_set, **pipeline_kwargs):
        self.routing = model_set if isinstance(model_set, RoutedLaserEncoder) else \
            RoutedLaserEncoder.from_pretrained(model_set, load=None)
        self._kwargs = pipeline_kwargs
        self._pipelines: dict[str, Pipeline] = {}

    def member_pipeline(self, key: str) -> Pipeline:
        if key not in self._pipelines:
            self._pipelines[key] = pipeline(TASK, model=str(self.routing.members()[key]), **self._kwargs)
        return self._pipelines[key]

    def __call__(self, inputs: str | Sequence[str], lang: str | Sequence[str] | None = None, **kwargs):
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        out: list = [None] * len(texts)
        for key, (rows, langs) in self.routing._groups(len(texts), lang).items():
            results = self.member_pipeline(key)([texts[i] for i in rows], lang=langs, **kwargs)
            for i, result in zip(rows, results):
                out[i] = result
        return out[0] if single else out


def laser_pipeline(model=None, **kwargs):
    """`pipeline("laser-sentence-embedding", model)` for a model directory, a [`RoutedLaserPipeline`] for a model
    set (a directory with `laser_model_set.json`, or a list of directories)."""
    if model is None:
        return pipeline(TASK, **kwargs)  # transformers says that it defaulted to the shipped model
    resolved = resolve(model, who="laser_pipeline")
    if resolved.is_set:
        return RoutedLaserPipeline(resolved.location, **kwargs)
    if is_sonar_directory(resolved.location):  # the task's model class is LaserModel: SONAR's are given
        return pipeline(TASK, model=SonarModel.from_pretrained(resolved.location),
                        tokenizer=SonarTokenizer.from_pretrained(resolved.location), **kwargs)
    return pipeline(TASK, model=str(resolved.location), **kwargs)


PIPELINE_REGISTRY.register_pipeline(
    TASK, pipeline_class=LaserSentenceEmbeddingPipeline, pt_model=LaserModel, type="text",
    default={"model": (DEFAULT_MODEL, None)},  # transformers warns that it defaulted to this model
)
