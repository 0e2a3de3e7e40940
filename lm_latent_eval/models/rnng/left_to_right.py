"""The tree CRF q_τ(z | x) ∝ exp(Σ_{(i,j) ∈ z} s_ij / τ) factorized left to right over SHIFT/REDUCE actions (for SMC).

After the shift of word t − 1 the stack holds constituents e_0..e_{s−1} with left edges l_0 = 0 < … < l_{s−1}
(e_{s−1} ends at word t − 1). The next decision is r ∈ {0..s−1}, the REDUCEs before word t is shifted; reduce i
builds the span [l_{s−1−i}, t − 1]. Every constituent a completion adds ends at word t − 1 or later, so with S = s/τ,
β the inside scores of S (``tree_crf.inside``) and j = s − 1 − r:

    q_τ(r | x, z_<t) ∝ exp(Σ_{i=1..r} S(l_{s−1−i}, t−1)) · Σ_{b ≥ t} exp(S(l_j, b)) β(t, b) G_j(b),

where G_j(b) is the outside score of a constituent [l_j, b] that contains e_j..e_{s−1}: the total score of every
completion around it. G_j depends on l_0..l_j only, so each particle keeps one vector G_j per stack element, pushed
when the element is shifted and popped with it by REDUCE:

    G_new(c) = u(c) + Σ_{b > c} exp(S(l_new, b)) β(c + 1, b) G_new(b)   for c ≥ l_new,
    u(c) = G_below(c) exp(S(l_below, c)) (u = 1[c = T − 1] for the first word, which the root closes).

That is G_new = (I − M_{l_new})⁻¹ u with M_l[c, b] = exp(S(l, b)) β(c + 1, b) (b > c), a triangular matrix that
depends on the sentence only: its inverse (``log_green``, [T, T, T], log space) is computed once per sentence and a
shift costs one product. The product of the conditionals over a whole tree is exactly q_τ(z | x); all math float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tree_crf import inside


def _log_matvec(log_a: torch.Tensor, log_v: torch.Tensor) -> torch.Tensor:
    """log (A v) from log A [..., N, M] and log v [..., M]: [..., N] (−inf rows stay −inf)."""
    return torch.logsumexp(log_a + log_v.unsqueeze(-2), -1)


@dataclass
class LeftToRightCRF:
    """The tables of one sentence at one temperature: S = s/τ [T, T], log β [T, T], log (I − M_l)⁻¹ [T, T, T]."""

    scores: torch.Tensor
    log_beta: torch.Tensor
    log_green: torch.Tensor

    @classmethod
    def build(cls, span_scores: torch.Tensor, temperature: float) -> LeftToRightCRF:
        """From the CRF's span scores s [T, T] (only i ≤ j read) at temperature τ (divided in their own dtype, as
        ``TreeCRFProposal`` does, so both factorizations temper the same numbers)."""
        T = span_scores.shape[-1]
        upper = torch.ones(T, T, dtype=torch.bool, device=span_scores.device).triu()
        # as the CRF tempers
        scores = (span_scores / temperature).double().masked_fill(~upper, float("-inf"))
        log_beta = inside(scores.unsqueeze(0))[0]
        # log M[l, c, b] = S(l, b) + log β(c + 1, b) for l ≤ c < b
        # row c: β(c + 1, ·)
        shifted = torch.cat([log_beta[1:], log_beta.new_full((1, T), float("-inf"))])
        idx = torch.arange(T, device=scores.device)
        keep = (idx[:, None, None] <= idx[None, :, None]) & (idx[None, :, None] < idx[None, None, :])
        log_m = (scores[:, None, :] + shifted[None]).masked_fill(~keep, float("-inf"))
        # (I − M)⁻¹ row by row from the last: H[c] = e_c + Σ_{b > c} M[c, b] H[b]
        eye = torch.full((T, T), float("-inf"), dtype=torch.float64, device=scores.device).fill_diagonal_(0.0)
        green = eye.expand(T, T, T).clone()
        for c in range(T - 2, -1, -1):
            # [T(l), T]
            below = _log_matvec(green[:, c + 1 :].transpose(1, 2), log_m[:, c, c + 1 :])
            green[:, c] = torch.logaddexp(eye[c].expand(T, T), below)
        return cls(scores, log_beta, green)

    @property
    def num_words(self) -> int:
        return self.scores.shape[-1]

    def push(
        self, t: int, left_below: torch.Tensor | None, outside_below: torch.Tensor | None
    ) -> torch.Tensor:
        """log G [K, T] of a new stack element with left edge t on top of elements with left edges ``left_below`` [K]
        and log G ``outside_below`` [K, T] (None for the first word). Entries c < t are −inf (never read)."""
        T = self.num_words
        cols = torch.arange(T, device=self.scores.device)
        if outside_below is None:
            u = torch.full((1, T), float("-inf"), dtype=torch.float64, device=self.scores.device)
            u[0, T - 1] = 0.0
        else:
            u = outside_below + self.scores[left_below]
        u = u.masked_fill(cols < t, float("-inf"))
        return _log_matvec(self.log_green[t], u).masked_fill(cols < t, float("-inf"))

    def reduce_logits(
        self, t: int, left: torch.Tensor, outside: torch.Tensor, size: torch.Tensor
    ) -> torch.Tensor:
        """Unnormalized log q_τ(r | x, z_<t) for r = 0..S−1 before word t ≥ 1: [K, S] (−inf for r ≥ size), from the
        left edges [K, S] and log G [K, S, T] of the stack elements and the stack sizes [K]."""
        S = left.shape[1]
        # R_j = log Σ_{b ≥ t} exp(S(l_j, b)) β(t, b) G_j(b), for every element j
        close = torch.logsumexp(self.scores[:, t:][left] + self.log_beta[t, t:] + outside[..., t:], -1)
        r = torch.arange(S, device=left.device)
        # [K, S]: the element whose constituent stays open
        j = (size[:, None] - 1 - r).clamp(min=0)
        # Σ_{i=1..r} S(l_{s−1−i}, t − 1): the reduce spans, cumulated from the top of the stack down
        reduce_score = self.scores[left, t - 1].gather(1, j)
        reduce_score = torch.where(r == 0, 0.0, reduce_score)
        cumulative = torch.cumsum(reduce_score, 1)
        logits = cumulative + close.gather(1, j)
        return logits.masked_fill(r >= size[:, None], float("-inf"))
