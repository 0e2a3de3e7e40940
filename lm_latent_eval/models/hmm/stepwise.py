"""The HMM's stepwise part for SMC: particles advance one word at a time under p and a stepwise proposal q.

p(x_t, z_t | z_{t-1}) = A(z_{t-1}, z_t) B(z_t, x_t) (π(z_1) B(z_1, x_1) at t = 1), the model's own factors.
q_τ(z_t | z_{t-1}, x) ∝ exp(ℓ_t / τ) from the mismatched proposal HMM (π', A', B'):
  peek=False (filtering, sees x_≤t):  ℓ_t(j) = log A'(z_{t-1}, j) + log B'(j, x_t), the IS no-peeking proposal itself
                                       (same random draws for the same generator);
  peek=True  (look-ahead, sees all x): ℓ_t(j) = log A'(z_{t-1}, j) + log B'(j, x_t) + log β'_t(j), with the backward
                                       messages β'_t(j) = q'(x_{t+1..T} | z_t = j); at τ = 1 this samples q'(z | x)
                                       forward, the same distribution that forward-filter backward-sample draws
                                       (at τ ≠ 1 the two temper different conditionals and differ).
                                       The increments carry the telescoping twist log β'_t(z_t) − log β'_{t-1}(z_{t-1})
                                       (β'_{-1} = 1, β'_T = 1: the sum over t is unchanged), so the weight after token
                                       t targets p(x_≤t, z_≤t) q'(x_{>t} | z_t), which foresees the rest of x
                                       (twisted SMC, Guarniero, Johansen & Lee 2017); at τ = 1 each increment is
                                       p's factor over q''s factor, e.g. A(z_{t-1}, z_t) B(z_t, x_t) / (A' B').
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...tensors import inverse_cdf
from ...tensors import tempered_draw as _draw
from ..side_by_side import document_rows, lane_uniforms


@dataclass
class HMMParticles:
    """K particles of one text: states drawn so far z [K, T] (columns < t filled) and the tables both sides need."""

    x: torch.Tensor  # [T] word ids
    # [K, T] states; columns t, t+1, ... not drawn yet
    z: torch.Tensor
    # tokens done
    t: int
    temperature: float
    # model (log π [S], log A [S, S], log B [S, V])
    log_p: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    # [S] proposal logits of z_1 before the emission: log π' (+ nothing)
    q_first: torch.Tensor
    q_trans: torch.Tensor  # [S, S] log A'
    # [T, S] log B'(j, x_t) (+ log β'_t(j) when peeking)
    q_emit: torch.Tensor
    # [T, S] log β'_t(j) when peeking, else 0
    twist: torch.Tensor


def backward_log_beta(log_A: torch.Tensor, emissions: torch.Tensor) -> torch.Tensor:
    """log β_t(i) = log q'(x_{t+1..T} | z_t = i): [T, S], β_T = 1 (``documents_log_beta`` of the one text)."""
    return documents_log_beta(log_A, emissions, [emissions.shape[0]])


@torch.no_grad()
def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> HMMParticles:
    """Empty histories for K particles of x [T]; precomputes the proposal's emission (and look-ahead) scores once."""
    x = model._check_x(x)
    proposal = model.proposal
    q_pi, q_A, _ = proposal.log_probs()
    # [T, S]
    emissions = proposal.emission_scores(x)
    twist = backward_log_beta(q_A, emissions) if peek else torch.zeros_like(emissions)
    z = torch.zeros(num_particles, x.shape[0], dtype=torch.long, device=x.device)
    return HMMParticles(
        x, z, 0, float(temperature), model.hmm.log_probs(), q_pi, q_A, emissions + twist, twist
    )


@torch.no_grad()
def step_particles(model, state: HMMParticles, t: int, generator) -> tuple[HMMParticles, torch.Tensor]:
    """Draw z_t for every particle; return log p(x_t, z_t | z_{t-1}) − log q_τ(z_t | z_{t-1}, x) (+ the look-ahead
    twist log β'_t(z_t) − log β'_{t-1}(z_{t-1}) when peeking): float64 [K]."""
    if t != state.t or t >= state.x.shape[0]:
        raise ValueError(f"smc_step: expected token {state.t} of {state.x.shape[0]}, got t = {t}")
    log_pi, log_A, log_B = state.log_p
    K = state.z.shape[0]
    if t == 0:
        zt, log_q = _draw((state.q_first + state.q_emit[0]).expand(K, -1), state.temperature, generator)
        log_p = log_pi[zt] + log_B[zt, state.x[0]] + state.twist[0, zt]
    else:
        prev = state.z[:, t - 1]
        zt, log_q = draw_by_row(state.q_trans + state.q_emit[t], prev, state.temperature, generator)
        log_p = log_A[prev, zt] + log_B[zt, state.x[t]] + state.twist[t, zt] - state.twist[t - 1, prev]
    state.z[:, t] = zt
    state.t = t + 1
    return state, log_p - log_q


def draw_by_row(
    logits: torch.Tensor, rows: torch.Tensor, temperature: float, generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tempered_draw(logits[rows], τ, generator)`` for a table logits [S, n] and row indices rows [K]: the softmax,
    exp and cumulative sums run on the S rows of the table and are gathered (row-wise operations, so the same numbers
    and draws) when S < K, else on the K gathered rows."""
    K = rows.shape[0]
    if logits.shape[0] >= K:
        return _draw(logits[rows], temperature, generator)
    log_p = torch.log_softmax(logits / temperature, -1)
    u = torch.rand(K, generator=generator, dtype=log_p.dtype, device=log_p.device)
    idx = inverse_cdf(None, u, cumulative=log_p.exp().cumsum(-1).index_select(0, rows))
    return idx, log_p[rows, idx]


def reorder_particles(state: HMMParticles, ancestors: torch.Tensor) -> HMMParticles:
    """Particle k takes the history of particle ancestors[k] (of one text, or global indices of texts side by side)."""
    state.z = state.z.index_select(0, ancestors.to(state.z.device))
    return state


def particle_latents(model, state: HMMParticles) -> torch.Tensor:
    """The states drawn so far, z [K, t] (``log_joint``'s format once t = T)."""
    return state.z[:, : state.t]


@dataclass
class HMMDocumentBatch:
    """The particles of several texts side by side (``DocumentBatchLM``): text d's K_d particles are the d-th
    segment of z [Σ K_d, max T_d], its tables rows ``offset_d`` .. ``offset_d + T_d − 1`` of the stacked ones."""

    sizes: list[int]
    lengths: list[int]
    z: torch.Tensor
    t: int
    temperature: float
    log_p: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    q_first: torch.Tensor  # [S]
    q_trans: torch.Tensor  # [S, S]
    x: torch.Tensor  # [Σ T_d] the texts, stacked
    q_emit: torch.Tensor  # [Σ T_d, S]
    twist: torch.Tensor  # [Σ T_d, S]
    # [Σ K_d] each particle's text's first row, and its last (offset_d + T_d − 1)
    first: torch.Tensor
    last: torch.Tensor


def documents_log_beta(log_A: torch.Tensor, emissions: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """``backward_log_beta`` of several texts in one backward pass, log β_t(i) = logsumexp_j log A(i, j) +
    emissions_{t+1}(j) + log β_{t+1}(j): emissions [Σ T_d, S] stacked text after text, the texts aligned at their
    ends (so every β_T = 1 falls on the last step), one log-sum-exp per step for all of them, each row's numbers those
    of its text alone; [Σ T_d, S] in the same order."""
    D, width, S = len(lengths), max(lengths), emissions.shape[1]
    device = emissions.device
    # row of token s of text d in the end-aligned [D · width] table
    starts = (
        torch.tensor([width - n for n in lengths], device=device) + torch.arange(D, device=device) * width
    )
    rows = torch.cat([torch.arange(n, device=device) for n in lengths]) + starts.repeat_interleave(
        torch.tensor(lengths, device=device)
    )
    aligned = emissions.new_zeros(D * width, S).index_copy_(0, rows, emissions).view(D, width, S)
    beta = emissions.new_zeros(D, width, S)
    for t in range(width - 2, -1, -1):
        beta[:, t] = torch.logsumexp(log_A + aligned[:, t + 1, None] + beta[:, t + 1, None], 2)
    return beta.view(D * width, S).index_select(0, rows)


@torch.no_grad()
def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> HMMDocumentBatch:
    """``init_particles`` of every text, stacked: the same tables (row by row), built for all texts at once (one
    emission lookup, one backward pass), one state."""
    xs = [model._check_x(x) for x in xs]
    lengths = [int(x.numel()) for x in xs]
    proposal = model.proposal
    q_pi, q_A, _ = proposal.log_probs()
    x = torch.cat(xs)
    # [Σ T_d, S]
    emissions = proposal.emission_scores(x)
    twist = documents_log_beta(q_A, emissions, lengths) if peek else torch.zeros_like(emissions)
    first, last = document_rows(num_particles, lengths, x.device)
    z = torch.zeros(sum(num_particles), max(lengths), dtype=torch.long, device=x.device)
    return HMMDocumentBatch(
        list(num_particles), lengths, z, 0, float(temperature), model.hmm.log_probs(), q_pi, q_A, x,
        emissions + twist, twist, first, last,
    )  # fmt: skip


@torch.no_grad()
def step_documents(
    model, state: HMMDocumentBatch, t: int, generators
) -> tuple[HMMDocumentBatch, torch.Tensor]:
    """``step_particles`` of every text with t < T_d, each drawing its K_d uniforms from its own generator (a text
    that has ended draws nothing: its particles' rows repeat its last token and their increments are ignored)."""
    if t != state.t:
        raise ValueError(f"smc_step_documents: expected step {state.t}, got t = {t}")
    log_pi, log_A, log_B = state.log_p
    dtype, device = state.q_emit.dtype, state.q_emit.device
    u = lane_uniforms(state.sizes, state.lengths, generators, t, 1, device)[:, 0].to(dtype)
    row = torch.minimum(state.first + t, state.last)
    x_t = state.x[row]
    if t == 0:
        logits = state.q_first + state.q_emit[row]
    else:
        prev = state.z[:, t - 1]
        logits = state.q_trans[prev] + state.q_emit[row]
    log_q_all = torch.log_softmax(logits / state.temperature, -1)
    zt = inverse_cdf(None, u, cumulative=log_q_all.exp().cumsum(-1))
    log_q = log_q_all.gather(-1, zt[:, None]).squeeze(-1)
    if t == 0:
        log_p = log_pi[zt] + log_B[zt, x_t] + state.twist[row, zt]
    else:
        log_p = log_A[prev, zt] + log_B[zt, x_t] + state.twist[row, zt] - state.twist[row - 1, prev]
    state.z[:, t] = zt
    state.t = t + 1
    return state, log_p - log_q
