"""Sentence-embedding API: `LaserEncoder` owns a `LaserModel` and its tokenizer and turns sentences into vectors.

Example::

    from hf_laser import LaserEncoder
    encoder = LaserEncoder.from_pretrained()          # the shipped default model (laser-mini), or a directory / Hub id
    embeddings = encoder.encode(["Hello world.", "Bonjour le monde."], lang=["en", "fr"])   # (2, 1024) float32

Also the batching (`plan_batches`) and the text reading (`read_lines`, `count_lines`) it uses. `encode_file` writes
through `hf_laser.outputs` (partial file, progress, manifest, identity).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from .checkpoints.integration_files import has_laser_tokenizer
from .defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_SENTENCE_TOKENS, DEFAULT_MAX_TOKENS
from .errors import DISK_ERRNOS, EmbeddingWriteError, UsageError, one_line, run_cli  # noqa: F401 (re-exported)
from .model_set import RoutedLaserEncoder
from .modeling.bilstm_numpy import NumpyLaserBiLSTM
from .models import HUB_KWARGS, check_model_dir, looks_local, resolve, resolve_model  # noqa: F401 (re-exported)
from .outputs import (  # noqa: F401 (re-exported)
    MANIFEST_FORMAT,
    OutputFiles,
    embedding_identity,
    identity_changes,
    model_sha256,
    output_lock,
    scan_input,
    tokenizer_sha256,
    write_json_atomic,
)
from .speed import ModelShape, SpeedChoice, from_calibration
from .speed import resolve as choose_speed_mode
from .speed import rule as speed_rule
from .speed.calibration import CANDIDATES, ShapeClass, calibrate, calibration_path, machine_key
from .speed.calibration import candidates as speed_candidates
from .speed.calibration import read_calibrations, reference_scale, slower_than_fp32
from .speed.calibration import workload as calibration_workload
from .speed.cpu import cpu_info, emulated_dtype_message, int8_without_kernels_message
from .text.langid import CHECK_SAMPLE, warn_at_caller
from .text.sonar_languages import SonarLineTokenizer, is_sonar_directory
from .text.text_tokenizer import LaserInputError, LaserTextTokenizer, check_lang_argument, check_lines_argument
from .text.text_tokenizer import read_lines as tokenizer_read_lines

if TYPE_CHECKING:
    import torch

    from .modeling.bilstm import LaserBiLSTM
    from .modeling.modeling_laser import LaserModel

ENGINES = ("torch", "numpy", "auto")

PROGRESS_BAR_MIN_SENTENCES = 10_000  # `encode`'s default progress-bar threshold
# torch 2.13's warning when quantize_dynamic builds qint8 tensors (see from_pretrained(quantize="int8"))
QUANTIZED_TENSOR_DEPRECATION = r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor"
PROGRESS_BAR_DELAY_S = 2.0  # `encode_file`'s bar appears only for runs longer than this
PROGRESS_SAVE_S = 5.0  # `encode_file` saves what it computed of a chunk after this much work (an interrupt loses less)
NUMPY_TOKEN_TABLE_BYTES = 256 << 20  # the NumPy engine's first-layer projections shared by a chunk's batches


# a transformer's batch costs `sentences x longest`: its sentences are at least this fraction of the longest (padding
# at most a fifth). The benchmark's FLORES sample padded to 70 % with the token budget alone (docs/sonar.md).
PADDED_BATCH_MIN_LENGTH_RATIO = 0.8


def plan_batches(lengths: Sequence[int], max_tokens: int | None = DEFAULT_MAX_TOKENS,
                 batch_size: int | None = None, min_length_ratio: float | None = None) -> list[np.ndarray]:
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
        min_length_ratio: a batch holds no sentence shorter than this fraction of its longest (None: no bound).
            For models that compute over padding (transformers: LASER3 students, SONAR), where a batch's cost is
            `sentences x longest` whatever the true lengths: 0.8 bounds the padding at a fifth of a batch.

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
        if min_length_ratio is not None:
            # lengths[order] descends: the sentences at least min_length_ratio x longest come first
            shortest = min_length_ratio * longest
            n = max(1, min(n, int(np.searchsorted(-lengths[order[start:start + n]], -shortest, side="right"))))
        batches.append(order[start:start + n])
        start += n
    return batches


def read_lines(path: str | os.PathLike, start: int = 0) -> Iterator[str]:
    """Yields the lines of a UTF-8 file split on `'\\n'` only (a `\\r` or `\\u2028` inside a line stays inside),
    without their newline, from line `start` on. Invalid bytes survive as surrogates (`errors="surrogateescape"`)."""
    return islice(tokenizer_read_lines(path), start, None)


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines as [`read_lines`] yields them (a last line without newline counts)."""
    return scan_input(path, sha256=False)["lines"]


def _sentence_list(sentences) -> Sequence:
    """A batch of sentences as a sequence; a dict, a set, bytes, a lone non-iterable are errors (a dict's keys or a
    set's order are no list of sentences)."""
    if isinstance(sentences, str):
        raise LaserInputError("expected a list of sentences, got a single str; wrap it in a list")
    check_lines_argument(sentences)
    return sentences if isinstance(sentences, Sequence) else list(sentences)


def _say(message: str) -> None:
    print(f"hf_laser: {message}", file=sys.stderr)


def batched(items: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class LaserEncoder:
    """A LASER model plus its tokenizer, for people who just want sentence vectors.

    Args:
        model: a [`LaserModel`] (or the plain-PyTorch [`~bilstm.LaserBiLSTM`], same embeddings; or the NumPy
            [`~bilstm_numpy.NumpyLaserBiLSTM`], the same to float round-off, CPU only, no torch import).
        tokenizer: a `LaserTokenizer` (or the transformers-free [`~text_tokenizer.LaserTextTokenizer`] it is built
            on, which is all the encoder uses), or None when only pre-tokenized input will be given.
        vocab: token → id mapping for pre-tokenized input (defaults to the tokenizer's vocabulary).
    """

    def __init__(self, model: LaserModel | LaserBiLSTM | NumpyLaserBiLSTM, tokenizer=None,
                 vocab: dict[str, int] | None = None):
        self.engine = "numpy" if type(model).__name__ == "NumpyLaserBiLSTM" else "torch"
        self.model = model if self.engine == "numpy" else model.eval()
        self.tokenizer = tokenizer
        if vocab is None and tokenizer is not None:
            vocab = tokenizer.get_vocab()
        self.vocab = vocab
        self.eos_id = model.config.eos_token_id
        self.unk_id = model.config.unk_token_id
        quantized = self.engine == "torch" and any(
            type(m).__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized")) for m in model.modules())
        self.quantize = "int8" if quantized else None
        self.speed = None  # a speed.SpeedChoice where loaded with from_pretrained(speed=...)
        # a BiLSTM packs each batch by its true lengths; a transformer computes over the padding: bound it
        config = model.config
        pads = getattr(config, "model_type", None) == "sonar" or getattr(config, "encoder_type", None) == "transformer"
        self.min_length_ratio = PADDED_BATCH_MIN_LENGTH_RATIO if pads else None
        self._model_sha256: str | None = None  # of the weights as loaded (before a dtype cast / quantisation)
        self._tokenizer_sha256: str | None = None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | None = None, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, quantize: str | None = None, *,
                        torch_only: bool = False, engine: str | None = None, speed: str | None = None,
                        **kwargs) -> LaserEncoder:
        """Loads model and tokenizer from a directory written by `hf-laser convert` / `save_pretrained` (or a Hub id).

        Args:
            path: local directory or Hub repo id; None: the model shipped with the package
                (`hf_laser.DEFAULT_MODEL`, laser-mini), announced once on stderr; a shipped model's name
                (`"laser-mini"`, `hf_laser.models.SHIPPED_MODELS`) where no local path has it. A model set (a directory with
                `laser_model_set.json`, or a list of model directories: LASER2 and LASER3 students) gives a
                [`~model_set.RoutedLaserEncoder`], which embeds each sentence with the model of its language.
                `"laser2"` / `"laser3-LANG"` (no such local directory): the original release, downloaded from Meta's
                addresses and converted once into the cache ([`~download.resolve_named_model`]).
            device: where the model runs (default: CPU).
            dtype: model dtype (`torch.float32` default, also for a directory whose config names another dtype;
                `torch.bfloat16`/`torch.float16` trade fidelity for speed).
            quantize: `"int8"` applies dynamic int8 quantisation to the LSTM, or to the linear layers of a LASER3
                transformer (CPU only; faster, as measured in docs/measured/; embeddings no longer within 1e-5 of
                the original, and each batch's range sets the quantisation, so a vector also depends a little on the
                sentences batched with it).
            torch_only: load the weights into the plain-PyTorch [`~bilstm.LaserBiLSTM`] (same embeddings, no
                `save_pretrained`) and the tokenizer into [`~text_tokenizer.LaserTextTokenizer`] (same ids, no
                `tokenizer(...)` call) when `path` is a plain local LASER directory and no other loading argument is
                given, without importing transformers: about half of the start-up of a process (the command-line
                tools use it). Otherwise, and for anything unusual, `LaserModel` / `LaserTokenizer.from_pretrained`
                (without transformers' "Loading weights" bar for a local directory).
            engine: what computes the embeddings. `"torch"`: PyTorch, every device, dtype and option.
                `"numpy"`: [`~bilstm_numpy.NumpyLaserBiLSTM`], float32 on the CPU without importing torch (1.3-3 s
                of a process's start-up; also faster per sentence on a small CPU, docs/measured/laser-mini-cli.md),
                the embeddings of `"torch"` to float round-off (~1e-6); it needs a plain local LASER directory
                (`model.safetensors` matching its config) and no `device` other than the CPU, `dtype` other than
                float32, `quantize` or other loading argument: anything else is a ValueError. `"auto"`: `"numpy"`
                where it can, else `"torch"`. `encoder.engine` says which was used, and an embedding manifest
                records it. None (default): `"auto"`, as the command line (a fresh process embeds its first sentence
                with laser-mini in well under a second instead of several: docs/measured/start-up.md), or what
                `speed` says; give `engine="torch"` for a PyTorch module in `encoder.model` (`save_pretrained`,
                another device, autograd).
            speed: a speed mode instead of `dtype` / `quantize` / `engine` ([`~speed`]): `"fp32"` (the original's
                numbers, on the fastest float32 engine that can load the model), `"bf16"`, `"int8"`, or `"auto"`:
                the fastest mode on this machine within the fidelity bounds (Tatoeba error within 0.2 points,
                cosine to float32 of 0.999 or more), measured the first time for this kind of model on this machine
                (a few seconds, one line on stderr; kept in the user's cache, [`~speed.calibration`]; a mode other
                than float32 only where it beats float32 beyond the timings' noise); float32 on a GPU and for SONAR.
                A [`~speed.SpeedChoice`] (from [`decide_speed`]: a driver's decision for its workers) is used as
                it is. An explicit mode measured slower than float32 here says so (a `UserWarning`).
                `encoder.speed` says what was chosen and why; an embedding's manifest records the engine, dtype
                and quantisation it came from. A model set's members each choose for themselves.
        """
        if speed is not None and (dtype is not None or quantize is not None or engine is not None):
            raise ValueError("speed= chooses the dtype, quantisation and engine: give speed, or dtype / quantize / "
                             "engine, not both")
        if engine is None and speed is None:
            engine = "auto"  # the command line's choice: NumPy where it can (no torch nor transformers to import)
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
        resolved = resolve(path, who="LaserEncoder", hub_kwargs=kwargs)
        if resolved.given is not None and resolved.location != resolved.given and resolved.kind in ("directory",
                                                                                                   "model_set"):
            # a Hub id, fetched: its snapshot is a local directory, and the Hub's arguments said which one
            kwargs = {k: v for k, v in kwargs.items() if k not in HUB_KWARGS}
        if resolved.is_set:
            # LASER2 + LASER3 students: one encoder that embeds each sentence with the model of its language
            return RoutedLaserEncoder.from_pretrained(resolved.location, cls.from_pretrained, device=device,
                                                      dtype=dtype, quantize=quantize, torch_only=torch_only,
                                                      engine=engine, **({"speed": speed} if speed is not None else {}),
                                                      **kwargs)
        path = resolved.location
        sonar = is_sonar_directory(path)
        if sonar and engine == "numpy":
            raise ValueError(f"engine='numpy' computes LASER's BiLSTMs; {path} is a SONAR text encoder (a "
                             "transformer): use engine='torch'")
        if sonar and engine == "auto":
            engine = "torch"
        if speed is not None:
            choice = _resolve_speed(speed, path, device, kwargs)
            encoder = cls.from_pretrained(path, device=device, dtype=choice.dtype(), quantize=choice.quantize,
                                          torch_only=torch_only, engine=choice.engine, **kwargs)
            encoder.speed = choice
            return encoder
        if engine != "torch":
            why_not = _why_not_numpy(path, device, dtype, quantize, kwargs)
            model = tokenizer_loaded = None
            if why_not is None:

                # the weights (NumPy, mostly outside the GIL) load while the tokenizer's files are parsed
                with ThreadPoolExecutor(max_workers=1) as pool:
                    future = pool.submit(_load_numpy_model, path)
                    try:
                        tokenizer_loaded = load_tokenizer(path, plain=True)
                    except (OSError, ValueError) as err:
                        tokenizer_loaded = err
                    model = future.result()
                if model is None:
                    why_not = "it is not a plain local LASER directory (one model.safetensors matching a float32 config)"
            if model is not None:
                if isinstance(tokenizer_loaded, Exception):
                    raise tokenizer_loaded
                return cls(model, *tokenizer_loaded)
            if engine == "numpy":
                raise ValueError(f"engine='numpy' cannot load {path}: {why_not}; use engine='torch'")
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        # lazy: modeling.bilstm imports torch
        from .modeling.bilstm import LaserBiLSTM

        model = LaserBiLSTM.from_directory(path) if torch_only and not kwargs and not sonar else None
        if model is None:
            # lazy: transformers (the NumPy engine and the command line's start run without it)
            from transformers.utils import logging as hf_logging

            # lazy: modeling.modeling_laser imports torch, transformers
            from .modeling.modeling_laser import LaserModel

            quiet = Path(path).is_dir() and hf_logging.is_progress_bar_enabled()
            if quiet:  # no "Loading weights" bar for a local directory (download bars stay for Hub ids)
                hf_logging.disable_progress_bar()
            try:
                if sonar:
                    # lazy: modeling.modeling_sonar imports torch, transformers
                    from .modeling.modeling_sonar import SonarModel

                    model = SonarModel.from_pretrained(path, **kwargs)
                else:
                    model = LaserModel.from_pretrained(path, **kwargs)
            finally:
                if quiet:
                    hf_logging.enable_progress_bar()
            if any(p.data_ptr() % 64 for p in model.parameters()):
                # Weights memory-mapped at unaligned offsets of the file take other CPU matrix-product paths than
                # aligned ones (results ~1e-8 apart): copied, every loading path gives the same bits.
                model._apply(torch.clone)
        if dtype is None and any(p.is_floating_point() and p.dtype != torch.float32 for p in model.parameters()):
            # the documented default, whatever dtype the directory's config names: a float16 config would compute
            # in float16 (other numbers, and much slower on a CPU); storing in float16 is still fine
            dtype = torch.float32
        weights_sha256 = model_sha256(model) if dtype is not None or quantize is not None else None
        if dtype is not None:
            slow = emulated_dtype_message(dtype, device, flag=f"dtype={dtype}")
            if slow:
                warn_at_caller(slow)
            model = model.to(dtype)
        if quantize is not None:
            if quantize != "int8":
                raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
            if device is not None and torch.device(device).type != "cpu":
                raise ValueError("int8 dynamic quantisation runs on CPU only")

            slow = int8_without_kernels_message(cpu_info())
            if slow:
                warn_at_caller(slow)
            # the LSTM of a BiLSTM, the projections of a transformer (a BiLSTM encoder has no nn.Linear)
            with warnings.catch_warnings():
                # torch 2.13 deprecates the quantized tensors this call builds ("torch.quantize_per_tensor ... are
                # deprecated", pytorch#184982): three lines of warning on every int8 load, about torch's future, not
                # about this run; that one warning is silenced here, any other still shows
                warnings.filterwarnings("ignore", message=QUANTIZED_TENSOR_DEPRECATION, category=UserWarning)
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.LSTM, torch.nn.Linear},
                                                               dtype=torch.qint8)
        if device is not None:
            model = model.to(device)
        if sonar:
            tokenizer = SonarLineTokenizer.from_pretrained(path, **{k: v for k, v in kwargs.items()
                                                                    if k in ("revision", "cache_dir", "token")})
            vocab = tokenizer.get_vocab()
        else:
            tokenizer, vocab = load_tokenizer(path, plain=torch_only and not kwargs)
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
        if self.engine == "numpy":
            dtype = "float32"
        else:
            dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), None)
        return {"model": self._model_sha256, "tokenizer": self._tokenizer_sha256,
                "model_dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
                "quantize": self.quantize,
                # the engines, and the NumPy engine's revisions, agree to round-off, not to the bit: a resume never
                # mixes them (absent for torch, so the manifests written before the NumPy engine stay valid)
                **({"engine": self.engine, "engine_revision": self.model.numerics_revision}
                   if self.engine != "torch" else {})}

    def _move_to(self, device) -> None:
        """Moves the model to `device`; a device it cannot run on (`meta`, a missing GPU) is a ValueError and the
        model stays where it was."""
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        if self.engine == "numpy":
            if torch.device(device).type == "cpu":
                return
            raise ValueError(f"this encoder computes with NumPy on the CPU (engine='numpy'), not on {device}: load it "
                             "with engine='torch' to use another device")
        device = torch.device(device)
        if device.type == "meta":
            raise ValueError("device='meta' holds no data, so nothing can be embedded there; give cpu or cuda")
        previous = self.device
        try:
            self.model.to(device)
        except (RuntimeError, AssertionError, ValueError) as err:
            self.model.to(previous)
            raise ValueError(f"cannot move the model to {device}: {one_line(err)}") from None

    @property
    def dim(self) -> int:
        """Dimension of the sentence embeddings."""
        return self.model.config.embedding_dim

    @property
    def device(self) -> torch.device:
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        return torch.device("cpu") if self.engine == "numpy" else next(self.model.parameters()).device

    def _device_name(self) -> str:
        return "cpu" if self.engine == "numpy" else str(self.device)

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
        if pretokenized and getattr(self.tokenizer, "mode", None) == "sonar":
            raise LaserInputError("SONAR takes raw text (its ids begin with each sentence's language tag): "
                                  "pretokenized input is for LASER models")
        if pretokenized:
            lang = check_lang_argument(lang, None if lang is None or isinstance(lang, str) else len(sentences))
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
                   on_truncated: Callable[[list[tuple[int, int]]], None] | None = None,
                   _checkpoint: _ChunkCheckpoint | None = None) -> torch.Tensor:
        """Embeds id sequences (each ending with `</s>`). Returns a CPU float32 tensor `(len(ids), dim)` in input
        order, whatever the model dtype or engine. `progress`, if given, is called with the number of (distinct) sentences
        of each batch once it is embedded.

        A sequence longer than `max_sentence_tokens` (default 100,000; None: no limit) is embedded as its first
        `max_sentence_tokens - 1` ids plus its last one (`</s>`), and a `UserWarning` names it: the CPU LSTM kernel
        (oneDNN) fails outright on a sequence of about 260,000 tokens at LASER's size, and memory grows with the
        length, so one runaway line would otherwise stop the whole run. Shorter sequences are untouched.
        `on_truncated`, if given, is called with `[(index, length), ...]` instead of the warning.
        """
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        return torch.from_numpy(self._embed_ids(
            ids, max_tokens=max_tokens, batch_size=batch_size, device=device, show_progress_bar=show_progress_bar,
            progress=progress, max_sentence_tokens=max_sentence_tokens, on_truncated=on_truncated,
            checkpoint=_checkpoint))

    def _embed_ids(self, ids, *, max_tokens, batch_size, device, show_progress_bar, progress=None,
                   max_sentence_tokens=DEFAULT_MAX_SENTENCE_TOKENS, on_truncated=None,
                   checkpoint: _ChunkCheckpoint | None = None) -> np.ndarray:
        """[`encode_ids`] as a float32 NumPy array (no torch import with `engine="numpy"`)."""
        if isinstance(ids, (str, bytes, bytearray, Mapping, set, frozenset)):
            raise LaserInputError(f"expected a list of token-id sequences, got {type(ids).__name__}")
        if max_sentence_tokens is not None and max_sentence_tokens < 2:
            raise ValueError(f"max_sentence_tokens must be at least 2 (one token and </s>), got {max_sentence_tokens}")
        max_sentence_tokens, model_limit = self._sentence_limit(max_sentence_tokens)
        if device is not None:
            # lazy: torch (the NumPy engine and the command line's start run without it)
            import torch

            if torch.device(device) != self.device:
                self._move_to(device)
        device = self.device if self.engine == "torch" else None
        out = np.empty((len(ids), self.dim), dtype=np.float32)
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
                                                  max_sentence_tokens, model_limit))
        if show_progress_bar is None:
            show_progress_bar = len(ids) >= PROGRESS_BAR_MIN_SENTENCES
        # not a decorator: the truncation warning above must point at the caller, not at torch's wrapper
        with self._no_grad():
            return self._encode_unique(unique, lengths, inverse, out, device=device, max_tokens=max_tokens,
                                       batch_size=batch_size, show_progress_bar=show_progress_bar, progress=progress,
                                       checkpoint=checkpoint)

    def _sentence_limit(self, requested: int | None) -> tuple[int | None, bool]:
        """`(limit, from the model)`: `requested`, or the model's own limit where that is lower: a LASER3
        transformer, its `max_positions` (fairseq's `max_source_positions`, `<s>` included: learned positions end
        there, and the original trained on sentences that short would compute attention over all the tokens of a
        longer one at once: a 100,000-token line, 160 GB of attention weights), with a warning naming the lines
        cut; SONAR, its 514 positions (its tokenizer cuts text there, as SONAR's pipeline does). With
        `requested=None` (no limit asked for), a student with sinusoidal positions is not cut: those extend to any
        length, as fairseq's do, so it computes what the original computes."""
        config = self.model.config
        if getattr(config, "model_type", None) == "sonar":
            cap = config.max_position_embeddings
        elif getattr(config, "encoder_type", "bilstm") != "transformer":
            return requested, False
        elif requested is None and getattr(config, "position_embedding_type", "learned") == "sinusoidal":
            return None, False
        else:
            cap = config.max_positions - int(bool(config.prepend_bos))
        return (cap, True) if requested is None or requested > cap else (requested, False)

    def _no_grad(self):
        if self.engine == "numpy":
            return nullcontext()
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        return torch.inference_mode()

    def _encode_unique(self, unique, lengths, inverse, out, *, device, max_tokens, batch_size, show_progress_bar,
                       progress, checkpoint: _ChunkCheckpoint | None = None) -> np.ndarray:
        """[`encode_ids`] on the distinct sequences `unique` (`lengths`), written to `out[i] = emb[inverse[i]]`."""
        vocab_size = self.model.config.vocab_size
        unique_out = np.empty((len(unique), self.dim), dtype=np.float32)
        with tqdm(total=len(unique), disable=not show_progress_bar, unit="sent", desc="embedding") as bar:
            plan = plan_batches(lengths, max_tokens, batch_size, self.min_length_ratio)
            skip = checkpoint.restore(plan, unique_out) if checkpoint is not None else 0
            # computed from all the sentences, whatever is restored: a resumed chunk gets the same bits
            table = self._numpy_token_table(unique) if self.engine == "numpy" and skip < len(plan) else None
            if skip:
                restored = sum(len(b) for b in plan[:skip])
                bar.update(restored)
                if progress is not None:
                    progress(restored)
            for b, batch in enumerate(plan):
                if b < skip:
                    continue
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
                if self.engine == "numpy":
                    unique_out[batch] = self.model.pooled(ids_array, batch_lengths, table)
                else:
                    unique_out[batch] = self._torch_pooled(ids_array, mask, batch_lengths, device)
                bar.update(len(batch))
                if progress is not None:
                    progress(len(batch))
                if checkpoint is not None:
                    checkpoint.batch_done(b + 1, plan, unique_out)
        np.take(unique_out, inverse, axis=0, out=out)
        return out

    def _numpy_token_table(self, unique):
        """The NumPy model's first-layer projections of every token of the sentences `unique`, shared by their
        batches (2,982 rows instead of 13,312 for 10,000 Tatoeba lines in 10 batches); None when it would take more
        than `NUMPY_TOKEN_TABLE_BYTES` (each batch then projects its own tokens) or when an id is not valid (the
        batch that holds it says which)."""
        flat = np.array(list(chain.from_iterable(unique)))
        if flat.dtype.kind not in "iu" or int(flat.min()) < 0 or int(flat.max()) >= self.model.config.vocab_size:
            return None
        tokens = np.unique(flat)
        if self.model.token_table_bytes(len(tokens)) > NUMPY_TOKEN_TABLE_BYTES:
            return None
        return self.model.token_table(tokens)

    def _torch_pooled(self, ids_array: np.ndarray, mask: np.ndarray, batch_lengths: np.ndarray,
                      device) -> np.ndarray:
        """The PyTorch model's sentence embeddings of one right-padded batch, as float32 NumPy."""
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        try:
            emb = self.model(torch.from_numpy(ids_array).to(device, non_blocking=True),
                             attention_mask=torch.from_numpy(mask).to(device, non_blocking=True)).pooler_output
        except RuntimeError as err:
            if "could not create a primitive" not in str(err):
                raise
            raise ValueError(
                f"a sentence of {int(batch_lengths[0]):,} tokens is too long for the CPU LSTM kernel (oneDNN "
                "fails on one sequence of about 260,000 tokens at LASER's size): embed it with a length limit "
                f"(max_sentence_tokens, --max-sentence-tokens; default {DEFAULT_MAX_SENTENCE_TOKENS:,}) "
                "instead of none") from None
        return emb.float().cpu().numpy()

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
                per sentence, or `"auto"` to detect it per sentence ([`hf_laser.text.langid`]). None: the tokenizer's
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
        emb = self._embed_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                              show_progress_bar=show_progress_bar, max_sentence_tokens=max_sentence_tokens)
        if normalize_embeddings:
            emb = self._normalized(emb)
        if single:
            emb = emb[0]
        if convert_to == "numpy":
            return emb
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        return torch.from_numpy(emb)

    def _normalized(self, emb: np.ndarray) -> np.ndarray:
        """Rows scaled to unit L2 norm (a zero row stays zero), as `torch.nn.functional.normalize` computes it
        (with the torch engine, by that very function: the same bits as before the NumPy engine existed)."""
        if self.engine == "torch":
            # lazy: torch (the NumPy engine and the command line's start run without it)
            import torch

            return torch.nn.functional.normalize(torch.from_numpy(emb), dim=-1).numpy()
        norms = np.sqrt(np.einsum("ij,ij->i", emb, emb, dtype=np.float32))
        return emb / np.maximum(norms, np.float32(1e-12))[:, None]

    def encode_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, lang: str | None = None,
                    pretokenized: bool = False, fp16: bool = False, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                    batch_size: int | None = None, chunk_lines: int = DEFAULT_CHUNK_LINES,
                    normalize_embeddings: bool = False, device: str | torch.device | None = None,
                    show_progress_bar: bool | None = None, resume: bool = True, num_proc: int = 1,
                    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS, wait: bool = False) -> np.ndarray:
        """Embeds a text file (one sentence per line, split on `'\\n'` only) into a `.npy` file, streaming.

        `lang` as in [`encode`] (one code, `"auto"`, or None: the default language, checked against the first 100
        lines). A line of more than `max_sentence_tokens` tokens is embedded as its first `max_sentence_tokens - 1`
        tokens + `</s>`, and a `UserWarning` gives its line number (see [`encode_ids`]); the rest of the file is
        embedded as usual.

        The rows are written chunk by chunk (`chunk_lines` lines in memory at a time) into `OUTPUT.partial`, which
        is renamed to `OUTPUT` once complete, so `OUTPUT` is never a half-written file. Progress is saved after every
        chunk with its sha256, and inside a chunk every `PROGRESS_SAVE_S` (5) seconds of work (the batches done, in
        `OUTPUT.partial`'s rows not written yet, so the space reserved for the output is all a run needs); a resume
        checks the checksums of what it keeps and starts over when rows changed. `OUTPUT.manifest.json` records what
        `OUTPUT` was computed from (see [`embedding_identity`]: the input's sha256, size and line count,
        the language, hashes of the model weights and tokenizer files, model dtype, quantisation, `fp16`,
        `normalize_embeddings`, the batching, the hf-laser version; plus, for information, the input's path and
        mtime, the device and the timing). With `resume=True`:

        - a complete `OUTPUT` whose manifest matches is returned as is;
        - an interrupted run of the same computation (`OUTPUT.partial` + `OUTPUT.partial.json`) continues where
          it stopped, and ends bit-identical to an uninterrupted run;
        - anything else (different input, language, model or options; no manifest, e.g. a file from an older
          hf-laser; a modified, truncated or unreadable file) is recomputed, and a line on stderr says why.

        `resume=False` always recomputes. An `OUTPUT` that is not a `.npy` file is never replaced without
        `resume=False`. One run at a time writes an output: the run holds `OUTPUT.lock` (an OS file lock, see
        [`hf_laser.outputs.output_lock`]) from before it looks at `OUTPUT` until `OUTPUT` and its manifest are
        written; another run of the same output raises [`hf_laser.outputs.OutputBusyError`] naming the process that
        holds it, or with `wait=True` waits for it (and then reuses or resumes what it left). The disk space is
        reserved before the first chunk (`posix_fallocate`): a full disk or an I/O error raises
        [`EmbeddingWriteError`] and keeps what was done, so the same call resumes.

        Returns:
            The output as a read-only memory-mapped array (float32, or float16 with `fp16=True`).
        """
        return self._encode_file(input_path, output_path, lang=lang, pretokenized=pretokenized, fp16=fp16,
                                 max_tokens=max_tokens, batch_size=batch_size, chunk_lines=chunk_lines,
                                 normalize_embeddings=normalize_embeddings, device=device,
                                 show_progress_bar=show_progress_bar, resume=resume, num_proc=num_proc,
                                 max_sentence_tokens=max_sentence_tokens, wait=wait)[0]

    def _encode_file(self, input_path, output_path, *, lang, pretokenized, fp16, max_tokens, batch_size, chunk_lines,
                     normalize_embeddings, device, show_progress_bar, resume, num_proc,
                     max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS, say=_say,
                     fresh_reason: str = "resume=False", wait: bool = False,
                     manifest_info: dict | None = None) -> tuple[np.ndarray, dict]:
        """[`encode_file`], also returning `{"lines", "computed", "resumed_at", "reused", "seconds"}`;
        `manifest_info` goes into the manifest for information (not the identity: a model set's member)."""
        t0 = time.perf_counter()
        input_path, output_path = Path(input_path), Path(output_path)
        if input_path.is_dir():
            raise IsADirectoryError(f"input {input_path} is a directory, not a text file")
        if not input_path.is_file():
            raise FileNotFoundError(f"input file not found: {input_path}" if not input_path.exists()
                                    else f"input {input_path} is not a regular file (read a stream with encode)")
        # every option is checked before a file is created
        if chunk_lines <= 0:
            raise ValueError(f"chunk_lines must be positive, got {chunk_lines}")
        if max_tokens is not None and max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if batch_size is not None and batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if max_sentence_tokens is not None and max_sentence_tokens < 2:
            raise ValueError(f"max_sentence_tokens must be at least 2 (one token and </s>), got {max_sentence_tokens}")
        if output_path.is_dir():
            raise UsageError(f"output {output_path} is a directory; give a .npy file name")
        if output_path.exists() and output_path.samefile(input_path):
            raise UsageError(f"output {output_path} is the input file")
        if pretokenized and getattr(self.tokenizer, "mode", None) == "sonar":
            raise LaserInputError("SONAR takes raw text (its ids begin with each sentence's language tag): "
                                  "pretokenized input is for LASER models")
        if not pretokenized and self.tokenizer is not None:
            if lang is None:
                lang = self.tokenizer.resolve_lang(None, list(islice(read_lines(input_path), CHECK_SAMPLE)))
            elif not isinstance(lang, str):
                raise LaserInputError(f"encode_file takes one language for the whole file (a code or 'auto'), "
                                      f"got {type(lang).__name__}")
            lang = check_lang_argument(lang)
        info = scan_input(input_path)
        n, dim = info["lines"], self.dim
        dtype = np.dtype(np.float16 if fp16 else np.float32)
        shape = (n, dim)
        identity = embedding_identity(self, info, lang=lang, pretokenized=pretokenized, fp16=fp16,
                                      normalize=normalize_embeddings, max_tokens=max_tokens, batch_size=batch_size,
                                      chunk_lines=chunk_lines, max_sentence_tokens=max_sentence_tokens)
        if not output_path.parent.is_dir():
            say(f"creating the directory {output_path.parent} of {output_path}")
            output_path.parent.mkdir(parents=True, exist_ok=True)
        if why_not_text := _not_text(input_path):
            message = f"{input_path} does not look like text ({why_not_text}); embedding it anyway, one row per line"
            if say is _say:
                warn_at_caller(message)
            else:
                say(f"warning: {message}")
        # one writer per output: taken before anything of it is read or deleted, held until OUT and its manifest
        # are written
        with output_lock(output_path, wait=wait, say=say):
            files = OutputFiles(output_path)
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
                    part = files.chunk_state
                    say(f"resuming {output_path} at line {done:,} of {n:,}" + (
                        f" (with {part['rows']:,} sentences of the next chunk saved)" if part else ""))
            elif output_path.exists() or files.partial.exists():
                say(f"recomputing {output_path} from scratch ({fresh_reason})")
            writer = files.start(identity, info, shape, dtype, done)
            try:
                done = stats["resumed_at"] = writer.done
                if show_progress_bar is None:
                    show_progress_bar = sys.stderr.isatty()
                chunks = batched(read_lines(input_path, start=done), chunk_lines)

                def report_truncated(cut, first_line):
                    limit, model_limit = self._sentence_limit(max_sentence_tokens)
                    message = truncation_message([f"line {first_line + i:,} ({n:,} tokens)" for i, n in cut],
                                                 limit, model_limit) + f" [{input_path}]"
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
                        emb = self._embed_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                                              show_progress_bar=False, progress=bar.update,
                                              max_sentence_tokens=max_sentence_tokens,
                                              on_truncated=partial(report_truncated, first_line=writer.done + 1),
                                              checkpoint=_ChunkCheckpoint(writer, writer.chunk_part(self.dim)))
                        if normalize_embeddings:
                            emb = self._normalized(emb)
                        writer.append(emb)
                        # the batches counted distinct sentences; repeated lines come here
                        bar.update(writer.done - bar.n)
                writer.close()
                st = input_path.stat()
                if (st.st_size, st.st_mtime_ns) != (info["size"], info["mtime_ns"]):
                    files.discard_partial()
                    raise ValueError(f"{input_path} changed while it was being embedded; run again once it is final")
                seconds = time.perf_counter() - t0
                writer.commit(**(manifest_info or {}), device=self._device_name(), seconds=round(seconds, 3),
                              resumed_at=stats["resumed_at"])
            finally:
                writer.close()
            stats.update(computed=n - stats["resumed_at"], seconds=seconds)
            return np.load(output_path, mmap_mode="r"), stats


def _resolve_speed(speed, path, device, kwargs, *, force: bool = False, say=None) -> SpeedChoice:
    """`from_pretrained(speed=...)` as a [`~speed.SpeedChoice`] for the model at `path` (its config.json read for
    its shape: a Hub id's is fetched, as loading it would); `"auto"` on the CPU is measured once per machine and
    shape class ([`~speed.calibration`]; `force`: measured again)."""
    if isinstance(speed, SpeedChoice):
        return speed  # decided already (by the driver of a run spread over processes or machines)
    if device is None:
        device_type = "cpu"
    else:
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        device_type = torch.device(device).type
    if speed != "auto":
        choice = choose_speed_mode(speed, device_type)
        if device_type == "cpu" and speed != "fp32" and calibration_path().is_file():
            config = _model_config(path, kwargs)
            entry = read_calibrations().get(_calibration_key(path, config, kwargs))
            slower = entry and slower_than_fp32(entry, speed)
            if slower:
                warn_at_caller(f"speed={speed!r} was measured {slower:.1f}x slower than float32 for this kind of model "
                               f"on this machine ({entry['measured']}; `hf-laser env --calibrate` measures again): "
                               "speed='fp32' or 'auto' is faster here")
        return choice
    config = _model_config(path, kwargs)
    ruled = speed_rule(ModelShape.from_config(config), device_type)
    if ruled is not None:
        return ruled
    return from_calibration(_calibrate(path, config, kwargs, force=force, say=say))


def _model_config(path, kwargs) -> dict:
    config_file = Path(str(path)).expanduser() / "config.json"
    if not config_file.is_file():
        # lazy: the Hub client, needed for Hub calls only
        from huggingface_hub import hf_hub_download

        config_file = hf_hub_download(str(path), "config.json", revision=kwargs.get("revision"),
                                      cache_dir=kwargs.get("cache_dir"))
    return json.loads(Path(config_file).read_text(encoding="utf-8"))


def _numpy_engine_may_load(path, config, kwargs) -> bool:
    return (config.get("encoder_type", "bilstm") == "bilstm" and _why_not_numpy(path, None, None, None, kwargs) is None
            and (Path(path) / "model.safetensors").is_file())


def _calibration_key(path, config, kwargs) -> str:
    return machine_key(ShapeClass.from_config(config), _numpy_engine_may_load(path, config, kwargs))


def _calibrate(path, config, kwargs, *, force: bool = False, say=None) -> dict:
    """The calibration entry of this model's shape class on this machine: kept, or measured now on the model at
    `path` itself (each candidate loaded as `from_pretrained` loads it, and run on [`calibration.workload`]; a
    candidate on PyTorch, where the default is the NumPy engine, also pays for importing torch in a fresh process)."""
    key = _calibration_key(path, config, kwargs)
    if not force:
        kept = read_calibrations().get(key)
        if kept is not None:
            return kept  # (without importing torch: a kept NumPy choice loads without it)
    # lazy: torch (the NumPy engine and the command line's start run without it)
    import torch

    shape = ShapeClass.from_config(config)
    numpy_engine = _numpy_engine_may_load(path, config, kwargs)
    names = [c.name for c in speed_candidates(cpu_info(), shape.encoder_type, numpy_engine)]

    def load(name):
        candidate = CANDIDATES[name]
        if candidate.engine == "numpy":
            loading = {"engine": "numpy"}
        else:
            loading = {"engine": "torch", "torch_only": True,
                       "dtype": torch.bfloat16 if candidate.mode == "bf16" else None,
                       "quantize": "int8" if candidate.mode == "int8" else None, **kwargs}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                encoder = LaserEncoder.from_pretrained(path, **loading)
            except (OSError, ValueError):
                return None
        seconds = time.perf_counter() - t0
        ids = calibration_workload(shape, int(config.get("vocab_size", 1000)), encoder.eos_id)
        return partial(encoder._embed_ids, ids, max_tokens=DEFAULT_MAX_TOKENS, batch_size=None, device=None,
                       show_progress_bar=False), seconds

    torch_start = _torch_import_seconds() if numpy_engine else 0.0
    shared = {name: torch_start for name in names if CANDIDATES[name].engine == "torch"}
    workload_ids = calibration_workload(shape, int(config.get("vocab_size", 1000)), 2)
    return calibrate(key, shape, names, load, scale=reference_scale(workload_ids), shared_start=shared, force=True,
                     say=say)


def _torch_import_seconds() -> float:
    """What importing torch costs a fresh process here (a process of `python -c "import torch"` less one of
    `python -c pass`): what a mode on PyTorch pays that the NumPy engine does not."""
    def wall(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=False, capture_output=True)
        return time.perf_counter() - t0

    return max(0.0, wall("import torch") - wall("pass"))


def decide_speed(speed, model=None, device=None, **kwargs):
    """What `LaserEncoder.from_pretrained(model, speed=speed, device=device)` would compute in, decided here once:
    the [`~speed.SpeedChoice`] to give every worker of a run spread over processes or machines (`hf-laser
    embed-shards`, [`~mining.on_ray`]), so that they all compute alike (a calibration on each could differ). `speed`
    None is returned as None; a model set's members choose for themselves (its `speed` is returned as given)."""
    if speed is None or isinstance(speed, SpeedChoice):
        return speed
    resolved = resolve(model, who="LaserEncoder")
    if resolved.is_set:
        return speed
    return _resolve_speed(speed, resolved.location, device, kwargs)


def calibrate_speed(model=None, *, say=None) -> tuple[dict, ShapeClass]:
    """Measures `speed="auto"`'s candidates again for `model`'s shape class on this machine (`hf-laser env
    --calibrate`): `(calibration entry, shape class)`, the entry kept for the next `auto`."""
    path = resolve(model, who="LaserEncoder").location
    config = _model_config(path, {})
    return _calibrate(path, config, {}, force=True, say=say), ShapeClass.from_config(config)


def _why_not_numpy(path, device, dtype, quantize, kwargs) -> str | None:
    """Why `engine="numpy"` cannot serve these loading arguments (None: it can, if the directory is plain)."""
    if device is not None and str(device) != "cpu":
        return f"it computes on the CPU only (device={device!r})"
    if dtype is not None and str(dtype).removeprefix("torch.") != "float32":
        return f"it computes in float32 only (dtype={dtype})"
    if quantize is not None:
        return f"it has no quantisation (quantize={quantize!r})"
    if kwargs:
        return f"it takes no other loading argument ({', '.join(sorted(kwargs))})"
    if not Path(path).is_dir():
        return "it loads local directories only"
    return None


def _load_numpy_model(path):
    return NumpyLaserBiLSTM.from_directory(path)


def load_tokenizer(path, *, plain: bool):
    """`(tokenizer, vocab)` of a model directory: the transformers-free `LaserTextTokenizer` when `plain`, else
    `LaserTokenizer`; a dictionary-only directory (converted without subword files) gives its `vocab.json`."""
    tokenizer, vocab = None, None
    try:
        tokenizer = LaserTextTokenizer.from_directory(path) if plain else None
        if tokenizer is None:
            # lazy: text.tokenization_laser imports transformers
            from .text.tokenization_laser import LaserTokenizer

            tokenizer = LaserTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        if has_laser_tokenizer(path):  # a tokenizer is there but cannot be loaded: say why, not "no tokenizer"
            raise
        vocab_file = Path(path) / "vocab.json"
        if vocab_file.is_file():
            vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    return tokenizer, vocab


class _ChunkCheckpoint:
    """What `encode_file` keeps of the chunk it is encoding: after every batch that ends more than
    `PROGRESS_SAVE_S` seconds of work after the last save, the rows of the batches done since go to the writer
    ([`hf_laser.outputs.ResumableWriter.save_chunk_part`]); a resumed run puts them back (`saved`: `(batches,
    rows)`) and encodes only the remaining batches. The batches of a chunk are a function of its lines (tokenizer,
    deduplication, `plan_batches`), so the chunk ends bit-identical to an uninterrupted run."""

    def __init__(self, writer, saved: tuple[int, np.ndarray] | None):
        self.writer, self.saved, self.batches, self.last = writer, saved, 0, time.monotonic()

    def restore(self, plan: list[np.ndarray], unique_out: np.ndarray) -> int:
        """Batches of `plan` already done (their rows written into `unique_out`); 0 when nothing matches."""
        if self.saved is None:
            return 0
        batches, rows = self.saved
        self.saved = None
        if not 0 < batches <= len(plan) or sum(len(b) for b in plan[:batches]) != len(rows):
            self.writer.chunk_state = None  # not this chunk's batches: it is encoded whole
            return 0
        unique_out[np.concatenate(plan[:batches])] = rows
        self.batches = batches
        return batches

    def batch_done(self, batches: int, plan: list[np.ndarray], unique_out: np.ndarray) -> None:
        if batches >= len(plan) or time.monotonic() - self.last < PROGRESS_SAVE_S:
            return  # (the chunk's last batch: the whole chunk is written next)
        new = np.concatenate(plan[self.batches:batches])
        self.writer.save_chunk_part(batches, unique_out[new])
        # where the saved part ends now, as the writer recorded it (a part that did not fit was not saved)
        self.batches = self.writer.chunk_state["batches"] if self.writer.chunk_state else 0
        self.last = time.monotonic()


def _not_text(path: Path) -> str | None:
    """Why the start of a file is evidently not text (NUL bytes, mostly invalid UTF-8), or None."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if not head:
        return None
    if b"\0" in head:
        return "it holds NUL bytes: a binary file?"
    text = head.decode("utf-8", errors="surrogateescape")
    bad = sum(1 for c in text if "\udc80" <= c <= "\udcff")
    if bad > 0.3 * len(text):
        return f"{bad / len(text):.0%} of its first bytes are not UTF-8"
    return None


def _raise_non_integer(unique: list[tuple], inverse: np.ndarray) -> None:
    """Raises a [`LaserInputError`] naming the first sentence (input index) that holds something other than an
    integer token id; returns when there is none."""
    for i, u in enumerate(inverse.tolist()):
        wrong = next((t for t in unique[u] if not isinstance(t, (int, np.integer))), None)
        if wrong is not None:
            raise LaserInputError(f"sentence {i} holds {wrong!r:.40} ({type(wrong).__name__}); expected integer "
                                  "token ids")


def truncation_message(items: list[str], limit: int, model_limit: bool = False) -> str:
    """The warning for sentences cut to `limit` tokens; `items` name them (`"sentence 3 (250,000 tokens)"`);
    `model_limit`: the limit is the model's own (a LASER3 transformer's positions), not max_sentence_tokens."""
    shown = ", ".join(items[:10]) + (f" and {len(items) - 10} more" if len(items) > 10 else "")
    what = f"this model's limit of {limit:,} tokens (config.max_positions)" if model_limit else \
        f"max_sentence_tokens={limit:,}"
    fix = ("(a LASER3 transformer takes no more: split such lines)" if model_limit else
           "(to embed them whole, raise max_sentence_tokens or set it to None; on the command line "
           "--max-sentence-tokens N, 0 for no limit)")
    return (f"{len(items)} sentence{'s' if len(items) > 1 else ''} longer than {what} embedded as "
            f"{'their' if len(items) > 1 else 'its'} first {limit - 1:,} tokens + </s>: {shown} {fix}")
