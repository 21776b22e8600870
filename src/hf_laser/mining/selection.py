"""Candidate selection of LASER's `mine_bitexts.py`: forward, backward, intersection, max."""

from __future__ import annotations

import numpy as np

from .margin import best_of

MODES = ("max", "forward", "backward", "intersection")


MODE_ALIASES = {"fwd": "forward", "bwd": "backward", "intersect": "intersection"}


def _norm_mode(mode: str) -> str:
    m = MODE_ALIASES.get(mode, mode)
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
    the lowest row on ties: [`~margin.best_of`]), each target row ``j`` its best ``bwd_best[j]``. Then:

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
    fwd_best, fwd_max = best_of(np.asarray(fwd_scores), fwd_inds)
    bwd_best, bwd_max = best_of(np.asarray(bwd_scores), bwd_inds)
    return select_best(fwd_best, fwd_max.astype(np.float64), bwd_best, bwd_max.astype(np.float64), mode=mode,
                       threshold=threshold)


def select_best(fwd_best: np.ndarray, fwd_max: np.ndarray, bwd_best: np.ndarray, bwd_max: np.ndarray,
                mode: str = "max", threshold: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[`select_pairs`] from each row's best candidate alone (what [`~margin.best_candidates`] gives block by block),
    so that nothing `[N, k]` is needed.

    Args:
        fwd_best, fwd_max: ``[Nx]`` each source row's best target and its margin score.
        bwd_best, bwd_max: ``[Ny]`` each target row's best source and its score.

    Returns:
        ``(src [M] int64, tgt [M] int64, scores [M] float64)``, sorted by decreasing score.
    """
    mode = _norm_mode(mode)
    # the threshold first, one side at a time: only the rows that can be kept are ever gathered (with memory maps
    # of a billion rows, only they are read into memory); it changes no pair (see below)
    f, fwd_tgt = _usable(fwd_best, fwd_max, threshold)
    b, bwd_src = _usable(bwd_best, bwd_max, threshold)
    if mode == "forward":
        src, tgt, sc = f, fwd_tgt, np.asarray(fwd_max[f], dtype=np.float64)
    elif mode == "backward":
        src, tgt, sc = bwd_src, b, np.asarray(bwd_max[b], dtype=np.float64)
    elif mode == "intersection":
        keep = np.asarray(bwd_best[fwd_tgt], dtype=np.int64) == f
        src, tgt, sc = f[keep], fwd_tgt[keep], np.asarray(fwd_max[f[keep]], dtype=np.float64)
    else:  # max: a pair at or below the threshold would come after every pair above it, and go anyway
        src, tgt = np.concatenate([f, bwd_src]), np.concatenate([fwd_tgt, b])
        sc = np.concatenate([np.asarray(fwd_max[f], dtype=np.float64), np.asarray(bwd_max[b], dtype=np.float64)])
        order = np.argsort(-sc, kind="stable")
        keep = order[greedy_matching(src[order], tgt[order])]
        src, tgt, sc = src[keep], tgt[keep], sc[keep]
    order = np.argsort(-sc, kind="stable")
    return src[order], tgt[order], sc[order]


def _usable(best: np.ndarray, score: np.ndarray, threshold: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows with a candidate whose score is finite (and above `threshold`), and those candidates (int64)."""
    rows, parts = [], []
    for a in range(0, len(best), 1 << 20):  # block by block: no [N] temporaries beyond the boolean mask
        sc = np.asarray(score[a:a + (1 << 20)], dtype=np.float64)  # compared as float64, whatever is given
        bb = np.asarray(best[a:a + (1 << 20)])
        ok = np.isfinite(sc) & (bb >= 0)
        if threshold is not None:
            ok &= sc > threshold
        found = np.nonzero(ok)[0]
        rows.append(found + a)
        parts.append(bb[found].astype(np.int64))
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(rows).astype(np.int64), np.concatenate(parts)


def greedy_matching(src: np.ndarray, tgt: np.ndarray, *, loop_below: int = 4096) -> np.ndarray:
    """Positions of the pairs kept by walking `(src[i], tgt[i])` in order and keeping a pair when neither its source
    nor its target was kept before (the `max` mode), computed in vectorised rounds.

    Each round keeps every pair that comes first, among the pairs still open, both for its source and for its target
    (the walk would keep it: nothing before it touches its rows), and closes the pairs that share a row with one kept.
    The walk keeps exactly these: a closed pair is one it rejects, and the pairs before an open pair that it keeps
    share none of that pair's rows. Rounds are few on mining candidates (each row has few); the open pairs left once
    fewer than `loop_below` remain, or once a round closes under 1 % of them, are walked one by one.

    Returns:
        int64 positions into `src` / `tgt`, increasing.
    """
    src, tgt = np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)
    open_ = np.arange(len(src), dtype=np.int64)
    kept = []
    n_src, n_tgt = (int(src.max()) + 1, int(tgt.max()) + 1) if len(src) else (0, 0)
    while len(open_) > loop_below:
        s, t = src[open_], tgt[open_]
        first_of_src = np.full(n_src, len(src), dtype=np.int64)  # the first open position of each row
        np.minimum.at(first_of_src, s, open_)
        first_of_tgt = np.full(n_tgt, len(src), dtype=np.int64)
        np.minimum.at(first_of_tgt, t, open_)
        first = (first_of_src[s] == open_) & (first_of_tgt[t] == open_)
        kept.append(open_[first])
        used_src, used_tgt = np.zeros(n_src, dtype=bool), np.zeros(n_tgt, dtype=bool)
        used_src[s[first]] = True
        used_tgt[t[first]] = True
        before = len(open_)
        open_ = open_[~(used_src[s] | used_tgt[t])]
        if before - len(open_) < before // 100:  # long chains of rows: rounds would be many and small
            break
    seen_src, seen_tgt, walked = set(), set(), []
    for i, a, b in zip(open_.tolist(), src[open_].tolist(), tgt[open_].tolist()):
        if a not in seen_src and b not in seen_tgt:
            seen_src.add(a)
            seen_tgt.add(b)
            walked.append(i)
    kept.append(np.asarray(walked, dtype=np.int64))
    return np.sort(np.concatenate(kept))
