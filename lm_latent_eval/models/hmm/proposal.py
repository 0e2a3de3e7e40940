"""The HMM's proposal q(z | x): a second, mismatched HMM (π', A', B'), sampled with or without peeking."""

from __future__ import annotations

import math

import torch

from ...protocol import CheckedProposal
from ...tensors import tempered_draw as _draw
from .parameters import HMMParameters, forward_log_alpha


class HMMProposal(CheckedProposal, HMMParameters):
    """q(z | x) from the mismatched HMM (π', A', B'); every z has q > 0, so it covers the model's support.

    peek=True:  forward-filter backward-sample, q(z | x) = q'(z_T | x) Π_t q'(z_t | z_{t+1}, x_≤t)
                (sees all of x).
    peek=False: q(z | x) = Π_t q'(z_t | z_{t-1}, x_t) with q'(z_t = j | i, x_t) ∝ A'(i, j) B'(j, x_t)
                (sees x_≤t).
    Temperature τ divides the log-probability logits of every conditional sampled from; log q is under that
    tempered distribution.
    """

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw z [K, T] ~ q_τ(z | x) and return it with log q_τ(z | x) float64 [K]."""
        device = self.initial_logits.device
        K, T = num_samples, x.shape[0]
        z = torch.zeros(K, T, dtype=torch.long, device=device)
        log_q = torch.zeros(K, dtype=torch.float64, device=device)
        if T == 0:
            return z, log_q
        log_pi, log_A, _ = self.log_probs()
        # [T, S]
        emissions = self.emission_scores(x)
        if peek:
            # z_T ∝ α_T(z_T), then z_t ∝ α_t(z_t) A'(z_t, z_{t+1}) (α: forward filter of q', [T, S])
            log_alpha = forward_log_alpha(log_pi, log_A, emissions)
            z[:, -1], log_q = _draw(log_alpha[-1].expand(K, -1), temperature, generator)
            for t in range(T - 2, -1, -1):
                z[:, t], lq = _draw(log_alpha[t] + log_A[:, z[:, t + 1]].t(), temperature, generator)
                log_q = log_q + lq
        else:
            # z_1 ∝ π'(z_1) B'(z_1, x_1), then z_t ∝ A'(z_{t-1}, z_t) B'(z_t, x_t)
            z[:, 0], log_q = _draw((log_pi + emissions[0]).expand(K, -1), temperature, generator)
            for t in range(1, T):
                z[:, t], lq = _draw(log_A[z[:, t - 1]] + emissions[t], temperature, generator)
                log_q = log_q + lq
        return z, log_q

    def _beam(self, x: torch.Tensor, beam_size: int) -> torch.Tensor:
        """The min(k, S^T) distinct z [k', T] with the highest q(z | x): k-best Viterbi on (π', A', B')."""
        device = self.initial_logits.device
        S, T, k = self.num_states, x.shape[0], beam_size
        if T == 0:
            return torch.zeros(1, 0, dtype=torch.long, device=device)
        log_pi, log_A, _ = self.log_probs()
        emissions = self.emission_scores(x)
        # score[j, r]: log q(x_≤t, z_≤t) of the r-th best prefix ending in state j (−inf: none)
        score = torch.full((S, k), -math.inf, dtype=torch.float64, device=device)
        score[:, 0] = log_pi + emissions[0]
        # back[t-1][j, r] = flat index i * k + r' of the prefix extended into slot (j, r) at t
        back = []
        for t in range(1, T):
            # [(i, r'), j]
            cand = (score[:, :, None] + log_A[:, None, :]).reshape(S * k, S)
            # [k, S]
            top, arg = cand.topk(k, dim=0)
            score = top.t() + emissions[t][:, None]
            back.append(arg.t())
        top, flat = score.reshape(-1).topk(k)
        flat = flat[torch.isfinite(top)]
        state, rank = flat // k, flat % k
        z = torch.empty(flat.shape[0], T, dtype=torch.long, device=device)
        z[:, -1] = state
        for t in range(T - 1, 0, -1):
            prev = back[t - 1][state, rank]
            state, rank = prev // k, prev % k
            z[:, t - 1] = state
        return z
