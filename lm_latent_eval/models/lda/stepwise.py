"""LDA's particles, advanced one token at a time; shared by ``LDAProposal.sample`` and the SMC methods.

At token t (counts n^{<t} of the particle's own draws) the proposal draws z_t from q_τ(z_t = k) ∝ exp(ℓ_k / τ) with
  peek=True:   ℓ_k = log(n_k + α_k) + log Φ[k, x_t]   (the urn times the token's likelihood: p(z_t | x_≤t, z_<t) at τ = 1)
  peek=False:  ℓ_k = log(n_k + α_k)                    (the urn prior alone)
and the model's factor is p(x_t, z_t | z_<t) = (n_{z_t} + α_{z_t}) / (t + Σα) · Φ[z_t, x_t]. At τ = 1 with peeking the
incremental weight is p(x_t | x_<t, z_<t) = Σ_k (n_k + α_k) Φ[k, x_t] / (t + Σα), whatever z_t was drawn: SMC is then
Wallach et al.'s (2009) left-to-right particle method, with the weights and resampling that make it unbiased.

With a lookahead (the model's ``lookahead="cvb0"``, peek=True only) step t draws the topic of token π(t) (the most
confidently placed tokens first; p(z) is exchangeable), ℓ_k = log(n_k + α_k + m_k^{(t)}) + log Φ[k, x_π(t)] with m^{(t)}
the expected topic counts of the tokens after step t, and the increment carries the twist ψ_t / ψ_{t−1} of
``lookahead.py``: SMC's targets then see the whole document, and the increments still sum to log p(x, z) − log q(z | x).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass

import torch

from ...tensors import inverse_cdf
from ...tensors import tempered_draw as draw
from ..side_by_side import document_rows, lane_uniforms, same_texts
from .lookahead import Lookahead, build_lookahead, build_lookaheads, log_twist, proposal_logits, sum_ahead


@dataclass
class LDAParticles:
    """K particles of one text: topics drawn so far z [K, T] (columns < t filled) and their topic counts."""

    x: torch.Tensor  # [T] word ids
    log_phi: torch.Tensor  # [T, topics] log Φ[k, x_t], float64
    alpha: torch.Tensor  # [topics] float64
    # Σα (kept on the host: no device sync per token)
    alpha_sum: float
    z: torch.Tensor  # [K, T]
    counts: torch.Tensor  # [K, topics] float64: n_k of z_<t
    t: int
    temperature: float
    peek: bool
    # the words ahead (``lookahead.py``), or None: the urn proposal of Wallach et al.
    lookahead: Lookahead | None = None
    # with a lookahead: S_s = Σ_k n_k Φ[k, x_π(s)] [K, T] (kept for the steps s ≥ t only) and log ψ_{t−1} [K] of every
    # particle
    explained: torch.Tensor | None = None
    log_psi: torch.Tensor | None = None


def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> LDAParticles:
    """K particles with empty histories over x [T] (the model's Φ columns of x gathered once)."""
    x = model.check_x(x)
    alpha = model.alpha.to(torch.float64)
    # [T, topics]
    log_phi = model.log_phi_columns(x)
    z = torch.zeros(num_particles, x.shape[0], dtype=torch.long, device=x.device)
    counts = torch.zeros(num_particles, alpha.shape[0], dtype=torch.float64, device=x.device)
    state = LDAParticles(x, log_phi, alpha, float(alpha.sum()), z, counts, 0, float(temperature), bool(peek))
    if peek and model.lookahead == "cvb0":
        state.lookahead = build_lookahead(log_phi, alpha)
        state.explained = torch.zeros(num_particles, x.shape[0], dtype=torch.float64, device=x.device)
        state.log_psi = torch.zeros(num_particles, dtype=torch.float64, device=x.device)
    return state


def step(state: LDAParticles, t: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw z_t for every particle: returns (log p(x_t, z_t | z_<t) [K], log q_τ(z_t | x, z_<t) [K]), float64."""
    _check_token(state, t)
    if state.lookahead is not None:
        return _twisted_step(state, t, generator)
    # [K, topics]
    log_urn = torch.log(state.counts + state.alpha)
    # [topics]
    log_phi = state.log_phi[t]
    zt, log_q = draw(log_urn + log_phi if state.peek else log_urn, state.temperature, generator)
    log_p = log_urn.gather(1, zt[:, None]).squeeze(1) - math.log(t + state.alpha_sum) + log_phi[zt]
    _advance(state, t, zt)
    return log_p, log_q


def step_particles(model, state: LDAParticles, t: int, generator) -> tuple[LDAParticles, torch.Tensor]:
    """``step``'s draw of z_t: (state, log p(x_t, z_t | z_<t) − log q_τ(z_t | x, z_<t) float64 [K])."""
    log_p, log_q = step(state, t, generator)
    return state, log_p - log_q


def propose(state: LDAParticles, t: int, generator) -> torch.Tensor:
    """Draw z_t for every particle without scoring it under p: log q_τ(z_t | x, z_<t) [K], float64 (the proposal's
    own draws: the same z and log q as ``step``, without the twist ψ that only the weights need)."""
    if state.lookahead is None:
        return step(state, t, generator)[1]
    _check_token(state, t)
    zt, log_q = _draw_twisted(state, t, generator)
    _advance(state, t, zt, state.lookahead.steps[t])
    return log_q


def _check_token(state: LDAParticles, t: int) -> None:
    if t != state.t or t >= state.x.shape[0]:
        raise ValueError(f"LDA particles: expected token {state.t} of {state.x.shape[0]}, got t = {t}")


def _twisted_step(state: LDAParticles, t: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The lookahead's step t, token π(t): its topic z ~ q_τ ∝ ((α + n + m^{(t)}) Φ[:, x_π(t)])^{1/τ}; returns
    (log p(x_π(t), z | the topics of steps < t) + log ψ_t − log ψ_{t−1} [K] (no ψ_{−1} at t = 0), log q_τ(z) [K]), as
    ``lookahead.py`` defines them."""
    ahead = state.lookahead
    zt, log_q = _draw_twisted(state, t, generator)
    log_urn = torch.log(state.counts.gather(1, zt[:, None]).squeeze(1) + state.alpha[zt])
    log_p = log_urn - math.log(t + state.alpha_sum) + ahead.log_phi[t, zt]
    # [K, T − t − 1]: S_s gains Φ[z_t, x_π(s)] for the tokens ahead (the twists to come read no other column)
    state.explained[:, t + 1 :] += ahead.phi_by_topic[:, t + 1 :].index_select(0, zt)
    log_psi = log_twist(state.explained, ahead, t)
    log_p = log_p + log_psi - state.log_psi
    state.log_psi = log_psi
    _advance(state, t, zt, ahead.steps[t])
    return log_p, log_q


def _draw_twisted(state: LDAParticles, t: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """z ~ q_τ ∝ ((α + n + m^{(t)}) Φ[:, x_π(t)])^{1/τ} for every particle: (z [K], log q_τ(z) [K]). At τ = 1 from the
    unnormalized probabilities w = (n + α + m^{(t)}) Φ directly (no log or exp of K × topics numbers): the same
    uniform per particle and inverse-CDF draw as ``tempered_draw``, and log q = log w_z − log Σ w."""
    ahead = state.lookahead
    if state.temperature != 1.0:
        return draw(proposal_logits(state.counts, state.alpha, ahead, t), state.temperature, generator)
    # [K, topics]
    w = (state.counts + (state.alpha + ahead.ahead[t])) * ahead.phi[t]
    u = torch.rand(w.shape[0], generator=generator, dtype=w.dtype, device=w.device)
    zt = inverse_cdf(w, u)
    return zt, torch.log(w.gather(1, zt[:, None]).squeeze(1)) - torch.log(w.sum(1))


def _advance(state: LDAParticles, t: int, zt: torch.Tensor, token: int | None = None) -> None:
    """Record the topics zt [K] of step t (of token ``token``, default t) and count them."""
    state.z[:, t if token is None else token] = zt
    # scatter_add_: several times faster on the CPU than advanced indexing, the same (integer) counts
    state.counts.scatter_add_(1, zt.unsqueeze(1), state.counts.new_ones(zt.shape[0], 1))
    state.t = t + 1


def reorder_particles(state: LDAParticles, ancestors: torch.Tensor) -> LDAParticles:
    """Particle k takes the history (topics and counts) of particle ancestors[k]."""
    ancestors = ancestors.to(state.z.device)
    # index_select: a gather of whole rows, several times faster on the CPU than advanced indexing
    state.z, state.counts = state.z.index_select(0, ancestors), state.counts.index_select(0, ancestors)
    if state.lookahead is not None:
        state.explained = state.explained.index_select(0, ancestors)
        state.log_psi = state.log_psi.index_select(0, ancestors)
    return state


def particle_latents(model, state: LDAParticles) -> torch.Tensor:
    """The topics drawn so far, z [K, t] (with a lookahead: of the tokens drawn so far, in the document's order; all
    of z once every step is done)."""
    if state.lookahead is None:
        return state.z[:, : state.t]
    return state.z[:, state.lookahead.order[: state.t].sort().values]


def document_stream(seed: int, text: str) -> torch.Generator:
    """A CPU generator seeded by sha256(seed, text): per-document random streams for the peer evaluators."""
    digest = hashlib.sha256(f"{int(seed)}\x00{text}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


# padded entries of the stacked base tables of documents side by side (above: declined)
SIDE_BY_SIDE_BASE_ENTRIES = 2**26


@dataclass
class LDADocumentBatch:
    """The particles of several texts side by side (``protocol.DocumentBatchLM``): text d's K_d particles are the
    d-th segment of counts [Σ K_d, topics]; its tables are rows ``offset_d`` .. ``offset_d + T_d − 1`` of the stacked
    ones, in the order of its steps (each particle reads its text's row of step t, ``first + t``, clamped to its last
    row once the text has ended); texts in one tensor (the sample blocks of a document) share their tables. The
    topics drawn are not kept: the estimator reads only the weights."""

    sizes: list[int]
    lengths: list[int]
    alpha: torch.Tensor
    alpha_sum: float
    counts: torch.Tensor
    t: int
    temperature: float
    peek: bool
    log_phi: torch.Tensor  # [Σ T_d, topics] log Φ[k, x] of each step's token
    first: torch.Tensor  # [Σ K_d]
    last: torch.Tensor
    # with a lookahead: m^{(t)} and Φ [Σ T_d, topics]; per distinct text (index ``doc`` [Σ K_d]) base [D, T, T]
    # (T = max T_d, padded with ones), log(Σα + s) [D, T] and Φ by topic [D · topics, T] (padded with zeros);
    # S [Σ K_d, T]; log ψ
    ahead: torch.Tensor | None = None
    phi: torch.Tensor | None = None
    doc: torch.Tensor | None = None
    base: torch.Tensor | None = None
    log_norm: torch.Tensor | None = None
    phi_by_topic: torch.Tensor | None = None
    explained: torch.Tensor | None = None
    log_psi: torch.Tensor | None = None


# the side-by-side state (``StepwiseFromModule`` reorders it with ``reorder_documents``)
DocumentBatch = LDADocumentBatch


def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> LDADocumentBatch | None:
    """``init_particles`` of every text, their tables stacked (each text's as alone, once for the sample blocks of one
    document: ``side_by_side.same_texts``); None when the lookahead's base tables, padded to the longest text, would
    exceed ``SIDE_BY_SIDE_BASE_ENTRIES``. Φ's columns of every text are gathered at once and the lookaheads built
    together, their CVB0 fits in one loop (``lookahead.build_lookaheads``: each text's as alone, to the bit)."""
    texts, which = same_texts(xs)
    # each distinct text checked once (the sample blocks of a document share its tensor)
    texts = [model.check_x(x) for x in texts]
    lengths, T = [int(x.numel()) for x in texts], max(int(x.numel()) for x in texts)
    twisted = peek and model.lookahead == "cvb0"
    if twisted and len(texts) * T * T > SIDE_BY_SIDE_BASE_ENTRIES:
        return None
    alpha = model.alpha.to(torch.float64)
    # [Σ T_d, topics] over the distinct texts
    log_phi = model.log_phi_columns(torch.cat(texts))
    device, K = log_phi.device, sum(num_particles)
    first, last = document_rows(num_particles, lengths, device, which)
    tables = _lookaheads(log_phi, lengths, alpha) if twisted else None
    state = LDADocumentBatch(
        list(num_particles), [lengths[w] for w in which], alpha, float(alpha.sum()),
        log_phi.new_zeros(K, alpha.shape[0]), 0, float(temperature), bool(peek),
        tables[0] if twisted else log_phi, first, last,
    )  # fmt: skip
    if twisted:
        state.ahead, state.phi, padded = tables[1], tables[2], tables[3]
        state.doc = torch.tensor(which, device=device).repeat_interleave(
            torch.tensor(list(num_particles), device=device)
        )
        state.base, state.log_norm = padded.base, padded.log_norm
        state.phi_by_topic = padded.phi.transpose(1, 2).reshape(-1, T)
        state.explained, state.log_psi = log_phi.new_zeros(K, T), log_phi.new_zeros(K)
    return state


def _lookaheads(log_phi: torch.Tensor, lengths: list[int], alpha: torch.Tensor):
    """The lookaheads of the texts whose rows of log_phi [Σ T_d, topics] are consecutive, built together
    (``lookahead.build_lookaheads``): (log Φ, m and Φ of each text's steps in its order π, stacked [Σ T_d, topics];
    the padded ``LookaheadTables``)."""
    offsets, T = [0, *itertools.accumulate(lengths)], max(lengths)
    # [D, T]: each text's rows, padded with row 0 (ignored)
    rows = [[o + s if s < n else 0 for s in range(T)] for o, n in zip(offsets, lengths)]
    padded = build_lookaheads(log_phi[torch.tensor(rows, device=log_phi.device)], lengths, alpha)
    # the rows of the padded tables that are a text's steps, text after text
    steps = torch.tensor([d * T + s for d, n in enumerate(lengths) for s in range(n)], device=log_phi.device)
    flat = [
        table.reshape(-1, table.shape[-1]).index_select(0, steps)
        for table in (padded.log_phi, padded.ahead, padded.phi)
    ]
    return (*flat, padded)


def step_documents(
    model, state: LDADocumentBatch, t: int, generators
) -> tuple[LDADocumentBatch, torch.Tensor]:
    """Step t of every text with t < T_d, each particle drawing with the ``torch.rand(K_d)`` of its text's generator
    (nothing drawn for a text that has ended): (state, log p − log q_τ [Σ K_d]) as ``step`` computes them, to the
    bit."""
    if t != state.t:
        raise ValueError(f"smc_step_documents: expected step {state.t}, got t = {t}")
    device = state.counts.device
    u = lane_uniforms(state.sizes, state.lengths, generators, t, 1, device)[:, 0]
    row = torch.minimum(state.first + t, state.last)
    log_phi = state.log_phi[row]
    if state.ahead is not None:
        log_p, log_q, zt = _twisted_documents(state, t, row, log_phi, u)
    else:
        log_urn = torch.log(state.counts + state.alpha)
        zt, log_q = _draw_rows(log_urn + log_phi if state.peek else log_urn, state.temperature, u)
        log_p = log_urn.gather(1, zt[:, None]).squeeze(1) - math.log(t + state.alpha_sum)
        log_p = log_p + log_phi.gather(1, zt[:, None]).squeeze(1)
    state.counts.scatter_add_(1, zt.unsqueeze(1), state.counts.new_ones(zt.shape[0], 1))
    state.t = t + 1
    return state, log_p - log_q


def _draw_rows(
    logits: torch.Tensor, temperature: float, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tempered_draw`` with the given uniforms u [K]: (index [K], its log probability [K])."""
    log_p = torch.log_softmax(logits / temperature, -1)
    idx = inverse_cdf(log_p.exp(), u)
    return idx, log_p.gather(-1, idx[:, None]).squeeze(-1)


def _twisted_documents(state: LDADocumentBatch, t: int, row, log_phi, u):
    """``_twisted_step`` of every particle at its text's step t: (log p + log ψ_t − log ψ_{t−1}, log q_τ, z) [Σ K_d]."""
    if state.temperature != 1.0:
        logits = torch.log(state.counts + state.alpha + state.ahead[row]) + log_phi
        zt, log_q = _draw_rows(logits, state.temperature, u)
    else:
        w = (state.counts + (state.alpha + state.ahead[row])) * state.phi[row]
        zt = inverse_cdf(w, u)
        log_q = torch.log(w.gather(1, zt[:, None]).squeeze(1)) - torch.log(w.sum(1))
    log_urn = torch.log(state.counts.gather(1, zt[:, None]).squeeze(1) + state.alpha[zt])
    log_p = log_urn - math.log(t + state.alpha_sum) + log_phi.gather(1, zt[:, None]).squeeze(1)
    T = state.explained.shape[1]
    if t + 1 < T:
        topics = state.alpha.shape[0]
        state.explained[:, t + 1 :] += state.phi_by_topic[:, t + 1 :].index_select(0, state.doc * topics + zt)
        ahead = state.base[:, t, t + 1 :].index_select(0, state.doc) + state.explained[:, t + 1 :]
        log_psi = sum_ahead(torch.log(ahead)) - sum_ahead(state.log_norm[:, t + 1 :]).index_select(
            0, state.doc
        )
    else:
        log_psi = torch.zeros_like(log_p)
    log_p = log_p + log_psi - state.log_psi
    state.log_psi = log_psi
    return log_p, log_q, zt


def reorder_documents(state: LDADocumentBatch, ancestors: torch.Tensor) -> LDADocumentBatch:
    """Particle k takes the counts (and S, log ψ) of particle ancestors[k] (global indices)."""
    a = ancestors.to(state.counts.device)
    state.counts = state.counts.index_select(0, a)
    if state.ahead is not None:
        state.explained, state.log_psi = state.explained.index_select(0, a), state.log_psi.index_select(0, a)
    return state
