"""EntityNLM one token at a time, for sequential Monte Carlo: K particles advance together and are reordered.

Token t of particle k draws z_t ~ q_τ(z_t | x, z_<t) (``draw_step``'s law: a mention's type, entity and length are
drawn at its first token; its later tokens are forced, q = 1) and scores it under p (``score_step`` and
``word_step``), so that the increment

    log w_t = log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t)

is a proper conditional and Σ_t log w_t = log p(x, z) − log q_τ(z | x) for the drawn z. The same generator gives
the same z as ``proposal.sample`` (one uniform [K, 3] per token, consumed as ``draw_step`` consumes it); encoders
run once per document (cached).

On the CPU the particles are stored once per distinct history (``EntityNLMParticles.history``), as the IS scorer
``log_joint`` scores each distinct z once: p's and q's memories, and everything computed from them, depend on z_<t
only, and SMC's particles share few histories (20 to 85 of 1,000 on the bundled test documents, averaged over
tokens). A step computes q's entity law once per history whose particles start a mention, and its length law once per
(history, entity) drawn; each particle draws with its own uniforms; the distinct (history, z_t) pairs become the new
histories, and their memory updates, p's factors and the word softmax run once each. Resampling rewrites the [K]
index only. A value computed on fewer rows rounds like ``log_joint``'s, within float32 rounding of the one-row-per-
particle numbers (tests/models/entitynlm/test_entitynlm_stepwise.py). On an accelerator, where finding the distinct
rows would synchronise with the host, every particle keeps its own row and nothing in a step synchronises.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from ...tensors import first_of_each, inverse_cdf, selects_rows
from ..side_by_side import document_rows, lane_uniforms
from .drawing import draw_step, draw_step_with
from .latents import LATENT_KEYS, EntityMemory
from .scoring import mention_context, score_step


class TokenInputs(NamedTuple):
    """What step t reads besides the particles, views of the document's tensors taken once in ``init_particles``."""

    q_type: torch.Tensor  # [1, 2] log q_τ(R_t | ·)
    # [1, D] the proposal's labelling state (g_t peeking, g_{t−1} not)
    q_label: torch.Tensor
    q_update: torch.Tensor  # [1, D] g_t
    p_type: torch.Tensor  # [1, 2] log p(R_t | h_{t−1})
    # [1, D] h_{t−1}: p labels z_t and generates x_t from it
    p_label: torch.Tensor
    p_update: torch.Tensor  # [1, D] h_t
    x: torch.Tensor  # [1] x_t


@dataclass
class EntityNLMParticles:
    """K particles after tokens 0..t−1 of one document x [T] (per-row tensors lead with H, per-particle ones with K)."""

    x: torch.Tensor  # [T]
    temperature: float
    peek: bool
    # per token
    inputs: list[TokenInputs]
    # per row: one row per distinct history z_<t where ``history`` is set, else one per particle
    p_memory: EntityMemory  # [H, ...]
    q_memory: EntityMemory  # [H, ...]
    # [H, D] entity embedding the previous token was generated with
    context: torch.Tensor
    # [K] particle k's row (None: row k; the accelerator's layout)
    history: torch.Tensor | None
    # per drawn token t: z_t = (R_t, E_t, L_t) [3, K] of the particles as they were after step t, and the ancestors
    # [K] of a resampling after it (None: none); ``particle_latents`` follows them back (resampling copies no history)
    drawn: tuple[torch.Tensor, ...] = ()
    ancestors: tuple[torch.Tensor | None, ...] = ()
    # next token
    t: int = 0

    @property
    def num_particles(self) -> int:
        """K."""
        return self.context.shape[0] if self.history is None else self.history.shape[0]


@torch.inference_mode()
def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> EntityNLMParticles:
    """K empty particles for document x [T] (encoders run here, once, without grad as in ``proposal.sample``): one
    history on the CPU, K rows elsewhere."""
    x = model._check_x(x)
    K = int(num_particles)
    heads_q, whole = document_inputs(model, x, temperature, peek)
    device = x.device
    history = torch.zeros(K, dtype=torch.long, device=device) if selects_rows(device) else None
    rows = K if history is None else 1
    return EntityNLMParticles(
        x=x,
        temperature=float(temperature),
        peek=bool(peek),
        # token t's views [1, ...] of the document's inputs
        inputs=[TokenInputs(*(v[t : t + 1] for v in whole)) for t in range(x.numel())],
        p_memory=model.heads.initial_memory(rows, device),
        q_memory=heads_q.initial_memory(rows, device),
        context=whole.p_label.new_zeros(rows, whole.p_label.shape[-1]),
        history=history,
    )


def document_inputs(model, x: torch.Tensor, temperature: float, peek: bool):
    """(q's heads for ``peek``, what every step reads besides the particles, ``TokenInputs`` of [T, ...] tensors): the
    encoders run once (without grad, as in ``proposal.sample``)."""
    # [1, T + 1, D]
    states_p = model.encode(x).unsqueeze(0)
    heads_q, q_label, q_update = model.proposal.views(model.proposal.encode(x).unsqueeze(0), peek)
    whole = TokenInputs(
        heads_q.type_log_probs(q_label[0], float(temperature)),
        q_label[0],
        q_update[0],
        model.heads.type_log_probs(states_p[:, :-1])[0],
        states_p[0, :-1],
        states_p[0, 1:],
        x,
    )
    return heads_q, whole


def step_particles(
    model, state: EntityNLMParticles, t: int, generator: torch.Generator | None
) -> tuple[EntityNLMParticles, torch.Tensor]:
    """Draw z_t for every particle and score it: (state after token t, log w_t float64 [K]).

    The state passed in is consumed (its memories may be updated in place, under inference mode)."""
    if t != state.t or not 0 <= t < state.x.numel():
        raise ValueError(
            f"smc_step: expected token t = {state.t} of a {state.x.numel()}-token document, got t = {t}"
        )
    with torch.inference_mode():
        step = _step if state.history is None else _distinct_step
        state, log_w = step(model, state, t, generator)
    return state, log_w.clone()


def _step(model, state: EntityNLMParticles, t: int, generator) -> tuple[EntityNLMParticles, torch.Tensor]:
    """One row per particle (the accelerator's layout): q's draw, then p's score of it, on all K rows."""
    heads_q = model.proposal.heads if state.peek else model.proposal.nopeek_heads
    now = state.inputs[t]
    q_memory, (r, e, ell), log_q = draw_step(
        heads_q, state.q_memory, now.q_type, now.q_label, now.q_update, t, state.temperature, generator
    )
    return _scored(model, state, now, t, q_memory, (r, e, ell), log_q)


def _scored(
    model, state, now: TokenInputs, t: int, q_memory, z_t, log_q
) -> tuple[EntityNLMParticles, torch.Tensor]:
    """p's score of the z_t = (R_t, E_t, L_t) [K] that q drew (every row), the state after token t, log w_t."""
    r, e, ell = z_t
    # z_t from q is on p's support
    p_memory, log_p, entity_emb = score_step(
        model.heads, state.p_memory, now.p_type, now.p_label, now.p_update, t, r, e, ell
    )
    context = mention_context(state.context, entity_emb, r)
    log_p = log_p + model.word_step(now.p_label, context, now.x)
    return _after(state, p_memory, q_memory, context, state.history, torch.stack([r, e, ell])), log_p - log_q


def _distinct_step(
    model, state: EntityNLMParticles, t: int, generator
) -> tuple[EntityNLMParticles, torch.Tensor]:
    """One row per distinct history (module docstring): q's laws per history, a draw per particle from its
    history's cumulative rows with the uniforms ``draw_step`` would give it, then p once per new history."""
    heads_q = model.proposal.heads if state.peek else model.proposal.nopeek_heads
    now, memory, rows = state.inputs[t], state.q_memory, state.history
    K, M, L = rows.shape[0], heads_q.max_entities, heads_q.max_mention_length
    u = torch.rand((K, 3), generator=generator, device=rows.device, dtype=torch.float64)
    decide = (memory.prev_length == 1).index_select(0, rows)
    r = torch.where(decide, inverse_cdf(now.q_type[0].double().exp(), u[:, 0]), 1)
    log_q = torch.where(decide, now.q_type[0].index_select(0, r), 0.0).double()
    # the particles starting a mention
    at = (decide & (r == 1)).nonzero().squeeze(1)
    e_at, l_at, log_q_at = _start_mentions(
        heads_q, memory, now.q_label, t, state.temperature, rows.index_select(0, at), u.index_select(0, at)
    )
    log_q = log_q.index_add_(0, at, log_q_at)
    e = torch.where(decide, -1, memory.prev_entity.index_select(0, rows)).index_copy_(0, at, e_at)
    ell = torch.where(decide, 1, memory.prev_length.index_select(0, rows) - 1).index_copy_(0, at, l_at + 1)
    # the new histories: distinct (history, z_t), z_t coded 0 when forced (within a mention), 1 for no mention
    z_code = torch.where(decide, 1, 0).index_copy_(0, at, 2 + e_at * L + l_at)
    new, history = torch.unique(rows * (2 + M * L) + z_code, return_inverse=True)
    first = first_of_each(history, new.shape[0])
    parent = rows.index_select(0, first)
    r_new, e_new, ell_new = (v.index_select(0, first) for v in (r, e, ell))
    q_memory = heads_q.update(memory.select(parent), e_new, r_new == 1, now.q_update, t, inplace=True)
    q_memory = replace(q_memory, prev_entity=e_new, prev_length=ell_new)
    p_memory, log_p, entity_emb = score_step(
        model.heads,
        state.p_memory.select(parent),
        now.p_type,
        now.p_label,
        now.p_update,
        t,
        r_new,
        e_new,
        ell_new,
    )
    context = mention_context(state.context.index_select(0, parent), entity_emb, r_new)
    log_p = (log_p + model.word_step(now.p_label, context, now.x)).index_select(0, history)
    return _after(state, p_memory, q_memory, context, history, torch.stack([r, e, ell])), log_p - log_q


def _start_mentions(heads, memory: EntityMemory, h, t: int, temperature: float, rows, u):
    """E_t and L_t − 1 of n particles starting a mention from the histories rows [n] of ``memory``, each drawn by
    inverse CDF with its uniforms u [n, 3] (columns 1 and 2, as ``draw_step``), the entity law computed once per
    history and the length law once per (history, entity) drawn: (E_t [n], L_t − 1 [n], their log q_τ float64 [n])."""
    if rows.numel() == 0:
        return rows, rows, u[:, 0]
    M, L = heads.max_entities, heads.max_mention_length
    starting, of_at = torch.unique(rows, return_inverse=True)
    lp_ent = heads.entity_log_probs(h, memory, t, temperature, starting)
    e = inverse_cdf(None, u[:, 1], cumulative=lp_ent.double().exp().cumsum(-1).index_select(0, of_at))
    pairs, of_pair = torch.unique(of_at * M + e, return_inverse=True)
    lp_len = heads.length_log_probs(
        h, memory.row(pairs % M, starting.index_select(0, pairs // M)), temperature
    )
    ell = inverse_cdf(None, u[:, 2], cumulative=lp_len.double().exp().cumsum(-1).index_select(0, of_pair))
    log_q = lp_ent.view(-1).index_select(0, of_at * M + e) + lp_len.view(-1).index_select(
        0, of_pair * L + ell
    )
    return e, ell, log_q.double()


def _after(state, p_memory, q_memory, context, history, z_t) -> EntityNLMParticles:
    """``state`` after token t: the new rows, the particles' rows, and z_t [3, K] recorded."""
    return replace(
        state,
        p_memory=p_memory,
        q_memory=q_memory,
        context=context,
        history=history,
        drawn=(*state.drawn, z_t),
        ancestors=(*state.ancestors, None),
        t=state.t + 1,
    )


def reorder_particles(state: EntityNLMParticles, ancestors: torch.Tensor) -> EntityNLMParticles:
    """Particle k takes the whole history of particle ancestors[k] (after resampling): its row index only where the
    rows are distinct histories, else a copy of the rows."""
    a = ancestors.to(state.context.device)
    if state.history is not None:
        moved = {"history": state.history.index_select(0, a)}
    else:
        moved = {
            "p_memory": state.p_memory.select(a),
            "q_memory": state.q_memory.select(a),
            "context": state.context.index_select(0, a),
        }
    return replace(state, **moved, ancestors=_after_resampling(state.ancestors, a))


def _after_resampling(ancestors: tuple, a: torch.Tensor) -> tuple:
    """The ancestors after the last drawn token once particle k takes the history of particle a[k] (composed with a
    resampling there already: particle k then descends from that one's ancestor a[k])."""
    if not ancestors:
        return ancestors
    last = ancestors[-1]
    return (*ancestors[:-1], a if last is None else last.index_select(0, a))


def particle_latents(model, state: EntityNLMParticles) -> dict:
    """The configurations drawn so far, as ``log_joint`` and ``proposal.sample`` take them: dict of [K, t]."""
    K = state.num_particles
    # particle k's index among the particles after step t, from the last token back
    index, columns = None, []
    for z_t, ancestors in zip(reversed(state.drawn), reversed(state.ancestors)):
        if ancestors is not None:
            index = ancestors if index is None else ancestors.index_select(0, index)
        columns.append(z_t if index is None else z_t.index_select(1, index))
    latents = (
        torch.stack(columns[::-1], 2)
        if columns
        else torch.zeros(len(LATENT_KEYS), K, 0, dtype=torch.long, device=state.context.device)
    )
    return {k: latents[i].clone() for i, k in enumerate(LATENT_KEYS)}


@dataclass
class EntityNLMDocumentBatch(EntityNLMParticles):
    """The particles of several documents side by side (``protocol.DocumentBatchLM``), one row per particle (the
    accelerator's layout): document d's K_d particles are the d-th segment; ``stacked`` holds every document's
    per-token inputs, positions after positions ([Σ T_d, ...] each), read by each particle at its own row."""

    stacked: TokenInputs | None = None
    sizes: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    # [Σ K_d] each particle's document's first and last row of ``stacked``
    first: torch.Tensor | None = None
    last: torch.Tensor | None = None


@torch.inference_mode()
def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> EntityNLMDocumentBatch | None:
    """``init_particles`` of every document with one row per particle, their per-token inputs stacked; None on the
    CPU, whose steps keep one row per distinct history of a document (fewer rows than particles: documents run one
    at a time there)."""
    xs = [model._check_x(x) for x in xs]
    device = xs[0].device
    if selects_rows(device):
        return None
    heads_q, wholes = None, []
    for x in xs:
        heads_q, whole = document_inputs(model, x, temperature, peek)
        wholes.append(whole)
    lengths = [int(x.numel()) for x in xs]
    K = sum(num_particles)
    first, last = document_rows(num_particles, lengths, device)
    return EntityNLMDocumentBatch(
        x=torch.cat(xs),
        temperature=float(temperature),
        peek=bool(peek),
        inputs=[],
        p_memory=model.heads.initial_memory(K, device),
        q_memory=heads_q.initial_memory(K, device),
        context=wholes[0].p_label.new_zeros(K, wholes[0].p_label.shape[-1]),
        history=None,
        # every document's inputs, positions after positions
        stacked=TokenInputs(*(torch.cat(parts) for parts in zip(*wholes))),
        sizes=list(num_particles),
        lengths=lengths,
        first=first,
        last=last,
    )


def step_documents(
    model, state: EntityNLMDocumentBatch, t: int, generators
) -> tuple[EntityNLMDocumentBatch, torch.Tensor]:
    """Step t of every document with t < T_d, each particle reading its document's inputs at token t and drawing
    with the ``torch.rand(K_d, 3)`` of its document's generator (a document that has ended draws nothing)."""
    if t != state.t:
        raise ValueError(f"smc_step_documents: expected step {state.t}, got t = {t}")
    with torch.inference_mode():
        device = state.context.device
        u = lane_uniforms(state.sizes, state.lengths, generators, t, 3, device)
        positions = torch.minimum(state.first + t, state.last)
        now = TokenInputs(*(v.index_select(0, positions) for v in state.stacked))
        heads_q = model.proposal.heads if state.peek else model.proposal.nopeek_heads
        q_memory, z_t, log_q = draw_step_with(
            heads_q, state.q_memory, now.q_type, now.q_label, now.q_update, t, state.temperature, u, True
        )
        state, log_w = _scored(model, state, now, t, q_memory, z_t, log_q)
    return state, log_w.clone()
