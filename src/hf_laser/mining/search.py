"""k-nearest-neighbour search by cosine: per-shard faiss indexes, query batches, top-k lists merged, approximate
neighbours re-scored exactly."""

from __future__ import annotations

import math
import time

import numpy as np
from tqdm.auto import tqdm

from .embeddings import Embeddings, as_embeddings, l2_normalize
from .index import build_index, is_exact, resolve_device


def tqdm_disable(show: bool | None):
    return None if show is None else (not show)


def merge_topk(
    sims_a: np.ndarray, inds_a: np.ndarray, sims_b: np.ndarray, inds_b: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two top-k lists per row into one.

    Args:
        sims_a, inds_a: ``[n, ka]`` similarities (descending per row) and global row ids (``-1`` = missing).
        sims_b, inds_b: ``[n, kb]`` likewise.
        k: number of neighbours to keep.

    Returns:
        ``(sims [n, k], inds [n, k])`` sorted by decreasing similarity; ties keep ``a`` before ``b``. Missing entries
        have similarity ``-inf`` and index ``-1``.
    """
    sims = np.concatenate([sims_a, sims_b], axis=1)
    inds = np.concatenate([inds_a, inds_b], axis=1)
    sims = np.where(inds < 0, -np.inf, sims).astype(np.float32)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(inds, order, axis=1)


def knn_search(
    queries,
    database,
    k: int,
    *,
    index: str = "flat",
    device: str | None = None,
    query_batch_size: int | None = None,
    shard_size: int | None = None,
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_m: int | None = None,
    train_size: int | None = None,
    refine: bool | None = None,
    gpu_fp16: bool = False,
    normalize: bool = True,
    show_progress: bool | None = None,
    desc: str = "kNN",
    stats: dict | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours by cosine similarity of every query among the database vectors.

    The database is split into consecutive shards of ``shard_size`` rows (default: one shard); one index is built per
    shard, every query batch (``query_batch_size`` rows) is searched in it, and the per-shard top-k lists are merged
    (:func:`merge_topk`). Memory: one index + one query batch + the ``[Nq, k]`` result.

    With an approximate index (anything but ``"flat"``), the similarities of the returned neighbours are recomputed
    exactly from the stored vectors (``refine=True`` by default), so the margin uses true cosines.

    Args:
        queries: ``[Nq, d]`` array, ``.npy`` path, list of shards or :class:`Embeddings`.
        database: ``[Nd, d]`` likewise.
        k: neighbours per query, ``1 <= k <= Nd``.
        index: ``"flat"`` (exact), ``"ivf"``, ``"ivfpq"`` or a faiss factory string; see :func:`index_factory_string`.
        device: ``None``/``"auto"`` (GPU when faiss sees one), ``"cpu"`` or ``"cuda"``.
        stats: if a dict is given, ``build_s`` (index training + adding) and ``search_s`` (search + refinement +
            merge) wall times in seconds are accumulated into it.
        out: ``(sims, inds)`` float32 / int64 ``[Nq, k]`` arrays to write the result into (e.g. ``.npy`` memory maps,
            for results larger than memory), returned.

    Returns:
        ``(sims, inds)``: float32 ``[Nq, k]`` cosines sorted in decreasing order and int64 ``[Nq, k]`` database rows.
        Rows for which an approximate index found fewer than ``k`` neighbours are padded with ``-inf`` / ``-1``.
    """
    q, db, k = check_knn_inputs(queries, database, k)
    dev = resolve_device(device)
    if query_batch_size is None:
        query_batch_size = 131072 if dev == "gpu" else 8192
    nq = len(q)
    out_sims, out_inds = result_arrays(nq, k, out)
    shards = database_shards(len(db), shard_size)

    n_batches = math.ceil(nq / query_batch_size)
    with tqdm(total=len(shards) * n_batches, desc=desc, unit="batch", disable=tqdm_disable(show_progress)) as bar:
        for a, b in shards:
            t_build = time.perf_counter()
            idx, factory = build_index(
                db, index, start=a, stop=b, device=dev, nlist=nlist, nprobe=nprobe, pq_m=pq_m,
                train_size=train_size, gpu_fp16=gpu_fp16, normalize=normalize,
            )
            do_refine = (not is_exact(factory)) if refine is None else bool(refine)
            t_search = time.perf_counter()
            if stats is not None:
                stats["build_s"] = stats.get("build_s", 0.0) + (t_search - t_build)
            for qa, qblock in q.iter_blocks(query_batch_size):
                qn = query_block(qblock, normalize)
                sims, inds = search_shard(idx, qn, min(k, b - a), a, db, do_refine, normalize)
                qb = qa + qn.shape[0]
                merge_into(out_sims[qa:qb], out_inds[qa:qb], sims, inds, len(shards) == 1)
                bar.update(1)
            if stats is not None:
                stats["search_s"] = stats.get("search_s", 0.0) + (time.perf_counter() - t_search)
            del idx
    return out_sims, out_inds


def check_knn_inputs(queries, database, k) -> tuple[Embeddings, Embeddings, int]:
    """``(queries, database, k)`` as a search takes them, or a clear error (empty, dimensions, ``k``)."""
    q = as_embeddings(queries)
    db = as_embeddings(database)
    if len(q) == 0:
        raise ValueError("the query embeddings are empty (0 rows)")
    if len(db) == 0:
        raise ValueError("the database embeddings are empty (0 rows)")
    if q.dim != db.dim:
        raise ValueError(f"dimension mismatch: queries have {q.dim} dimensions, database has {db.dim}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > len(db):
        raise ValueError(f"k={k} is larger than the corpus searched ({len(db)} vectors); use a smaller k")
    return q, db, k


def result_arrays(nq: int, k: int, out=None) -> tuple[np.ndarray, np.ndarray]:
    """The ``(sims, inds)`` ``[nq, k]`` arrays a search fills: ``out`` checked and cleared, or new ones."""
    if out is None:
        return np.full((nq, k), -np.inf, dtype=np.float32), np.full((nq, k), -1, dtype=np.int64)
    sims, inds = out
    for name, array, dtype in (("sims", sims, np.float32), ("inds", inds, np.int64)):
        if array.shape != (nq, k) or array.dtype != dtype:
            raise ValueError(f"out {name} must be {np.dtype(dtype)} of shape {(nq, k)}, got {array.dtype} "
                             f"{array.shape}")
    for a in range(0, nq, 1 << 16):
        sims[a:a + (1 << 16)], inds[a:a + (1 << 16)] = -np.inf, -1
    return sims, inds


def database_shards(n: int, shard_size: int | None) -> list[tuple[int, int]]:
    """The ``[start, stop)`` row ranges of the consecutive index shards over ``n`` database rows."""
    shard_size = n if not shard_size else int(shard_size)
    return [(a, min(a + shard_size, n)) for a in range(0, n, shard_size)]


def query_block(block: np.ndarray, normalize: bool) -> np.ndarray:
    return l2_normalize(block, copy=False) if normalize else np.ascontiguousarray(block, dtype=np.float32)


def search_shard(idx, qn: np.ndarray, kk: int, start: int, db: Embeddings, refine: bool, normalize: bool):
    """Top-``kk`` of the (normalised) queries ``qn`` in the index ``idx`` over database rows ``[start, ...)``:
    ``(sims [n, kk] float32, inds [n, kk] int64 database rows)``, re-scored exactly from ``db`` with ``refine``."""
    sims, inds = idx.search(qn, kk)
    inds = inds.astype(np.int64, copy=False)
    inds = np.where(inds >= 0, inds + start, -1)
    if refine:
        sims = _exact_sims(qn, db, inds, normalize)
        order = np.argsort(-sims, axis=1, kind="stable")
        sims = np.take_along_axis(sims, order, axis=1)
        inds = np.take_along_axis(inds, order, axis=1)
    return np.where(inds < 0, -np.inf, sims).astype(np.float32), inds


def merge_into(out_sims: np.ndarray, out_inds: np.ndarray, sims: np.ndarray, inds: np.ndarray, only: bool) -> None:
    """Merges one shard's top-k of a query block into the block's running top-k (in place); ``only``: the one shard."""
    if only:
        out_sims[:, : sims.shape[1]], out_inds[:, : inds.shape[1]] = sims, inds
    else:
        out_sims[:], out_inds[:] = merge_topk(out_sims, out_inds, sims, inds, out_sims.shape[1])


def _exact_sims(qn: np.ndarray, db: Embeddings, inds: np.ndarray, normalize: bool, chunk: int = 4096) -> np.ndarray:
    """Exact cosines ``[n, k]`` between normalised queries ``qn [n, d]`` and database rows ``inds [n, k]``."""
    n, k = inds.shape
    out = np.full((n, k), -np.inf, dtype=np.float32)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        ind = inds[a:b]
        valid = ind >= 0
        vec = db.take(np.where(valid, ind, 0).reshape(-1))
        if normalize:
            vec = l2_normalize(vec, copy=False)
        vec = vec.reshape(b - a, k, -1)
        s = np.einsum("nd,nkd->nk", qn[a:b], vec, dtype=np.float32)
        out[a:b] = np.where(valid, s, -np.inf)
    return out
