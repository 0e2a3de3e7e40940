"""HMM parameters as logits and the forward algorithm over them (log space, batched, padded)."""

from __future__ import annotations

import torch
from torch import nn


class HMMParameters(nn.Module):
    """Logits of π = softmax(initial) [S], A = softmax(transition) [S, S], B = softmax(emission) [S, V]."""

    def __init__(self, num_states: int, vocab_size: int, generator: torch.Generator | None = None):
        super().__init__()
        if num_states <= 0 or vocab_size <= 0:
            raise ValueError(f"need num_states > 0 and vocab_size > 0, got {num_states} and {vocab_size}")
        self.initial_logits = nn.Parameter(torch.randn(num_states, generator=generator))
        self.transition_logits = nn.Parameter(torch.randn(num_states, num_states, generator=generator))
        self.emission_logits = nn.Parameter(torch.randn(num_states, vocab_size, generator=generator))

    @property
    def num_states(self) -> int:
        return self.initial_logits.shape[0]

    def log_probs(self, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log π [S], log A [S, S], log B [S, V]), each normalized over its last dimension."""
        return (
            torch.log_softmax(self.initial_logits.to(dtype), -1),
            torch.log_softmax(self.transition_logits.to(dtype), -1),
            torch.log_softmax(self.emission_logits.to(dtype), -1),
        )

    @torch.no_grad()
    def set_probs(self, pi: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> None:
        """Store probability tables (rows summing to 1, all > 0) as logits = log probabilities."""
        for param, probs in (
            (self.initial_logits, pi),
            (self.transition_logits, A),
            (self.emission_logits, B),
        ):
            if probs.shape != param.shape:
                raise ValueError(f"expected shape {tuple(param.shape)}, got {tuple(probs.shape)}")
            param.copy_(probs.log().to(param.dtype))

    def emission_scores(self, x: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
        """log B(·, x_t) arranged as [..., T, S] for token ids x [..., T]."""
        log_B = self.log_probs(dtype)[2]
        return log_B.t()[x.to(log_B.device)]


def forward_log_alpha(log_pi: torch.Tensor, log_A: torch.Tensor, emissions: torch.Tensor) -> torch.Tensor:
    """log α_t(j) = log p(x_1..x_t, z_t = j) for every t: [T, S], from emissions log B(j, x_t) [T, S]."""
    alphas = []
    for t in range(emissions.shape[0]):
        prev = log_pi if t == 0 else torch.logsumexp(alphas[-1][:, None] + log_A, 0)
        alphas.append(prev + emissions[t])
    return torch.stack(alphas) if alphas else emissions.new_zeros(0, log_pi.shape[0])


def batch_log_likelihood(
    log_pi: torch.Tensor, log_A: torch.Tensor, emissions: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """log p(x_n) of N padded sequences (prefix probability): emissions [N, T_max, S], lengths [N] -> [N]."""
    T_max = emissions.shape[1]
    alpha = log_pi + emissions[:, 0]
    for t in range(1, T_max):
        step = torch.logsumexp(alpha[:, :, None] + log_A, 1) + emissions[:, t]
        alpha = torch.where((t < lengths)[:, None], step, alpha)
    log_z = torch.logsumexp(alpha, -1)
    return torch.where(lengths > 0, log_z, torch.zeros_like(log_z))
