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

from ..modeling.modeling_sonar import SonarModel
from ..text.tokenization_sonar import SonarTokenizer
from .sentence_transformers_inputs import PER_SENTENCE, LanguageInputModule

try:  # language names and lang="auto" where hf_laser is installed; SONAR's tags alone where it is not
    from hf_laser.text.sonar_languages import SonarLineTokenizer, sonar_tag
except ImportError:
    SonarLineTokenizer = sonar_tag = None


class SonarSentenceTransformerModule(LanguageInputModule):
    """SONAR's text encoder and tokenizer as one sentence-transformers input module: `preprocess` turns sentences
    into SONAR's ids (`lang=` for the call, or `{"text", "lang"}` items); `forward` adds `token_embeddings` and
    `sentence_embedding` (the mean over every real token, SONAR's embedding)."""

    NAME, MODEL_TYPE = "SONAR", "sonar"
    model_class, tokenizer_class = SonarModel, SonarTokenizer

    def __init__(self, model: SonarModel, tokenizer: SonarTokenizer):
        super().__init__(model, tokenizer)
        self.max_seq_length = model.config.max_position_embeddings
        self._lines = SonarLineTokenizer(tokenizer._core) if SonarLineTokenizer is not None else None

    def get_embedding_dimension(self) -> int:
        return self.model.config.d_model

    def default_lang(self) -> str:
        return self.tokenizer.src_lang

    def default_lang_message(self, default: str) -> str:
        return (f"no lang given to encode(): the sentences are embedded as {default!r} (the tokenizer's src_lang); "
                f"SONAR's embedding depends on the language tag: pass lang= (one language for the call), or "
                f"{PER_SENTENCE}")

    def _tag(self, lang: str) -> str:
        if lang in self.tokenizer.langs or sonar_tag is None:
            return lang  # (an unknown tag is the tokenizer's one-line error)
        return sonar_tag(lang, self.tokenizer.langs)

    def batch_ids(self, texts: list[str], langs: list[str]) -> list[list[int]]:
        if self._lines is not None:  # hf_laser: names, ISO codes and "auto" as everywhere in hf_laser
            ids = self._lines.encode_lines(texts, lang=langs)
        else:
            ids = [self.tokenizer.encode(text, lang=self._tag(code)) for text, code in zip(texts, langs)]
        return [x[:self.max_seq_length] for x in ids]  # SONAR's pipeline cut (already so at the default 514)

    def __repr__(self) -> str:
        config = self.model.config
        return (f"SonarSentenceTransformerModule(layers={config.encoder_layers}, d_model={config.d_model}, "
                f"default_lang={self.tokenizer.src_lang!r})")
