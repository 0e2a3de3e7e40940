"""Per-document diagnostics of importance weights: ESS, Pareto k̂ (PSIS) and its sample-size threshold, the relative
variance of p̂, the convergence curve over K."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

from .aggregate import corpus_ppl, instance_ppl, log_mean_exp

PARETO_K_CAP = 0.7  # the largest threshold at any sample size (Vehtari et al. 2024)


def pareto_k_threshold(num_samples: int) -> float:
    """The k̂ above which PSIS calls an estimate from S samples unreliable: min(1 − 1/log10 S, 0.7) (Vehtari et al.
    2024): 0.5 at S = 100, 0.667 at 1,000, 0.7 from S ≈ 2,154 on; 0 at S ≤ 10 (too few samples to judge a tail).

    Examples
    --------
    >>> pareto_k_threshold(100), pareto_k_threshold(10_000)
    (0.5, 0.7)
    """
    if num_samples <= 10:
        return 0.0
    return min(1.0 - 1.0 / math.log10(num_samples), PARETO_K_CAP)


def relative_variance(log_weights: np.ndarray) -> float:
    """v̂ = s²_w / (K w̄²), the estimate of Var(p̂)/p² from the K weights (p̂ = w̄); NaN for K = 1.

    Examples
    --------
    >>> round(relative_variance(np.log([1.0, 3.0])), 6)  # s² = 2, w̄ = 2: 2 / (2 · 4)
    0.25
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    if lw.size < 2:
        return float("nan")
    u = np.exp(lw - log_mean_exp(lw))  # w_k / w̄
    return float(np.sum((u - 1.0) ** 2) / (lw.size - 1) / lw.size)


def effective_sample_size(log_weights: np.ndarray) -> float:
    """ESS = (Σ_k w_k)² / Σ_k w_k², computed from log weights.

    Parameters
    ----------
    log_weights : array_like
        log w_k, [K].

    Returns
    -------
    float
        Between 1 and K.

    Examples
    --------
    >>> effective_sample_size(np.zeros(17))
    17.0
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    return float(math.exp(2.0 * logsumexp(lw) - logsumexp(2.0 * lw)))


def pareto_tail_size(num_weights: int) -> int:
    """M = ⌈min(K/5, 3√K)⌉: the largest weights PSIS fits its generalized Pareto to (Vehtari et al. 2024)."""
    return math.ceil(min(0.2 * num_weights, 3.0 * math.sqrt(num_weights)))


def pareto_khat(log_weights: np.ndarray) -> float:
    """Shape k̂ of the generalized Pareto fitted to the largest weights (PSIS, arviz.psislw).

    0 when all weights are equal (q ∝ p: the estimate is exact); NaN when undefined: fewer than 5 finite weights,
    or the M + 1 largest (M = ⌈min(K/5, 3√K)⌉, the PSIS tail) take fewer than 5 distinct values, as happens when
    the proposal puts its mass on a few configurations; a tail fit to ties would report a meaningless ±inf.
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    finite = lw[np.isfinite(lw)]
    if finite.size < 5:
        return float("nan")
    if np.ptp(finite) == 0.0:
        return 0.0
    tail = pareto_tail_size(finite.size)
    if np.unique(np.sort(finite)[-(tail + 1) :]).size < 5:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # arviz takes about a second to import and only PSIS needs it
        import arviz

        _, khat = arviz.psislw(finite.copy())
    khat = float(khat)
    return khat if math.isfinite(khat) else float("nan")


def convergence_sizes(num_samples: int) -> list[int]:
    """K' = 1, 2, 4, …, with K itself always last."""
    sizes = [2**i for i in range(int(math.log2(num_samples)) + 1)]
    return sizes if sizes[-1] == num_samples else sizes + [num_samples]


def convergence_curve(log_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log p̂ using the first K' samples of one run, for K' in ``convergence_sizes(K)``."""
    lw = np.asarray(log_weights, dtype=np.float64)
    running = np.logaddexp.accumulate(lw)
    ks = np.array(convergence_sizes(lw.size))
    return ks, running[ks - 1] - np.log(ks)


def corpus_convergence_curve(log_weights, num_tokens) -> dict:
    """Instance- and corpus-level PPL from the first K' samples of every document, K' in ``convergence_sizes(min K)``.

    The corpus-level curve is None when documents have different sample counts.
    """
    sizes = convergence_sizes(min(len(lw) for lw in log_weights))
    equal_k = len({len(lw) for lw in log_weights}) == 1
    return {
        "num_samples": sizes,
        "instance_perplexity": [
            instance_ppl([np.asarray(lw)[:k] for lw in log_weights], num_tokens) for k in sizes
        ],
        "corpus_perplexity": (
            [corpus_ppl([np.asarray(lw)[:k] for lw in log_weights], num_tokens) for k in sizes]
            if equal_k
            else None
        ),
    }


def pareto_k_shares(estimates: Sequence) -> tuple[int, int, int]:
    """(documents whose IS weights have Pareto k̂ at or above the threshold at their K, documents whose k̂ is
    undefined, documents with IS weights and tokens): the counts behind both the table's shares and the warning."""
    weights = [e.importance_weights for e in estimates if e.importance_weights is not None]
    khat = [(pareto_khat(lw), pareto_k_threshold(lw.size)) for lw in weights]
    return (
        sum(k >= t for k, t in khat if not math.isnan(k)),
        sum(math.isnan(k) for k, _ in khat),
        len(weights),
    )
