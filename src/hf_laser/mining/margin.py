"""Margin scoring of kNN candidates: `margin(cos(x, y), mean kNN cos of x / 2 + mean kNN cos of y / 2)`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MARGINS = ("ratio", "distance", "absolute")


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
