"""Mining end to end: both kNN directions, margin scores, selection ([`mine`]); in-memory sentences ([`mine_sentences`])."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..outputs import output_lock
from .dedup import deduplicate
from .embeddings import as_embeddings
from .margin import best_candidates, margin_function, neighbourhood_mean
from .search import canonical_neighbours, knn_search
from .selection import _norm_mode, select_best


@dataclass
class MinedPairs:
    """Mined sentence pairs, sorted by decreasing margin score.

    Attributes:
        src: ``[M]`` int64 source rows.
        tgt: ``[M]`` int64 target rows.
        scores: ``[M]`` float64 margin scores.
        x2y_sim, x2y_ind: ``[Nx, k]`` forward kNN (float32 cosines, int64 target rows).
        y2x_sim, y2x_ind: ``[Ny, k]`` backward kNN.

    With [`mine`]'s ``knn_dir`` the kNN arrays are read-only memory maps of its ``.npy`` files.
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
    knn=knn_search,
    knn_dir: str | os.PathLike | None = None,
) -> MinedPairs:
    """Mine parallel pairs between source embeddings ``[Nx, d]`` and target embeddings ``[Ny, d]``.

    Both kNN directions are always computed (the margin needs both neighbourhoods). See the module docstring and
    :func:`select_pairs` for the scoring and the selection modes, and :func:`knn_search` for the index options.
    ``knn`` is the search itself, a function with :func:`knn_search`'s signature (``hf_laser.mining.on_ray`` gives one that
    spreads the index shards over Ray actors); with ``knn_dir`` it is given ``out=`` arrays to fill (a result
    returned in arrays of its own is copied into them).

    Memory: the two ``[N, k]`` kNN results (12 bytes x k per row and direction) and a few ``[N]`` vectors per side;
    margin scores and the selection go row block by row block. With ``knn_dir`` (a directory of this run's own,
    locked while it runs: ``DIR.lock``) the kNN results and the vectors are ``.npy`` files there (``x2y_sim.npy``,
    ``x2y_ind.npy``, ``y2x_*``, ``*_mean.npy``, ``*_best.npy``, ``*_score.npy``, overwritten), filled in place, and
    memory holds only the candidates the selection weighs (about 80 bytes each at the peak of the ``max`` selection,
    plus 16 bytes per row: every row's best candidate in each direction, only those above ``threshold`` when one is
    given, as it is applied first): mining whose kNN arrays do not fit.

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
    arrays = _MiningArrays(knn_dir, len(x), len(y), k)
    with arrays.locked():
        out = arrays.knn_out("x2y")
        x2y_sim, x2y_ind = arrays.kept(knn(x, y, k, desc="kNN src->tgt", **kw, **out), out)
        out = arrays.knn_out("y2x")
        y2x_sim, y2x_ind = arrays.kept(knn(y, x, k, desc="kNN tgt->src", **kw, **out), out)
        # the same neighbours, cosines and order whatever the shards, batches and searchers (#68: ties between
        # duplicate lines): cosines from the vectors alone, twins by line number
        canonical_neighbours(x, y, x2y_sim, x2y_ind, normalize=normalize)
        canonical_neighbours(y, x, y2x_sim, y2x_ind, normalize=normalize)
        x2y_mean = neighbourhood_mean(x2y_sim, x2y_ind, out=arrays.vector("x2y_mean", len(x), np.float64))
        y2x_mean = neighbourhood_mean(y2x_sim, y2x_ind, out=arrays.vector("y2x_mean", len(y), np.float64))
        fwd = best_candidates(x2y_sim, x2y_ind, x2y_mean, y2x_mean, margin, out=arrays.best("fwd", len(x)))
        bwd = best_candidates(y2x_sim, y2x_ind, y2x_mean, x2y_mean, margin, out=arrays.best("bwd", len(y)))
        src, tgt, sc = select_best(*fwd, *bwd, mode=mode, threshold=threshold)
        x2y_sim, x2y_ind, y2x_sim, y2x_ind = arrays.finished(x2y_sim, x2y_ind, y2x_sim, y2x_ind)
    return MinedPairs(src, tgt, sc, x2y_sim, x2y_ind, y2x_sim, y2x_ind)


class _MiningArrays:
    """Where [`mine`]'s large arrays live: in memory (``directory`` None), or as ``.npy`` memory maps in
    ``directory``, flushed and reopened read-only when the mining is done."""

    def __init__(self, directory, nx: int, ny: int, k: int):
        self.directory = None if directory is None else Path(directory)
        self.shapes, self.k = {"x2y": nx, "y2x": ny}, k
        self.maps: list = []

    @contextlib.contextmanager
    def locked(self):
        if self.directory is None:
            yield
            return

        self.directory.mkdir(parents=True, exist_ok=True)
        with output_lock(self.directory):
            yield

    def _map(self, name: str, shape: tuple, dtype):
        path = self.directory / f"{name}.npy"
        path.unlink(missing_ok=True)  # a new file: an earlier result's memory maps keep the old one
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        self.maps.append(array)
        return array

    def knn_out(self, direction: str) -> dict:
        if self.directory is None:
            return {}
        n = self.shapes[direction]
        return {"out": (self._map(f"{direction}_sim", (n, self.k), np.float32),
                        self._map(f"{direction}_ind", (n, self.k), np.int64))}

    def kept(self, result: tuple, given: dict) -> tuple:
        """A search's result in the files: copied there block by block when the search returned arrays of its own
        instead of filling `out`."""
        for got, out in zip(result, given.get("out", ())):
            if got is not out:
                for a in range(0, len(out), 1 << 16):
                    out[a:a + (1 << 16)] = got[a:a + (1 << 16)]
        return given["out"] if given else result

    def vector(self, name: str, n: int, dtype):
        return None if self.directory is None else self._map(name, (n,), dtype)

    def best(self, side: str, n: int):
        if self.directory is None:
            return None
        return self._map(f"{side}_best", (n,), np.int64), self._map(f"{side}_score", (n,), np.float64)

    def finished(self, *knn):
        if self.directory is None:
            return knn
        for array in self.maps:
            array.flush()
        self.maps.clear()
        return tuple(np.load(self.directory / f"{name}.npy", mmap_mode="r")
                     for name in ("x2y_sim", "x2y_ind", "y2x_sim", "y2x_ind"))


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
    # the embedding (most of the time) shows progress as the search does: `show_progress` True / False, or None: a
    # bar when stderr is a terminal
    show = mine_kwargs.get("show_progress")
    encode_kwargs.setdefault("show_progress_bar", sys.stderr.isatty() if show is None else bool(show))
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
