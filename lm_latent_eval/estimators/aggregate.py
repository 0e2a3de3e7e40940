"""Aggregating log importance weights into log p̂ and perplexities (Logan, Gardner & Singh 2020, Eq. 5–6)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

from ..errors import InputError


def as_log_weights(log_weights, doc: str = "document") -> np.ndarray:
    """Validate one document's log weights log w_k = log p(x, z_k) − log q(z_k | x) as float64 [K]."""
    lw = np.asarray(log_weights, dtype=np.float64)
    if lw.ndim != 1 or lw.size == 0:
        raise ValueError(f"{doc}: expected a non-empty 1-d list of log weights, got shape {lw.shape}")
    if np.isnan(lw).any():
        raise ValueError(f"{doc}: {int(np.isnan(lw).sum())} of {lw.size} log weights are NaN")
    if np.isposinf(lw).any():
        raise ValueError(
            f"{doc}: {int(np.isposinf(lw).sum())} log weights are +inf (log q = -inf for a drawn sample?)"
        )
    if np.isneginf(lw).all():
        raise ValueError(
            f"{doc}: every one of the {lw.size} samples has weight 0 (p(x, z) = 0): "
            "the proposal misses the support of the model"
        )
    return lw


def log_mean_exp(log_weights: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """log p̂ = logsumexp_k(log w_k) − log K, in float64.

    Parameters
    ----------
    log_weights : array_like
        log w_k along ``axis`` (K of them).
    axis : int
        The sample axis.

    Returns
    -------
    float or numpy.ndarray
        log mean_k w_k.

    Examples
    --------
    >>> round(float(log_mean_exp([0.0, math.log(3.0)])), 6)  # log((1 + 3) / 2)
    0.693147
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    return logsumexp(lw, axis=axis) - math.log(lw.shape[axis])


def instance_log_likelihoods(log_weights: Sequence) -> np.ndarray:
    """Per-document log p̂(x_n) = logsumexp_k log w_nk − log K_n: float64 [N]."""
    return np.array([log_mean_exp(as_log_weights(lw, f"document {n}")) for n, lw in enumerate(log_weights)])


def stack_equal_k(log_weights: Sequence) -> np.ndarray:
    """Stack per-document log weights into [N, K]; corpus-level IS needs the same K for every document."""
    sizes = {len(lw) for lw in log_weights}
    if len(sizes) != 1:
        raise ValueError(
            f"corpus-level IS pairs sample k of every document, so every document needs the same number of "
            f"samples; got sample counts {sorted(sizes)}"
        )
    return np.stack([as_log_weights(lw, f"document {n}") for n, lw in enumerate(log_weights)])


def token_counts(num_tokens: Sequence[int], n_docs: int) -> list[int]:
    """The token counts T_n [N] as ints, one per document; an ``InputError`` naming the first document whose count is
    not a whole number ≥ 0 (2.5 would otherwise be truncated to 2, silently).

    Examples
    --------
    >>> token_counts([3, 2.0], 2)
    [3, 2]
    >>> token_counts([3, 2.5], 2)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: document 1: num_tokens must be a whole number ≥ 0, got 2.5
    """
    if len(num_tokens) != n_docs:
        raise InputError(f"got {n_docs} documents but {len(num_tokens)} token counts")
    counts = []
    for n, t in enumerate(num_tokens):
        whole = isinstance(t, numbers.Integral) or (isinstance(t, numbers.Real) and float(t).is_integer())
        if isinstance(t, bool) or not whole or t < 0:
            raise InputError(f"document {n}: num_tokens must be a whole number ≥ 0, got {t!r}")
        counts.append(int(t))
    return counts


def total_tokens(num_tokens: Sequence[int], n_docs: int) -> int:
    """Σ_n T_n over ``token_counts``; an ``InputError`` when it is 0 (perplexity is undefined)."""
    total = sum(token_counts(num_tokens, n_docs))
    if total == 0:
        raise InputError("perplexity is undefined for a corpus with zero tokens")
    return total


def instance_ppl(log_weights: Sequence, num_tokens: Sequence[int]) -> float:
    """Instance-level PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n) (Logan et al. 2020, Eq. 5).

    Parameters
    ----------
    log_weights : sequence of array_like
        Per document n, its K_n log weights.
    num_tokens : sequence of int
        T_n per document.

    Returns
    -------
    float

    Examples
    --------
    >>> round(instance_ppl([[-2.0, -2.0], [-4.0, -4.0]], [1, 2]), 4)  # exp(6 / 3)
    7.3891
    """
    total = total_tokens(num_tokens, len(log_weights))
    return math.exp(-float(instance_log_likelihoods(log_weights).sum()) / total)


def corpus_log_likelihood(log_weights: Sequence) -> float:
    """Corpus-level log p̂ = logsumexp_k Σ_n log w_nk − log K (sample k of every document is one corpus sample)."""
    return float(log_mean_exp(stack_equal_k(log_weights).sum(axis=0)))


def corpus_ppl(log_weights: Sequence, num_tokens: Sequence[int]) -> float:
    """Corpus-level PPL = exp(−(logsumexp_k Σ_n log w_nk − log K) / Σ_n T_n) (Eq. 6): sample k of every document is
    one joint sample of the corpus, so every document needs the same K (arguments as ``instance_ppl``).

    Examples
    --------
    >>> paired = [[0.0, -2.0], [0.0, -2.0]]  # sample 0 good for both documents, sample 1 bad for both
    >>> round(corpus_ppl(paired, [1, 1]), 4), round(instance_ppl(paired, [1, 1]), 4)
    (1.4014, 1.7616)
    """
    total = total_tokens(num_tokens, len(log_weights))
    return math.exp(-corpus_log_likelihood(log_weights) / total)


def perplexity(log_likelihoods: Sequence[float], num_tokens: Sequence[int]) -> float:
    """PPL = exp(−Σ_n ℓ_n / Σ_n T_n) from per-document log likelihoods ℓ_n (estimates or bounds) [N]."""
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    if ll.ndim != 1:
        raise ValueError(f"expected one log likelihood per document (1-d), got shape {ll.shape}")
    bad = np.flatnonzero(np.isnan(ll) | np.isposinf(ll))
    if bad.size:
        raise ValueError(
            f"document {int(bad[0])}: log likelihood {ll[bad[0]]} is not a valid log probability"
        )
    total = total_tokens(num_tokens, ll.size)
    return math.exp(-float(ll.sum()) / total)
