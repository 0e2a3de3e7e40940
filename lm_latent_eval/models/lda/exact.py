"""Exact log p(x) of LDA by dynamic programming over topic-count vectors (and by brute force, for tests).

p(x) = Σ_z Π_t (n_{z_t}^{<t} + α_{z_t}) / (t + Σα) · Φ[z_t, x_t] depends on z_<t only through its counts, so
f_t(n) = p(x_≤t, counts of z_≤t = n) obeys f_t(n) = Σ_k f_{t−1}(n − e_k) (n_k − 1 + α_k) / (t − 1 + Σα) Φ[k, x_t] and
log p(x) = log Σ_n f_T(n). The states after t tokens are the C(t + K − 1, K − 1) compositions of t into K parts,
ranked by the combinatorial number system: Σ_t C(t + K − 1, K − 1) = C(T + K, K) cells of K terms each, in log space
(float64) so that no state is lost to underflow. Feasible for few topics and short documents only (``exact_work``
= K² C(T + K, K), one CPU thread: K = 4, T = 150 is 3.6e8, about 4 s; K = 8, T = 30 is 3.1e9, about 2 minutes).
"""

from __future__ import annotations

import itertools
import math

import torch


def exact_work(num_tokens: int, num_topics: int) -> int:
    """K² C(T + K, K): the cost of the dynamic program on a T-token document over K topics (C(T + K, K) cells, K
    successors of K counts each), about 10-40 ns each on one CPU thread."""
    return num_topics**2 * math.comb(num_tokens + num_topics, num_topics)


def _binomials(n: int, k: int, device) -> torch.Tensor:
    """C(i, j) for i ≤ n, j ≤ k as int64 [n + 1, k + 1]."""
    return torch.tensor([[math.comb(i, j) for j in range(k + 1)] for i in range(n + 1)], device=device)


def _successor_ranks(counts: torch.Tensor, binom: torch.Tensor) -> torch.Tensor:
    """Rank of n + e_k among the compositions of t + 1, for each composition n [S, K] of t and each topic k: [S, K].

    A composition is ranked by its bar positions b_j = n_1 + … + n_j + j − 1 (j = 1..K−1, stars and bars) as
    Σ_j C(b_j, j), a bijection onto [0, C(t + K − 1, K − 1)) (colexicographic order). Adding e_k moves the bars
    j ≥ k + 1 one place right, so rank(n + e_k) = Σ_{j ≤ k} C(b_j, j) + Σ_{j > k} C(b_j + 1, j)."""
    S, K = counts.shape
    if K == 1:
        return torch.zeros(S, 1, dtype=torch.long, device=counts.device)
    j = torch.arange(1, K, device=counts.device)
    # [S, K − 1]
    bars = counts[:, :-1].cumsum(1) + j - 1
    zero = torch.zeros(S, 1, dtype=torch.long, device=counts.device)
    # Σ_{j ≤ k} C(b_j, j)
    kept = torch.cat([zero, binom[bars, j].cumsum(1)], 1)
    # Σ_{j > k} C(b_j + 1, j)
    moved = torch.cat([binom[bars + 1, j].flip(1).cumsum(1).flip(1), zero], 1)
    return kept + moved


@torch.no_grad()
def log_marginal_dp(log_phi: torch.Tensor, alpha: torch.Tensor) -> float:
    """log p(x) from log Φ[k, x_t] as [T, K] (float64) and α [K]: the dynamic program of the module docstring."""
    T, K = log_phi.shape
    dev = log_phi.device
    alpha = alpha.to(torch.float64)
    a0 = float(alpha.sum())
    binom = _binomials(T + K, K, dev)
    # the states after t tokens
    counts = torch.zeros(1, K, dtype=torch.long, device=dev)
    # log f_t(n) of each state
    f = torch.zeros(1, dtype=torch.float64, device=dev)
    eye = torch.eye(K, dtype=torch.long, device=dev)
    for t in range(T):
        # states after t + 1 tokens
        size = math.comb(t + K, K - 1)
        # [S, K]
        ranks = _successor_ranks(counts, binom)
        # [S, K]: f_t(n) · urn · Φ
        values = f[:, None] + torch.log(counts.double() + alpha) + log_phi[t]
        scattered = torch.full((K, size), -math.inf, dtype=torch.float64, device=dev)
        new_counts = torch.empty(size, K, dtype=torch.long, device=dev)
        for k in range(K):
            scattered[k].index_copy_(0, ranks[:, k], values[:, k])
            new_counts.index_copy_(0, ranks[:, k], counts + eye[k])
        f = torch.logsumexp(scattered, 0) - math.log(t + a0)
        counts = new_counts
    return float(torch.logsumexp(f, 0))


def all_assignments(num_tokens: int, num_topics: int) -> torch.Tensor:
    """Every z ∈ {0..K−1}^T, [K^T, T] (tests: the support of a tiny LDA; T = 0: one empty assignment)."""
    rows = list(itertools.product(range(num_topics), repeat=num_tokens))
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_tokens)


@torch.no_grad()
def log_marginal_brute_force(model, x: torch.Tensor) -> float:
    """log Σ_z p(x, z) by listing all K^T assignments (tests only)."""
    return float(torch.logsumexp(model.log_joint(x, all_assignments(x.numel(), model.num_topics)), 0))
