"""Sentence-embedding API: `LaserEncoder` owns a `LaserModel` and its tokenizer and turns sentences into vectors.

Example::

    from hf_laser import LaserEncoder
    encoder = LaserEncoder.from_pretrained("laser-93langs")
    embeddings = encoder.encode(["Hello world.", "Bonjour le monde."], lang=["en", "fr"])   # (2, 1024) float32
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import chain, islice
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .modeling_laser import LaserModel
from .tokenization_laser import LaserTokenizer
from .tokenization_laser import read_lines as tokenizer_read_lines

DEFAULT_MAX_TOKENS = 12000  # the original SentenceEncoder's token budget
PROGRESS_BAR_MIN_SENTENCES = 10_000


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

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: str | torch.device | None = None,
                        dtype: torch.dtype | None = None, quantize: str | None = None, **kwargs) -> LaserEncoder:
        """Loads model and tokenizer from a directory written by `hf-laser convert` / `save_pretrained` (or a Hub id).

        Args:
            path: local directory or Hub repo id.
            device: where the model runs (default: CPU).
            dtype: model dtype (`torch.float32` default; `torch.bfloat16`/`torch.float16` trade fidelity for speed).
            quantize: `"int8"` applies dynamic int8 quantisation to the LSTM (CPU only; ~2x faster, embeddings no
                longer within 1e-5 of the original: see README, "Embedding throughput").
        """
        model = LaserModel.from_pretrained(path, **kwargs)
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
        return cls(model, tokenizer, vocab)

    @property
    def dim(self) -> int:
        """Dimension of the sentence embeddings."""
        return self.model.config.embedding_dim

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ tokenisation
    def token_ids(self, sentences: Sequence[str], lang: str | Sequence[str] = "en", *,
                  pretokenized: bool = False, num_proc: int = 1) -> list[list[int]]:
        """Dictionary ids of every sentence, `</s>` appended (no `<s>`), unknown tokens → `<unk>`.

        With `pretokenized=True` the sentences are already BPE/SentencePiece tokens separated by whitespace (the
        original encoder's input: `line.strip().split()`); otherwise raw text goes through the LASER preprocessing.
        """
        if pretokenized:
            for i, s in enumerate(sentences):  # raw text is checked by the tokenizer
                if not isinstance(s, str):
                    raise TypeError(f"sentence {i} is {type(s).__name__}, expected str")
            if self.vocab is None:
                raise ValueError("this model directory has no vocabulary (vocab.json or tokenizer files)")
            get, unk, eos = self.vocab.get, self.unk_id, self.eos_id
            return [[get(t, unk) for t in s.split()] + [eos] for s in sentences]
        if self.tokenizer is None:
            raise ValueError(
                "this model directory has no tokenizer; convert it with --bpe-codes/--bpe-vocab or --spm-model, "
                "or pass pretokenized=True with BPE-tokenized input"
            )
        return self.tokenizer.encode_lines(list(sentences), lang=lang, num_proc=num_proc)

    # ------------------------------------------------------------------ encoding
    @torch.inference_mode()
    def encode_ids(self, ids: Sequence[Sequence[int]], *, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                   batch_size: int | None = None, device: str | torch.device | None = None,
                   show_progress_bar: bool | None = None) -> torch.Tensor:
        """Embeds id sequences (each ending with `</s>`). Returns a CPU float32 tensor `(len(ids), dim)` in input
        order, whatever the model dtype."""
        if device is not None and torch.device(device) != self.device:
            self.model.to(device)
        device = self.device
        out = torch.empty((len(ids), self.dim), dtype=torch.float32)
        if not len(ids):
            return out
        # Identical sentences (repeated lines, empty lines) are embedded once.
        first_seen: dict[tuple[int, ...], int] = {}
        inverse = np.fromiter((first_seen.setdefault(tuple(s), len(first_seen)) for s in ids), np.int64, len(ids))
        unique = list(first_seen)
        lengths = [len(s) for s in unique]
        if min(lengths) == 0:
            raise ValueError(f"sentence {int(np.flatnonzero(inverse == lengths.index(0))[0])} has no token; "
                             "it must at least end with </s>")
        if show_progress_bar is None:
            show_progress_bar = len(ids) >= PROGRESS_BAR_MIN_SENTENCES
        vocab_size = self.model.config.vocab_size
        unique_out = torch.empty((len(unique), self.dim), dtype=torch.float32)
        with tqdm(total=len(unique), disable=not show_progress_bar, unit="sent", desc="embedding") as bar:
            for batch in plan_batches(lengths, max_tokens, batch_size):
                batch_lengths = np.array([lengths[i] for i in batch])
                flat = np.fromiter(chain.from_iterable(unique[i] for i in batch), np.int64, batch_lengths.sum())
                if int(flat.max()) >= vocab_size or int(flat.min()) < 0:
                    bad = [int(j) for j in np.flatnonzero(np.isin(inverse, batch))]
                    raise ValueError(f"token ids outside the vocabulary [0, {vocab_size}) in sentence(s) {bad}")
                mask = np.arange(batch_lengths[0])[None, :] < batch_lengths[:, None]
                ids_array = np.full(mask.shape, self.model.config.pad_token_id, dtype=np.int64)
                ids_array[mask] = flat
                emb = self.model(torch.from_numpy(ids_array).to(device, non_blocking=True),
                                 attention_mask=torch.from_numpy(mask).to(device, non_blocking=True)).pooler_output
                unique_out[torch.from_numpy(batch)] = emb.float().cpu()
                bar.update(len(batch))
        torch.index_select(unique_out, 0, torch.from_numpy(inverse), out=out)
        return out

    def encode(self, sentences: str | Sequence[str], lang: str | Sequence[str] = "en", *,
               max_tokens: int | None = DEFAULT_MAX_TOKENS, batch_size: int | None = None,
               normalize_embeddings: bool = False, device: str | torch.device | None = None,
               show_progress_bar: bool | None = None, convert_to: str = "numpy", pretokenized: bool = False,
               num_proc: int = 1) -> np.ndarray | torch.Tensor:
        """Embeds sentences.

        Args:
            sentences: a sentence or a list of sentences (raw text, or BPE tokens with `pretokenized=True`).
            lang: language code for the preprocessing, one for all or one per sentence.
            max_tokens: token budget per batch (the original's default 12000); bounds memory.
            batch_size: optional cap on sentences per batch.
            normalize_embeddings: L2-normalise the vectors (for cosine similarity by dot product).
            device: run on this device (moves the model).
            show_progress_bar: tqdm bar; default on from 10,000 sentences.
            convert_to: `"numpy"` (float32 array) or `"torch"` (float32 CPU tensor).
            pretokenized: the input is already tokenized (see [`token_ids`]).
            num_proc: processes for the text preprocessing of large inputs.

        Returns:
            `(n, dim)` float32 embeddings in input order (`(dim,)` for a single string). An empty list gives `(0, dim)`;
            an empty sentence gives the embedding of `</s>` alone, as in the original.
        """
        if convert_to not in ("numpy", "torch"):
            raise ValueError(f"convert_to must be 'numpy' or 'torch', got {convert_to!r}")
        single = isinstance(sentences, str)
        if single:
            sentences = [sentences]
        elif not isinstance(sentences, Iterable):
            raise TypeError(f"sentences must be a string or a list of strings, got {type(sentences).__name__}")
        elif not isinstance(sentences, Sequence):
            sentences = list(sentences)
        ids = self.token_ids(sentences, lang, pretokenized=pretokenized, num_proc=num_proc)
        emb = self.encode_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                              show_progress_bar=show_progress_bar)
        if normalize_embeddings:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        if single:
            emb = emb[0]
        return emb.numpy() if convert_to == "numpy" else emb

    def encode_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, lang: str = "en",
                    pretokenized: bool = False, fp16: bool = False, max_tokens: int | None = DEFAULT_MAX_TOKENS,
                    batch_size: int | None = None, chunk_lines: int = 100_000, normalize_embeddings: bool = False,
                    device: str | torch.device | None = None, show_progress_bar: bool | None = None,
                    resume: bool = True, num_proc: int = 1) -> np.ndarray:
        """Embeds a text file (one sentence per line, split on `'\\n'` only) into a `.npy` file, streaming.

        The output is a memory-mapped `(lines, dim)` array written chunk by chunk (`chunk_lines` lines in memory at a
        time); a `OUTPUT.progress.json` side file records the lines done, so a killed run continues where it
        stopped when called again with `resume=True`. An existing complete output of the right shape is returned
        as is.

        Returns:
            The output as a read-only memory-mapped array (float32, or float16 with `fp16=True`).
        """
        input_path, output_path = Path(input_path), Path(output_path)
        if not input_path.is_file():
            raise FileNotFoundError(f"input not found: {input_path}")
        if chunk_lines <= 0:
            raise ValueError(f"chunk_lines must be positive, got {chunk_lines}")
        n = count_lines(input_path)
        dtype = np.float16 if fp16 else np.float32
        progress_path = output_path.with_name(output_path.name + ".progress.json")
        done = 0
        if resume and output_path.exists():
            try:
                existing = np.load(output_path, mmap_mode="r+")
            except ValueError as err:
                raise ValueError(f"{output_path} exists but is not a .npy file; remove it or pass resume=False") from err
            if existing.shape != (n, self.dim) or existing.dtype != dtype:
                raise ValueError(
                    f"{output_path} exists with shape {existing.shape} {existing.dtype}, expected ({n}, {self.dim}) "
                    f"{np.dtype(dtype)} for {input_path}; remove it or pass resume=False"
                )
            if not progress_path.exists():
                return np.load(output_path, mmap_mode="r")
            done = int(json.loads(progress_path.read_text())["lines_done"])
            out = existing
        else:
            output_path.parent.mkdir(parents=True, exist_ok=True)
            out = np.lib.format.open_memmap(output_path, mode="w+", dtype=dtype, shape=(n, self.dim))
            progress_path.write_text(json.dumps({"lines_done": 0, "input": str(input_path)}))
        if show_progress_bar is None:
            show_progress_bar = n >= PROGRESS_BAR_MIN_SENTENCES
        chunks = batched(read_lines(input_path, start=done), chunk_lines)
        tokenize = partial(self.token_ids, lang=lang, pretokenized=pretokenized, num_proc=num_proc)
        # The next chunk is tokenized (in a thread, or worker processes with num_proc > 1) while this one is encoded.
        with tqdm(total=n, initial=done, disable=not show_progress_bar, unit="line", desc="embedding") as bar, \
                ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(tokenize, next(chunks, []))
            while ids := pending.result():
                pending = pool.submit(tokenize, next(chunks, []))
                emb = self.encode_ids(ids, max_tokens=max_tokens, batch_size=batch_size, device=device,
                                      show_progress_bar=False)
                if normalize_embeddings:
                    emb = torch.nn.functional.normalize(emb, dim=-1)
                chunk = ids
                out[done:done + len(chunk)] = emb.numpy().astype(dtype, copy=False)
                done += len(chunk)
                out.flush()
                tmp = progress_path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"lines_done": done, "input": str(input_path)}))
                os.replace(tmp, progress_path)
                bar.update(len(chunk))
        del out
        progress_path.unlink(missing_ok=True)
        return np.load(output_path, mmap_mode="r")


def embed_main_io(args) -> int:
    """`hf-laser embed`: see `cli.py`."""
    import tempfile

    if args.device == "cuda" and not torch.cuda.is_available():
        print("hf-laser embed: error: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    encoder = LaserEncoder.from_pretrained(args.model, device=args.device, dtype=getattr(torch, args.dtype),
                                           quantize="int8" if args.int8 else None)
    tmp = None
    try:
        if args.input in (None, "-"):
            # stdin is spooled to disk so that huge inputs are streamed and counted like files.
            tmp = tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False)
            while block := sys.stdin.buffer.read(1 << 24):
                tmp.write(block)
            tmp.close()
            input_path = tmp.name
        else:
            input_path = args.input
        encoder.encode_file(input_path, args.output, lang=args.lang, pretokenized=args.pretokenized,
                            fp16=args.fp16, max_tokens=args.max_tokens, normalize_embeddings=args.normalize,
                            show_progress_bar=False if args.quiet else None, resume=not args.overwrite,
                            num_proc=args.num_proc)
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    return 0
