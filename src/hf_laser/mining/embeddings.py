"""Embedding matrices that need not fit in memory: arrays, `.npy` memory maps, shards seen as one matrix, row subsets."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np


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
        return RowSubset(self, indices)

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

    def __getstate__(self) -> dict:
        # a `.npy` memory map travels as its path (pickling a memmap would copy its rows), so handing a corpus of
        # files to other processes (Ray actors of `hf_laser.mining.on_ray`) costs nothing; they reopen the same files
        state = dict(self.__dict__)
        state["shards"] = [(_NpyFile(a.filename, a.shape, str(a.dtype)) if is_whole_npy_map(a) else a)
                           for a in self.shards]
        return state

    def __setstate__(self, state: dict) -> None:
        state["shards"] = [s.open() if isinstance(s, _NpyFile) else s for s in state["shards"]]
        self.__dict__.update(state)

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


class _NpyFile:
    """A `.npy` memory map by path (see `ShardedEmbeddings.__getstate__`); reopened only if still the same shape."""

    def __init__(self, path: str, shape: tuple, dtype: str):
        self.path, self.shape, self.dtype = path, tuple(shape), dtype

    def open(self) -> np.ndarray:
        a = np.load(self.path, mmap_mode="r")
        if a.shape != self.shape or str(a.dtype) != self.dtype:
            raise ValueError(f"{self.path} changed since these embeddings were opened ({self.shape} {self.dtype}, "
                             f"now {a.shape} {a.dtype})")
        return a


def is_whole_npy_map(a) -> bool:
    """`a` is a whole `.npy` file opened by `np.load(mmap_mode="r")` (not a slice of one, not an array in memory)."""
    if not isinstance(a, np.memmap) or not a.filename or a.mode != "r" or not a.flags["C_CONTIGUOUS"]:
        return False
    try:
        whole = np.load(a.filename, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return whole.shape == a.shape and whole.dtype == a.dtype and whole.offset == a.offset


class RowSubset(Embeddings):
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
