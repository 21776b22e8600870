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

from ..modeling.modeling_laser import LaserModel
from ..text.tokenization_laser import LaserTokenizer
from .sentence_transformers_inputs import PER_SENTENCE, LanguageInputModule, caller_stacklevel

# = hf_laser.defaults.DEFAULT_MAX_SENTENCE_TOKENS (not imported: this file also runs as remote code without hf_laser)
DEFAULT_MAX_SEQ_LENGTH = 100_000


class LaserSentenceTransformerModule(LanguageInputModule):
    """A LASER encoder and its tokenizer as one sentence-transformers input module.

    `preprocess` turns sentences into LASER ids (`lang=` one code or `"auto"` for the call; items
    `{"text": ..., "lang": ...}` for one language per sentence, which take precedence); `forward` adds
    `token_embeddings` (the BiLSTM outputs) and `sentence_embedding` (their max-pool, LASER's embedding).
    """

    NAME, MODEL_TYPE = "LASER", "laser"
    model_class, tokenizer_class = LaserModel, LaserTokenizer

    def __init__(self, model: LaserModel, tokenizer: LaserTokenizer):
        super().__init__(model, tokenizer)
        if not callable(getattr(tokenizer, "resolve_lang", None)):
            raise ValueError(f"expected a LASER tokenizer, got {type(tokenizer).__name__}")
        self.max_seq_length: int | None = DEFAULT_MAX_SEQ_LENGTH
        config = model.config
        if getattr(config, "encoder_type", "bilstm") == "transformer":
            # a LASER3 student takes no more (its positions; `<s>` is prepended by the model)
            self.max_seq_length = min(DEFAULT_MAX_SEQ_LENGTH, config.max_positions - int(bool(config.prepend_bos)))

    def get_embedding_dimension(self) -> int:
        return self.model.config.embedding_dim

    def default_lang(self) -> str:
        return self.tokenizer.default_lang

    def default_lang_message(self, default: str) -> str:
        return (f"no lang given to encode(): the sentences are preprocessed as {default!r} (the tokenizer's default "
                f"language); LASER's preprocessing depends on the language: pass lang='xx' (one code for the call, "
                f"or lang='auto' to detect it per sentence), or {PER_SENTENCE}")

    def batch_ids(self, texts: list[str], langs: list[str]) -> list[list[int]]:
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
        return ids

    def __repr__(self) -> str:
        config = self.model.config
        return (f"LaserSentenceTransformerModule(encoder={getattr(config, 'encoder_type', 'bilstm')}, "
                f"layers={config.num_layers}, hidden_size={config.hidden_size}, "
                f"embedding_dim={config.embedding_dim}, tokenizer={self.tokenizer.mode}, "
                f"default_lang={self.tokenizer.default_lang!r})")
