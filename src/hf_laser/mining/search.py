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


def order_neighbours(sims: np.ndarray, inds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's neighbours in the one order every search gives them: decreasing similarity, then increasing
    database row (missing ones, ``-1`` / ``-inf``, last). faiss returns tied neighbours in the order of its heap;
    this order makes ties between duplicate lines the same whatever the shards and query batches (#68)."""
    sims = np.where(inds < 0, -np.inf, sims).astype(np.float32, copy=False)
    by_row = np.argsort(np.where(inds < 0, np.iinfo(np.int64).max, inds), axis=1, kind="stable")
    sims, inds = np.take_along_axis(sims, by_row, axis=1), np.take_along_axis(inds, by_row, axis=1)
    by_sim = np.argsort(-sims, axis=1, kind="stable")
    return np.take_along_axis(sims, by_sim, axis=1), np.take_along_axis(inds, by_sim, axis=1)


def merge_topk(
    sims_a: np.ndarray, inds_a: np.ndarray, sims_b: np.ndarray, inds_b: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two top-k lists per row into one.

    Args:
        sims_a, inds_a: ``[n, ka]`` similarities (descending per row) and global row ids (``-1`` = missing).
        sims_b, inds_b: ``[n, kb]`` likewise.
        k: number of neighbours to keep.

    Returns:
        ``(sims [n, k], inds [n, k])`` in [`order_neighbours`]' order: decreasing similarity, then increasing row
        (of tied neighbours, the lower rows are kept). Missing entries have similarity ``-inf`` and index ``-1``.
    """
    sims = np.concatenate([sims_a, sims_b], axis=1)
    inds = np.concatenate([inds_a, inds_b], axis=1)
    sims, inds = order_neighbours(sims, inds)
    return sims[:, :k], inds[:, :k]


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
    (:func:`merge_topk`). Memory: one index + one query batch + the ``[Nq, k]`` result. Each row's neighbours come
    by decreasing similarity, then increasing row ([`order_neighbours`]): with an exact index, the same lists for
    every ``shard_size`` and ``query_batch_size`` (ties between duplicate lines included).

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
    ``(sims [n, kk] float32, inds [n, kk] int64 database rows)``, re-scored exactly from ``db`` with ``refine``, in
    [`order_neighbours`]' order (faiss keeps the lowest rows of tied neighbours, in the order of its heap)."""
    sims, inds = idx.search(qn, kk)
    inds = inds.astype(np.int64, copy=False)
    inds = np.where(inds >= 0, inds + start, -1)
    if refine:
        sims = _exact_sims(qn, db, inds, normalize)
    return order_neighbours(sims, inds)


def merge_into(out_sims: np.ndarray, out_inds: np.ndarray, sims: np.ndarray, inds: np.ndarray, only: bool) -> None:
    """Merges one shard's top-k of a query block into the block's running top-k (in place); ``only``: the one shard."""
    if only:
        out_sims[:, : sims.shape[1]], out_inds[:, : inds.shape[1]] = sims, inds
    else:
        out_sims[:], out_inds[:] = merge_topk(out_sims, out_inds, sims, inds, out_sims.shape[1])


def _exact_sims(qn: np.ndarray, db: Embeddings, inds: np.ndarray, normalize: bool, chunk: int = 4096) -> np.ndarray:
    """Exact cosines ``[n, k]`` between normalised queries ``qn [n, d]`` and database rows ``inds [n, k]``; each one
    from its two vectors alone (`einsum`'s loop, not BLAS: the same bits whatever the block)."""
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


class Duplicates:
    """The rows of an embedding matrix whose vectors are identical (the same bytes; found by a 64-bit hash of each
    row, block by block), grouped: `members` holds each group's rows in increasing order, group after group, and
    `group(rows)` the position in `members` where a row's group starts (-1 for a row without a twin). Memory: 8 bytes
    per row while it is built, then 16 bytes per row that has a twin."""

    HASH_BLOCK = 4096

    def __init__(self, embeddings: Embeddings):
        n = len(embeddings)
        coeffs = np.random.default_rng(0x68).integers(1, 2**63, embeddings.dim, dtype=np.uint64) | np.uint64(1)
        hashes = np.empty(n, dtype=np.uint64)
        for a, block in embeddings.iter_blocks(self.HASH_BLOCK):  # exact integer arithmetic, modulo 2**64
            words = np.ascontiguousarray(block, dtype=np.float32).view(np.uint32).astype(np.uint64)
            hashes[a:a + len(block)] = (words * coeffs).sum(axis=1, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")  # (equal hashes keep their rows in increasing order)
        ordered = hashes[order]
        del hashes
        same_as_previous = np.zeros(n, dtype=bool)
        same_as_previous[1:] = ordered[1:] == ordered[:-1]
        in_group = same_as_previous.copy()
        in_group[:-1] |= same_as_previous[1:]
        positions = np.nonzero(in_group)[0]
        self.members = order[positions].astype(np.int64)
        first = np.where(~same_as_previous[positions], np.arange(len(positions)), 0)
        starts = np.maximum.accumulate(first) if len(first) else first
        by_row = np.argsort(self.members, kind="stable")
        self._rows, self._starts = self.members[by_row], starts[by_row].astype(np.int64)

    def __bool__(self) -> bool:
        return len(self.members) > 0

    def group(self, rows: np.ndarray) -> np.ndarray:
        if not len(self._rows):
            return np.full(np.shape(rows), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._rows, rows), len(self._rows) - 1)
        return np.where((rows >= 0) & (self._rows[at] == rows), self._starts[at], -1)

    def lowest_rows(self, inds: np.ndarray) -> np.ndarray:
        """`inds [n, k]` with the m entries of a row that are twins of one another replaced, in their order, by the
        m lowest rows of their group (twins are equally near any query: which of them a search returns is chance)."""
        groups = self.group(inds)
        if not (groups >= 0).any():
            return inds
        k = inds.shape[1]
        same = (groups[:, :, None] == groups[:, None, :]) & (groups[:, :, None] >= 0)
        rank = (same & np.tri(k, k, -1, dtype=bool)[None]).sum(axis=2)
        return np.where(groups >= 0, self.members[np.maximum(groups, 0) + rank], inds)


def canonical_neighbours(queries, database, sims: np.ndarray, inds: np.ndarray, *, normalize: bool = True,
                         duplicates: Duplicates | None = None, block_rows: int = 4096) -> None:
    """Makes a finished kNN result (`[Nq, k]`, memory maps too; in place, block by block) the same whatever the
    shards, query batches and index: each neighbour's cosine is computed again from the two vectors alone (the
    search's own differs in its last bits with the shapes of the products: twins got unequal cosines), the twins of a
    row's neighbours (identical database vectors) are the lowest rows of their group, and the neighbours are
    ordered by decreasing cosine, then increasing row ([`order_neighbours`]). #68: ties between duplicate lines were
    broken differently by one process, `--shard-size 1000` and Ray."""
    q, db = as_embeddings(queries), as_embeddings(database)
    duplicates = Duplicates(db) if duplicates is None else duplicates
    for a in range(0, len(q), block_rows):
        b = min(a + block_rows, len(q))
        block_inds = np.asarray(inds[a:b])
        if duplicates:
            block_inds = duplicates.lowest_rows(block_inds)
        exact = _exact_sims(query_block(q.rows(a, b), normalize), db, block_inds, normalize)
        sims[a:b], inds[a:b] = order_neighbours(exact, block_inds)
