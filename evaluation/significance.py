"""Paired bootstrap (Koehn 2004) over test sentences: is one model's error below another's by more than the sampling
noise of the test set? Used to choose, on a validation set, where a student replaces its teacher (issue #50)."""

from __future__ import annotations

import numpy as np


def paired_bootstrap(baseline, candidate, *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict:
    """The candidate's gain over the baseline, in error points (%), with a one-sided bootstrap bound.

    `baseline`, `candidate`: `(n,)` per-sentence errors in [0, 1] of the same n sentences (e.g.
    `training.report.model_flores_misses`). The sentences are resampled with replacement `resamples` times (the same
    draw for both models, from `seed`); each draw gives the gain `mean(baseline) - mean(candidate)`. Returns
    `{"gain": the gain on all sentences, "lower": the (1 - confidence) quantile of the draws' gains (the candidate is
    better beyond the noise when it is above 0), "p_not_better": the fraction of draws with a gain <= 0,
    "resamples", "confidence", "sentences"}`, gains in percentage points. Each sentence's outcome is held fixed (the
    other sentences a search ranks against are not resampled), as in MT's paired bootstrap."""
    baseline, candidate = np.asarray(baseline, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if baseline.shape != candidate.shape or baseline.ndim != 1 or not len(baseline):
        raise ValueError(f"need two non-empty (n,) arrays of the same sentences, got {baseline.shape} and "
                         f"{candidate.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    diff = baseline - candidate
    draws = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
    gains = 100 * diff[draws].mean(axis=1)
    return {"gain": round(100 * float(diff.mean()), 4), "lower": round(float(np.quantile(gains, 1 - confidence)), 4),
            "p_not_better": float((gains <= 0).mean()), "resamples": resamples, "confidence": confidence,
            "sentences": len(diff)}
