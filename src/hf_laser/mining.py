r"""Margin-based bitext mining with faiss (Artetxe & Schwenk, 2018, "Margin-based Parallel Corpus Mining with
Multilingual Sentence Embeddings").

Pipeline
--------
1. L2-normalise the source embeddings ``x`` ``[Nx, d]`` and target embeddings ``y`` ``[Ny, d]``.
2. k-nearest-neighbour search in both directions with faiss (inner product = cosine):
   ``x2y_sim, x2y_ind = knn(x, y, k)`` (``[Nx, k]``) and ``y2x_sim, y2x_ind = knn(y, x, k)`` (``[Ny, k]``).
3. Margin score of a candidate pair::

       score(x, y) = margin(cos(x, y), sum_{z in NNk(x)} cos(x, z) / 2k + sum_{z in NNk(y)} cos(y, z) / 2k)

   with ``margin`` one of ``ratio`` (``a / b``, default), ``distance`` (``a - b``) or ``absolute`` (``a``).
4. Candidate selection (``forward``, ``backward``, ``intersection``, ``max``) as in LASER's
   ``source/mine_bitexts.py``; the result is sorted by decreasing score.

Everything is written so that the vectors never need to be in memory at once: embeddings can be numpy arrays,
``.npy`` memory maps, or several shards (:class:`ShardedEmbeddings`, e.g. one file per process); queries are
searched in batches and the database can be split into several indexes whose top-k lists are merged.

The command line is ``hf-laser mine`` and ``hf-laser embed-shards`` (``hf_laser/commands/mine.py``,
``embed_shards.py``); ``python -m hf_laser.mining embed-shards`` is the same (multi-process embedding, e.g. under
``accelerate launch``).

Multi-process embedding, then mining over the shards
----------------------------------------------------
Every process embeds its own contiguous slices of each file (``RANK`` / ``WORLD_SIZE`` from the launcher, or
``--rank`` / ``--world-size``) into ``.npy`` shards in a shared directory; ``hf-laser mine --embed-dir`` then finds
the shards' manifest and searches them as one memory-mapped matrix (no re-embedding)::

    # GPUs: one process per GPU (rank r embeds on cuda:$LOCAL_RANK)
    accelerate launch --multi_gpu --num_processes 8 -m hf_laser.mining embed-shards \
        --model MODEL_DIR --embed-dir EMB --input de src.de --input en tgt.en
    # CPU, 2 processes on this machine (either form)
    python -m hf_laser.mining embed-shards --nproc 2 --device cpu --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    torchrun --nproc_per_node 2 -m hf_laser.mining embed-shards --device cpu --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    # or one command per rank, e.g. on machines sharing EMB
    python -m hf_laser.mining embed-shards --rank 0 --world-size 2 --model MODEL_DIR --embed-dir EMB \
        --input de src.de --input en tgt.en
    # kNN + margin over the shards (faiss uses all cores / GPUs of this one process)
    hf-laser mine --model MODEL_DIR --src-lang de --tgt-lang en src.de tgt.en -o pairs.tsv --embed-dir EMB

(``accelerate launch --cpu --num_processes 2`` starts a single process unless an MPI hostfile is given, so on CPU
use ``--nproc`` or ``torchrun``.) Shards are resumable (``encode_file`` progress files plus a ``.done.json`` marker
per shard), so a crashed rank is simply started again. The markers and the manifest record what the embeddings were
computed from (input sha256, language, model and tokenizer hashes, options, version: ``embedding_identity``); shards
of anything else are recomputed by ``embed-shards`` and ignored, with a message, by ``mine``. ``--num-shards`` larger than the number of processes gives
smaller restart units.

Deviations from the original script, all deliberate:

* ``--threshold`` is applied in every retrieval mode (the original only applies it in ``max`` mode), and
  every mode's output is sorted by decreasing score (the original only sorts in ``max`` mode). The comparison
  is strict (``score > threshold``) as in the original.
* ``k`` larger than a corpus is an error instead of being silently reduced.
* Sorting uses a stable sort, so ties keep the original order (forward candidates before backward ones, then
  by row number); the original used numpy's default (unstable) quicksort.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from .defaults import DEFAULT_CHUNK_LINES, DEFAULT_MAX_SENTENCE_TOKENS
from .encoder import count_lines, read_lines
from .outputs import embedding_identity, identity_changes, read_json, scan_input, write_json_atomic, write_npy_atomic

__all__ = [
    "MARGINS",
    "MODES",
    "Embeddings",
    "ShardedEmbeddings",
    "as_embeddings",
    "l2_normalize",
    "require_faiss",
    "faiss_gpu_available",
    "index_factory_string",
    "build_index",
    "knn_search",
    "merge_topk",
    "margin_function",
    "neighbourhood_mean",
    "score_candidates",
    "select_pairs",
    "MinedPairs",
    "mine",
    "Dedup",
    "deduplicate",
    "deduplicate_file",
    "mine_sentences",
    "iter_lines",
    "count_lines",
    "read_lines_at",
    "plan_shards",
    "embed_shards",
    "load_embedding_shards",
    "StaleEmbeddingsError",
    "embedding_key",
]

MARGINS = ("ratio", "distance", "absolute")
MODES = ("max", "forward", "backward", "intersection")
_MODE_ALIASES = {"fwd": "forward", "bwd": "backward", "intersect": "intersection"}
_INSTALL_HINT = 'pip install "hf-laser[mining]"'


# ---------------------------------------------------------------------------------------------------------------
# faiss
# ---------------------------------------------------------------------------------------------------------------


def require_faiss():
    """Import and return the ``faiss`` module, with an actionable message when it is missing.

    Before the first import, ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` (unless set by the user): with OpenMP's
    default spin-waiting, faiss's many small parallel regions (PQ training, IVF scans) ran 6-50x slower on a CPU shared
    with other processes in our measurements.
    """
    if "faiss" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import faiss  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Bitext mining needs faiss, which is not installed. Install it with "
            f"`{_INSTALL_HINT}` (faiss-cpu), or `pip install \"hf-laser[gpu]\"` for faiss-gpu."
        ) from err
    return faiss


def faiss_gpu_available() -> bool:
    """True when the installed faiss is a GPU build and sees at least one GPU."""
    faiss = require_faiss()
    get = getattr(faiss, "get_num_gpus", None)
    try:
        return bool(get and get() > 0)
    except Exception:  # pragma: no cover
        return False


def _resolve_device(device: str | None) -> str:
    """Map ``None``/``"auto"``/``"cpu"``/``"cuda"``/``"gpu"`` to ``"cpu"`` or ``"gpu"`` for faiss."""
    if device is None or device == "auto":
        return "gpu" if faiss_gpu_available() else "cpu"
    dev = str(device).lower()
    if dev == "cpu":
        return "cpu"
    if dev in ("gpu", "cuda") or dev.startswith("cuda:"):
        if not faiss_gpu_available():
            raise RuntimeError(
                f"device={device!r} was requested for the kNN search but faiss sees no GPU "
                "(faiss-cpu installed, or no CUDA device). Install faiss-gpu (`pip install \"hf-laser[gpu]\"`) "
                "or use device='cpu'."
            )
        return "gpu"
    raise ValueError(f"Unknown faiss device {device!r}; expected 'auto', 'cpu' or 'cuda'.")


# ---------------------------------------------------------------------------------------------------------------
# Embedding containers
# ---------------------------------------------------------------------------------------------------------------


def l2_normalize(x: np.ndarray, copy: bool = True) -> np.ndarray:
    """Row-wise L2-normalised float32 C-contiguous version of ``x`` ``[n, d]``.

    With ``copy=False`` a float32 C-contiguous writable ``x`` is normalised in place (no extra memory). Zero rows stay
    zero (as with ``faiss.normalize_L2``).
    """
    if copy:
        out = np.array(x, dtype=np.float32, order="C", copy=True)
    else:
        out = np.require(x, dtype=np.float32, requirements=["C", "W"])
    if out.ndim != 2:
        raise ValueError(f"expected a 2-D array [n, d], got shape {out.shape}")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


class Embeddings:
    """Read-only view of an ``[n, d]`` embedding matrix that may not fit in memory.

    Subclasses implement :meth:`rows` (a contiguous slice) and :meth:`take` (arbitrary rows); both return *new*
    float32 arrays (not normalised; the search normalises them in place).
    """

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def dim(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.dim)

    def rows(self, start: int, stop: int) -> np.ndarray:  # pragma: no cover - abstract
        """Rows ``[start, stop)`` as float32 ``[stop - start, d]``."""
        raise NotImplementedError

    def take(self, indices: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """Rows ``indices`` (any order, repeats allowed) as float32 ``[len(indices), d]``."""
        raise NotImplementedError

    def iter_blocks(self, block_rows: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(offset, block)`` with ``block`` float32 ``[<= block_rows, d]`` covering rows ``[start, stop)``."""
        stop = len(self) if stop is None else stop
        block_rows = max(1, int(block_rows))
        for a in range(start, stop, block_rows):
            b = min(a + block_rows, stop)
            yield a, self.rows(a, b)

    def subset(self, indices: np.ndarray) -> "Embeddings":
        """A view of rows ``indices`` (``[m]`` int) without copying the vectors."""
        return _RowSubset(self, indices)

    def to_numpy(self) -> np.ndarray:
        """Materialise as one float32 array ``[n, d]`` (only for data that fits in memory)."""
        return self.rows(0, len(self))


class ShardedEmbeddings(Embeddings):
    """The row-wise concatenation of several ``[n_i, d]`` arrays, seen as one ``[sum n_i, d]`` matrix.

    Args:
        shards: numpy arrays, ``np.memmap`` s, or paths of ``.npy`` files (opened with ``mmap_mode="r"``), all with the
            same second dimension ``d``. Empty shards are allowed.
    """

    def __init__(self, shards: Sequence[np.ndarray | str | os.PathLike]):
        arrays = []
        for s in shards:
            a = np.load(s, mmap_mode="r") if isinstance(s, (str, os.PathLike)) else s
            if a.ndim != 2:
                raise ValueError(f"embedding shard must be 2-D [n, d], got shape {a.shape}")
            arrays.append(a)
        if not arrays:
            raise ValueError("ShardedEmbeddings needs at least one shard")
        dims = {a.shape[1] for a in arrays}
        if len(dims) != 1:
            raise ValueError(f"embedding shards have different dimensions: {sorted(dims)}")
        self.shards = arrays
        self._dim = dims.pop()
        sizes = np.array([a.shape[0] for a in arrays], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # [num_shards + 1]

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def dim(self) -> int:
        return self._dim

    def rows(self, start: int, stop: int) -> np.ndarray:
        start, stop = max(0, int(start)), min(len(self), int(stop))
        out = np.empty((max(0, stop - start), self._dim), dtype=np.float32)
        if stop <= start:
            return out
        first = int(np.searchsorted(self.offsets, start, side="right") - 1)
        pos, s = start, first
        while pos < stop:
            off, end = int(self.offsets[s]), int(self.offsets[s + 1])
            b = min(stop, end)
            if b > pos:
                out[pos - start : b - start] = self.shards[s][pos - off : b - off]
            pos = max(pos, b)
            s += 1
        return out

    def take(self, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = np.empty((idx.shape[0], self._dim), dtype=np.float32)
        if idx.size == 0:
            return out
        if idx.min() < 0 or idx.max() >= len(self):
            raise IndexError(f"row index out of range [0, {len(self)})")
        which = np.searchsorted(self.offsets, idx, side="right") - 1
        for s in np.unique(which):
            sel = np.nonzero(which == s)[0]
            local = idx[sel] - self.offsets[s]
            order = np.argsort(local, kind="stable")  # sorted reads are friendlier to memory maps
            out[sel[order]] = self.shards[int(s)][local[order]]
        return out


class _RowSubset(Embeddings):
    def __init__(self, base: Embeddings, indices: np.ndarray):
        self.base = base
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= len(base)):
            raise IndexError(f"subset index out of range [0, {len(base)})")

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    @property
    def dim(self) -> int:
        return self.base.dim

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self.base.take(self.indices[start:stop])

    def take(self, indices: np.ndarray) -> np.ndarray:
        return self.base.take(self.indices[np.asarray(indices, dtype=np.int64)])


def as_embeddings(x) -> Embeddings:
    """Wrap ``x`` (array ``[n, d]``, ``.npy`` path, list of shards, or :class:`Embeddings`) as :class:`Embeddings`."""
    if isinstance(x, Embeddings):
        return x
    if isinstance(x, (str, os.PathLike)):
        return ShardedEmbeddings([x])
    if isinstance(x, (list, tuple)):
        return ShardedEmbeddings(x)
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor
        x = x.detach().float().cpu().numpy()
    arr = np.asarray(x) if not isinstance(x, np.ndarray) else x
    if arr.ndim != 2:
        raise ValueError(f"embeddings must be 2-D [n, d], got shape {arr.shape}")
    return ShardedEmbeddings([arr])


# ---------------------------------------------------------------------------------------------------------------
# Index construction and kNN search
# ---------------------------------------------------------------------------------------------------------------


def _default_nlist(n: int) -> int:
    """~4 sqrt(n) inverted lists, a power of two, and at least 39 training points per list."""
    target = 2 ** int(round(math.log2(max(1.0, 4.0 * math.sqrt(max(n, 1))))))
    return int(max(1, min(target, n // 39 if n >= 39 else 1)))


def _default_pq_m(d: int) -> int:
    """Largest divisor of ``d`` not above ``d // 16`` (64 sub-quantizers for 1024-d vectors)."""
    cap = max(1, d // 16)
    return max(m for m in range(1, cap + 1) if d % m == 0)


def index_factory_string(index: str, n: int, d: int, *, nlist: int | None = None, pq_m: int | None = None) -> str:
    """faiss factory string for ``index`` (``"flat"``, ``"ivf"``, ``"ivfpq"`` or a factory string itself).

    Args:
        index: ``"flat"`` (exact, ``IndexFlatIP``), ``"ivf"`` (``IVF{nlist},Flat``), ``"ivfpq"``
            (``IVF{nlist},PQ{pq_m}``), or any faiss factory string (e.g. ``"IVF4096,SQ8"``, ``"HNSW32"``).
        n: number of database vectors (for the default ``nlist``).
        d: vector dimension (for the default ``pq_m``).
    """
    key = index.lower()
    if key == "flat":
        return "Flat"
    if key == "ivf":
        return f"IVF{nlist or _default_nlist(n)},Flat"
    if key == "ivfpq":
        m = pq_m or _default_pq_m(d)
        if d % m:
            raise ValueError(f"pq_m={m} must divide the embedding dimension {d}")
        return f"IVF{nlist or _default_nlist(n)},PQ{m}"
    return index


def _is_exact(factory: str) -> bool:
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


def build_index(
    database: Embeddings | np.ndarray,
    index: str = "flat",
    *,
    start: int = 0,
    stop: int | None = None,
    device: str | None = "cpu",
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_m: int | None = None,
    train_size: int | None = None,
    add_batch_size: int = 32768,
    gpu_fp16: bool = False,
    normalize: bool = True,
    seed: int = 0,
):
    """Build a faiss inner-product index over rows ``[start, stop)`` of ``database`` (``[n, d]``).

    Vectors are L2-normalised block by block (``normalize=True``), so the inner product is the cosine. Indexes that
    need training (IVF, PQ, ...) are trained on ``train_size`` random rows (default ``min(n, max(64 * nlist, 20000))``
    or 50k for other factory strings). On GPU (``device="cuda"``), the trained index is cloned to all visible GPUs with
    ``faiss.index_cpu_to_all_gpus`` (database split across GPUs, ``useFloat16`` from ``gpu_fp16``, forced for IVF-PQ
    with more than 48 bytes per code, which GPU IVFPQ only supports with float16 lookup tables), and IVF
    k-means runs on the GPU.

    Returns:
        ``(faiss_index, factory_string)``.
    """
    faiss = require_faiss()
    db = as_embeddings(database)
    stop = len(db) if stop is None else stop
    n, d = stop - start, db.dim
    if n <= 0:
        raise ValueError("cannot build an index over 0 vectors")
    dev = _resolve_device(device)
    factory = index_factory_string(index, n, d, nlist=nlist, pq_m=pq_m)
    try:
        cpu_index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    except Exception as err:  # faiss raises RuntimeError with C++ message
        raise ValueError(f"invalid faiss index {index!r} (factory string {factory!r}): {err}") from err

    try:  # polysemous training (a slow PQ code re-ordering, only used by polysemous search) is not needed here
        pq_index = faiss.downcast_index(faiss.extract_index_ivf(cpu_index))
        if hasattr(pq_index, "do_polysemous_training"):
            pq_index.do_polysemous_training = False
    except Exception:
        pass

    if not cpu_index.is_trained:
        ivf = None
        try:
            ivf = faiss.extract_index_ivf(cpu_index)
        except Exception:
            ivf = None
        min_train = 1
        if ivf is not None:
            min_train = max(min_train, int(ivf.nlist))
        if "PQ" in factory.upper():
            min_train = max(min_train, 256)
        if train_size is None:
            train_size = min(n, max(64 * int(ivf.nlist), 20000)) if ivf is not None else min(n, 50000)
        train_size = min(int(train_size), n)
        if train_size < min_train:
            raise ValueError(
                f"index {index!r} ({factory}) needs at least {min_train} training vectors but the corpus "
                f"has {n}; use index='flat' for small corpora or a smaller nlist."
            )
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(n, size=train_size, replace=False)) + start
        train = db.take(rows)
        train = l2_normalize(train, copy=False) if normalize else np.ascontiguousarray(train, dtype=np.float32)
        gpu_clustering = None
        if dev == "gpu" and ivf is not None:
            # k-means on the GPU(s); same metric as the coarse quantizer. Keep a Python reference while training.
            gpu_clustering = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(d, ivf.metric_type))
            ivf.clustering_index = gpu_clustering
        cpu_index.train(train)
        del train
        if gpu_clustering is not None:
            ivf.clustering_index = None
            del gpu_clustering

    if nprobe is not None or "IVF" in factory.upper():
        try:
            ivf = faiss.extract_index_ivf(cpu_index)
            ivf.nprobe = int(nprobe if nprobe is not None else min(16, ivf.nlist))
        except Exception:
            if nprobe is not None:
                raise ValueError(f"nprobe is only meaningful for IVF indexes, not {factory!r}") from None

    if dev == "gpu":
        co = faiss.GpuMultipleClonerOptions()
        co.shard = True  # split the database across GPUs
        co.useFloat16 = bool(gpu_fp16)
        try:
            pq = faiss.downcast_index(faiss.extract_index_ivf(cpu_index))
            if hasattr(pq, "pq") and pq.pq.code_size > 48:
                co.useFloat16 = True
        except Exception:
            pass
        try:
            index_obj = faiss.index_cpu_to_all_gpus(cpu_index, co=co)
        except Exception as err:
            raise ValueError(f"faiss index {factory!r} cannot be moved to the GPU: {err}") from err
        if nprobe is not None or "IVF" in factory.upper():
            try:
                faiss.GpuParameterSpace().set_index_parameter(
                    index_obj, "nprobe", int(nprobe if nprobe is not None else min(16, _ivf_nlist(cpu_index)))
                )
            except Exception:
                pass
    else:
        index_obj = cpu_index

    for a, block in db.iter_blocks(add_batch_size, start, stop):
        index_obj.add(l2_normalize(block, copy=False) if normalize else np.ascontiguousarray(block, dtype=np.float32))
    return index_obj, factory


def _tqdm_disable(show: bool | None):
    return None if show is None else (not show)


def _ivf_nlist(index) -> int:
    faiss = require_faiss()
    return int(faiss.extract_index_ivf(index).nlist)


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

    Returns:
        ``(sims, inds)``: float32 ``[Nq, k]`` cosines sorted in decreasing order and int64 ``[Nq, k]`` database rows.
        Rows for which an approximate index found fewer than ``k`` neighbours are padded with ``-inf`` / ``-1``.
    """
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
    dev = _resolve_device(device)
    if query_batch_size is None:
        query_batch_size = 131072 if dev == "gpu" else 8192
    shard_size = len(db) if not shard_size else int(shard_size)
    nq = len(q)
    out_sims = np.full((nq, k), -np.inf, dtype=np.float32)
    out_inds = np.full((nq, k), -1, dtype=np.int64)
    shards = [(a, min(a + shard_size, len(db))) for a in range(0, len(db), shard_size)]

    from tqdm.auto import tqdm  # noqa: PLC0415

    n_batches = math.ceil(nq / query_batch_size)
    with tqdm(total=len(shards) * n_batches, desc=desc, unit="batch", disable=_tqdm_disable(show_progress)) as bar:
        for a, b in shards:
            t_build = time.perf_counter()
            idx, factory = build_index(
                db, index, start=a, stop=b, device=dev, nlist=nlist, nprobe=nprobe, pq_m=pq_m,
                train_size=train_size, gpu_fp16=gpu_fp16, normalize=normalize,
            )
            do_refine = (not _is_exact(factory)) if refine is None else bool(refine)
            t_search = time.perf_counter()
            if stats is not None:
                stats["build_s"] = stats.get("build_s", 0.0) + (t_search - t_build)
            kk = min(k, b - a)
            for qa, qblock in q.iter_blocks(query_batch_size):
                qn = l2_normalize(qblock, copy=False) if normalize else np.ascontiguousarray(qblock, dtype=np.float32)
                sims, inds = idx.search(qn, kk)
                inds = inds.astype(np.int64, copy=False)
                valid = inds >= 0
                inds = np.where(valid, inds + a, -1)
                if do_refine:
                    sims = _exact_sims(qn, db, inds, normalize)
                    order = np.argsort(-sims, axis=1, kind="stable")
                    sims = np.take_along_axis(sims, order, axis=1)
                    inds = np.take_along_axis(inds, order, axis=1)
                sims = np.where(inds < 0, -np.inf, sims).astype(np.float32)
                qb = qa + qn.shape[0]
                if len(shards) == 1:
                    out_sims[qa:qb, :kk], out_inds[qa:qb, :kk] = sims, inds
                else:
                    out_sims[qa:qb], out_inds[qa:qb] = merge_topk(out_sims[qa:qb], out_inds[qa:qb], sims, inds, k)
                bar.update(1)
            if stats is not None:
                stats["search_s"] = stats.get("search_s", 0.0) + (time.perf_counter() - t_search)
            del idx
    return out_sims, out_inds


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


# ---------------------------------------------------------------------------------------------------------------
# Margin scoring and candidate selection
# ---------------------------------------------------------------------------------------------------------------


def margin_function(margin: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``margin(a, b)``: ``ratio`` -> ``a / b``, ``distance`` -> ``a - b``, ``absolute`` -> ``a``."""
    if margin == "ratio":
        return lambda a, b: a / b
    if margin == "distance":
        return lambda a, b: a - b
    if margin == "absolute":
        return lambda a, b: a
    raise ValueError(f"unknown margin {margin!r}; expected one of {MARGINS}")


def neighbourhood_mean(sims: np.ndarray, inds: np.ndarray | None = None) -> np.ndarray:
    """Mean cosine of each row's k nearest neighbours, ``[n]`` float64, from ``sims [n, k]``.

    Missing neighbours (``inds == -1`` or ``sims == -inf``) are left out of the mean; a row without any neighbour
    gets NaN.
    """
    sims = np.asarray(sims, dtype=np.float64)
    valid = np.isfinite(sims) if inds is None else (np.asarray(inds) >= 0) & np.isfinite(sims)
    cnt = valid.sum(axis=1)
    tot = np.where(valid, sims, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def score_candidates(
    sims: np.ndarray, inds: np.ndarray, query_mean: np.ndarray, database_mean: np.ndarray, margin: str = "ratio"
) -> np.ndarray:
    """Margin scores of the kNN candidates.

    ``scores[i, j] = margin(sims[i, j], (query_mean[i] + database_mean[inds[i, j]]) / 2)``, i.e. the denominator is
    ``sum_{NNk(x)} cos / 2k + sum_{NNk(y)} cos / 2k``.

    Args:
        sims: ``[n, k]`` cosines between query ``i`` and its candidate ``inds[i, j]``.
        inds: ``[n, k]`` candidate rows in the other corpus (``-1`` = missing).
        query_mean: ``[n]`` mean kNN cosine of the queries.
        database_mean: ``[m]`` mean kNN cosine of the other corpus's rows (in the reverse direction).

    Returns:
        float64 ``[n, k]``; missing candidates score ``-inf``.
    """
    f = margin_function(margin)
    inds = np.asarray(inds)
    valid = inds >= 0
    cand_mean = np.asarray(database_mean, dtype=np.float64)[np.where(valid, inds, 0)]
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = (np.asarray(query_mean, dtype=np.float64)[:, None] + cand_mean) / 2
        scores = f(np.asarray(sims, dtype=np.float64), denom)
        scores = np.broadcast_to(scores, inds.shape).astype(np.float64)
    scores = np.where(valid & np.isfinite(scores), scores, -np.inf)
    return scores


def _norm_mode(mode: str) -> str:
    m = _MODE_ALIASES.get(mode, mode)
    if m not in MODES:
        raise ValueError(f"unknown mining mode {mode!r}; expected one of {MODES} (or fwd/bwd/intersect)")
    return m


def select_pairs(
    fwd_inds: np.ndarray,
    fwd_scores: np.ndarray,
    bwd_inds: np.ndarray,
    bwd_scores: np.ndarray,
    mode: str = "max",
    threshold: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate selection of LASER's ``mine_bitexts.py`` (``--mode mine``).

    Each source row ``i`` keeps its best candidate ``fwd_best[i]`` (highest margin score among its k neighbours,
    first one on ties), each target row ``j`` its best ``bwd_best[j]``. Then:

    * ``forward``: every source with its best target, scored ``max_j fwd_scores[i]``;
    * ``backward``: every target with its best source;
    * ``intersection``: the forward pairs ``(i, fwd_best[i])`` with ``bwd_best[fwd_best[i]] == i``;
    * ``max``: forward and backward pairs pooled and sorted by decreasing score; a pair is kept only if neither its
      source nor its target row was used by a higher-scored pair (so each row appears at most once, and a pair found
      in both directions is kept once).

    Pairs with ``score > threshold`` (all pairs when ``threshold`` is None) are returned sorted by decreasing score.

    Args:
        fwd_inds, fwd_scores: ``[Nx, k]`` target candidates of each source row and their margin scores.
        bwd_inds, bwd_scores: ``[Ny, k]`` source candidates of each target row and their margin scores.

    Returns:
        ``(src [M] int64, tgt [M] int64, scores [M] float64)``.
    """
    mode = _norm_mode(mode)
    nx, ny = fwd_inds.shape[0], bwd_inds.shape[0]
    fa = fwd_scores.argmax(axis=1)
    ba = bwd_scores.argmax(axis=1)
    fwd_best = fwd_inds[np.arange(nx), fa].astype(np.int64)
    bwd_best = bwd_inds[np.arange(ny), ba].astype(np.int64)
    fwd_max = fwd_scores[np.arange(nx), fa].astype(np.float64)
    bwd_max = bwd_scores[np.arange(ny), ba].astype(np.float64)

    if mode == "forward":
        src, tgt, sc = np.arange(nx, dtype=np.int64), fwd_best, fwd_max
    elif mode == "backward":
        src, tgt, sc = bwd_best, np.arange(ny, dtype=np.int64), bwd_max
    elif mode == "intersection":
        ok = fwd_best >= 0
        back = np.full(nx, -1, dtype=np.int64)
        back[ok] = bwd_best[fwd_best[ok]]
        keep = ok & (back == np.arange(nx))
        src, tgt, sc = np.arange(nx, dtype=np.int64)[keep], fwd_best[keep], fwd_max[keep]
    else:  # max
        src_all = np.concatenate([np.arange(nx, dtype=np.int64), bwd_best])
        tgt_all = np.concatenate([fwd_best, np.arange(ny, dtype=np.int64)])
        sc_all = np.concatenate([fwd_max, bwd_max])
        usable = np.isfinite(sc_all) & (src_all >= 0) & (tgt_all >= 0)
        cand = np.nonzero(usable)[0]
        order = cand[np.argsort(-sc_all[cand], kind="stable")]
        seen_src = np.zeros(nx, dtype=bool)
        seen_tgt = np.zeros(ny, dtype=bool)
        keep = []
        s_all, t_all = src_all.tolist(), tgt_all.tolist()
        for i in order.tolist():
            s, t = s_all[i], t_all[i]
            if not seen_src[s] and not seen_tgt[t]:
                seen_src[s] = True
                seen_tgt[t] = True
                keep.append(i)
        keep = np.asarray(keep, dtype=np.int64)
        src, tgt, sc = src_all[keep], tgt_all[keep], sc_all[keep]

    ok = np.isfinite(sc) & (src >= 0) & (tgt >= 0)
    if threshold is not None:
        ok &= sc > threshold
    src, tgt, sc = src[ok], tgt[ok], sc[ok]
    order = np.argsort(-sc, kind="stable")
    return src[order], tgt[order], sc[order]


@dataclass
class MinedPairs:
    """Mined sentence pairs, sorted by decreasing margin score.

    Attributes:
        src: ``[M]`` int64 source rows.
        tgt: ``[M]`` int64 target rows.
        scores: ``[M]`` float64 margin scores.
        x2y_sim, x2y_ind: ``[Nx, k]`` forward kNN (float32 cosines, int64 target rows).
        y2x_sim, y2x_ind: ``[Ny, k]`` backward kNN.
    """

    src: np.ndarray
    tgt: np.ndarray
    scores: np.ndarray
    x2y_sim: np.ndarray | None = None
    x2y_ind: np.ndarray | None = None
    y2x_sim: np.ndarray | None = None
    y2x_ind: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def __iter__(self):
        return iter(zip(self.scores.tolist(), self.src.tolist(), self.tgt.tolist()))


def mine(
    src_embeddings,
    tgt_embeddings,
    *,
    k: int = 4,
    margin: str = "ratio",
    mode: str = "max",
    threshold: float | None = None,
    index: str = "flat",
    device: str | None = None,
    query_batch_size: int | None = None,
    shard_size: int | None = None,
    nlist: int | None = None,
    nprobe: int | None = None,
    pq_m: int | None = None,
    refine: bool | None = None,
    gpu_fp16: bool = False,
    normalize: bool = True,
    show_progress: bool | None = None,
) -> MinedPairs:
    """Mine parallel pairs between source embeddings ``[Nx, d]`` and target embeddings ``[Ny, d]``.

    Both kNN directions are always computed (the margin needs both neighbourhoods). See the module docstring and
    :func:`select_pairs` for the scoring and the selection modes, and :func:`knn_search` for the index options.

    Returns:
        :class:`MinedPairs` with row numbers into the two inputs, sorted by decreasing score.
    """
    margin_function(margin)  # validate early
    mode = _norm_mode(mode)
    x, y = as_embeddings(src_embeddings), as_embeddings(tgt_embeddings)
    if len(x) == 0:
        raise ValueError("the source corpus is empty (0 embeddings)")
    if len(y) == 0:
        raise ValueError("the target corpus is empty (0 embeddings)")
    if x.dim != y.dim:
        raise ValueError(
            f"dimension mismatch: source embeddings have {x.dim} dimensions, target embeddings {y.dim}"
        )
    for name, n in (("target", len(y)), ("source", len(x))):
        if k > n:
            raise ValueError(f"k={k} is larger than the {name} corpus ({n} sentences); use a smaller --k")
    kw = dict(
        index=index, device=device, query_batch_size=query_batch_size, shard_size=shard_size, nlist=nlist,
        nprobe=nprobe, pq_m=pq_m, refine=refine, gpu_fp16=gpu_fp16, normalize=normalize, show_progress=show_progress,
    )
    x2y_sim, x2y_ind = knn_search(x, y, k, desc="kNN src->tgt", **kw)
    y2x_sim, y2x_ind = knn_search(y, x, k, desc="kNN tgt->src", **kw)
    x2y_mean = neighbourhood_mean(x2y_sim, x2y_ind)
    y2x_mean = neighbourhood_mean(y2x_sim, y2x_ind)
    fwd_scores = score_candidates(x2y_sim, x2y_ind, x2y_mean, y2x_mean, margin)
    bwd_scores = score_candidates(y2x_sim, y2x_ind, y2x_mean, x2y_mean, margin)
    src, tgt, sc = select_pairs(x2y_ind, fwd_scores, y2x_ind, bwd_scores, mode=mode, threshold=threshold)
    return MinedPairs(src, tgt, sc, x2y_sim, x2y_ind, y2x_sim, y2x_ind)


# ---------------------------------------------------------------------------------------------------------------
# Deduplication
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Dedup:
    """Mapping between a corpus and its unique items.

    Attributes:
        first: ``[U]`` int64, original position of the first occurrence of each unique item (increasing).
        inverse: ``[N]`` int64, unique id of every original position (``first[inverse[i]]`` is the first occurrence
            of item ``i``); may be None when only ``first`` was kept (:func:`deduplicate_file` on big files).
        n: ``N``, number of original items.
    """

    first: np.ndarray
    inverse: np.ndarray | None
    n: int

    @property
    def num_unique(self) -> int:
        return int(self.first.shape[0])

    def to_original(self, unique_ids: np.ndarray) -> np.ndarray:
        """Original positions (first occurrences) ``[m]`` of unique ids ``[m]``."""
        return self.first[np.asarray(unique_ids, dtype=np.int64)]


def _digest(s: str) -> bytes:
    return hashlib.blake2b(s.encode("utf-8", "surrogateescape"), digest_size=16).digest()


def deduplicate(items: Iterable[str]) -> Dedup:
    """Unique items in order of first occurrence, like LASER's ``TextLoadUnify`` (``--unify``).

    Items are compared exactly (after the caller's own normalisation); a 128-bit hash is kept per unique item
    instead of the text.
    """
    seen: dict[bytes, int] = {}
    first, inverse = [], []
    for pos, item in enumerate(items):
        h = _digest(item)
        uid = seen.get(h)
        if uid is None:
            uid = seen[h] = len(first)
            first.append(pos)
        inverse.append(uid)
    return Dedup(np.asarray(first, dtype=np.int64), np.asarray(inverse, dtype=np.int64), len(inverse))


def deduplicate_file(path: str | os.PathLike, unique_path: str | os.PathLike, keep_inverse: bool = False) -> Dedup:
    """Stream ``path`` and write its unique lines (first occurrences, in order) to ``unique_path``.

    Memory: 16-byte hash + ids per unique line; the text is never held. ``inverse`` is only kept on request.
    """
    seen: dict[bytes, int] = {}
    first, inverse = [], ([] if keep_inverse else None)
    n = 0
    tmp = Path(str(unique_path) + ".tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
        for pos, line in enumerate(iter_lines(path)):
            h = _digest(line)
            uid = seen.get(h)
            if uid is None:
                uid = seen[h] = len(first)
                first.append(pos)
                out.write(line + "\n")
            if inverse is not None:
                inverse.append(uid)
            n = pos + 1
    os.replace(tmp, unique_path)
    inv = np.asarray(inverse, dtype=np.int64) if inverse is not None else None
    return Dedup(np.asarray(first, dtype=np.int64), inv, n)


def mine_sentences(
    encoder,
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    *,
    src_lang: str,
    tgt_lang: str,
    dedup: bool = True,
    encode_kwargs: dict | None = None,
    **mine_kwargs,
) -> MinedPairs:
    """Embed two in-memory sentence lists with ``encoder.encode`` and mine them.

    With ``dedup=True`` identical sentences are embedded and searched once (LASER's ``--unify``); returned rows are
    positions in the input lists (first occurrence of a duplicated sentence).

    Returns:
        :class:`MinedPairs` with ``src`` / ``tgt`` positions in ``src_sentences`` / ``tgt_sentences``.
    """
    if len(src_sentences) == 0:
        raise ValueError("the source sentence list is empty")
    if len(tgt_sentences) == 0:
        raise ValueError("the target sentence list is empty")
    encode_kwargs = dict(encode_kwargs or {})
    if dedup:
        ds, dt = deduplicate(src_sentences), deduplicate(tgt_sentences)
        src_u = [src_sentences[i] for i in ds.first.tolist()]
        tgt_u = [tgt_sentences[i] for i in dt.first.tolist()]
    else:
        src_u, tgt_u = list(src_sentences), list(tgt_sentences)
    x = encoder.encode(src_u, lang=src_lang, **encode_kwargs)
    y = encoder.encode(tgt_u, lang=tgt_lang, **encode_kwargs)
    res = mine(np.asarray(x), np.asarray(y), **mine_kwargs)
    if dedup:
        res.src, res.tgt = ds.to_original(res.src), dt.to_original(res.tgt)
    return res


# ---------------------------------------------------------------------------------------------------------------
# Text files
# ---------------------------------------------------------------------------------------------------------------


# Lines are numbered exactly as `LaserEncoder.encode_file` reads them: only '\n' ends a line.
iter_lines = read_lines


def read_lines_at(path: str | os.PathLike, line_numbers: Iterable[int]) -> dict[int, str]:
    """Read only the requested lines (0-based) of a text file in one streaming pass: ``{line_number: text}``."""
    wanted = np.unique(np.fromiter((int(i) for i in line_numbers), dtype=np.int64))
    out: dict[int, str] = {}
    if wanted.size == 0:
        return out
    targets = wanted.tolist()
    t = 0
    for pos, line in enumerate(iter_lines(path)):
        if pos == targets[t]:
            out[pos] = line
            t += 1
            if t == len(targets):
                break
    if len(out) != len(targets):
        missing = [i for i in targets if i not in out][:5]
        raise ValueError(f"{path}: line(s) {missing} requested but the file has fewer lines")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Embedding files: single file and multi-process shards
# ---------------------------------------------------------------------------------------------------------------


def embedding_key(input_path: str | os.PathLike, lang: str) -> str:
    """Stable file stem for the embeddings of ``input_path`` in language ``lang`` inside an embedding directory."""
    p = Path(input_path).resolve()
    h = hashlib.sha1(str(p).encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{p.name}.{lang}.{h}"


def plan_shards(num_lines: int, num_shards: int) -> list[tuple[int, int]]:
    """Split lines ``[0, num_lines)`` into ``num_shards`` contiguous ranges whose sizes differ by at most one."""
    if num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    base, extra = divmod(num_lines, num_shards)
    out, a = [], 0
    for s in range(num_shards):
        b = a + base + (1 if s < extra else 0)
        out.append((a, b))
        a = b
    return out


def _manifest_path(embed_dir: Path, key: str) -> Path:
    return embed_dir / f"{key}.shards.json"


class StaleEmbeddingsError(ValueError):
    """Embedding shards that were computed from something else than what is asked now (message: what changed)."""


def _identity_tag(identity: dict, num_shards: int) -> str:
    blob = json.dumps({"identity": identity, "num_shards": num_shards}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _shard_identity(encoder, info: dict, lang: str, *, pretokenized: bool, fp16: bool, max_tokens: int,
                    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS) -> dict:
    """The [`embedding_identity`] of a whole file embedded with `embed_shards` / `mine` (default batching)."""
    return embedding_identity(encoder, info, lang=lang, pretokenized=pretokenized, fp16=fp16, normalize=False,
                              max_tokens=max_tokens, batch_size=None, chunk_lines=DEFAULT_CHUNK_LINES,
                              max_sentence_tokens=max_sentence_tokens)



def _dist_env() -> tuple[int, int]:
    """(rank, world_size) from the environment of ``torchrun`` / ``accelerate launch`` (``RANK``, ``WORLD_SIZE``)."""
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return rank, world


def embed_shards(
    encoder,
    input_path: str | os.PathLike,
    embed_dir: str | os.PathLike,
    lang: str,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    num_shards: int | None = None,
    pretokenized: bool = False,
    fp16: bool = False,
    max_tokens: int = 12000,
    max_sentence_tokens: int | None = DEFAULT_MAX_SENTENCE_TOKENS,
    show_progress_bar: bool | None = None,
) -> Path | None:
    """Embed this process's share of a text file into ``.npy`` shards (one call per process).

    The file's lines are split into ``num_shards`` contiguous ranges (default: one per process); process ``rank`` of
    ``world_size`` embeds shards ``rank, rank + world_size, ...`` with ``encoder.encode_file`` (streamed, resumable).
    Each finished shard leaves a ``.done.json`` marker tagged with what it was computed from (the file's content,
    language, model, options: :func:`hf_laser.encoder.embedding_identity`); the process that finds all markers of
    this computation present writes the manifest ``{embedding_key}.shards.json`` (with that identity) that
    :func:`load_embedding_shards` and ``hf-laser mine --embed-dir`` read. Re-running skips the finished shards of the
    same computation and recomputes the others (e.g. after the file was edited).

    Returns:
        The manifest path when all shards are done after this call, else None.
    """
    if rank is None or world_size is None:
        env_rank, env_world = _dist_env()
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world_size {world_size}")
    embed_dir = Path(embed_dir)
    embed_dir.mkdir(parents=True, exist_ok=True)
    key = embedding_key(input_path, lang)
    info = scan_input(input_path)
    n = info["lines"]
    if n == 0:
        raise ValueError(f"input file {input_path} is empty")
    num_shards = world_size if num_shards is None else int(num_shards)
    identity = _shard_identity(encoder, info, lang, pretokenized=pretokenized, fp16=fp16, max_tokens=max_tokens,
                               max_sentence_tokens=max_sentence_tokens)
    tag = _identity_tag(identity, num_shards)
    bounds = plan_shards(n, num_shards)
    names = [f"{key}.shard{s:05d}-of-{num_shards:05d}" for s in range(num_shards)]

    for s in range(rank, num_shards, world_size):
        a, b = bounds[s]
        done = embed_dir / f"{names[s]}.done.json"
        txt = embed_dir / f"{names[s]}.txt"
        npy = embed_dir / f"{names[s]}.npy"
        if _done_tag(done) == tag and npy.exists():
            continue
        done.unlink(missing_ok=True)
        # the shard's text, rewritten from the input (encode_file resumes its embedding when the content is the same)
        tmp = txt.with_name(txt.name + ".tmp")
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as out:
            for pos, line in enumerate(iter_lines(input_path)):
                if pos >= b:
                    break
                if pos >= a:
                    out.write(line + "\n")
        os.replace(tmp, txt)
        if b > a:
            emb = encoder.encode_file(
                str(txt), str(npy), lang=lang, pretokenized=pretokenized, fp16=fp16, max_tokens=max_tokens,
                max_sentence_tokens=max_sentence_tokens, show_progress_bar=show_progress_bar, resume=True,
            )
            rows, dim = int(emb.shape[0]), int(emb.shape[1])
            del emb
        else:  # more shards than lines
            dim = int(encoder.dim)
            write_npy_atomic(npy, np.zeros((0, dim), dtype=np.float16 if fp16 else np.float32))
            rows = 0
        if rows != b - a:
            raise RuntimeError(f"shard {npy} has {rows} rows but {b - a} lines were embedded")
        write_json_atomic(done, {"start": a, "end": b, "rows": rows, "dim": dim, "file": npy.name, "tag": tag})
    return _finalize_manifest(embed_dir, key, input_path, lang, n, names, bounds, identity, tag)


def _done_tag(done: Path) -> str | None:
    try:
        return read_json(done).get("tag")
    except (OSError, ValueError, AttributeError):
        return None


def _finalize_manifest(embed_dir, key, input_path, lang, n, names, bounds, identity, tag) -> Path | None:
    manifest = _manifest_path(embed_dir, key)
    shards = []
    for name, (a, b) in zip(names, bounds):
        done = embed_dir / f"{name}.done.json"
        if _done_tag(done) != tag:
            return None
        info = read_json(done)
        shards.append({"file": info["file"], "start": a, "end": b, "dim": info["dim"]})
    write_json_atomic(
        manifest,
        {"source": str(Path(input_path).resolve()), "lang": lang, "num_lines": n, "num_shards": len(names),
         "dim": shards[0]["dim"], "shards": shards, "identity": identity, "tag": tag},
    )
    return manifest


def load_embedding_shards(
    embed_dir: str | os.PathLike, input_path: str | os.PathLike, lang: str, *, identity: dict | None = None
) -> ShardedEmbeddings | None:
    """Open the shards written by :func:`embed_shards` for ``input_path`` as one memory-mapped matrix.

    Returns None when there is no complete manifest. Raises :class:`StaleEmbeddingsError` (naming what changed) when
    the manifest was computed from something else: another content of the text file (sha256), or, when ``identity``
    (:func:`hf_laser.encoder.embedding_identity` of what is asked now) is given, another model, language or option;
    a manifest of an older hf-laser (without identity) is stale too.
    """
    embed_dir = Path(embed_dir)
    manifest = _manifest_path(embed_dir, embedding_key(input_path, lang))
    if not manifest.exists():
        return None
    try:
        info = read_json(manifest)
        old = info["identity"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StaleEmbeddingsError(f"stale embedding shards: {manifest} is unreadable or from an older hf-laser "
                                   f"({type(err).__name__}); run embed-shards again") from None
    if identity is None:
        current = scan_input(input_path)
        changes = identity_changes({k: old.get(k) for k in ("input_sha256", "input_size", "lines")},
                                   {"input_sha256": current["sha256"], "input_size": current["size"],
                                    "lines": current["lines"]})
    else:
        changes = identity_changes(old, identity)
    if changes:
        raise StaleEmbeddingsError(f"stale embedding shards {manifest.name} for {input_path}: " + "; ".join(changes))
    arrays = []
    for sh in info["shards"]:
        a = np.load(embed_dir / sh["file"], mmap_mode="r")
        if a.shape[0] != sh["end"] - sh["start"]:
            raise ValueError(f"shard {sh['file']} has {a.shape[0]} rows, expected {sh['end'] - sh['start']}")
        arrays.append(a)
    return ShardedEmbeddings(arrays)


if __name__ == "__main__":  # pragma: no cover - `python -m hf_laser.mining {mine,embed-shards}`
    from hf_laser.commands.mine import main

    sys.exit(main())
