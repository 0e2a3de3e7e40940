"""Per-document diagnostics of importance weights: ESS, Pareto k̂ (PSIS), bootstrap CI, convergence curve."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import logsumexp

from .aggregate import log_mean_exp

PARETO_K_THRESHOLD = 0.7  # above this, PSIS says the IS estimate is unreliable (Vehtari et al. 2024)


def effective_sample_size(log_weights: np.ndarray) -> float:
    """ESS = (Σ_k w_k)² / Σ_k w_k², computed from log weights."""
    lw = np.asarray(log_weights, dtype=np.float64)
    return float(math.exp(2.0 * logsumexp(lw) - logsumexp(2.0 * lw)))


def pareto_khat(log_weights: np.ndarray) -> float:
    """Shape k̂ of the generalized Pareto fitted to the largest weights (arviz.psislw); NaN when K is too small."""
    lw = np.asarray(log_weights, dtype=np.float64)
    finite = lw[np.isfinite(lw)]
    if finite.size < 5 or np.ptp(finite) == 0.0:
        return 0.0 if finite.size >= 5 else float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz

        _, khat = arviz.psislw(finite.copy())
    return float(khat)


def bootstrap_ci(
    log_weights: np.ndarray, level: float = 0.95, num_resamples: int = 1000, seed: int = 0, chunk: int = 2**22
) -> tuple[float, float]:
    """Percentile bootstrap interval of log p̂ over resamples of the K weights (with replacement)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    rng = np.random.default_rng(seed)
    k = lw.size
    rows = max(1, chunk // k)
    stats = []
    for start in range(0, num_resamples, rows):
        n = min(rows, num_resamples - start)
        stats.append(log_mean_exp(lw[rng.integers(0, k, size=(n, k))], axis=1))
    stats = np.concatenate(stats)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def convergence_curve(log_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log p̂ using the first K' samples of one run, for K' = 1, 2, 4, …, K (K always included)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    sizes = [2**i for i in range(int(math.log2(lw.size)) + 1)]
    if sizes[-1] != lw.size:
        sizes.append(lw.size)
    running = np.logaddexp.accumulate(lw)
    ks = np.array(sizes)
    return ks, running[ks - 1] - np.log(ks)


def summarize(log_weights: np.ndarray, seed: int = 0) -> dict:
    """All diagnostics of one document's weights as a JSON-ready dict."""
    lw = np.asarray(log_weights, dtype=np.float64)
    lo, hi = bootstrap_ci(lw, seed=seed)
    ks, curve = convergence_curve(lw)
    return {
        "num_samples": int(lw.size),
        "log_likelihood": float(log_mean_exp(lw)),
        "ess": effective_sample_size(lw),
        "pareto_k": pareto_khat(lw),
        "ci95": [lo, hi],
        "convergence_k": ks.tolist(),
        "convergence_log_likelihood": curve.tolist(),
    }
