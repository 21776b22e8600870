r"""Scoring the pairs of a parallel corpus one by one (what corpus filtering does: `hf-laser score`, the OpusFilter
and OpusCleaner filters), on embeddings that need not fit in memory.

For the corpus's aligned pairs ``(x_i, y_i)``, ``i < N`` (``x`` the source embeddings, ``y`` the target ones,
L2-normalised):

* ``cosine``: ``s_i = cos(x_i, y_i)``.
* ``margin`` (Artetxe & Schwenk 2018, as `hf-laser mine` scores a candidate): with ``NN_k(x_i)`` the ``k`` nearest
  neighbours of ``x_i`` among all the corpus's target sentences ``{y_j}`` (``y_i`` included when it is among them)
  and ``NN_k(y_i)`` those of ``y_i`` among all its source sentences ``{x_j}``,

      s_i = margin(cos(x_i, y_i),  sum_{z in NN_k(x_i)} cos(x_i, z) / 2k  +  sum_{z in NN_k(y_i)} cos(y_i, z) / 2k)

  with ``margin(a, b) = a / b`` (``ratio``) or ``a - b`` (``distance``). The denominator is how close each side is
  to its own neighbourhood in the corpus, so the score says how much more the pair belongs together than its
  sentences belong to anything else: a threshold on it means the same on corpora of other domains or languages,
  where raw cosines shift. It is the score `hf-laser mine` gives the candidate ``(x_i, y_i)``.

The kNN searches are those of `hf-laser mine` ([`knn_search`], exact by default; with ``knn_dir`` the ``[N, k]``
arrays are ``.npy`` files there), with the neighbours' cosines recomputed from the vectors alone
([`canonical_neighbours`]), so a score does not depend on the search's batches or shards. Everything else goes
row block by row block: memory holds ``[N]`` vectors (or none, with ``out`` a memory map) and one block.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from ..outputs import output_lock
from .embeddings import as_embeddings, l2_normalize
from .margin import margin_function, neighbourhood_mean
from .search import canonical_neighbours, knn_search

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SCORE_MARGINS",
    "SCORE_METHODS",
    "default_threshold",
    "pair_cosines",
    "score_files",
    "score_pairs",
    "score_sentences",
]

SCORE_METHODS = ("margin", "cosine")
SCORE_MARGINS = ("ratio", "distance")
BLOCK_ROWS = 1 << 15

# NLLB's mined bitexts kept the pairs of ratio margin >= 1.06 (NLLB Team 2022, section 5.3.2: "a margin threshold of
# 1.06"): the one threshold with a published use. Cosine and distance thresholds depend on the model: none is
# assumed, the user gives one.
DEFAULT_THRESHOLDS = {("margin", "ratio"): 1.06}


def default_threshold(method: str = "margin", margin: str = "ratio") -> float | None:
    """The default keep threshold of a score (``score >= threshold`` is kept): 1.06 for the ratio margin (NLLB's),
    None (the user must give one) for the others."""
    check_method(method, margin)
    return DEFAULT_THRESHOLDS.get((method, margin if method == "margin" else None))


def check_method(method: str, margin: str) -> None:
    if method not in SCORE_METHODS:
        raise ValueError(f"unknown scoring method {method!r}; expected one of {SCORE_METHODS}")
    if method == "margin" and margin not in SCORE_MARGINS:
        raise ValueError(f"unknown margin {margin!r}; expected one of {SCORE_MARGINS}")


def pair_cosines(x, y, *, normalize: bool = True, out: np.ndarray | None = None) -> np.ndarray:
    """``cos(x_i, y_i)`` of aligned rows, ``[N]`` float64, block by block; each from its two vectors alone
    (`einsum`, the same bits whatever the block). ``out``: an ``[N]`` float64 array to fill (a memory map),
    returned."""
    x, y = as_embeddings(x), as_embeddings(y)
    check_aligned(x, y)
    out = np.empty(len(x), dtype=np.float64) if out is None else out
    for a in range(0, len(x), BLOCK_ROWS):
        b = min(len(x), a + BLOCK_ROWS)
        xa, ya = x.rows(a, b), y.rows(a, b)
        if normalize:
            xa, ya = l2_normalize(xa, copy=False), l2_normalize(ya, copy=False)
        out[a:b] = np.einsum("nd,nd->n", xa, ya, dtype=np.float32)
    return out


def check_aligned(x, y) -> None:
    if len(x) != len(y):
        raise ValueError(f"the two sides are not aligned: {len(x)} source and {len(y)} target sentences")
    if len(x) == 0:
        raise ValueError("the corpus is empty (0 pairs)")
    if x.dim != y.dim:
        raise ValueError(f"dimension mismatch: source embeddings have {x.dim} dimensions, target embeddings {y.dim}")


def score_pairs(src_embeddings, tgt_embeddings, *, method: str = "margin", margin: str = "ratio", k: int = 4,
                index: str = "flat", device: str | None = None, query_batch_size: int | None = None,
                shard_size: int | None = None, nlist: int | None = None, nprobe: int | None = None,
                refine: bool | None = None, knn=knn_search, knn_dir: str | os.PathLike | None = None,
                show_progress: bool | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """The score of every aligned pair ``(src_embeddings[i], tgt_embeddings[i])`` (see the module docstring for
    the definitions), ``[N]`` float64 in the corpus's order.

    Args:
        src_embeddings, tgt_embeddings: ``[N, d]`` arrays, ``.npy`` paths, shards or [`Embeddings`] (not normalised:
            they are normalised block by block).
        method: ``"margin"`` (default) or ``"cosine"``.
        margin: ``"ratio"`` (default) or ``"distance"``.
        k: neighbourhood size of the margin (``1 <= k <= N``); 4 as in `hf-laser mine` and LASER's
            ``mine_bitexts.py``.
        index, device, query_batch_size, shard_size, nlist, nprobe, refine: the kNN search's ([`knn_search`]).
        knn: the search itself, with [`knn_search`]'s signature.
        knn_dir: a directory for the ``[N, k]`` kNN arrays and the ``[N]`` neighbourhood means as ``.npy`` files
            (locked while in use; its files overwritten): margins of corpora whose kNN arrays do not fit in memory.
        out: an ``[N]`` float64 array for the scores (a memory map), returned.
    """
    check_method(method, margin)
    x, y = as_embeddings(src_embeddings), as_embeddings(tgt_embeddings)
    check_aligned(x, y)
    if method == "cosine":
        return pair_cosines(x, y, out=out)
    k = int(k)
    if not 1 <= k <= len(x):
        raise ValueError(f"k={k}: the margin needs 1 <= k <= the number of pairs ({len(x)}); use a smaller k, or "
                         "the cosine")
    f = margin_function(margin)
    kw = {"index": index, "device": device, "query_batch_size": query_batch_size, "shard_size": shard_size,
          "nlist": nlist, "nprobe": nprobe, "refine": refine, "show_progress": show_progress}
    arrays = KnnArrays(knn_dir, len(x), k)
    with arrays.locked():
        means = []
        for name, q, db in (("x2y", x, y), ("y2x", y, x)):
            given = arrays.knn_out(name)
            result = knn(q, db, k, desc=f"kNN {'src->tgt' if name == 'x2y' else 'tgt->src'}", **kw, **given)
            sims, inds = arrays.kept(result, given)
            canonical_neighbours(q, db, sims, inds)
            means.append(neighbourhood_mean(sims, inds, out=arrays.vector(f"{name}_mean")))
        out = pair_cosines(x, y, out=out)
        for a in range(0, len(x), BLOCK_ROWS):
            b = min(len(x), a + BLOCK_ROWS)
            denom = (np.asarray(means[0][a:b]) + np.asarray(means[1][a:b])) / 2
            with np.errstate(invalid="ignore", divide="ignore"):
                out[a:b] = f(np.asarray(out[a:b]), denom)
        arrays.flush()
    return out


class KnnArrays:
    """Where [`score_pairs`]' kNN arrays live: in memory (``directory`` None) or as ``.npy`` files there."""

    def __init__(self, directory, n: int, k: int):
        self.directory = None if directory is None else Path(directory)
        self.n, self.k, self.maps = n, k, []

    def locked(self):
        if self.directory is None:
            return contextlib.nullcontext()
        self.directory.mkdir(parents=True, exist_ok=True)
        return output_lock(self.directory)

    def _map(self, name: str, shape: tuple, dtype):
        path = self.directory / f"{name}.npy"
        path.unlink(missing_ok=True)
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        self.maps.append(array)
        return array

    def knn_out(self, name: str) -> dict:
        if self.directory is None:
            return {}
        return {"out": (self._map(f"{name}_sim", (self.n, self.k), np.float32),
                        self._map(f"{name}_ind", (self.n, self.k), np.int64))}

    def kept(self, result: tuple, given: dict) -> tuple:
        for got, out in zip(result, given.get("out", ())):
            if got is not out:
                for a in range(0, len(out), 1 << 16):
                    out[a:a + (1 << 16)] = got[a:a + (1 << 16)]
        return given["out"] if given else result

    def vector(self, name: str):
        return None if self.directory is None else self._map(name, (self.n,), np.float64)

    def flush(self) -> None:
        for array in self.maps:
            array.flush()
        self.maps.clear()


def score_sentences(encoder, src_sentences, tgt_sentences, *, src_lang: str, tgt_lang: str,
                    encode_kwargs: dict | None = None, **score_kwargs) -> np.ndarray:
    """Embed two aligned in-memory sentence lists with ``encoder.encode`` (a [`LaserEncoder`] or a model set: each
    side by the model of its language) and [`score_pairs`] them. ``[N]`` float64 scores."""
    src_sentences, tgt_sentences = list(src_sentences), list(tgt_sentences)
    if len(src_sentences) != len(tgt_sentences):
        raise ValueError(f"the two sides are not aligned: {len(src_sentences)} source and {len(tgt_sentences)} "
                         "target sentences")
    encode_kwargs = dict(encode_kwargs or {})
    x = np.asarray(encoder.encode(src_sentences, lang=src_lang, **encode_kwargs))
    y = np.asarray(encoder.encode(tgt_sentences, lang=tgt_lang, **encode_kwargs))
    return score_pairs(x, y, **score_kwargs)


def score_files(encoder, src_path, tgt_path, work_dir, *, src_lang: str, tgt_lang: str,
                encode_kwargs: dict | None = None, **score_kwargs) -> np.ndarray:
    """[`score_pairs`] of two aligned text files (one sentence per line), with memory bounded for any corpus size:
    each side is embedded by ``encoder.encode_file`` into ``work_dir`` (``src.npy`` / ``tgt.npy``, resumable and
    reused while the input, model and options are the same: their manifests), the kNN arrays and the scores are
    ``.npy`` files there too. Returns the scores as a read-only memory map (``work_dir/scores.npy``)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    encode_kwargs = dict(encode_kwargs or {})
    x = encoder.encode_file(src_path, work_dir / "src.npy", lang=src_lang, **encode_kwargs)
    y = encoder.encode_file(tgt_path, work_dir / "tgt.npy", lang=tgt_lang, **encode_kwargs)
    path = work_dir / "scores.npy"
    path.unlink(missing_ok=True)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(len(x),))
    score_pairs(x, y, knn_dir=work_dir / "knn", out=out, **score_kwargs)
    out.flush()
    del out
    return np.load(path, mmap_mode="r")
