"""The one bootstrap of importance weights: resample the K weights of one document with replacement, B times.

Every interval, standard error and percentile that the package derives from a bootstrap over samples draws its
resamples here, so the random stream (``rng.integers(0, K, size=(rows, K))`` in chunks of at most 2^22 indices) and
the arithmetic are the same everywhere.
"""

from __future__ import annotations

import math

import numpy as np

CHUNK = 2**22  # bootstrap indices drawn at a time (bounded memory for any K and B)


def bootstrap_log_means(
    log_weights: np.ndarray, num_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(log p̂*_b, se*_b / p̂*_b) for B resamples of the K log weights: p̂*_b = mean_k w*_bk and se*_b = s(w*_b)/√K.

    Both float64 [B]; the relative standard error is NaN for K = 1 and +inf where a resample's p̂* is 0.
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    k = lw.size
    rows = max(1, CHUNK // k)
    shift = lw.max()
    w = np.exp(lw - shift)
    log_means, rel_se = [], []
    for start in range(0, num_resamples, rows):
        sample = w[rng.integers(0, k, size=(min(rows, num_resamples - start), k))]
        mean = sample.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_means.append(np.log(mean) + shift)
            rel_se.append(sample.std(axis=1, ddof=1) / math.sqrt(k) / mean if k > 1 else np.full(mean.shape, np.nan))
    return np.concatenate(log_means), np.concatenate(rel_se)
