"""Margin scoring of kNN candidates: `margin(cos(x, y), mean kNN cos of x / 2 + mean kNN cos of y / 2)`.

Everything here works row block by row block ([`BLOCK_ROWS`] rows at a time), so `[N, k]` kNN arrays may be `.npy`
memory maps larger than memory: only the `[N]` results are whole."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MARGINS = ("ratio", "distance", "absolute")
BLOCK_ROWS = 1 << 16


def margin_function(margin: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``margin(a, b)``: ``ratio`` -> ``a / b``, ``distance`` -> ``a - b``, ``absolute`` -> ``a``."""
    if margin == "ratio":
        return lambda a, b: a / b
    if margin == "distance":
        return lambda a, b: a - b
    if margin == "absolute":
        return lambda a, b: a
    raise ValueError(f"unknown margin {margin!r}; expected one of {MARGINS}")


def neighbourhood_mean(sims: np.ndarray, inds: np.ndarray | None = None, *, out: np.ndarray | None = None
                       ) -> np.ndarray:
    """Mean cosine of each row's k nearest neighbours, ``[n]`` float64, from ``sims [n, k]``.

    Missing neighbours (``inds == -1`` or ``sims == -inf``) are left out of the mean; a row without any neighbour
    gets NaN. ``out``: a ``[n]`` float64 array to write into (e.g. a memory map), returned.
    """
    n = len(sims)
    out = np.empty(n, dtype=np.float64) if out is None else out
    for a in range(0, n, BLOCK_ROWS):
        block = np.asarray(sims[a:a + BLOCK_ROWS], dtype=np.float64)
        valid = np.isfinite(block) if inds is None else (np.asarray(inds[a:a + BLOCK_ROWS]) >= 0) & np.isfinite(block)
        cnt = valid.sum(axis=1)
        tot = np.where(valid, block, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[a:a + len(block)] = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
    return out


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


def best_of(scores: np.ndarray, inds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best candidate: the highest score, then the lowest candidate row (`inds`) among equal scores, so
    that ties (duplicate lines) are broken by line number whatever the order of the candidates (#68). A row
    without a usable candidate (`-inf`) gives its first candidate (possibly `-1`). `(best [n] int64, score [n])`."""
    inds = np.asarray(inds)
    rows = np.arange(len(scores))
    arg = scores.argmax(axis=1)
    top = scores[rows, arg]
    tied = (scores == top[:, None]) & (inds >= 0)
    lowest = np.where(tied, inds, np.iinfo(np.int64).max).min(axis=1)
    return np.where(np.isfinite(top), lowest, inds[rows, arg]).astype(np.int64), top


def best_candidates(sims: np.ndarray, inds: np.ndarray, query_mean: np.ndarray, database_mean: np.ndarray,
                    margin: str = "ratio", *, out: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best candidate by margin score ([`score_candidates`]; of equal scores, the lowest candidate
    row: [`best_of`]), computed block by block without the ``[n, k]`` scores.

    Args:
        sims, inds, query_mean, database_mean, margin: as for [`score_candidates`].
        out: ``([n] int64, [n] float64)`` arrays to write into (e.g. memory maps), returned.

    Returns:
        ``(best [n] int64 candidate rows, scores [n] float64)``; a query without a usable candidate has ``-inf``
        (its row is then whichever missing candidate came first, possibly ``-1``).
    """
    n = len(sims)
    best, score = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float64)) if out is None else out
    for a in range(0, n, BLOCK_ROWS):
        b = min(n, a + BLOCK_ROWS)
        block_inds = np.asarray(inds[a:b])
        scores = score_candidates(sims[a:b], block_inds, query_mean[a:b], database_mean, margin)
        best[a:b], score[a:b] = best_of(scores, block_inds)
    return best, score
