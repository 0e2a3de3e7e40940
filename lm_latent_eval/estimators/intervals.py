"""Confidence intervals for log p(x) from one document's K importance weights, and for Σ_n log p(x_n) over documents.

p̂ = mean_k w_k is unbiased for p and, by the central limit theorem, close to normal for large K; log p̂ is biased low
(E[log p̂] ≤ log p). Methods (measured against exact values by bench/interval_coverage.py, table in docs/estimators.md):

- ``percentile``: percentile bootstrap of log p̂ over resamples of the K weights (centred on the biased log p̂);
- ``student``: Student-t interval for the mean weight, p̂ · (1 ± t_{K−1} · s/(√K · p̂)), then logged
  (lower end −inf when it reaches 0); over documents, log p̂ + s²/(2K p̂²) ± z √Σ_n s_n²/(K_n p̂_n²) (delta method,
  bias-corrected);
- ``bootstrap_t``: the studentized bootstrap of the mean weight, t* = (p̂* − p̂) / se*, then logged; over documents
  the studentized bootstrap of Σ_n log p̂_n with the delta-method standard error.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from ..paths import DATA_DIR
from .aggregate import log_mean_exp
from .bootstrap import bootstrap_log_means

INTERVAL_METHODS = ("percentile", "student", "bootstrap_t")


def relative_standard_error(log_weights: np.ndarray) -> float:
    """se(p̂)/p̂ = s_w / (√K · w̄), from log weights; NaN for K = 1."""
    lw = np.asarray(log_weights, dtype=np.float64)
    if lw.size < 2:
        return float("nan")
    u = np.exp(lw - log_mean_exp(lw))  # w_k / w̄
    return float(math.sqrt(np.sum((u - 1.0) ** 2) / (lw.size - 1) / lw.size))


def _log_bounds(rel_lo: float, rel_hi: float, log_p_hat: float) -> tuple[float, float]:
    """log of p̂·(1 + rel) for the two relative offsets; −inf where p̂·(1 + rel) ≤ 0."""
    lo = log_p_hat + math.log1p(rel_lo) if rel_lo > -1.0 else -math.inf
    hi = log_p_hat + math.log1p(rel_hi) if rel_hi > -1.0 else -math.inf
    return lo, hi


def log_likelihood_interval(
    log_weights: np.ndarray,
    level: float = 0.95,
    method: str = "student",
    num_resamples: int = 1000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """A ``level`` interval for log p(x) from one document's K log weights (``method`` in INTERVAL_METHODS)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method must be one of {INTERVAL_METHODS}, got {method!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    log_p_hat = float(log_mean_exp(lw))
    alpha = (1.0 - level) / 2.0
    rng = rng if rng is not None else np.random.default_rng(0)
    if method == "student":
        rel = relative_standard_error(lw)
        if not math.isfinite(rel):
            return -math.inf, math.inf
        t = stats.t.ppf(1.0 - alpha, lw.size - 1)
        return _log_bounds(-t * rel, t * rel, log_p_hat)
    log_means, rel_se = bootstrap_log_means(lw, num_resamples, rng)
    if method == "percentile":
        lo, hi = np.quantile(log_means, [alpha, 1.0 - alpha])
        return float(lo), float(hi)
    rel = relative_standard_error(lw)
    if not math.isfinite(rel) or rel == 0.0:
        return (log_p_hat, log_p_hat) if rel == 0.0 else (-math.inf, math.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = np.expm1(log_means - log_p_hat) / rel_se  # (p̂* − p̂) / se*, in units of p̂
    t_star = t_star[np.isfinite(t_star)]  # a resample of one repeated weight has se* = 0
    if t_star.size == 0:
        return -math.inf, math.inf
    t_lo, t_hi = np.quantile(t_star, [alpha, 1.0 - alpha])
    return _log_bounds(-t_hi * rel, -t_lo * rel, log_p_hat)


def corpus_log_likelihood_interval(
    log_weights: Sequence[np.ndarray],
    level: float = 0.95,
    method: str = "student",
    num_resamples: int = 1000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """A ``level`` interval for Σ_n log p(x_n) from independent documents' log weights ([N][K_n]).

    ``percentile``: quantiles of Σ_n log p̂*_n (each document resampled independently); ``student``: delta method,
    Σ_n (log p̂_n + r_n²/2) ± z √Σ_n r_n², r_n = se(p̂_n)/p̂_n; ``bootstrap_t``: studentized bootstrap of the sum.
    """
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method must be one of {INTERVAL_METHODS}, got {method!r}")
    lws = [np.asarray(lw, dtype=np.float64) for lw in log_weights]
    alpha = (1.0 - level) / 2.0
    rng = rng if rng is not None else np.random.default_rng(0)
    total = float(sum(log_mean_exp(lw) for lw in lws))
    rel = np.array([relative_standard_error(lw) for lw in lws])
    rel = np.where(np.isnan(rel), 0.0, rel)  # a 1-sample document contributes no spread it can measure
    if method == "student":
        z = stats.norm.ppf(1.0 - alpha)
        centre, se = total + 0.5 * float(np.sum(rel**2)), float(math.sqrt(np.sum(rel**2)))
        return centre - z * se, centre + z * se
    draws = [bootstrap_log_means(lw, num_resamples, rng) for lw in lws]
    sums = np.sum([d[0] for d in draws], axis=0)  # [B]
    if method == "percentile":
        lo, hi = np.quantile(sums, [alpha, 1.0 - alpha])
        return float(lo), float(hi)
    se = float(math.sqrt(np.sum(rel**2)))
    if se == 0.0:
        return total, total
    se_star = np.sqrt(np.sum([np.nan_to_num(d[1]) ** 2 for d in draws], axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = (sums - total) / se_star
    t_star = t_star[np.isfinite(t_star)]
    if t_star.size == 0:
        return -math.inf, math.inf
    t_lo, t_hi = np.quantile(t_star, [alpha, 1.0 - alpha])
    return total - t_hi * se, total - t_lo * se


DEFAULT_INTERVAL = "student"  # no resampling; per document as good as the bootstrap methods, better than percentile over documents

# The committed outputs of bench/interval_coverage.py: share of 95% intervals that covered the exact value over repeated
# runs (HMM with and without peeking on 10 documents, enumerated KGLM and EntityNLM), and of the lower end alone.
COVERAGE_FILE = DATA_DIR / "interval_coverage" / "coverage.json"
ONE_SIDED_COVERAGE_FILE = DATA_DIR / "interval_coverage" / "one_sided" / "coverage.json"


@functools.cache
def _coverage_results(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["results"]


def _coverage_range(path: str, method: str, num_samples: int, key: str) -> tuple[int, float, float] | None:
    """(K, lowest, highest) of ``key`` (e.g. ``document_coverage``) over the cases at the measured K nearest
    ``num_samples`` (log scale); None when ``method`` was not measured."""
    by_k = [by_k for by_k in _coverage_results(path).values()]
    sizes = sorted({int(k) for row in by_k for k, methods in row.items() if method in methods})
    if not sizes:
        return None
    k = min(sizes, key=lambda size: abs(math.log(size) - math.log(max(num_samples, 1))))
    values = [row[str(k)][method][key] for row in by_k if method in row.get(str(k), {})]
    values = [v for v in values if v is not None]
    return k, min(values), max(values)


def measured_coverage(method: str, num_samples: int, scope: str = "document") -> str:
    """A sentence with the measured coverage of ``method``'s 95% interval at the K nearest ``num_samples`` (log scale);
    ``scope`` is ``document`` (log p of one text) or ``corpus`` (a sum over documents)."""
    measured = _coverage_range(str(COVERAGE_FILE), method, num_samples, f"{scope}_coverage")
    if measured is None:
        return "coverage of this interval not measured"
    k, lo, hi = measured
    what = "per document" if scope == "document" else "of a 10-document sum (HMM)"
    text = (f"measured coverage of 95% {method} intervals at K = {k} on the reference models "
            f"(bench/interval_coverage.py): {100 * lo:.0f}–{100 * hi:.0f}% {what}")
    upper = _coverage_range(str(ONE_SIDED_COVERAGE_FILE), method, k, f"{scope}_lower_end_coverage")
    if upper is not None and upper[0] == k:
        text += (f"; the true perplexity was below the interval's upper end in at least {100 * upper[1]:.0f}% "
                 "of runs (misses lie almost all below the interval: IS overestimates perplexity)")
    return text
