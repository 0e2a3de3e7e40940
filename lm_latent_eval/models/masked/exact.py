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
from .policy import is_deterministic
from .windows import window_size, window_spans


def check_exact_length(model, length: int) -> None:
    """UnsupportedError (one line) when 2^T states exceed the model's ``max_exact_tokens``."""
    if length > model.max_exact_tokens:
        raise UnsupportedError(
            f"{type(model).__name__}: the exact marginal sums over 2^T revealed sets and stops at "
            f"max_exact_tokens={model.max_exact_tokens} tokens, got T = {length}"
        )


@torch.no_grad()
def dp_log_marginal(model, x: torch.Tensor) -> float:
    """log p(x) by the dynamic program over revealed sets (float64 sums; 0.0 for T = 0); a text longer than the
    network reads is the sum over its windows (``windows.py``) of log p(window j | window j − 1 revealed).

    Parameters
    ----------
    model : MaskedOrderLM
        The masked LM (its network, mask id and order policy).
    x : torch.Tensor
        The text, LongTensor [T] with T (or each window) ≤ ``model.max_exact_tokens``.

    Returns
    -------
    float
        log Σ_σ p(x, σ).

    Raises
    ------
    lm_latent_eval.errors.UnsupportedError
        When T (or a window) > ``model.max_exact_tokens``.
    """
    T = x.numel()
    if T == 0:
        return 0.0
    size = window_size(model, T)
    check_exact_length(model, T if size is None else size)
    if size is None:
        return window_dp(model, x, 0)
    return sum(window_dp(model, x[start:end], mid - start) for start, mid, end in window_spans(T, size))


def exact_cost(model, length: int) -> float:
    """What ``log_marginal`` of a text of ``length`` tokens costs, in samples (``protocol.exact_marginal_cost``):
    its network rows over the T rows of one particle (one per reveal step). The dynamic program runs the 2^n − 1
    revealed sets of each window's n positions (``window_dp``); a deterministic policy's one order, T rows, costs one
    particle; beyond ``max_exact_tokens`` it is refused: inf.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> model, _ = load_model("masked")
    >>> exact_cost(model, 9), exact_cost(model, 10), exact_cost(model, model.max_exact_tokens + 1)
    (56.77777777777778, 102.3, inf)
    """
    if length == 0 or is_deterministic(model.policy, model.policy_temperature):
        return 1.0
    size = window_size(model, length)
    spans = [(0, 0, length)] if size is None else window_spans(length, size)
    if max(end - mid for _, mid, end in spans) > model.max_exact_tokens:
        return math.inf
    return sum((1 << (end - mid)) - 1 for _, mid, end in spans) / length


@torch.no_grad()
def deterministic_orders(model, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The one order σ*(x) of a deterministic policy and log p(x) = Σ_t log p_θ(x_{σ*_t} | S_{t−1}) along it: T
    network rows, one state per step (DUEL's algorithm); (LongTensor [T], float).

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model = tiny_masked_lm(seed=0, policy="left_to_right")
    >>> deterministic_orders(model, torch.tensor([2, 3, 4]))[0].tolist()
    [0, 1, 2]
    """
    T = x.numel()
    revealed = torch.zeros(1, T, dtype=torch.bool, device=x.device)
    order, total = [], 0.0
    for _ in range(T):
        scores = step_scores(model, x, revealed)
        i = int(scores.log_order[0].argmax())
        total += float(scores.log_joint[0, i])
        order.append(i)
        revealed[0, i] = True
    return torch.tensor(order, dtype=torch.long), total


def deterministic_log_marginal(model, x: torch.Tensor) -> float:
    """log p(x) of a deterministic policy: the log-likelihood along its one order (``deterministic_orders``)."""
    return deterministic_orders(model, x)[1]


def set_factors(model, x: torch.Tensor, fixed: int = 0):
    """Every set S of the free positions fixed, ..., L − 1 of x [L] (set s holds free position i where bit i of s is
    1): (bits [n], sets [2^n], member [2^n, n] bool, factor [2^n − 1, n] = log π(i | S) + log p_θ(x_i | S) of every
    set but the full one), the first ``fixed`` positions revealed throughout."""
    n, device = x.numel() - fixed, x.device
    bits = 1 << torch.arange(n, device=device)
    sets = torch.arange(1 << n, device=device)
    member = (sets[:, None] & bits) != 0
    revealed = torch.cat([torch.ones(1 << n, fixed, dtype=torch.bool, device=device), member], 1)
    return bits, sets, member, step_scores(model, x, revealed[:-1]).log_joint[:, fixed:]


@torch.no_grad()
def exact_log_values(model, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log V(S) = log p(x_M | x_S) of every set S of a text x [T] the network reads whole (``value.py``), by the
    program of the module docstring run backwards from V(all) = 1: (log V [2^T] float64, member [2^T, T] as in
    ``set_factors``); log V(∅) = log p(x).

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model, x = tiny_masked_lm(seed=0), torch.tensor([2, 3, 4])
    >>> log_v, member = exact_log_values(model, x)
    >>> abs(float(log_v[0]) - dp_log_marginal(model, x)) < 1e-12, float(log_v[-1])
    (True, 0.0)
    """
    check_exact_length(model, x.numel())
    if window_size(model, x.numel()) is not None:
        raise UnsupportedError(
            f"exact_log_values: {x.numel()} tokens are read in windows; give a shorter text"
        )
    bits, sets, member, factor = set_factors(model, x)
    log_v = torch.full((sets.numel(),), -math.inf, dtype=torch.float64, device=x.device)
    log_v[-1] = 0.0
    size = member.sum(1)
    for s in range(x.numel() - 1, -1, -1):
        layer = sets[size == s]
        terms = factor[layer] + log_v[layer[:, None] | bits]
        log_v[layer] = torch.logsumexp(terms.masked_fill(member[layer], -math.inf), 1)
    return log_v, member


def window_dp(model, x: torch.Tensor, fixed: int) -> float:
    """log Σ over the orders of positions fixed, ..., L − 1 of x [L] of their factors, the first ``fixed`` positions
    revealed throughout (the network reads all of x)."""
    n, device = x.numel() - fixed, x.device
    bits, sets, member, factor = set_factors(model, x, fixed)
    alpha = torch.full((1 << n,), -math.inf, dtype=torch.float64, device=device)
    alpha[0] = 0.0
    size = member.sum(1)
    for t in range(1, n + 1):
        layer = sets[size == t]
        has = member[layer]
        # S ∖ i for each i ∈ S (0 where i ∉ S, masked below): [m, n]
        before = torch.where(has, layer[:, None] ^ bits, 0)
        terms = alpha[before] + factor[before, torch.arange(n, device=device)]
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
