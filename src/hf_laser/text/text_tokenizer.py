"""The LASER tokenizer without transformers: preprocessing (``.tok``) -> fastBPE (LASER1) or SentencePiece (LASER2)
-> ids, and the streaming helpers around it.

* :class:`LaserTextPipeline` -- text only, no dictionary: raw line -> ``.tok`` line (the preprocessing of
  :mod:`hf_laser.text.preprocessing`) -> subword line (fastBPE ``.bpe`` line for LASER1, SentencePiece pieces joined by
  spaces for LASER2).  This is what ``hf-laser tokenize --bpe-codes/--spm-model`` runs.
* :class:`LaserTextTokenizer` -- the pipeline plus the checkpoint dictionary: lines -> ids (``</s>`` appended, no
  ``<s>``, unknown -> ``<unk>``), exactly the ids LASER's ``SentenceEncoder`` computes from a ``.bpe``/``.spm`` line.
  :class:`~hf_laser.text.tokenization_laser.LaserTokenizer` is the ``transformers`` tokenizer built on it; the command
  line uses this class alone for a plain model directory ([`LaserTextTokenizer.from_directory`]), so that it never
  imports transformers (a third of a command's start-up).
* streaming helpers (:meth:`LaserTextTokenizer.encode_lines`, :meth:`LaserTextPipeline.iter_file`,
  :meth:`LaserTextPipeline.tokenize_file`, which ``hf-laser tokenize`` runs) with an order-preserving
  multiprocessing pool (``num_proc``).

Files read and written use UTF-8 with ``errors="surrogateescape"`` and split lines on ``'\\n'``
only, so a line containing ``\\r``, U+2028, U+0085 ... stays one line (one output line per input
line).
"""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing
import os
import sys
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .bpe import CACHE_MAX_WORD_CHARS, FastBPE, read_codes, read_vocab
from .langid import AUTO, CHECK_SAMPLE, check_default_lang, detect, is_auto
from .nonbreaking_prefixes import register_bundle, registered_bundle
from .preprocessing import LANG_CODE, LaserPreprocessor

VOCAB_FILES_NAMES = {
    "vocab_file": "vocab.json",
    "bpe_codes_file": "bpe.fcodes",
    "bpe_vocab_file": "bpe.fvocab",
    "spm_model_file": "spm.model",
}

STAGES = ("tok", "bpe", "ids")
_WORD_CACHE_SIZE = 500_000  # distinct words whose ids are cached (cleared when full)
_WORD_CACHE_UNITS = 32 << 20  # ... and at most this many characters + ids in it (a bound in bytes, not entries)
_PRETOKENIZED = (False, True, "bpe", "tok")
MAX_CACHED_PREPROCESSORS = 256  # languages whose preprocessor a pipeline keeps (a server meets codes clients make up)
SPIECE_UNDERLINE = "\u2581"


# ---------------------------------------------------------------------------------------- I/O
def read_lines(path_or_file, *, encoding: str = "utf-8") -> Iterator[str]:
    """Yield the lines of a file (or ``"-"`` = stdin) lazily, split on ``'\\n'`` only, without it.

    A final line without ``'\\n'`` is still a line; a file ending in ``'\\n'`` has no extra empty
    line.  Invalid UTF-8 is kept as surrogate escapes.
    """
    if path_or_file == "-" or path_or_file is None:
        fh = io.TextIOWrapper(sys.stdin.buffer, encoding=encoding, errors="surrogateescape", newline="\n")
        close = False
    elif isinstance(path_or_file, (str, os.PathLike)):
        fh = open(path_or_file, encoding=encoding, errors="surrogateescape", newline="\n")
        close = True
    else:
        fh, close = path_or_file, False
    try:
        for line in fh:
            yield line[:-1] if line.endswith("\n") else line
    finally:
        if close:
            fh.close()
        elif path_or_file == "-" or path_or_file is None:
            fh.detach()


def _open_output(path):
    if path == "-" or path is None:
        return io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="surrogateescape", newline="\n"), False
    return open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n"), True


class LaserInputError(TypeError, ValueError):
    """A sentence or language argument of the wrong type or shape (a `TypeError` and a `ValueError`: either
    catches it)."""

def check_texts(texts: Sequence) -> None:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise LaserInputError(f"text at position {i} is {type(t).__name__}, expected str")


_LANG_HELP = "a language code (e.g. 'fr'), 'auto' (detect it per sentence), or a list with one code per sentence"


def check_lang_argument(lang, n_texts: int | None = None):
    """``lang`` as the preprocessing takes it: None, one code (str), or a list of codes (one per text, length
    ``n_texts`` when given).  Anything else raises :class:`LaserInputError` saying what is expected."""
    if lang is None:
        return None
    if isinstance(lang, str):
        if not lang.strip():
            raise LaserInputError(f"lang is an empty string; expected {_LANG_HELP}")
        return _language(lang, "lang")
    if isinstance(lang, (bytes, bytearray, Mapping)) or not isinstance(lang, Iterable):
        raise LaserInputError(f"lang must be {_LANG_HELP}; got {type(lang).__name__} {lang!r:.60}")
    langs = list(lang)
    for i, code in enumerate(langs):
        if not isinstance(code, str) or not code.strip():
            raise LaserInputError(f"lang[{i}] is {code!r:.40} ({type(code).__name__}); expected a language code "
                                  "(str) or 'auto'")
    if n_texts is not None and len(langs) != n_texts:
        raise LaserInputError(f"got {len(langs)} languages for {n_texts} sentences: give one language code per "
                              "sentence, or a single code (or 'auto') for all of them")
    return [_language(code, f"lang[{i}]") for i, code in enumerate(langs)]


def _language(code: str, where: str) -> str:
    """One language by the command line's rule ([`hf_laser.text.languages.check_language`]): `auto` or a code as given, a
    language name as its FLORES-200 code; anything else (`francais`, `fr,en`) is a [`LaserInputError`], never a
    warning and the Moses defaults."""

    if LANG_CODE.match(code) or is_auto(code):
        return code
    if LANG_CODE.match(code.strip()) or is_auto(code.strip()):
        return code.strip()
    try:  # (absolute: remote code, a copy of this file beside a model, finds the names where hf_laser is installed)
        # lazy: optional: its ImportError is handled here
        from hf_laser.text.languages import check_language
    except ImportError:
        raise LaserInputError(f"{where}: {code!r} is not a language code (en, fr, zh, ...; language names need "
                              "hf_laser installed)") from None
    try:
        return check_language(code)
    except ValueError as err:
        raise LaserInputError(f"{where}: {err}") from None


def check_lines_argument(lines) -> None:
    """A batch of sentences: not a str (its characters would be taken for sentences), not a mapping or a set."""
    if isinstance(lines, (str, bytes, bytearray)):
        raise LaserInputError(f"expected a list of sentences, got a single {type(lines).__name__}; wrap it in a list")
    if isinstance(lines, (Mapping, set, frozenset)) or not isinstance(lines, Iterable):
        raise LaserInputError(f"expected a list of sentences (str), got {type(lines).__name__}")


def _check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")


def _check_pretokenized(pretokenized) -> None:
    if pretokenized not in _PRETOKENIZED:
        raise ValueError(f"pretokenized must be False, True/'bpe' or 'tok', got {pretokenized!r}")


# ---------------------------------------------------------------------------------- pipeline
class LaserTextPipeline:
    """Raw text -> ``.tok`` -> subwords, for LASER1 (fastBPE) or LASER2 (SentencePiece).

    Args:
        bpe_codes: fastBPE codes (path, or list of ``(left, right)`` pairs in rank order).
        bpe_vocab: fastBPE vocabulary (path, or ``{token: count}``); LASER always uses one.
        spm_model: SentencePiece model (path, or the serialized model bytes).
        lang: default language for preprocessing.
        laser2_punct_lang: LASER2 only: if set, this language is used for
            ``normalize-punctuation`` whatever ``lang`` is (``"en"`` reproduces stock LASER2, whose
            ``embed.py --spm-lang`` defaults to ``en`` and is never set by ``embed.sh``).

    Exactly one of ``bpe_codes`` / ``spm_model`` must be given.  Objects pickle cheaply (the
    models' contents, not caches), which is how worker processes get them.
    """

    def __init__(
        self,
        *,
        bpe_codes=None,
        bpe_vocab=None,
        spm_model=None,
        lang: str = "en",
        laser2_punct_lang: str | None = None,
    ):
        if (bpe_codes is None) == (spm_model is None):
            raise ValueError("give exactly one of bpe_codes (LASER1) or spm_model (LASER2)")
        if spm_model is None and bpe_vocab is None:
            warnings.warn("fastBPE without a vocabulary: subwords are not restricted to it (LASER uses one)")
        self.lang = lang
        self.laser2_punct_lang = laser2_punct_lang
        self._preprocessors: dict[str, Any] = {}
        if bpe_codes is not None:
            self.mode = "laser1"
            pairs = read_codes(bpe_codes) if isinstance(bpe_codes, (str, os.PathLike)) else list(bpe_codes)
            vocab = read_vocab(bpe_vocab) if isinstance(bpe_vocab, (str, os.PathLike)) else dict(bpe_vocab or {})
            self.bpe: FastBPE | None = FastBPE(pairs, vocab)
            self.spm = None
            self._spm_proto = None
        else:
            try:  # (in a try block: transformers then does not require sentencepiece for remote LASER1 tokenizers)
                # lazy: needed by LASER2 tokenizers only
                import sentencepiece as spm
            except ImportError as err:
                raise ImportError("LASER2 (SentencePiece) tokenization needs sentencepiece: "
                                  "pip install sentencepiece==0.2.1") from err

            self.mode = "laser2"
            if isinstance(spm_model, (bytes, bytearray)):
                proto = bytes(spm_model)
            else:
                with open(spm_model, "rb") as fh:
                    proto = fh.read()
            self._spm_proto = proto
            self.spm = spm.SentencePieceProcessor(model_proto=proto)
            self.bpe = None

    # pickling: contents only
    def __reduce__(self):
        if self.bpe is not None:
            pairs = sorted(self.bpe.codes, key=self.bpe.codes.__getitem__)
            kw = dict(bpe_codes=pairs, bpe_vocab=self.bpe.vocab)
        else:
            kw = dict(spm_model=self._spm_proto)
        # + the prefix files a directory's remote code registered (a flat copy has no data folder)
        return (_rebuild_pipeline, (kw, self.lang, self.laser2_punct_lang, registered_bundle()))

    # ----------------------------------------------------------------- preprocessing
    def preprocessor(self, lang: str | None = None):
        """The (cached) :class:`~hf_laser.text.preprocessing.LaserPreprocessor` for ``lang``."""
        lang = self.lang if lang is None else lang
        if self.mode == "laser2" and self.laser2_punct_lang is not None:
            lang = self.laser2_punct_lang
        pre = self._preprocessors.pop(lang, None)
        if pre is None:
            pre = LaserPreprocessor(lang, mode=self.mode)
            if len(self._preprocessors) >= MAX_CACHED_PREPROCESSORS:  # the least recently used goes
                del self._preprocessors[next(iter(self._preprocessors))]
        self._preprocessors[lang] = pre  # (last: the most recently used)
        return pre

    def preprocess(self, lines: Sequence[str], lang: str | Sequence[str] | None = None) -> list[str]:
        """Raw lines -> ``.tok`` lines; ``lang`` one code, ``"auto"`` (detected per line, see
        :mod:`hf_laser.text.langid`) or one per line (which may be ``"auto"`` too)."""
        check_lines_argument(lines)
        lines = list(lines)
        check_texts(lines)
        lang = self.lang if lang is None else check_lang_argument(lang, len(lines))
        if isinstance(lang, str) and not is_auto(lang):
            return list(self.preprocessor(lang).batch(lines)) if lines else []
        langs = [AUTO] * len(lines) if isinstance(lang, str) else list(lang)
        auto = [i for i, lg in enumerate(langs) if is_auto(lg)]
        if auto:
            fallback = self.lang if isinstance(self.lang, str) and not is_auto(self.lang) else "en"
            for i, code in zip(auto, detect([lines[i] for i in auto], default=fallback)):
                langs[i] = code
        out: list[str] = [""] * len(lines)
        groups: dict[str, list[int]] = {}
        for i, lg in enumerate(langs):
            groups.setdefault(lg, []).append(i)
        for lg, idx in groups.items():
            res = self.preprocessor(lg).batch([lines[i] for i in idx])
            for i, r in zip(idx, res):
                out[i] = r
        return out

    # ----------------------------------------------------------------- subwords
    def subword_line(self, tok_line: str) -> str:
        """One ``.tok`` line -> ``.bpe`` line (fastBPE file mode) or ``.spm`` line."""
        if self.bpe is not None:
            return self.bpe.apply(tok_line)
        return " ".join(self.spm.encode(tok_line, out_type=str))

    def subword_lines(self, tok_lines: Sequence[str]) -> list[str]:
        if self.bpe is not None:
            return self.bpe.apply_lines(tok_lines)
        tok_lines = list(tok_lines)
        if not tok_lines:
            return []
        return [" ".join(p) for p in self.spm.encode(tok_lines, out_type=str, num_threads=1)]

    def subword_tokens(self, tok_lines: Sequence[str]) -> list[list[str]]:
        """``.tok`` lines -> the tokens LASER's encoder sees (``subword_line(l).split()``)."""
        if self.bpe is not None:
            aw = self.bpe.apply_word
            cache = self.bpe._cache
            out = []
            for line in tok_lines:
                toks: list[str] = []
                for w in line.replace("\n", " ").split(" "):
                    if w:
                        r = cache.get(w)
                        toks.extend((r if r is not None else aw(w)).split())
                out.append(toks)
            return out
        tok_lines = list(tok_lines)
        if not tok_lines:
            return []
        # pieces never contain a space; joining and splitting on whitespace mirrors the
        # original encoder reading the .spm file exactly
        return [" ".join(p).split() for p in self.spm.encode(tok_lines, out_type=str, num_threads=1)]

    def process(
        self,
        lines: Sequence[str],
        lang: str | Sequence[str] | None = None,
        *,
        stage: str = "bpe",
        pretokenized: bool | str = False,
    ) -> list[str]:
        """Lines -> ``.tok`` (``stage="tok"``) or subword lines (``stage="bpe"``).

        ``pretokenized="tok"``: the input already is ``.tok`` text (preprocessing skipped).
        """
        if stage not in ("tok", "bpe"):
            raise ValueError(f"stage must be 'tok' or 'bpe' for text output, got {stage!r}")
        _check_pretokenized(pretokenized)
        lines = list(lines)
        check_texts(lines)
        if pretokenized in (True, "bpe"):
            return lines
        tok = lines if pretokenized == "tok" else self.preprocess(lines, lang)
        return tok if stage == "tok" else self.subword_lines(tok)

    def iter_file(
        self,
        path,
        lang: str | None = None,
        *,
        stage: str = "bpe",
        pretokenized: bool | str = False,
        num_proc: int = 1,
        chunk_size: int = 2000,
    ) -> Iterator[str]:
        """Stream a file (or ``"-"``) -> one output line (without ``'\\n'``) per input line."""
        yield from _iter_chunked(self, read_lines(path), lang, stage, pretokenized, num_proc, chunk_size)

    def tokenize_file(self, in_path, out_path, lang=None, **kwargs) -> int:
        """:meth:`iter_file` written to ``out_path`` (``"-"`` = stdout); returns the line count."""
        out, close = _open_output(out_path)
        n = 0
        try:
            for line in self.iter_file(in_path, lang, **kwargs):
                out.write(line)
                out.write("\n")
                n += 1
        finally:
            if close:
                out.close()
            else:
                out.flush()
                out.detach()
        return n


def _rebuild_pipeline(kw, lang, laser2_punct_lang, prefix_bundle=None):
    if prefix_bundle is not None:
        register_bundle(prefix_bundle)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LaserTextPipeline(**kw, lang=lang, laser2_punct_lang=laser2_punct_lang)


# ------------------------------------------------------------------------------- ids encoder
class _IdsEncoder:
    """Pipeline + dictionary -> ids, with a per-word id cache (LASER1).  Picklable."""

    def __init__(self, pipeline: LaserTextPipeline, vocab: dict[str, int], unk_id: int, eos_id: int):
        self.pipeline = pipeline
        self.vocab = vocab
        self.unk_id = unk_id
        self.eos_id = eos_id
        self._word_ids: dict[str, tuple[int, ...]] = {}
        self._word_ids_size = 0  # characters of the keys + ids of the values: bounded by _WORD_CACHE_UNITS

    def __reduce__(self):
        return (_IdsEncoder, (self.pipeline, self.vocab, self.unk_id, self.eos_id))

    def tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        get = self.vocab.get
        unk = self.unk_id
        return [get(t, unk) for t in tokens]

    def _tok_to_ids_bpe(self, tok_lines: Sequence[str]) -> list[list[int]]:
        bpe = self.pipeline.bpe
        cache = self._word_ids
        get = self.vocab.get
        unk = self.unk_id
        out = []
        for line in tok_lines:
            ids: list[int] = []
            for w in (line.replace("\n", " ") if "\n" in line else line).split(" "):
                if w:
                    r = cache.get(w)
                    if r is None:
                        r = tuple(get(t, unk) for t in bpe.bpe_word(w).split())
                        if len(w) <= CACHE_MAX_WORD_CHARS:  # (a long word costs more to keep than to redo)
                            if len(cache) >= _WORD_CACHE_SIZE or self._word_ids_size > _WORD_CACHE_UNITS:
                                cache.clear()
                                self._word_ids_size = 0
                            cache[w] = r
                            self._word_ids_size += len(w) + len(r)
                    ids.extend(r)
            out.append(ids)
        return out

    def encode(
        self,
        lines: Sequence[str],
        lang: str | Sequence[str] | None = None,
        *,
        pretokenized: bool | str = False,
        add_eos: bool = True,
    ) -> list[list[int]]:
        _check_pretokenized(pretokenized)
        lines = list(lines)
        check_texts(lines)
        if pretokenized in (True, "bpe"):
            res = [self.tokens_to_ids(line.split()) for line in lines]
        else:
            tok = lines if pretokenized == "tok" else self.pipeline.preprocess(lines, lang)
            if self.pipeline.bpe is not None:
                res = self._tok_to_ids_bpe(tok)
            else:
                res = [self.tokens_to_ids(t) for t in self.pipeline.subword_tokens(tok)]
        if add_eos:
            eos = self.eos_id
            for r in res:
                r.append(eos)
        return res

    def process(self, lines, lang=None, *, stage="ids", pretokenized=False):
        if stage == "ids":
            return self.encode(lines, lang, pretokenized=pretokenized)
        return self.pipeline.process(lines, lang, stage=stage, pretokenized=pretokenized)


# ------------------------------------------------------------------------ multiprocessing
_WORKER: Any = None


def _worker_init(obj) -> None:
    global _WORKER
    _WORKER = obj


def _worker_run(args):
    lines, lang, stage, pretokenized = args
    return _WORKER.process(lines, lang, stage=stage, pretokenized=pretokenized)


def _mp_context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _chunks(lines: Iterable[str], lang, chunk_size: int):
    """Yield (lines_chunk, lang_chunk); ``lang`` is a str/None or an iterable aligned with lines."""
    it = iter(lines)
    per_line = lang is not None and not isinstance(lang, str)
    lit = iter(lang) if per_line else None
    n = 0
    while True:
        chunk = list(itertools.islice(it, chunk_size))
        if not chunk:
            if per_line and next(lit, None) is not None:
                raise LaserInputError(f"more languages than sentences: {n} sentences but more than {n} languages")
            return
        n += len(chunk)
        if per_line:
            lchunk = list(itertools.islice(lit, len(chunk)))
            if len(lchunk) != len(chunk):
                raise LaserInputError(f"fewer languages than sentences: {n - len(chunk) + len(lchunk)} languages "
                                      f"for {n} or more sentences")
            yield chunk, lchunk
        else:
            yield chunk, lang


def _iter_chunked(worker_obj, lines, lang, stage, pretokenized, num_proc, chunk_size):
    """Order-preserving, memory-bounded map of ``worker_obj.process`` over chunks of ``lines``."""
    _check_stage(stage)
    _check_pretokenized(pretokenized)
    chunk_size = max(1, int(chunk_size))
    num_proc = 1 if num_proc is None else int(num_proc)
    if num_proc <= 0:
        num_proc = os.cpu_count() or 1
    chunks = _chunks(lines, lang, chunk_size)
    if num_proc == 1:
        for chunk, lchunk in chunks:
            yield from worker_obj.process(chunk, lchunk, stage=stage, pretokenized=pretokenized)
        return
    # Peek: small inputs are not worth a pool.
    first = next(chunks, None)
    if first is None:
        return
    second = next(chunks, None)
    if second is None:
        yield from worker_obj.process(first[0], first[1], stage=stage, pretokenized=pretokenized)
        return
    chunks = itertools.chain([first, second], chunks)
    ctx = _mp_context()
    with ctx.Pool(num_proc, initializer=_worker_init, initargs=(worker_obj,)) as pool:
        pending: deque = deque()
        max_pending = 2 * num_proc
        for chunk, lchunk in chunks:
            pending.append(pool.apply_async(_worker_run, ((chunk, lchunk, stage, pretokenized),)))
            if len(pending) >= max_pending:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


# ------------------------------------------------------------------------------ tokenizer
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
# tokenizer_config.json keys that do not change the ids of `encode_lines` (padding, truncation, decoding, bookkeeping)
_INERT_TOKENIZER_CONFIG_KEYS = {"auto_map", "backend", "clean_up_tokenization_spaces", "is_local", "local_files_only",
                                "model_input_names", "model_max_length", "padding_side", "truncation_side"}


class LaserTextTokenizer:
    """The LASER dictionary plus its text pipeline: lines -> ids, without transformers.

    Args: those of :class:`~hf_laser.text.tokenization_laser.LaserTokenizer` (the transformers tokenizer built on this
    class, which adds ``tokenizer(texts, ...)``, padding, tensors and ``save_pretrained``):
        vocab_file: JSON ``{token: id}`` -- the checkpoint's ``dictionary``.
        bpe_codes_file, bpe_vocab_file / spm_model_file: LASER1 fastBPE files / LASER2 SentencePiece model.
        lang: default language (a code or ``"auto"``); laser2_punct_lang: see :class:`LaserTextPipeline`.
        mode: optional ``"laser1"``/``"laser2"``, checked against the files given.
    """

    # model identities (`hf_laser.outputs.tokenizer_sha256`) name this, so both classes give the same identity
    identity_name = "LaserTokenizer"

    def __init__(self, vocab_file, bpe_codes_file=None, bpe_vocab_file=None, spm_model_file=None, lang: str = "en",
                 laser2_punct_lang: str | None = None, mode: str | None = None, **special_tokens):
        unknown = set(special_tokens) - set(SPECIAL_TOKENS)
        if unknown:
            raise TypeError(f"unexpected arguments: {', '.join(sorted(unknown))}")
        self._load_files(vocab_file, bpe_codes_file, bpe_vocab_file, spm_model_file, lang, laser2_punct_lang, mode,
                         {**SPECIAL_TOKENS, **special_tokens})

    def _load_files(self, vocab_file, bpe_codes_file, bpe_vocab_file, spm_model_file, lang, laser2_punct_lang, mode,
                    special_tokens: dict) -> None:
        if vocab_file is None:
            raise ValueError("vocab_file (the checkpoint dictionary as JSON) is required")
        with open(vocab_file, encoding="utf-8", errors="surrogateescape") as fh:
            vocab = json.load(fh)
        if not isinstance(vocab, dict):
            raise ValueError(f"{vocab_file}: expected a JSON object token -> id")
        self.encoder: dict[str, int] = {str(k): int(v) for k, v in vocab.items()}
        self.decoder: dict[int, str] = {v: k for k, v in self.encoder.items()}
        for name in SPECIAL_TOKENS:
            if str(special_tokens[name]) not in self.encoder:
                raise ValueError(f"{name[:-6]} token {str(special_tokens[name])!r} is not in the dictionary "
                                 "(vocab_file)")

        if (bpe_codes_file is None) == (spm_model_file is None):
            raise ValueError("give exactly one of bpe_codes_file (LASER1) or spm_model_file (LASER2)")
        derived = "laser1" if bpe_codes_file is not None else "laser2"
        if mode is not None and mode != derived:
            raise ValueError(f"mode={mode!r} but the files given are for {derived}")
        if bpe_codes_file is not None and bpe_vocab_file is None:
            raise ValueError("bpe_vocab_file is required with bpe_codes_file (LASER always restricts BPE to it)")
        self.mode = derived
        self.lang = lang
        self.laser2_punct_lang = laser2_punct_lang
        # raw file contents, for save_vocabulary (the source files may be temporary) and the tokenizer's identity
        self._files: dict[str, bytes] = {}
        for key, path in (("bpe_codes_file", bpe_codes_file), ("bpe_vocab_file", bpe_vocab_file),
                          ("spm_model_file", spm_model_file)):
            if path is not None:
                with open(path, "rb") as fh:
                    self._files[key] = fh.read()
        if derived == "laser1":
            pipeline = LaserTextPipeline(bpe_codes=bpe_codes_file, bpe_vocab=bpe_vocab_file, lang=lang,
                                         laser2_punct_lang=laser2_punct_lang)
        else:
            pipeline = LaserTextPipeline(spm_model=self._files["spm_model_file"], lang=lang,
                                         laser2_punct_lang=laser2_punct_lang)
        self._core = _IdsEncoder(pipeline, self.encoder, self.encoder[str(special_tokens["unk_token"])],
                                 self.encoder[str(special_tokens["eos_token"])])

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> LaserTextTokenizer | None:
        """The tokenizer of a local directory written by ``LaserTokenizer.save_pretrained``, or None when the
        directory is anything but the plain case (its ``tokenizer_config.json`` names ``LaserTokenizer``, the four
        LASER special tokens at their dictionary ids and nothing else, and settings that do not change the ids):
        None means "load it with ``LaserTokenizer.from_pretrained``", which also explains what is wrong."""
        path = os.fspath(path)
        try:
            with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as fh:
                config = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(config, dict) or config.get("tokenizer_class") != "LaserTokenizer":
            return None
        files = {key: os.path.join(path, name) for key, name in VOCAB_FILES_NAMES.items()
                 if os.path.isfile(os.path.join(path, name))}
        added = config.get("added_tokens_decoder", {})
        kwargs = {k: v for k, v in config.items()
                  if k not in _INERT_TOKENIZER_CONFIG_KEYS | {"tokenizer_class", "added_tokens_decoder"}}
        if (set(kwargs) - {"lang", "laser2_punct_lang", "mode", *SPECIAL_TOKENS}
                or any(kwargs.get(name, token) != token for name, token in SPECIAL_TOKENS.items())
                or not isinstance(added, dict)
                or Counter(token.get("content") if isinstance(token, dict) else None for token in added.values())
                != Counter(SPECIAL_TOKENS.values())
                or "vocab_file" not in files):
            return None
        for name in SPECIAL_TOKENS:
            kwargs.pop(name, None)
        try:
            tokenizer = cls(files.pop("vocab_file"), **files, **kwargs)
        except (OSError, ValueError, TypeError):
            return None
        # the added tokens must sit at their dictionary ids, or LaserTokenizer's lookups would differ
        if any(not str(index).isdigit() or tokenizer.encoder.get(token["content"]) != int(index)
               for index, token in added.items()):
            return None
        return tokenizer

    # ------------------------------------------------------------------ vocab basics
    @property
    def vocab_size(self) -> int:
        return len(self.encoder)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    @property
    def pipeline(self) -> LaserTextPipeline:
        return self._core.pipeline

    # ------------------------------------------------------------------ language
    @property
    def default_lang(self) -> str:
        """The language used when a call gives none: the configured ``lang`` (``tokenizer_config.json``), else
        ``"en"``."""
        return self.lang if isinstance(self.lang, str) and self.lang.strip() else "en"

    def resolve_lang(self, lang, texts: Sequence[str] = (), *, pretokenized: bool | str = False,
                     n_texts: int | None = None):
        """``lang`` checked (:func:`check_lang_argument`); for ``lang=None`` the :attr:`default_lang`, after checking
        (a sample of at most 100 of) ``texts`` against it: a ``UserWarning`` at the caller's line says so when
        most of them are in another language (see :func:`hf_laser.text.langid.check_default_lang`).  An explicit
        ``lang`` never warns; neither does pre-tokenized input (no preprocessing)."""
        if lang is not None:
            return check_lang_argument(lang, n_texts)
        used = self.default_lang
        if pretokenized is False and not is_auto(used) and texts:
            check_default_lang(texts, used)
        return used

    # ------------------------------------------------------------------ text -> tokens -> ids
    def preprocess(self, texts: str | Sequence[str], lang: str | Sequence[str] | None = None):
        """Raw text -> ``.tok`` text (a str for a str, a list for a list)."""
        if isinstance(texts, str):
            return self.pipeline.preprocess([texts], self.resolve_lang(lang, [texts], n_texts=1))[0]
        check_lines_argument(texts)
        texts = list(texts)
        return self.pipeline.preprocess(texts, self.resolve_lang(lang, texts, n_texts=len(texts)))

    def encode_lines(
        self,
        lines: Iterable[str],
        lang: str | Sequence[str] | None = None,
        *,
        pretokenized: bool | str = False,
        num_proc: int = 1,
        chunk_size: int = 2000,
    ) -> list[list[int]]:
        """Lines -> lists of ids (``</s>`` appended), order preserved; ``num_proc > 1`` uses a pool.

        ``lang``: one code, ``"auto"`` (detected per line), or one code per line; None: :attr:`default_lang`,
        with a warning when the lines look like another language (see :meth:`resolve_lang`)."""
        check_lines_argument(lines)
        if lang is None:
            if isinstance(lines, Sequence):
                sample = lines
            else:  # an iterator: its first lines are the sample
                it = iter(lines)
                sample = list(itertools.islice(it, CHECK_SAMPLE))
                lines = itertools.chain(sample, it)
            lang = self.resolve_lang(None, sample, pretokenized=pretokenized)
        elif not isinstance(lang, str):
            lines = list(lines)
            lang = check_lang_argument(lang, len(lines))
        else:
            lang = check_lang_argument(lang)
        return list(_iter_chunked(self._core, lines, lang, "ids", pretokenized, num_proc, chunk_size))

    def iter_tokenize_file(
        self,
        path,
        lang: str | None = None,
        *,
        stage: str = "bpe",
        pretokenized: bool | str = False,
        num_proc: int = 1,
        chunk_size: int = 2000,
    ) -> Iterator:
        """Stream a file: one item per input line (split on ``'\\n'`` only).

        ``stage="tok"``/``"bpe"`` yield strings (``.tok`` / ``.bpe`` or ``.spm`` lines),
        ``stage="ids"`` yields lists of ids with ``</s>``.  ``lang=None``: as :meth:`encode_lines` (the first
        100 lines are checked).
        """
        lines = read_lines(path)
        if lang is None:
            head = list(itertools.islice(lines, CHECK_SAMPLE))
            lang = self.resolve_lang(None, head, pretokenized=pretokenized)
            lines = itertools.chain(head, lines)
        else:
            lang = check_lang_argument(lang)
        yield from _iter_chunked(self._core, lines, lang, stage, pretokenized, num_proc, chunk_size)
