"""On-disk embedding cache: every (model, text file / list of texts, language) is embedded once.

Layout::

    CACHE_DIR/<model fingerprint>/<key>.npy     (n, dim) float32 or float16, loaded memory-mapped
    CACHE_DIR/<model fingerprint>/<key>.json    what it holds: source, lang, n, dtype, seconds

The key hashes the model fingerprint (weights, config, tokenizer, hf_laser version), the exact content of the texts
(for a file: its lines split on '\\n'), the language, the input kind (raw text / pre-tokenized) and the dtype, so a
changed file, model or tokenizer never reuses stale vectors. Writes are atomic (a partial file is renamed when
complete), so an interrupted run never leaves a truncated entry; one process computes an entry at a time (the others
wait for its lock, `<key>.npy.lock`, then reuse it); files are streamed through
`LaserEncoder.encode_file`, which resumes where a killed run stopped.

The default directory is `$HF_LASER_EMBEDDING_CACHE`, else `$XDG_CACHE_HOME/hf_laser/embeddings` (`~/.cache/...`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hf_laser.defaults import EMBEDDING_CACHE_ENV, cache_from_env
from hf_laser.encoder import batched, count_lines, read_lines
from hf_laser.outputs import NpyFile, OutputFiles, model_identity, output_lock, write_json_atomic, write_npy_atomic

CACHE_VERSION = 1
TEXT_CHUNK = 20_000

__all__ = ["EmbeddingCache", "default_cache_dir", "model_fingerprint", "texts_digest", "split_at_periods"]


def default_cache_dir() -> Path:
    """`$HF_LASER_EMBEDDING_CACHE`, else `$XDG_CACHE_HOME/hf_laser/embeddings` (the old `$HF_LASER_CACHE` is read with
    a FutureWarning)."""
    named = cache_from_env(EMBEDDING_CACHE_ENV)
    if named:
        return Path(named)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "hf_laser" / "embeddings"


def texts_digest(texts) -> str:
    """SHA-256 of a sequence of strings (length-prefixed, so `["a b"]` and `["a", "b"]` differ)."""
    h = hashlib.sha256()
    n = 0
    for t in texts:
        b = t.encode("utf-8", "surrogateescape")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
        n += 1
    h.update(n.to_bytes(8, "little"))
    return h.hexdigest()


def model_fingerprint(encoder) -> str:
    """Hash of everything that determines an embedding: the encoder's identity as `hf_laser.outputs` records it for
    every embedding file (sha256 of config + weights and of the tokenizer files / vocabulary, model dtype,
    quantisation), the tokenizer's default language and the hf_laser version. Cached on the encoder object (the
    hashes are computed once, ~0.2 s for a full-size model)."""
    cached = getattr(encoder, "_hf_laser_fingerprint", None)
    if cached:
        return cached
    import hf_laser

    if callable(getattr(encoder, "model_for", None)):
        # a model set: one directory for all sets, each entry keyed by the member that embeds its language
        # ([`EmbeddingCache.key`]): the set has no identity of its own
        identity = {"cache": CACHE_VERSION, "hf_laser": hf_laser.__version__, "model set": True}
    else:
        identity = {"cache": CACHE_VERSION, "hf_laser": hf_laser.__version__, **model_identity(encoder),
                    "default_lang": getattr(getattr(encoder, "tokenizer", None), "lang", None)}
    fp = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    try:
        encoder._hf_laser_fingerprint = fp
    except AttributeError:
        pass
    return fp


def split_at_periods(tokens: str) -> list[str]:
    """Splits a tokenised document into sentences after every `.` token that is not the last one (LASER's
    `SplitLines`, used for MLDoc). Always returns at least one (possibly empty) piece."""
    pieces, current = [], []
    words = tokens.split()
    for i, w in enumerate(words):
        current.append(w)
        if w == "." and i != len(words) - 1:
            pieces.append(" ".join(current))
            current = []
    if current or not pieces:
        pieces.append(" ".join(current))
    return pieces


class EmbeddingCache:
    """Embeds texts and files with a `LaserEncoder`, memoised on disk.

    Args:
        encoder: a `LaserEncoder` (anything with `.model`, `.dim`, `.encode`, `.encode_file`).
        cache_dir: root directory (default: [`default_cache_dir`]); None with `enabled=False` keeps nothing on disk.
        fp16: store float16 (half the disk and page cache; the classifier and the search convert to float32).
        enabled: False embeds every time (and writes nothing).
        show_progress: tqdm bars while embedding.
        encode_kwargs: passed to `encoder.encode` (`max_tokens`, `device`, `num_proc`...).
    """

    def __init__(self, encoder, cache_dir: str | os.PathLike | None = None, *, fp16: bool = False,
                 enabled: bool = True, show_progress: bool = True, encode_kwargs: dict | None = None):
        self.encoder = encoder
        self.enabled = enabled
        self.fp16 = fp16
        self.dtype = np.float16 if fp16 else np.float32
        self.show_progress = show_progress
        self.encode_kwargs = dict(encode_kwargs or {})
        self.root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0
        self._dir: Path | None = None

    @property
    def dir(self) -> Path:
        if self._dir is None:
            self._dir = self.root / model_fingerprint(self.encoder)
        return self._dir

    def key(self, digest: str, lang: str, kind: str) -> str:
        parts = [digest, lang, kind, np.dtype(self.dtype).name, CACHE_VERSION]
        model_for = getattr(self.encoder, "model_for", None)
        if callable(model_for):  # a model set's numbers for `lang` are those of the member that embeds it
            parts.append(model_fingerprint(model_for(lang)))
        blob = json.dumps(parts).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def _lookup(self, key: str, n: int) -> np.ndarray | None:
        if not self.enabled:
            return None
        path = self.dir / f"{key}.npy"
        if not path.exists():
            return None
        arr = np.load(path, mmap_mode="r")
        if arr.shape != (n, self.encoder.dim) or arr.dtype != self.dtype:
            path.unlink()  # stale or foreign: recompute
            return None
        self.hits += 1
        return arr

    @contextmanager
    def _entry(self, key: str, n: int) -> Iterator[np.ndarray | None]:
        """The cached entry `key` of `n` rows (None on a miss, counted), with its lock held for the block
        (`hf_laser.outputs.output_lock`, waiting for another process that computes it), so that two evaluations
        sharing a cache never write one entry at once."""
        if not self.enabled:
            self.misses += 1
            yield None
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        with output_lock(self.dir / f"{key}.npy", wait=True,
                         say=lambda m: print(f"embedding cache: {m}", file=sys.stderr)):
            hit = self._lookup(key, n)
            if hit is None:
                self.misses += 1
            yield hit

    def _store_meta(self, key: str, meta: dict) -> None:
        write_json_atomic(self.dir / f"{key}.json", meta)

    # ------------------------------------------------------------------ texts
    def embed_texts(self, texts: Sequence[str], lang: str, *, pretokenized: bool = False,
                    name: str | None = None) -> np.ndarray:
        """`(len(texts), dim)` embeddings (memory-mapped when cached). `name` labels the progress bar / metadata."""
        texts = list(texts)
        kind = "bpe" if pretokenized else "text"
        key = self.key(texts_digest(texts), lang, kind)
        with self._entry(key, len(texts)) as hit:  # one process computes it; the others wait, reuse it
            if hit is not None:
                return hit
            t0 = time.time()
            desc = f"embed {name or 'texts'} [{lang}]"
            if not self.enabled:
                return self._encode_chunks(texts, lang, pretokenized, None, desc)
            self.dir.mkdir(parents=True, exist_ok=True)
            partial = self.dir / f"{key}.partial{os.getpid()}.npy"
            self._encode_chunks(texts, lang, pretokenized, partial, desc)
            os.replace(partial, self.dir / f"{key}.npy")
            self._store_meta(key, {"source": name, "lang": lang, "kind": kind, "n": len(texts),
                                   "dtype": np.dtype(self.dtype).name, "seconds": round(time.time() - t0, 3)})
            return np.load(self.dir / f"{key}.npy", mmap_mode="r")

    def _encode_chunks(self, texts, lang, pretokenized, path, desc) -> np.ndarray | None:
        """The embeddings of `texts`, chunk by chunk: in memory (`path` None), or written into the `.npy` file
        `path` (`hf_laser.outputs.NpyFile`; returns None)."""
        shape = (len(texts), self.encoder.dim)
        out = NpyFile(path, shape, self.dtype) if path is not None else np.empty(shape, dtype=self.dtype)
        done = 0
        try:
            with tqdm(total=len(texts), desc=desc, unit="sent", disable=not self.show_progress, leave=False) as bar:
                for chunk in batched(texts, TEXT_CHUNK):
                    emb = self.encoder.encode(chunk, lang, pretokenized=pretokenized, show_progress_bar=False,
                                              **self.encode_kwargs)
                    if path is not None:
                        out.write_rows(done, emb)
                    else:
                        out[done:done + len(chunk)] = emb
                    done += len(chunk)
                    bar.update(len(chunk))
        finally:
            if path is not None:
                out.close()
        return None if path is not None else out

    # ------------------------------------------------------------------ files
    def embed_file(self, path: str | os.PathLike, lang: str, *, pretokenized: bool = False) -> np.ndarray:
        """Embeds a text file (one sentence per line, split on '\\n' only), streaming, resumable."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"input file not found: {path}")
        lines = read_lines(path)
        digest = texts_digest(lines)
        n = count_lines(path)
        kind = "bpe" if pretokenized else "text"
        key = self.key(digest, lang, kind)
        with self._entry(key, n) as hit:  # one process computes it; the others wait, reuse it
            if hit is not None:
                return hit
            if not self.enabled:
                return self.encoder.encode(list(read_lines(path)), lang, pretokenized=pretokenized,
                                           show_progress_bar=self.show_progress,
                                           **self.encode_kwargs).astype(self.dtype)
            t0 = time.time()
            self.dir.mkdir(parents=True, exist_ok=True)
            partial = self.dir / f"{key}.partial.npy"  # same name across runs: encode_file resumes it
            kw = {k: v for k, v in self.encode_kwargs.items()
                  if k in ("max_tokens", "batch_size", "device", "num_proc")}
            out = self.encoder.encode_file(path, partial, lang=lang, pretokenized=pretokenized, fp16=self.fp16,
                                           show_progress_bar=self.show_progress and n >= 1000, resume=True, **kw)
            del out
            os.replace(partial, self.dir / f"{key}.npy")
            # the cache's own metadata (keyed on content, model and options) replaces encode_file's manifest
            OutputFiles(partial).manifest.unlink(missing_ok=True)
            self._store_meta(key, {"source": str(path), "lang": lang, "kind": kind, "n": n,
                                   "dtype": np.dtype(self.dtype).name, "seconds": round(time.time() - t0, 3)})
            return np.load(self.dir / f"{key}.npy", mmap_mode="r")

    # ------------------------------------------------------------------ documents
    def embed_documents(self, docs: Sequence[str], lang: str, *, pretokenized: bool = False,
                        name: str | None = None) -> np.ndarray:
        """Document embeddings as LASER computes them for MLDoc: each document is tokenised, split into sentences
        after every `.` token but the last ([`split_at_periods`]), and its vector is the mean of its sentences'.

        With `pretokenized=True` the documents are already BPE tokens (the split happens on them)."""
        docs = list(docs)
        kind = "doc-bpe" if pretokenized else "doc-text"
        key = self.key(texts_digest(docs), lang, kind)
        with self._entry(key, len(docs)) as hit:  # one process computes it; the others wait, reuse it
            if hit is not None:
                return hit
            t0 = time.time()
            enc = self.encoder
            if pretokenized:
                tok_docs = docs
            else:
                if enc.tokenizer is None:
                    raise ValueError("this model has no tokenizer: pass pretokenized=True with BPE-tokenised documents")
                tok_docs = enc.tokenizer.pipeline.process(docs, lang, stage="tok")
            pieces, owner = [], []
            for i, doc in enumerate(tok_docs):
                for piece in split_at_periods(doc):
                    pieces.append(piece)
                    owner.append(i)
            if pretokenized:
                ids = enc.token_ids(pieces, pretokenized=True)
            else:
                ids = enc.tokenizer.encode_lines(pieces, lang=lang, pretokenized="tok",
                                                 num_proc=self.encode_kwargs.get("num_proc", 1))
            kw = {k: v for k, v in self.encode_kwargs.items() if k in ("max_tokens", "batch_size", "device")}
            sent = enc.encode_ids(ids, show_progress_bar=self.show_progress and len(ids) >= 1000, **kw).numpy()
            owner = np.asarray(owner)
            sums = np.zeros((len(docs), enc.dim), dtype=np.float64)
            np.add.at(sums, owner, sent)
            counts = np.bincount(owner, minlength=len(docs))
            out = (sums / counts[:, None]).astype(self.dtype)
            if not self.enabled:
                return out
            self.dir.mkdir(parents=True, exist_ok=True)
            write_npy_atomic(self.dir / f"{key}.npy", out)
            self._store_meta(key, {"source": name, "lang": lang, "kind": kind, "n": len(docs), "sentences": len(pieces),
                                   "dtype": np.dtype(self.dtype).name, "seconds": round(time.time() - t0, 3)})
            return np.load(self.dir / f"{key}.npy", mmap_mode="r")
