"""LASER tokenizer: preprocessing (``.tok``) -> fastBPE (LASER1) or SentencePiece (LASER2) -> ids.

Three layers, each usable on its own:

* :class:`LaserTextPipeline` -- text only, no dictionary: raw line -> ``.tok`` line (the
  preprocessing of :mod:`hf_laser.preprocessing`) -> subword line (fastBPE ``.bpe`` line for
  LASER1, SentencePiece pieces joined by spaces for LASER2).  This is what
  ``hf-laser tokenize --bpe-codes/--spm-model`` runs.
* :class:`LaserTokenizer` -- the ``transformers`` tokenizer around it, with the checkpoint
  dictionary: ``tokenizer(texts, lang="fr", padding=True, return_tensors="pt")`` gives
  ``input_ids`` (``</s>`` appended, no ``<s>``, unknown -> ``<unk>``) and ``attention_mask``
  for :class:`~hf_laser.modeling_laser.LaserModel`, exactly the ids LASER's ``SentenceEncoder``
  computes from a ``.bpe``/``.spm`` line (``line.strip().split()`` looked up in the dictionary).
* streaming helpers (:meth:`LaserTokenizer.encode_lines`, :meth:`LaserTextPipeline.iter_file`,
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
import shutil
import sys
import tempfile
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import BatchEncoding, PaddingStrategy, TruncationStrategy

from .bpe import FastBPE, read_codes, read_vocab
from .integration_files import write_integration_files
from .langid import AUTO, CHECK_SAMPLE, is_auto

__all__ = [
    "LaserTextPipeline",
    "LaserTokenizer",
    "LaserInputError",
    "VOCAB_FILES_NAMES",
    "read_lines",
]

VOCAB_FILES_NAMES = {
    "vocab_file": "vocab.json",
    "bpe_codes_file": "bpe.fcodes",
    "bpe_vocab_file": "bpe.fvocab",
    "spm_model_file": "spm.model",
}

STAGES = ("tok", "bpe", "ids")
_WORD_CACHE_SIZE = 500_000  # distinct words whose ids are cached (cleared when full)
_PRETOKENIZED = (False, True, "bpe", "tok")
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


def _check_texts(texts: Sequence) -> None:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise LaserInputError(f"text at position {i} is {type(t).__name__}, expected str")


_LANG_HELP = "a language code (e.g. 'fr'), 'auto' (detect it per sentence), or a list with one code per sentence"


def _check_lang(lang, n_texts: int | None = None):
    """``lang`` as the preprocessing takes it: None, one code (str), or a list of codes (one per text, length
    ``n_texts`` when given).  Anything else raises :class:`LaserInputError` saying what is expected."""
    if lang is None:
        return None
    if isinstance(lang, str):
        if not lang.strip():
            raise LaserInputError(f"lang is an empty string; expected {_LANG_HELP}")
        return lang
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
    return langs


def _check_lines_arg(lines) -> None:
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
        return (_rebuild_pipeline, (kw, self.lang, self.laser2_punct_lang))

    # ----------------------------------------------------------------- preprocessing
    def preprocessor(self, lang: str | None = None):
        """The (cached) :class:`~hf_laser.preprocessing.LaserPreprocessor` for ``lang``."""
        lang = self.lang if lang is None else lang
        if self.mode == "laser2" and self.laser2_punct_lang is not None:
            lang = self.laser2_punct_lang
        pre = self._preprocessors.get(lang)
        if pre is None:
            from .preprocessing import LaserPreprocessor

            pre = LaserPreprocessor(lang, mode=self.mode)
            self._preprocessors[lang] = pre
        return pre

    def preprocess(self, lines: Sequence[str], lang: str | Sequence[str] | None = None) -> list[str]:
        """Raw lines -> ``.tok`` lines; ``lang`` one code, ``"auto"`` (detected per line, see
        :mod:`hf_laser.langid`) or one per line (which may be ``"auto"`` too)."""
        _check_lines_arg(lines)
        lines = list(lines)
        _check_texts(lines)
        lang = self.lang if lang is None else _check_lang(lang, len(lines))
        if isinstance(lang, str) and not is_auto(lang):
            return list(self.preprocessor(lang).batch(lines)) if lines else []
        langs = [AUTO] * len(lines) if isinstance(lang, str) else list(lang)
        auto = [i for i, lg in enumerate(langs) if is_auto(lg)]
        if auto:
            from .langid import detect

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
        _check_texts(lines)
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


def _rebuild_pipeline(kw, lang, laser2_punct_lang):
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
                        if len(cache) >= _WORD_CACHE_SIZE:
                            cache.clear()
                        cache[w] = r
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
        _check_texts(lines)
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
class LaserTokenizer(PreTrainedTokenizer):
    """LASER tokenizer (LASER1: Moses preprocessing + fastBPE; LASER2: light preprocessing + SPM).

    Args:
        vocab_file: JSON ``{token: id}`` -- the checkpoint's ``dictionary`` (``<s>`` 0, ``<pad>`` 1,
            ``</s>`` 2, ``<unk>`` 3, then the subwords).
        bpe_codes_file, bpe_vocab_file: fastBPE codes and vocabulary (LASER1, ``*.fcodes`` /
            ``*.fvocab``).
        spm_model_file: SentencePiece model (LASER2, ``laser2.spm``).  Exactly one of
            ``bpe_codes_file`` / ``spm_model_file``.
        lang: default language (ISO 639-1 or -3 code, see :func:`hf_laser.preprocessing.normalize_lang`, or
            ``"auto"``), used by calls without ``lang`` (with a warning when their text looks like another
            language, see :meth:`resolve_lang`); can be overridden per call, or per sentence with a list.
        laser2_punct_lang: LASER2 only, see :class:`LaserTextPipeline`.
        mode: optional, ``"laser1"``/``"laser2"``; checked against the files given.

    Calls: ``tokenizer(texts, lang="fr", padding=True, return_tensors="pt")``;
    ``lang=[...]`` one code per text; ``lang="auto"`` detects the language of every text
    (:mod:`hf_laser.langid`); ``pretokenized=True`` (or ``"bpe"``) for text that already
    is BPE/SPM output (split on whitespace and looked up, as LASER's encoder does),
    ``pretokenized="tok"`` for already preprocessed ``.tok`` text; ``num_proc`` for big batches.
    ``input_ids`` end with ``</s>``, no ``<s>``.  Default padding side is right (LASER's
    ``SentenceEncoder`` right-pads); ``padding_side="left"`` works too.

    Build one from a LASER checkpoint with :meth:`from_laser_files`.
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]
    # `save_pretrained` ships this file (and the modules it imports) and writes the `auto_map`, so the directory
    # loads with `AutoTokenizer.from_pretrained(dir, trust_remote_code=True)` where hf_laser is not installed
    _auto_class = "AutoTokenizer"
    padding_side = "right"
    truncation_side = "right"

    def __init__(
        self,
        vocab_file,
        bpe_codes_file=None,
        bpe_vocab_file=None,
        spm_model_file=None,
        lang: str = "en",
        laser2_punct_lang: str | None = None,
        mode: str | None = None,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        **kwargs,
    ):
        if vocab_file is None:
            raise ValueError("vocab_file (the checkpoint dictionary as JSON) is required")
        with open(vocab_file, encoding="utf-8", errors="surrogateescape") as fh:
            vocab = json.load(fh)
        if not isinstance(vocab, dict):
            raise ValueError(f"{vocab_file}: expected a JSON object token -> id")
        self.encoder: dict[str, int] = {str(k): int(v) for k, v in vocab.items()}
        self.decoder: dict[int, str] = {v: k for k, v in self.encoder.items()}
        for name, tok in (("bos", bos_token), ("pad", pad_token), ("eos", eos_token), ("unk", unk_token)):
            if str(tok) not in self.encoder:
                raise ValueError(f"{name} token {str(tok)!r} is not in the dictionary (vocab_file)")

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
        # raw file contents, for save_vocabulary (the source files may be temporary)
        self._files: dict[str, bytes] = {}
        for key, path in (
            ("bpe_codes_file", bpe_codes_file),
            ("bpe_vocab_file", bpe_vocab_file),
            ("spm_model_file", spm_model_file),
        ):
            if path is not None:
                with open(path, "rb") as fh:
                    self._files[key] = fh.read()
        if derived == "laser1":
            pipeline = LaserTextPipeline(
                bpe_codes=bpe_codes_file, bpe_vocab=bpe_vocab_file, lang=lang, laser2_punct_lang=laser2_punct_lang
            )
        else:
            pipeline = LaserTextPipeline(
                spm_model=self._files["spm_model_file"], lang=lang, laser2_punct_lang=laser2_punct_lang
            )
        self._core = _IdsEncoder(pipeline, self.encoder, self.encoder[str(unk_token)], self.encoder[str(eos_token)])
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(
            lang=lang,
            laser2_punct_lang=laser2_punct_lang,
            mode=derived,
            bos_token=bos_token,
            pad_token=pad_token,
            eos_token=eos_token,
            unk_token=unk_token,
            **kwargs,
        )

    # ------------------------------------------------------------------ construction helper
    @classmethod
    def from_laser_files(
        cls,
        dictionary: dict[str, int] | str | os.PathLike,
        *,
        bpe_codes: str | os.PathLike | None = None,
        bpe_vocab: str | os.PathLike | None = None,
        spm_model: str | os.PathLike | None = None,
        lang: str = "en",
        save_dir: str | os.PathLike | None = None,
        **kwargs,
    ) -> LaserTokenizer:
        """Build a tokenizer from a LASER checkpoint's parts (what the converter calls).

        Args:
            dictionary: ``torch.load(ckpt)["dictionary"]`` (``{token: id}``), or a path to a
                JSON file with it.
            bpe_codes, bpe_vocab: LASER1 ``*.fcodes`` / ``*.fvocab``.
            spm_model: LASER2 ``*.spm`` (give this *or* the BPE pair).
            lang: default language stored in the tokenizer config.
            save_dir: if given, ``save_pretrained(save_dir)`` is called (writes ``vocab.json``,
                ``bpe.fcodes`` + ``bpe.fvocab`` or ``spm.model``, ``tokenizer_config.json``).
            kwargs: further :class:`LaserTokenizer` arguments (e.g. ``laser2_punct_lang``).
        """
        tmp = None
        try:
            if isinstance(dictionary, (str, os.PathLike)):
                vocab_file = os.fspath(dictionary)
            else:
                tmp = tempfile.mkdtemp(prefix="laser-tok-")
                vocab_file = os.path.join(tmp, VOCAB_FILES_NAMES["vocab_file"])
                _write_vocab_json(vocab_file, dictionary)
            tok = cls(
                vocab_file,
                bpe_codes_file=bpe_codes,
                bpe_vocab_file=bpe_vocab,
                spm_model_file=spm_model,
                lang=lang,
                **kwargs,
            )
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        if save_dir is not None:
            tok.save_pretrained(save_dir)
        return tok

    # ------------------------------------------------------------------ vocab basics
    @property
    def vocab_size(self) -> int:
        return len(self.encoder)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    @property
    def pipeline(self) -> LaserTextPipeline:
        return self._core.pipeline

    def _convert_token_to_id(self, token: str) -> int:
        return self.encoder.get(token, self._core.unk_id)

    def _convert_id_to_token(self, index: int) -> str:
        return self.decoder.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        if self.mode == "laser2":
            return "".join(tokens).replace(SPIECE_UNDERLINE, " ").strip()
        text = " ".join(tokens).replace("@@ ", "")
        return text[:-2] if text.endswith("@@") else text

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        if token_ids_1 is None:
            return list(token_ids_0) + [self.eos_token_id]
        return list(token_ids_0) + [self.eos_token_id] + list(token_ids_1) + [self.eos_token_id]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        if token_ids_1 is None:
            return [0] * len(token_ids_0) + [1]
        return [0] * len(token_ids_0) + [1] + [0] * len(token_ids_1) + [1]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2 if pair else 1

    # ------------------------------------------------------------------ language
    @property
    def default_lang(self) -> str:
        """The language used when a call gives none: the configured ``lang`` (``tokenizer_config.json``), else
        ``"en"``."""
        return self.lang if isinstance(self.lang, str) and self.lang.strip() else "en"

    def resolve_lang(self, lang, texts: Sequence[str] = (), *, pretokenized: bool | str = False,
                     n_texts: int | None = None):
        """``lang`` checked (:func:`_check_lang`); for ``lang=None`` the :attr:`default_lang`, after checking
        (a sample of at most 100 of) ``texts`` against it: a ``UserWarning`` at the caller's line says so when
        most of them are in another language (see :func:`hf_laser.langid.check_default_lang`).  An explicit
        ``lang`` never warns; neither does pre-tokenized input (no preprocessing)."""
        if lang is not None:
            return _check_lang(lang, n_texts)
        used = self.default_lang
        if pretokenized is False and not is_auto(used) and texts:
            from .langid import check_default_lang

            check_default_lang(texts, used)
        return used

    # ------------------------------------------------------------------ text -> tokens
    def preprocess(self, texts: str | Sequence[str], lang: str | Sequence[str] | None = None):
        """Raw text -> ``.tok`` text (a str for a str, a list for a list)."""
        if isinstance(texts, str):
            return self.pipeline.preprocess([texts], self.resolve_lang(lang, [texts], n_texts=1))[0]
        _check_lines_arg(texts)
        texts = list(texts)
        return self.pipeline.preprocess(texts, self.resolve_lang(lang, texts, n_texts=len(texts)))

    def tokenize(self, text: str, lang: str | None = None, pretokenized: bool | str = False, **kwargs) -> list[str]:
        """Text -> subword tokens (BPE pieces with ``@@`` / SPM pieces), as LASER's encoder splits them.

        Special-token strings in the text are not treated specially: LASER's preprocessing turns
        ``<s>`` into ``< s >`` like any other text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected str")
        _check_pretokenized(pretokenized)
        if pretokenized in (True, "bpe"):
            return text.split()
        if pretokenized == "tok":
            tok = text
        else:
            tok = self.pipeline.preprocess([text], self.resolve_lang(lang, [text], n_texts=1))[0]
        return self.pipeline.subword_tokens([tok])[0]

    def _tokenize(self, text, **kwargs):
        return self.tokenize(text, **kwargs)

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
        _check_lines_arg(lines)
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
            lang = _check_lang(lang, len(lines))
        else:
            lang = _check_lang(lang)
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
            lang = _check_lang(lang)
        yield from _iter_chunked(self._core, lines, lang, stage, pretokenized, num_proc, chunk_size)

    # ------------------------------------------------------------------ __call__ fast path
    def __call__(self, text=None, *args, **kwargs) -> BatchEncoding:
        if text is None and kwargs.get("text_target") is None:
            raise TypeError("text at position 0 is NoneType, expected str or a list of str")
        return super().__call__(text, *args, **kwargs)

    def _encode_plus(
        self,
        text,
        text_pair=None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs,
    ) -> BatchEncoding:
        lang = kwargs.pop("lang", None)
        pretokenized = kwargs.pop("pretokenized", False)
        num_proc = kwargs.pop("num_proc", 1)
        kwargs.pop("split_special_tokens", None)
        if text_pair is not None:
            raise ValueError("LaserTokenizer encodes single sentences; text_pair is not supported")
        if return_offsets_mapping:
            raise NotImplementedError("return_offset_mapping is not available for LaserTokenizer")
        if return_overflowing_tokens:
            raise NotImplementedError("return_overflowing_tokens is not supported by LaserTokenizer")
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")

        # input forms
        if text is None:
            raise TypeError("text at position 0 is NoneType, expected str")
        if is_split_into_words:
            # list of words (one sentence) or list of lists (batch): already tokenised words
            batched = isinstance(text, (list, tuple)) and len(text) > 0 and isinstance(text[0], (list, tuple))
            sents = text if batched else [text]
            texts = []
            for i, s in enumerate(sents):
                if not isinstance(s, (list, tuple)):
                    raise LaserInputError(f"text at position {i} is {type(s).__name__}, expected a list of words")
                _check_texts(s)
                texts.append(" ".join(s))
            if pretokenized is False:
                pretokenized = "tok"
        elif isinstance(text, str):
            batched, texts = False, [text]
        elif isinstance(text, (list, tuple)):
            if text and isinstance(text[0], int):  # already ids
                batched, ids_list = False, [list(text)]
                texts = None
            elif text and isinstance(text[0], (list, tuple)) and text[0] and isinstance(text[0][0], int):
                batched, ids_list, texts = True, [list(t) for t in text], None
            else:
                batched, texts = True, list(text)
        else:
            raise LaserInputError(f"text at position 0 is {type(text).__name__}, expected str or a list of str")

        if texts is not None:
            _check_texts(texts)
            lang = self.resolve_lang(lang, texts, pretokenized=pretokenized, n_texts=len(texts))
            ids_list = self.encode_lines(texts, lang, pretokenized=pretokenized, num_proc=num_proc)
            if not add_special_tokens:
                for ids in ids_list:
                    ids.pop()
        else:
            _check_lang(lang)  # ids need no language, but a wrong argument is still an error
            if add_special_tokens:
                ids_list = [ids + [self.eos_token_id] for ids in ids_list]

        # truncation (keeps </s> at the end)
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            keep = max_length - 1 if add_special_tokens else max_length
            if keep < 0:
                raise ValueError(f"max_length={max_length} leaves no room for </s>")
            side = self.truncation_side
            for i, ids in enumerate(ids_list):
                if len(ids) > max_length:
                    body = ids[:-1] if add_special_tokens else ids
                    body = body[:keep] if side == "right" else body[len(body) - keep :]
                    ids_list[i] = body + ([self.eos_token_id] if add_special_tokens else [])

        # padding
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        side = padding_side if padding_side is not None else self.padding_side
        if side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}")
        lengths = [len(ids) for ids in ids_list]
        width = None
        if padding_strategy == PaddingStrategy.LONGEST:
            width = max(lengths, default=0)
        elif padding_strategy == PaddingStrategy.MAX_LENGTH and max_length is not None:
            width = max_length
        if width is not None and pad_to_multiple_of and width % pad_to_multiple_of:
            width = (width // pad_to_multiple_of + 1) * pad_to_multiple_of
        if width is None and len(set(lengths)) <= 1:
            width = lengths[0] if lengths else 0
        if verbose and self.model_max_length < 10**12 and any(n > self.model_max_length for n in lengths):
            self._eventual_warn_about_too_long_sequence([0] * max(lengths), max_length, verbose)

        if width is not None and all(n <= width for n in lengths):
            data = self._padded_arrays(
                ids_list, lengths, width, side, add_special_tokens, return_attention_mask,
                return_token_type_ids, return_special_tokens_mask,
            )
        else:  # ragged, nothing to pad: plain lists
            data = {"input_ids": ids_list}
            if return_attention_mask:
                data["attention_mask"] = [[1] * n for n in lengths]
            if return_token_type_ids:
                data["token_type_ids"] = [[0] * n for n in lengths]
            if return_special_tokens_mask:
                data["special_tokens_mask"] = [[0] * (n - 1) + [1] if add_special_tokens and n else [0] * n
                                               for n in lengths]
        if return_length:
            data["length"] = np.asarray(lengths, dtype=np.int64) if isinstance(data["input_ids"], np.ndarray) else lengths

        tensor_type = None if return_tensors is None else str(getattr(return_tensors, "value", return_tensors))
        if isinstance(data["input_ids"], np.ndarray):
            if tensor_type == "pt":
                import torch

                return BatchEncoding({k: torch.from_numpy(v) for k, v in data.items()})
            if tensor_type == "np":
                return BatchEncoding(data)
            data = {k: v.tolist() for k, v in data.items()}
            if return_tensors is not None:  # another framework: let transformers convert
                return BatchEncoding(data, tensor_type=return_tensors)
        if not batched:
            data = {k: v[0] for k, v in data.items()}
            return BatchEncoding(data, tensor_type=return_tensors, prepend_batch_axis=return_tensors is not None)
        return BatchEncoding(data, tensor_type=return_tensors)

    def _padded_arrays(self, ids_list, lengths, width, side, add_special_tokens, attention_mask, token_type_ids,
                       special_tokens_mask) -> dict[str, np.ndarray]:
        """Pads in numpy (a batch of thousands of sentences pads in milliseconds)."""
        n_rows = len(ids_list)
        lens = np.asarray(lengths, dtype=np.int64).reshape(n_rows)
        pos = np.arange(width, dtype=np.int64)[None, :]
        real = pos < lens[:, None] if side == "right" else pos >= (width - lens)[:, None]
        input_ids = np.full((n_rows, width), self.pad_token_id, dtype=np.int64)
        input_ids[real] = np.fromiter(itertools.chain.from_iterable(ids_list), dtype=np.int64, count=int(lens.sum()))
        data = {"input_ids": input_ids}
        if attention_mask:
            data["attention_mask"] = real.astype(np.int64)
        if token_type_ids:
            data["token_type_ids"] = np.zeros((n_rows, width), dtype=np.int64)
        if special_tokens_mask:
            stm = (~real).astype(np.int64)
            if add_special_tokens:
                rows = np.nonzero(lens > 0)[0]
                last = lens[rows] - 1 if side == "right" else np.full(len(rows), width - 1)
                stm[rows, last] = 1
            data["special_tokens_mask"] = stm
        return data

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedTokenizer.save_pretrained`; next to a saved LASER model it also completes the directory's
        integration files (`integration_files.py`: `AutoTokenizer` in `config.json`, sentence-transformers)."""
        saved = super().save_pretrained(save_directory, *args, **kwargs)
        write_integration_files(save_directory)
        return saved

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        saved = []
        path = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES["vocab_file"])
        _write_vocab_json(path, self.encoder)
        saved.append(path)
        for key, content in self._files.items():
            path = os.path.join(save_directory, prefix + VOCAB_FILES_NAMES[key])
            with open(path, "wb") as fh:
                fh.write(content)
            saved.append(path)
        return tuple(saved)


def _write_vocab_json(path, vocab: dict[str, int]) -> None:
    items = sorted(((str(k), int(v)) for k, v in vocab.items()), key=lambda kv: kv[1])
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        fh.write(json.dumps(dict(items), ensure_ascii=False, indent=0))
        fh.write("\n")
