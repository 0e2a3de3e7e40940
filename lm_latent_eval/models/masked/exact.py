"""Exact log p(x) = log Σ_σ p(x, σ) of a masked LM: a dynamic program over revealed sets, and brute force over orders.

The factor of revealing position i from state S, π(i | S) p_θ(x_i | S), depends on S only (not on the order that
revealed S), so with α(∅) = 1

    α(S) = Σ_{i ∈ S} α(S ∖ i) π(i | S ∖ i) p_θ(x_i | S ∖ i),    p(x) = α({0, ..., T−1}):

2^T − 1 network rows (every state but the full one), then T layers of log-sum-exp over 2^T sets. The brute force
lists all T! orders and sums ``log_joint``: the ground truth the tests hold the program to.
"""

from __future__ import annotations

import math

import torch

from ...errors import UnsupportedError
from ...protocol import enumerated_log_marginal
from .conditionals import step_scores
from .orders import all_orders


def check_exact_length(model, length: int) -> None:
    """UnsupportedError (one line) when 2^T states exceed the model's ``max_exact_tokens``."""
    if length > model.max_exact_tokens:
        raise UnsupportedError(
            f"{type(model).__name__}: the exact marginal sums over 2^T revealed sets and stops at "
            f"max_exact_tokens={model.max_exact_tokens} tokens, got T = {length}; use estimator=is or smc"
        )


@torch.no_grad()
def dp_log_marginal(model, x: torch.Tensor) -> float:
    """log p(x) by the dynamic program over revealed sets (float64 sums; 0.0 for T = 0).

    Parameters
    ----------
    model : MaskedOrderLM
        The masked LM (its network, mask id and order policy).
    x : torch.Tensor
        The text, LongTensor [T] with T ≤ ``model.max_exact_tokens``.

    Returns
    -------
    float
        log Σ_σ p(x, σ).

    Raises
    ------
    lm_latent_eval.errors.UnsupportedError
        When T > ``model.max_exact_tokens``.
    """
    T = x.numel()
    if T == 0:
        return 0.0
    check_exact_length(model, T)
    device = x.device
    bits = 1 << torch.arange(T, device=device)
    sets = torch.arange(1 << T, device=device)
    # [2^T, T]: position i is in set S
    member = (sets[:, None] & bits) != 0
    # log π(i | S) + log p_θ(x_i | S) of every state but the full one: [2^T − 1, T]
    factor = step_scores(model, x, member[:-1]).log_joint
    alpha = torch.full((1 << T,), -math.inf, dtype=torch.float64, device=device)
    alpha[0] = 0.0
    size = member.sum(1)
    for t in range(1, T + 1):
        layer = sets[size == t]
        has = member[layer]
        # S ∖ i for each i ∈ S (0 where i ∉ S, masked below): [n, T]
        before = torch.where(has, layer[:, None] ^ bits, 0)
        terms = alpha[before] + factor[before, torch.arange(T, device=device)]
        alpha[layer] = torch.logsumexp(terms.masked_fill(~has, -math.inf), 1)
    return float(alpha[-1])


@torch.no_grad()
def brute_force_log_marginal(model, x: torch.Tensor, batch_size: int = 720) -> float:
    """log p(x) = log Σ_σ p(x, σ) over all T! orders, ``log_joint`` on ``batch_size`` orders at a time (tests only:
    T ≤ 8 or so).

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model = tiny_masked_lm(seed=0)
    >>> x = torch.tensor([2, 3, 4])
    >>> abs(brute_force_log_marginal(model, x) - dp_log_marginal(model, x)) < 1e-12
    True
    """
    return enumerated_log_marginal(model, x, all_orders(x.numel()).to(x.device), batch_size)
