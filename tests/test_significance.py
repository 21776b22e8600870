"""evaluation/significance.py: the paired bootstrap that decides whether a student's gain is beyond noise."""

import numpy as np
import pytest

from evaluation.significance import paired_bootstrap


def misses(n, wrong):
    out = np.zeros(n)
    out[list(wrong)] = 1.0
    return out


def test_a_clear_gain_is_beyond_noise_and_its_figures_are_the_means():
    teacher, student = misses(1000, range(300)), misses(1000, range(200))
    result = paired_bootstrap(teacher, student)
    assert result["gain"] == pytest.approx(10.0) and result["sentences"] == 1000
    assert 0 < result["lower"] < 10.0 and result["p_not_better"] == 0.0


def test_a_gain_of_a_few_sentences_out_of_a_thousand_is_not():
    # the student fixes 7 sentences and breaks 3: 0.4 points better on these sentences, within their noise
    teacher = misses(1012, range(300))
    student = misses(1012, list(range(7, 300)) + [1000, 1001, 1002])
    result = paired_bootstrap(teacher, student)
    assert result["gain"] == pytest.approx(100 * 4 / 1012, abs=1e-3)
    assert result["lower"] <= 0 < result["p_not_better"]


def test_equal_models_gain_nothing_and_the_draws_are_reproducible():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 500).astype(float)
    same = paired_bootstrap(a, a.copy())
    assert same["gain"] == 0 and same["lower"] == 0 and same["p_not_better"] == 1.0
    b = rng.integers(0, 2, 500) / 2  # half-misses (one of two directions) are allowed
    assert paired_bootstrap(a, b) == paired_bootstrap(a, b) != paired_bootstrap(a, b, seed=1)


def test_arrays_of_different_sentences_are_refused():
    with pytest.raises(ValueError, match="same sentences"):
        paired_bootstrap(np.zeros(10), np.zeros(11))
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap(np.zeros(10), np.zeros(10), confidence=1.5)
