"""Sentence-embedding API: `LaserEncoder` owns a `LaserModel` and its tokenizer and turns sentences into vectors.

Example::

    from hf_laser import LaserEncoder
    encoder = LaserEncoder.from_pretrained()          # the shipped default model (laser-mini), or a directory / Hub id
    embeddings = encoder.encode(["Hello world.", "Bonjour le monde."], lang=["en", "fr"])   # (2, 1024) float32
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain, islice
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS
from .errors import DISK_ERRNOS, EmbeddingWriteError, UsageError, one_line, run_cli  # noqa: F401 (re-exported)
from .langid import CHECK_SAMPLE, detector_version, is_auto, warn_at_caller
from .modeling_laser import LaserModel
from .models import check_model_dir, looks_local, resolve_model  # noqa: F401 (re-exported)
from .tokenization_laser import LaserInputError, LaserTokenizer, _check_lang, _check_lines_arg
from .tokenization_laser import read_lines as tokenizer_read_lines

PROGRESS_BAR_MIN_SENTENCES = 10_000  # `encode`'s default progress-bar threshold
PROGRESS_BAR_DELAY_S = 2.0  # `encode_file`'s bar appears only for runs longer than this
MANIFEST_FORMAT = "hf-laser-embeddings/1"


def plan_batches(lengths: Sequence[int], max_tokens: int | None = DEFAULT_MAX_TOKENS,
                 batch_size: int | None = None) -> list[np.ndarray]:
    """Groups sentence indices into batches of similar length, longest first, like the original `SentenceEncoder`.

    A batch holds at most `max_tokens` tokens *padded* (`sentences x longest`, so memory is bounded by the budget)
    and at most `batch_size` sentences; a sentence longer than `max_tokens` gets a batch of its own. The model packs
    each batch by its true lengths, so the batch composition does not change the embeddings. (Batches of exactly one
    length, which let the LSTM run without packing, measured no faster on CPU: the encoder is compute-bound; see
    `benchmarks/embed_throughput.py`.)

    Args:
        lengths: token count of each sentence (`</s>` included), shape `(n,)`.
        max_tokens: token budget per batch (None: no budget).
        batch_size: sentence budget per batch (None: no budget).

    Returns:
        A list of index arrays into `lengths`.
    """
    if max_tokens is not None and max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        longest = int(lengths[order[start]])
        n = len(order) - start
        if max_tokens is not None:
            n = min(n, max(1, max_tokens // longest))
        if batch_size is not None:
            n = min(n, batch_size)
        batches.append(order[start:start + n])
        start += n
    return batches


def read_lines(path: str | os.PathLike, start: int = 0) -> Iterator[str]:
    """Yields the lines of a UTF-8 file split on `'\\n'` only (a `\\r` or `\\u2028` inside a line stays inside),
    without their newline, from line `start` on. Invalid bytes survive as surrogates (`errors="surrogateescape"`)."""
    return islice(tokenizer_read_lines(path), start, None)


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines as [`read_lines`] yields them (a last line without newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _sentence_list(sentences) -> Sequence:
    """A batch of sentences as a sequence; a dict, a set, bytes, a lone non-iterable are errors (a dict's keys or a
    set's order are no list of sentences)."""
    if isinstance(sentences, str):
        raise LaserInputError("expected a list of sentences, got a single str; wrap it in a list")
    _check_lines_arg(sentences)
    return sentences if isinstance(sentences, Sequence) else list(sentences)


def batched(items: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ---------------------------------------------------------------------------------------------------------------
# What an embedding file was computed from (its manifest), and writing it safely
# ---------------------------------------------------------------------------------------------------------------


def scan_input(path: str | os.PathLike) -> dict:
    """One pass over a text file: `{"path", "size", "mtime_ns", "lines", "sha256"}`, `lines` counted as
    [`count_lines`] does and `sha256` over the file's bytes."""
    path = Path(path)
    digest, count, last = hashlib.sha256(), 0, b"\n"
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        while block := f.read(1 << 24):
            digest.update(block)
            count += block.count(b"\n")
            last = block[-1:]
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "lines": count + (last != b"\n"), "sha256": digest.hexdigest()}


def _package_version() -> str:
    from . import __version__

    return __version__


_CONFIG_METADATA = {"architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "use_cache"}


def model_sha256(model: torch.nn.Module) -> str:
    """sha256 of a model's config (without metadata such as its path) and of every tensor of its state dict
    (name, dtype, shape, bytes). A full hash: ~0.2 s for the 93-language LASER's weights."""
    digest = hashlib.sha256()
    config = getattr(model, "config", None)
    if config is not None:
        cfg = {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k not in _CONFIG_METADATA}
        digest.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    state = model.state_dict()
    for name in sorted(state):
        value = state[name]
        if not isinstance(value, torch.Tensor):
            digest.update(f"{name}|{type(value).__qualname__}".encode())
            continue
        t = value.detach()
        if t.is_quantized:
            t = t.int_repr()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        if t.device.type == "meta" or not t.numel():
            continue
        t = t.cpu().contiguous().reshape(-1)
        digest.update((t if t.dtype in (torch.uint8, torch.int8, torch.bool) else t.view(torch.uint8)).numpy().data)
    return digest.hexdigest()


def tokenizer_sha256(tokenizer, vocab: dict | None) -> str | None:
    """sha256 of what turns text into ids: the vocabulary and the subword files (BPE codes / SentencePiece model)
    of a `LaserTokenizer`, or the vocabulary alone for a dictionary-only model. None when there is neither."""
    if tokenizer is None and vocab is None:
        return None
    digest = hashlib.sha256()
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        digest.update(f"{type(tokenizer).__qualname__}|{getattr(tokenizer, 'mode', None)}|"
                      f"{getattr(tokenizer, 'laser2_punct_lang', None)}".encode())
        for key, content in sorted((getattr(tokenizer, "_files", None) or {}).items()):
            digest.update(key.encode() + b"|" + hashlib.sha256(content).digest())
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def embedding_identity(encoder, input_info: dict, *, lang, pretokenized: bool = False, fp16: bool = False,
                       normalize: bool = False, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                       batch_size: int | None = None, chunk_lines: int = DEFAULT_CHUNK_LINES,
                       max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> dict:
    """Everything that determines the embeddings of a file (compared before resuming or reusing them): the input's
    content (sha256, size, lines), language (None for pre-tokenized input), model and tokenizer (hashes, dtype,
    quantisation), the output options, the batching (which decides float round-off), the sentence-length limit when
    it is not the default, and the hf-laser version. The input's path and mtime and the device are not part of it
    (recorded in the manifest for information only)."""
    model_id = getattr(encoder, "model_identity", None)
    model_id = model_id() if callable(model_id) else {
        "model": f"{type(encoder).__module__}.{type(encoder).__qualname__}", "tokenizer": None,
        "model_dtype": None, "quantize": None}
    return {
        "hf_laser": _package_version(),
        "input_sha256": input_info["sha256"], "input_size": input_info["size"], "lines": input_info["lines"],
        # pre-tokenized input does not go through the language-specific preprocessing; "auto" depends on the detector
        "lang": None if pretokenized else _lang_identity(lang) if isinstance(lang, str) or lang is None
        else [_lang_identity(x) for x in lang],
        "pretokenized": bool(pretokenized),
        **model_id,
        "output_dtype": "float16" if fp16 else "float32", "normalize": bool(normalize),
        "max_tokens": max_tokens, "batch_size": batch_size, "chunk_lines": chunk_lines,
        # Only a non-default limit is recorded, so that outputs written before the limit existed stay valid: they
        # can differ only on a sentence over the limit, which those versions embedded whole (or died on).
        **({} if max_sentence_tokens == DEFAULT_MAX_SENTENCE_TOKENS else {"max_sentence_tokens": max_sentence_tokens}),
    }


def _lang_identity(lang: str | None) -> str | None:
    """The language as recorded in an embedding identity: `"auto"` with the detector's name and version."""
    return f"auto ({detector_version()})" if is_auto(lang) else lang


_IDENTITY_LABELS = {
    "hf_laser": "hf-laser version", "input_sha256": "input content (sha256)", "input_size": "input size",
    "lines": "input lines", "lang": "language", "pretokenized": "pretokenized", "model": "model (sha256)",
    "tokenizer": "tokenizer (sha256)", "model_dtype": "model dtype", "quantize": "quantisation",
    "output_dtype": "output dtype", "normalize": "normalize", "max_tokens": "max_tokens",
    "batch_size": "batch_size", "chunk_lines": "chunk_lines", "max_sentence_tokens": "max_sentence_tokens",
}


def identity_changes(old: dict, new: dict) -> list[str]:
    """What differs between two [`embedding_identity`] dicts, as `"language fr -> de"` items (empty: the same)."""
    def show(v):
        return f"{v[:12]}…" if isinstance(v, str) and len(v) == 64 else json.dumps(v)

    new = json.loads(json.dumps(new))
    return [f"{_IDENTITY_LABELS.get(k, k)} {show(old.get(k))} -> {show(new.get(k))}"
            for k in list(new) + [k for k in old if k not in new] if old.get(k) != new.get(k)]


def _say(message: str) -> None:
    print(f"hf_laser: {message}", file=sys.stderr)


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def write_json_atomic(path: Path, obj) -> None:
    """Writes JSON to a temporary file next to `path`, then renames it: `path` is always whole."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _npy_header(path: Path) -> tuple[tuple, np.dtype, int]:
    """`(shape, dtype, header_length)` of a C-order `.npy` file; ValueError when it is not one."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = read(f)
        if fortran:
            raise ValueError("Fortran-order array")
        return tuple(shape), np.dtype(dtype), f.tell()


def _preallocate(fd: int, offset: int, length: int) -> None:
    """Reserves the disk blocks of `[offset, offset + length)`, so that a full disk fails here (ENOSPC), not later.
    Where the file system cannot (no `posix_fallocate`), the file is extended sparse and writes report ENOSPC."""
    if length <= 0:
        return
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, offset, length)
            return
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", -1)):
                raise
    if os.fstat(fd).st_size < offset + length:
        os.ftruncate(fd, offset + length)


def _write_at(fd: int, offset: int, data) -> None:
    """Plain positioned writes (no memory map: a full disk raises ENOSPC here instead of killing with SIGBUS)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class _OutputFiles:
    """The files of one `encode_file` output `OUT`: `OUT` (complete), `OUT.manifest.json` (what `OUT` was computed
    from), `OUT.partial` + `OUT.partial.json` (a run in progress and how far it got), and `OUT.progress.json`
    (an interrupted run of hf-laser <= 0.1.0, which wrote `OUT` in place)."""

    def __init__(self, output: Path):
        self.output = output
        self.manifest = output.with_name(output.name + ".manifest.json")
        self.partial = output.with_name(output.name + ".partial")
        self.progress = output.with_name(output.name + ".partial.json")
        self.legacy_progress = output.with_name(output.name + ".progress.json")

    def complete_status(self, identity: dict, shape: tuple, dtype: np.dtype) -> str | None:
        """None when `OUT` is complete and was computed from `identity`; otherwise why it cannot be used ("" when
        there is no `OUT`). Raises when `OUT` exists but is no `.npy` file (never overwritten without asking)."""
        if not self.output.exists():
            return ""
        try:
            out_shape, out_dtype, _ = _npy_header(self.output)
        except (ValueError, OSError, EOFError) as err:
            raise UsageError(f"{self.output} exists and is not a .npy file of embeddings ({err}); "
                             "remove it, or pass --overwrite / resume=False to replace it") from None
        if not self.manifest.exists():
            if self.legacy_progress.exists():
                return "it holds an interrupted run of an older hf-laser (no manifest), which cannot be checked"
            return "it has no manifest (written by an older hf-laser or another program), so what it holds " \
                   "cannot be checked"
        try:
            manifest = _read_json(self.manifest)
            old, recorded = manifest["identity"], manifest["output"]
        except (ValueError, KeyError, TypeError, OSError) as err:
            return f"its manifest {self.manifest.name} is unreadable ({type(err).__name__})"
        if manifest.get("format") != MANIFEST_FORMAT:
            return f"its manifest has format {manifest.get('format')!r}, this hf-laser writes {MANIFEST_FORMAT!r}"
        st = self.output.stat()
        if (st.st_size, st.st_mtime_ns) != (recorded.get("size"), recorded.get("mtime_ns")):
            return "it was modified or replaced after its manifest was written (size/mtime differ)"
        if changes := identity_changes(old, identity):
            return "it was computed from something else: " + "; ".join(changes)
        if out_shape != shape or out_dtype != dtype:
            return f"it holds {out_shape} {out_dtype}, expected {shape} {dtype}"
        return None

    def resumable_lines(self, identity: dict, shape: tuple, dtype: np.dtype, say) -> int | None:
        """Lines already done by an interrupted run of the same computation; None (and the reason said) when there
        is none to resume or it cannot be trusted."""
        if not self.partial.exists() and not self.progress.exists():
            return None
        why = None
        if not self.progress.exists():
            why = f"{self.partial.name} has no progress record (a run killed before its first chunk was saved)"
        elif not self.partial.exists():
            why = f"{self.progress.name} has no {self.partial.name} to go with it"
        else:
            try:
                state = _read_json(self.progress)
                if not isinstance(state, dict) or state.get("format") != MANIFEST_FORMAT:
                    fmt = state.get("format") if isinstance(state, dict) else None
                    why = f"its progress record has format {fmt!r}, not {MANIFEST_FORMAT!r} (another hf-laser version)"
                else:
                    old, done = state["identity"], state["lines_done"]
            except (ValueError, KeyError, TypeError, OSError) as err:
                why = f"its progress record {self.progress.name} is unreadable ({type(err).__name__})"
            if why is None and (changes := identity_changes(old, identity)):
                why = "it was computing something else: " + "; ".join(changes)
            if why is None and (not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= shape[0]):
                why = f"its progress record claims {done!r} lines done, the input has {shape[0]}"
            if why is None:
                try:
                    p_shape, p_dtype, header = _npy_header(self.partial)
                    if (p_shape, p_dtype) != (shape, dtype):
                        why = f"{self.partial.name} holds {p_shape} {p_dtype}, expected {shape} {dtype}"
                    elif self.partial.stat().st_size < header + done * shape[1] * dtype.itemsize:
                        why = f"{self.partial.name} is truncated"
                except (ValueError, OSError, EOFError) as err:
                    why = f"{self.partial.name} is not a valid .npy file ({err})"
            if why is None:
                return done
        say(f"not resuming the interrupted run for {self.output} ({why}): starting over")
        self.discard_partial()
        return None

    def discard_partial(self) -> None:
        self.progress.unlink(missing_ok=True)
        self.partial.unlink(missing_ok=True)


class LaserEncoder:
    """A LASER model plus its tokenizer, for people who just want sentence vectors.

    Args:
        model: a [`LaserModel`].
        tokenizer: a `LaserTokenizer`, or None when only pre-tokenized input will be given.
        vocab: token → id mapping for pre-tokenized input (defaults to the tokenizer's vocabulary).
    """

    def __init__(self, model: LaserModel, tokenizer=None, vocab: dict[str, int] | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        if vocab is None and tokenizer is not None:
            vocab = tokenizer.get_vocab()
        self.vocab = vocab
        self.eos_id = model.config.eos_token_id
        self.unk_id = model.config.unk_token_id
        quantized = any(type(m).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized"))
                        for m in model.modules())
        self.quantize = "int8" if quantized else None
        self._model_sha256: str | None = None  # of the weights as loaded (before a dtype cast / quantisation)
        self._tokenizer_sha256: str | None = None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | None = None, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, quantize: str | None = None, **kwargs) -> LaserEncoder:
        """Loads model and tokenizer from a directory written by `hf-laser convert` / `save_pretrained` (or a Hub id).

        Args:
            path: local directory or Hub repo id; None: the model shipped with the package
                (`hf_laser.DEFAULT_MODEL`, laser-mini), announced once on stderr.
            device: where the model runs (default: CPU).
            dtype: model dtype (`torch.float32` default; `torch.bfloat16`/`torch.float16` trade fidelity for speed).
            quantize: `"int8"` applies dynamic int8 quantisation to the LSTM (CPU only; ~2x faster, embeddings no
                longer within 1e-5 of the original: see README, "Embedding throughput").
        """
        path = resolve_model(path, who="LaserEncoder")
        model = LaserModel.from_pretrained(path, **kwargs)
        weights_sha256 = model_sha256(model) if dtype is not None or quantize is not None else None
        if dtype is not None:
            model = model.to(dtype)
        if quantize is not None:
            if quantize != "int8":
                raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
            if device is not None and torch.device(device).type != "cpu":
                raise ValueError("int8 dynamic quantisation runs on CPU only")
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.LSTM}, dtype=torch.qint8)
        if device is not None:
            model = model.to(device)
        tokenizer, vocab = None, None
        try:
            tokenizer = LaserTokenizer.from_pretrained(path)
        except (OSError, ValueError):  # a dictionary-only directory (converted without subword files)
            vocab_file = Path(path) / "vocab.json"
            if vocab_file.is_file():
                vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
        encoder = cls(model, tokenizer, vocab)
        encoder._model_sha256 = weights_sha256
        return encoder

    def model_identity(self) -> dict:
        """What identifies this encoder's numbers: `{"model": sha256 of config + weights (as loaded, before any dtype
        cast or quantisation), "tokenizer": sha256 of vocabulary + subword files, "model_dtype", "quantize"}`.
        The hashes are computed once (full hashes of the tensors in memory; see [`model_sha256`])."""
        if self._model_sha256 is None:
            self._model_sha256 = model_sha256(self.model)
        if self._tokenizer_sha256 is None:
            self._tokenizer_sha256 = tokenizer_sha256(self.tokenizer, self.vocab)
        dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), None)
        return {"model": self._model_sha256, "tokenizer": self._tokenizer_sha256,
                "model_dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
                "quantize": self.quantize}

    @property
    def dim(self) -> int:
        """Dimension of the sentence embeddings."""
        return self.model.config.embedding_dim

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ tokenisation
    def token_ids(self, sentences: Sequence[str], lang: str | Sequence[str] | None = None, *,
                  pretokenized: bool = False, num_proc: int = 1) -> list[list[int]]:
        """Dictionary ids of every sentence, `</s>` appended (no `<s>`), unknown tokens → `<unk>`.

        With `pretokenized=True` the sentences are already BPE/SentencePiece tokens separated by whitespace (the
        original encoder's input: `line.strip().split()`); otherwise raw text goes through the LASER preprocessing
        in language `lang` (see [`encode`]).
        """
        sentences = _sentence_list(sentences)
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise LaserInputError(f"sentence {i} is {type(s).__name__}, expected str")
        if pretokenized:
            _check_lang(lang, None if lang is None or isinstance(lang, str) else len(sentences))
            if self.vocab is None:
                raise ValueError("this model directory has no vocabulary (vocab.json or tokenizer files)")
            get, unk, eos = self.vocab.get, self.unk_id, self.eos_id
            return [[get(t, unk) for t in s.split()] + [eos] for s in sentences]
        if self.tokenizer is None:
            raise ValueError(
                "this model directory has no tokenizer; convert it with --bpe-codes/--bpe-vocab or --spm-model, "
                "or pass pretokenized=True with BPE-tokenized input"
            )
        lang = self.tokenizer.resolve_lang(lang, sentences, n_texts=len(sentences))
        return self.tokenizer.encode_lines(sentences, lang=lang, num_proc=num_proc)

    # ------------------------------------------------------------------ encoding
    def encode_ids(self, ids: Sequence[Sequence[int]], *, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                   batch_size: int | None = None, device: str | torch.device | None = None,
                   show_progress_bar: bool | None = None,
                   progress: Callable[[int], None] | None = None,
                   max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS,
                   on_truncated: Callable[[list[tuple[int, int]]], None] | None = None) -> torch.Tensor:
        """Embeds id sequences (each ending with `</s>`). Returns a CPU float32 tensor `(len(ids), dim)` in input
        order, whatever the model dtype. `progress`, if given, is called with the number of (distinct) sentences
        of each batch once it is embedded.

        A sequence longer than `max_sentence_tokens` (default 100,000; None: no limit) is embedded as its first
        `max_sentence_tokens - 1` ids plus its last one (`</s>`), and a `UserWarning` names it: the CPU LSTM kernel
        (oneDNN) fails outright on a sequence of about 260,000 tokens at LASER's size, and memory grows with the
        length, so one runaway line would otherwise stop the whole run. Shorter sequences are untouched.
        `on_truncated`, if given, is called with `[(index, length), ...]` instead of the warning.
        """
        if isinstance(ids, (str, bytes, bytearray, Mapping, set, frozenset)):
            raise LaserInputError(f"expected a list of token-id sequences, got {type(ids).__name__}")
        if max_sentence_tokens is not None and max_sentence_tokens < 2:
            raise ValueError(f"max_sentence_tokens must be at least 2 (one token and </s>), got {max_sentence_tokens}")
        if device is not None and torch.device(device) != self.device:
            self.model.to(device)
        device = self.device
        out = torch.empty((len(ids), self.dim), dtype=torch.float32)
        if not len(ids):
            return out
        for i, s in enumerate(ids):
            if isinstance(s, (str, bytes, bytearray, Mapping)) or not isinstance(s, Iterable):
                raise LaserInputError(f"sentence {i} is {type(s).__name__}, expected a sequence of token ids")
        # Identical sentences (repeated lines, empty lines) are embedded once.
        first_seen: dict[tuple[int, ...], int] = {}
        try:
            inverse = np.fromiter((first_seen.setdefault(tuple(s), len(first_seen)) for s in ids), np.int64, len(ids))
        except TypeError:  # an unhashable token (a list...)
            _raise_non_integer([tuple(s) for s in ids], np.arange(len(ids)))
            raise
        unique = list(first_seen)
        lengths = [len(s) for s in unique]
        if min(lengths) == 0:
            raise ValueError(f"sentence {int(np.flatnonzero(inverse == lengths.index(0))[0])} has no token; "
                             "it must at least end with </s>")
        if max_sentence_tokens is not None and max(lengths) > max_sentence_tokens:
            cut = []
            for u, n in enumerate(lengths):
                if n > max_sentence_tokens:
                    unique[u] = unique[u][:max_sentence_tokens - 1] + unique[u][-1:]
                    lengths[u] = max_sentence_tokens
                    cut.extend((int(i), n) for i in np.flatnonzero(inverse == u))
            cut.sort()
            if on_truncated is not None:
                on_truncated(cut)
            else:
                warn_at_caller(truncation_message([f"sentence {i} ({n:,} tokens)" for i, n in cut],
                                                  max_sentence_tokens))
        if show_progress_bar is None:
            show_progress_bar = len(ids) >= PROGRESS_BAR_MIN_SENTENCES
        # not a decorator: the truncation warning above must point at the caller, not at torch's wrapper
        with torch.inference_mode():
            return self._encode_unique(unique, lengths, inverse, out, device=device, max_tokens=max_tokens,
                                       batch_size=batch_size, show_progress_bar=show_progress_bar, progress=progress)

    def _encode_unique(self, unique, lengths, inverse, out, *, device, max_tokens, batch_size, show_progress_bar,
                       progress) -> torch.Tensor:
        """[`encode_ids`] on the distinct sequences `unique` (`lengths`), written to `out[i] = emb[inverse[i]]`."""
        vocab_size = self.model.config.vocab_size
        unique_out = torch.empty((len(unique), self.dim), dtype=torch.float32)
        with tqdm(total=len(unique), disable=not show_progress_bar, unit="sent", desc="embedding") as bar:
            for batch in plan_batches(lengths, max_tokens, batch_size):
                batch_lengths = np.array([lengths[i] for i in batch])
                # np.array, not np.fromiter(..., np.int64): that one turns "5" and 2.5 into ids without a word
                flat = np.array(list(chain.from_iterable(unique[i] for i in batch)))
                if flat.dtype.kind not in "iu":
                    _raise_non_integer(unique, inverse)
                if flat.dtype.kind not in "iu" or int(flat.max()) >= vocab_size or int(flat.min()) < 0:
                    bad = [int(j) for j in np.flatnonzero(np.isin(inverse, batch))]
                    raise ValueError(f"token ids outside the vocabulary [0, {vocab_size}) in sentence(s) {bad}")
                mask = np.arange(batch_lengths[0])[None, :] < batch_lengths[:, None]
                ids_array = np.full(mask.shape, self.model.config.pad_token_id, dtype=np.int64)
                ids_array[mask] = flat
                emb = self.model(torch.from_numpy(ids_array).to(device, non_blocking=True),
                                 attention_mask=torch.from_numpy(mask).to(device, non_blocking=True)).pooler_output
                unique_out[torch.from_numpy(batch)] = emb.float().cpu()
                bar.update(len(batch))
                if progress is not None:
                    progress(len(batch))
        torch.index_select(unique_out, 0, torch.from_numpy(inverse), out=out)
        return out

    def encode(self, sentences: str | Sequence[str], lang: str | Sequence[str] | None = None, *,
               max_tokens: int | None = DEFAULT_MAX_TOKENS, batch_size: int | None = None,
               normalize_embeddings: bool = False, device: str | torch.device | None = None,
               show_progress_bar: bool | None = None, convert_to: str = "numpy", pretokenized: bool = False,
               num_proc: int = 1,
               max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> np.ndarray | torch.Tensor:
        """Embeds sentences.

        Args:
            sentences: a sentence or a list of sentences (raw text, or BPE tokens with `pretokenized=True`).
            lang: language of the text for the LASER preprocessing: one code for all (`"fr"`, `"zh"` ...), one
                per sentence, or `"auto"` to detect it per sentence ([`hf_laser.langid`]). None: the tokenizer's
                default language (`"en"` unless the model directory configures another), checked against the
                text: a `UserWarning` says when (a sample of) the sentences looks like another language.
            max_tokens: token budget per batch (the original's default 12000); bounds memory.
            batch_size: optional cap on sentences per batch.
            normalize_embeddings: L2-normalise the vectors (for cosine similarity by dot product).
            device: run on this device (moves the model).
            show_progress_bar: tqdm bar; default on from 10,000 sentences.
            convert_to: `"numpy"` (float32 array) or `"torch"` (float32 CPU tensor).
            pretokenized: the input is already tokenized (see [`token_ids`]).
            num_proc: processes for the text preprocessing of large inputs.
            max_sentence_tokens: a sentence with more tokens (`</s>` included) is embedded as its first
                `max_sentence_tokens - 1` tokens + `</s>`, with a `UserWarning` naming it (see [`encode_ids`]);
                None: no limit.

        Returns:
            `(n, dim)` float32 embeddings in input order (`(dim,)` for a single string). An empty list gives `(0, dim)`;
            an empty sentence gives the embedding of `</s>` alone, as in the original.
        """
        if convert_to not in ("numpy", "torch"):
            raise ValueError(f"convert_to must be 'numpy' or 'torch', got {convert_to!r}")
        single = isinstance(sentences, str)
        sentences = [sentences] if single else _sentence_list(sentences)
        ids = self.token_ids(sentences, lang, pretokenized=pretokenized, num_proc=num_proc)
        emb = self.encode_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                              show_progress_bar=show_progress_bar, max_sentence_tokens=max_sentence_tokens)
        if normalize_embeddings:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        if single:
            emb = emb[0]
        return emb.numpy() if convert_to == "numpy" else emb

    def encode_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, lang: str | None = None,
                    pretokenized: bool = False, fp16: bool = False, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                    batch_size: int | None = None, chunk_lines: int = DEFAULT_CHUNK_LINES,
                    normalize_embeddings: bool = False, device: str | torch.device | None = None,
                    show_progress_bar: bool | None = None, resume: bool = True, num_proc: int = 1,
                    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> np.ndarray:
        """Embeds a text file (one sentence per line, split on `'\\n'` only) into a `.npy` file, streaming.

        `lang` as in [`encode`] (one code, `"auto"`, or None: the default language, checked against the first 100
        lines). A line of more than `max_sentence_tokens` tokens is embedded as its first `max_sentence_tokens - 1`
        tokens + `</s>`, and a `UserWarning` gives its line number (see [`encode_ids`]); the rest of the file is
        embedded as usual.

        The rows are written chunk by chunk (`chunk_lines` lines in memory at a time) into `OUTPUT.partial`, which
        is renamed to `OUTPUT` once complete, so `OUTPUT` is never a half-written file. `OUTPUT.manifest.json`
        records what `OUTPUT` was computed from (see [`embedding_identity`]: the input's sha256, size and line count,
        the language, hashes of the model weights and tokenizer files, model dtype, quantisation, `fp16`,
        `normalize_embeddings`, the batching, the hf-laser version; plus, for information, the input's path and
        mtime, the device and the timing). With `resume=True`:

        - a complete `OUTPUT` whose manifest matches is returned as is;
        - an interrupted run of the same computation (`OUTPUT.partial` + `OUTPUT.partial.json`) continues where
          it stopped, and ends bit-identical to an uninterrupted run;
        - anything else (different input, language, model or options; no manifest, e.g. a file from an older
          hf-laser; a modified, truncated or unreadable file) is recomputed, and a line on stderr says why.

        `resume=False` always recomputes. An `OUTPUT` that is not a `.npy` file is never replaced without
        `resume=False`. The disk space is reserved before the first chunk (`posix_fallocate`): a full disk or an
        I/O error raises [`EmbeddingWriteError`] and keeps what was done, so the same call resumes.

        Returns:
            The output as a read-only memory-mapped array (float32, or float16 with `fp16=True`).
        """
        return self._encode_file(input_path, output_path, lang=lang, pretokenized=pretokenized, fp16=fp16,
                                 max_tokens=max_tokens, batch_size=batch_size, chunk_lines=chunk_lines,
                                 normalize_embeddings=normalize_embeddings, device=device,
                                 show_progress_bar=show_progress_bar, resume=resume, num_proc=num_proc,
                                 max_sentence_tokens=max_sentence_tokens)[0]

    def _encode_file(self, input_path, output_path, *, lang, pretokenized, fp16, max_tokens, batch_size, chunk_lines,
                     normalize_embeddings, device, show_progress_bar, resume, num_proc,
                     max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS, say=_say,
                     fresh_reason: str = "resume=False") -> tuple[np.ndarray, dict]:
        """[`encode_file`], also returning `{"lines", "computed", "resumed_at", "reused", "seconds"}`."""
        t0 = time.perf_counter()
        input_path, output_path = Path(input_path), Path(output_path)
        if not input_path.is_file():
            raise FileNotFoundError(f"input file not found: {input_path}")
        if chunk_lines <= 0:
            raise ValueError(f"chunk_lines must be positive, got {chunk_lines}")
        if output_path.is_dir():
            raise UsageError(f"output {output_path} is a directory; give a .npy file name")
        if output_path.exists() and output_path.samefile(input_path):
            raise UsageError(f"output {output_path} is the input file")
        if not pretokenized and self.tokenizer is not None:
            if lang is None:
                lang = self.tokenizer.resolve_lang(None, list(islice(read_lines(input_path), CHECK_SAMPLE)))
            elif not isinstance(lang, str):
                raise LaserInputError(f"encode_file takes one language for the whole file (a code or 'auto'), "
                                      f"got {type(lang).__name__}")
            _check_lang(lang)
        info = scan_input(input_path)
        n, dim = info["lines"], self.dim
        dtype = np.dtype(np.float16 if fp16 else np.float32)
        shape = (n, dim)
        identity = embedding_identity(self, info, lang=lang, pretokenized=pretokenized, fp16=fp16,
                                      normalize=normalize_embeddings, max_tokens=max_tokens, batch_size=batch_size,
                                      chunk_lines=chunk_lines, max_sentence_tokens=max_sentence_tokens)
        files = _OutputFiles(output_path)
        stats = {"lines": n, "computed": 0, "resumed_at": 0, "reused": False, "seconds": 0.0}
        done = None
        if resume:
            why = files.complete_status(identity, shape, dtype)
            if why is None:
                say(f"{output_path} is up to date (same input, model and options): reused "
                    f"({'--overwrite' if say is not _say else 'resume=False'} recomputes it)")
                stats.update(reused=True, seconds=time.perf_counter() - t0)
                return np.load(output_path, mmap_mode="r"), stats
            done = files.resumable_lines(identity, shape, dtype, say)
            if why and done is None:
                say(f"recomputing {output_path}: {why}")
            elif done is not None:
                say(f"resuming {output_path} at line {done:,} of {n:,}")
        elif output_path.exists() or files.partial.exists():
            say(f"recomputing {output_path} from scratch ({fresh_reason})")
        if done is None:
            files.discard_partial()
            output_path.parent.mkdir(parents=True, exist_ok=True)
        row_bytes = dim * dtype.itemsize
        disk_error = partial(_disk_error, files=files, n=n)
        fd = None
        try:
            if done is None:
                try:
                    with open(files.partial, "wb") as f:  # the header of `np.save`, then the rows at their offsets
                        np.lib.format.write_array_header_1_0(
                            f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
                        header = f.tell()
                except OSError as err:
                    files.partial.unlink(missing_ok=True)
                    raise disk_error(err, "creating", 0) from err
            else:
                header = _npy_header(files.partial)[2]
            fd = os.open(files.partial, os.O_RDWR)
            try:
                _preallocate(fd, header, n * row_bytes)
            except OSError as err:
                if done is None:
                    os.close(fd)
                    fd = None
                    files.partial.unlink(missing_ok=True)
                raise disk_error(err, f"reserving {n * row_bytes / 1e6:,.1f} MB for", done or 0) from err
            if done is None:
                done = 0
                self._save_progress(files, identity, info, 0, disk_error)
            stats["resumed_at"] = done
            if show_progress_bar is None:
                show_progress_bar = sys.stderr.isatty()
            chunks = batched(read_lines(input_path, start=done), chunk_lines)

            def report_truncated(cut, first_line):
                message = truncation_message([f"line {first_line + i:,} ({n:,} tokens)" for i, n in cut],
                                             max_sentence_tokens) + f" [{input_path}]"
                if say is _say:  # the Python API: a warning; the command line: its own stderr line
                    warn_at_caller(message)
                else:
                    say(message)

            tokenize = partial(self.token_ids, lang=lang, pretokenized=pretokenized, num_proc=num_proc)
            # The next chunk is tokenized (in a thread, or worker processes with num_proc > 1) while this one is
            # encoded.
            with tqdm(total=n, initial=done, disable=not show_progress_bar, unit="line", desc="embedding",
                      delay=PROGRESS_BAR_DELAY_S, file=sys.stderr, dynamic_ncols=True) as bar, \
                    ThreadPoolExecutor(max_workers=1) as pool:
                pending = pool.submit(tokenize, next(chunks, []))
                while ids := pending.result():
                    pending = pool.submit(tokenize, next(chunks, []))
                    emb = self.encode_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                                          show_progress_bar=False, progress=bar.update,
                                          max_sentence_tokens=max_sentence_tokens,
                                          on_truncated=partial(report_truncated, first_line=done + 1))
                    if normalize_embeddings:
                        emb = torch.nn.functional.normalize(emb, dim=-1)
                    rows = np.ascontiguousarray(emb.numpy().astype(dtype, copy=False))
                    try:
                        _write_at(fd, header + done * row_bytes, rows)
                        os.fsync(fd)  # the rows are on disk before the progress record says so
                    except OSError as err:
                        raise disk_error(err, "writing", done) from err
                    done += len(ids)
                    self._save_progress(files, identity, info, done, disk_error)
                    bar.update(done - bar.n)  # the batches counted distinct sentences; repeated lines come here
            os.close(fd)
            fd = None
            st = input_path.stat()
            if (st.st_size, st.st_mtime_ns) != (info["size"], info["mtime_ns"]):
                files.discard_partial()
                raise ValueError(f"{input_path} changed while it was being embedded; run again once it is final")
            # OUT becomes complete only by the rename; its manifest follows (a kill in between leaves an OUT without
            # manifest, which the next run recomputes).
            files.manifest.unlink(missing_ok=True)
            os.replace(files.partial, output_path)
            st = output_path.stat()
            seconds = time.perf_counter() - t0
            try:
                write_json_atomic(files.manifest, {
                    "format": MANIFEST_FORMAT, "identity": identity,
                    "output": {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "shape": list(shape),
                               "dtype": dtype.name},
                    "input": {"path": info["path"], "mtime_ns": info["mtime_ns"]},
                    "device": str(self.device), "seconds": round(seconds, 3), "resumed_at": stats["resumed_at"],
                    "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                })
            except OSError as err:
                raise disk_error(err, "writing the manifest of", n) from err
            files.progress.unlink(missing_ok=True)
            files.legacy_progress.unlink(missing_ok=True)
        finally:
            if fd is not None:
                os.close(fd)
        stats.update(computed=n - stats["resumed_at"], seconds=seconds)
        return np.load(output_path, mmap_mode="r"), stats

    @staticmethod
    def _save_progress(files: _OutputFiles, identity: dict, info: dict, done: int, error) -> None:
        try:
            write_json_atomic(files.progress, {"format": MANIFEST_FORMAT, "lines_done": done, "identity": identity,
                                               "input": {"path": info["path"], "mtime_ns": info["mtime_ns"]}})
        except OSError as err:
            raise error(err, "saving the progress of", done) from err


def _raise_non_integer(unique: list[tuple], inverse: np.ndarray) -> None:
    """Raises a [`LaserInputError`] naming the first sentence (input index) that holds something other than an
    integer token id; returns when there is none."""
    for i, u in enumerate(inverse.tolist()):
        wrong = next((t for t in unique[u] if not isinstance(t, (int, np.integer))), None)
        if wrong is not None:
            raise LaserInputError(f"sentence {i} holds {wrong!r:.40} ({type(wrong).__name__}); expected integer "
                                  "token ids")


def truncation_message(items: list[str], limit: int) -> str:
    """The warning for sentences cut to `limit` tokens; `items` name them (`"sentence 3 (250,000 tokens)"`)."""
    shown = ", ".join(items[:10]) + (f" and {len(items) - 10} more" if len(items) > 10 else "")
    return (f"{len(items)} sentence{'s' if len(items) > 1 else ''} longer than max_sentence_tokens={limit:,} "
            f"embedded as {'their' if len(items) > 1 else 'its'} first {limit - 1:,} tokens + </s>: {shown} "
            "(to embed them whole, raise max_sentence_tokens or set it to None; on the command line "
            "--max-sentence-tokens N, 0 for no limit)")


def _disk_error(err: OSError, doing: str, done: int, *, files: _OutputFiles, n: int) -> OSError:
    """A full disk / I/O error as an [`EmbeddingWriteError`] saying what was kept; other errors unchanged."""
    if err.errno not in DISK_ERRNOS:
        return err
    return EmbeddingWriteError(err.errno, (
        f"{os.strerror(err.errno)} while {doing} {files.partial} ({done:,} of {n:,} lines saved); "
        "free some space and run the same command again: it resumes from there"))
