"""Candidate selection of LASER's `mine_bitexts.py`: forward, backward, intersection, max."""

from __future__ import annotations

import numpy as np

MODES = ("max", "forward", "backward", "intersection")


_MODE_ALIASES = {"fwd": "forward", "bwd": "backward", "intersect": "intersection"}


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
