"""The interval functions themselves: closed forms, invariances, and coverage on weights with a known mean."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lm_latent_eval.estimators import log_mean_exp
from lm_latent_eval.estimators.intervals import (
    INTERVAL_METHODS,
    corpus_log_likelihood_interval,
    log_likelihood_interval,
    measured_coverage,
    relative_standard_error,
)


def test_student_interval_closed_form():
    """log of p̂ (1 ± t_{K−1} s / (√K p̂)) computed by hand from the weights."""
    w = np.array([0.5, 1.0, 2.0, 4.0, 0.25, 1.5])
    lo, hi = log_likelihood_interval(np.log(w), method="student")
    half = stats.t.ppf(0.975, w.size - 1) * w.std(ddof=1) / math.sqrt(w.size)
    assert lo == pytest.approx(math.log(w.mean() - half)) and hi == pytest.approx(math.log(w.mean() + half))
    assert relative_standard_error(np.log(w)) == pytest.approx(w.std(ddof=1) / math.sqrt(w.size) / w.mean())


def test_student_lower_end_is_minus_infinity_when_the_mean_can_reach_zero():
    lw = np.array([0.0, -50.0, -50.0])  # one weight dominates: s / (√K p̂) ≈ 1
    lo, hi = log_likelihood_interval(lw, method="student")
    assert lo == -math.inf and hi > float(log_mean_exp(lw))


@pytest.mark.parametrize("method", INTERVAL_METHODS)
def test_intervals_shift_with_the_weights_and_contain_the_estimate(method):
    """Multiplying every weight by e^c shifts the interval by c; equal weights give the point log p̂."""
    lw = np.random.default_rng(1).normal(-20.0, 1.5, size=200)
    lo, hi = log_likelihood_interval(lw, method=method, rng=np.random.default_rng(0))
    lo2, hi2 = log_likelihood_interval(lw + 7.0, method=method, rng=np.random.default_rng(0))
    assert lo2 == pytest.approx(lo + 7.0) and hi2 == pytest.approx(hi + 7.0)
    assert lo < float(log_mean_exp(lw)) < hi
    flat = np.full(50, -3.0)
    assert log_likelihood_interval(flat, method=method) == pytest.approx((-3.0, -3.0))
    corpus = corpus_log_likelihood_interval([lw, lw + 1.0], method=method, rng=np.random.default_rng(0))
    assert corpus[0] < 2 * float(log_mean_exp(lw)) + 1.0 < corpus[1]


@pytest.mark.parametrize("method", INTERVAL_METHODS)
def test_coverage_with_light_tailed_weights(method):
    """Lognormal weights (σ = 0.5): log E[w] = μ + σ²/2 is covered about 95% of the time at K = 200."""
    rng = np.random.default_rng(3)
    mu, sigma, repeats = -10.0, 0.5, 300
    truth = mu + sigma**2 / 2
    hits = [lo <= truth <= hi for lo, hi in (
        log_likelihood_interval(rng.normal(mu, sigma, 200), method=method, num_resamples=300, rng=rng)
        for _ in range(repeats))]
    se = math.sqrt(0.95 * 0.05 / repeats)
    assert abs(np.mean(hits) - 0.95) < 3 * se + 0.01


def test_corpus_student_interval_is_the_delta_method_sum():
    rng = np.random.default_rng(0)
    lws = [rng.normal(-5, 1, size=100), rng.normal(-8, 0.5, size=100)]
    rel = np.array([relative_standard_error(lw) for lw in lws])
    centre = sum(float(log_mean_exp(lw)) for lw in lws) + 0.5 * float(np.sum(rel**2))
    lo, hi = corpus_log_likelihood_interval(lws, method="student")
    assert (lo + hi) / 2 == pytest.approx(centre) and (hi - lo) / 2 == pytest.approx(1.959964 * math.sqrt(np.sum(rel**2)))


def test_bad_arguments_and_coverage_sentence():
    with pytest.raises(ValueError, match="method must be one of"):
        log_likelihood_interval(np.zeros(3), method="wald")
    with pytest.raises(ValueError, match="level"):
        log_likelihood_interval(np.zeros(3), level=95)
    assert "K = 100" in measured_coverage("student", 120) or "not measured" in measured_coverage("student", 120)
