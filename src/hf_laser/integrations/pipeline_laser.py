"""The `feature-extraction` pipeline of LASER directories: transformers' `FeatureExtractionPipeline` that takes the
language of the text as a call argument.

Every saved LASER directory ships this file and names it in `config.json` (`custom_pipelines`), so where hf_laser
is not installed::

    from transformers import pipeline
    extract = pipeline("feature-extraction", model="laser-93langs", trust_remote_code=True)
    extract("Bonjour le monde.", lang="fr")              # [[token features ...]]: (1, tokens, dim)
    extract(["Hello.", "Hallo."], lang=["en", "de"])      # one language per sentence

(transformers requires `trust_remote_code=True` for a directory's own pipeline, with or without hf_laser.)
The max over the token features of a sentence is its LASER embedding; `pipeline("laser-sentence-embedding")`
(hf_laser installed) returns that directly.

This file imports nothing from hf_laser: the language is checked by the directory's tokenizer
(`LaserTokenizer.resolve_lang`).
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers.pipelines import FeatureExtractionPipeline


class LaserFeatureExtractionPipeline(FeatureExtractionPipeline):
    """Token-level BiLSTM outputs (`last_hidden_state`) of raw text.

    Call arguments (besides those of `FeatureExtractionPipeline`: `tokenize_kwargs`, `truncation`, `return_tensors`):
        lang (`str` or list of `str`): language of the input for the LASER preprocessing: a code, `"auto"` (detected
            per sentence) or one code per sentence. Default: the tokenizer's default language, with a warning when
            the sentences look like another one.
    """

    # call arguments besides `lang` (and the base Pipeline's num_workers / batch_size)
    _ARGUMENTS = ("tokenize_kwargs", "truncation", "return_tensors")

    def _check_arguments(self, names) -> None:
        # the stock pipeline drops unknown arguments: a misspelt `lang` would go unnoticed
        unknown = sorted(set(names) - set(self._ARGUMENTS) - {"num_workers", "batch_size"})
        if unknown:
            raise TypeError(f"unexpected arguments {unknown}; {type(self).__name__} takes lang, "
                            f"{', '.join(self._ARGUMENTS)}")

    def __call__(self, inputs, *args, lang: str | Sequence[str] | None = None, **kwargs):
        self._check_arguments(kwargs)
        resolve = getattr(self.tokenizer, "resolve_lang", None)
        if resolve is None:
            raise TypeError(f"{type(self).__name__} needs a LASER tokenizer (with resolve_lang), got "
                            f"{type(self.tokenizer).__name__}")
        tokenize_kwargs = dict(kwargs.get("tokenize_kwargs") or {})
        if "lang" in tokenize_kwargs:  # the stock pipeline's way: still accepted
            if lang is not None:
                raise ValueError("lang given twice (as an argument and in tokenize_kwargs)")
            lang = tokenize_kwargs.pop("lang")
            kwargs["tokenize_kwargs"] = tokenize_kwargs
        if lang is None:  # a language given when the pipeline was built
            lang = self._preprocess_params.get("lang")
        if lang is not None and not isinstance(lang, str):
            # one language per sentence: pair them so each item carries its own code through batching
            if not isinstance(inputs, (list, tuple)):
                raise TypeError("a list of languages needs a list of sentences of the same length, got "
                                f"{type(inputs).__name__} sentences")
            langs = resolve(lang, inputs, n_texts=len(inputs))
            return super().__call__([{"text": t, "lang": code} for t, code in zip(inputs, langs)], *args, **kwargs)
        # checked once here (not per sentence): a generator or dataset is not sampled
        sample = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, (list, tuple)) else ()
        return super().__call__(inputs, *args, lang=resolve(lang, sample), **kwargs)

    def _sanitize_parameters(self, lang=None, truncation=None, tokenize_kwargs=None, return_tensors=None, **kwargs):
        self._check_arguments(kwargs)
        preprocess, forward, postprocess = super()._sanitize_parameters(
            truncation=truncation, tokenize_kwargs=tokenize_kwargs, return_tensors=return_tensors)
        if lang is not None:
            preprocess["lang"] = lang
        return preprocess, forward, postprocess

    def preprocess(self, inputs, **tokenize_kwargs):
        if isinstance(inputs, dict):
            tokenize_kwargs = {**tokenize_kwargs, "lang": inputs["lang"]}
            inputs = inputs["text"]
        return super().preprocess(inputs, **tokenize_kwargs)
