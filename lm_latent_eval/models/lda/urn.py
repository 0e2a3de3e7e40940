"""The Pólya urn of LDA with θ integrated out, shared by p and q.

p(z) = Γ(Σα) / Γ(T + Σα) · Π_k Γ(n_k + α_k) / Γ(α_k), and token by token p(z_t = k | z_<t) = (n_k^{<t} + α_k) / (t + Σα)
(t = 0, 1, ...: tokens before this one); p(x, z) = p(z) Π_t Φ[z_t, x_t].
"""

from __future__ import annotations

import torch


def log_prior(counts: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """log p(z) from the topic counts n [..., K] of z (float64) and α [K]: [...]."""
    total = counts.sum(-1)
    a0 = alpha.sum()
    return (
        torch.lgamma(a0)
        - torch.lgamma(total + a0)
        + (torch.lgamma(counts + alpha) - torch.lgamma(alpha)).sum(-1)
    )


def topic_counts(z: torch.Tensor, num_topics: int) -> torch.Tensor:
    """n_k = #{t : z_t = k} of z [K', T]: float64 [K', num_topics]."""
    counts = torch.zeros(z.shape[0], num_topics, dtype=torch.float64, device=z.device)
    return counts.scatter_add_(1, z, torch.ones_like(z, dtype=torch.float64))


def counts_before(z: torch.Tensor, num_topics: int) -> torch.Tensor:
    """n_k^{<t} for every token t of z [K', T]: float64 [K', T, num_topics] (the counts each factor conditions on)."""
    one_hot = torch.nn.functional.one_hot(z, num_topics).to(torch.float64)
    return one_hot.cumsum(1) - one_hot
