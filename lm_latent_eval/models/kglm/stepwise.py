"""The per-token kernel of the KGLM latent process: K particles advance one token at a time, without host syncs.

``HeadTables`` (latents.py) holds everything the latent heads compute from the parameters for one document and temperature
(type logits, new-entity log probabilities, parent logits per window slot, relation logits), once per call; each
token then only gathers from them. ``WindowState`` is what z_<t contributes to step t: the last ``cutoff`` mention
rows, which of them are parent candidates (owned rows with KG edges whose later slots do not repeat them: a
per-particle last-occurrence mask updated in O(cutoff) per token instead of a sort) and the previous mention.

``sample_step`` draws z_t ~ q_τ(z_t | x, z_<t) by inverse CDF from four uniforms per particle (type, new entity,
parent slot, edge), so a document consumes ``torch.rand(K, 4)`` per token in token order whether it is sampled
whole (``KGLMProposal.sample``) or step by step (``KGLM.smc_step``). ``score_step`` is log π(z_t | z_<t) of given
z_t under any heads (p's prior factors or q's); ``drawn_log_prob`` gives its numbers for the z_t that ``draw_step``
(``sample_step`` with a record of the draw) has just drawn, reusing what the draw found (pattern, rows, slot,
edges). The float32 dot products are computed exactly as the whole-document scorer computes them (same kernels and
shapes), so both paths give the same numbers.

On the CPU, where a host sync costs nothing, ``sample_step`` sends only the particles that drew "related" through
the parent and edge heads (``torch.nonzero``; the same numbers row by row); on other devices every particle goes
through them, masked, so the token loop never waits for the device.

``KGLMParticles`` and the functions after it are the model's stepwise interface for SMC (``KGLM.smc_init``,
``smc_step``, ``smc_reorder``, ``smc_latents``): each step draws z_t ~ q_τ(z_t | x, z_<t) for every particle and
returns the increment log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t) (float64 [K]): p's latent term by
``drawn_log_prob``, its word term gathered from the document's ``word_log_prob_table`` (every position and entity,
built in ``init_particles`` when there are no more entities than particles). Each increment is a proper
conditional (an entity is scored once, at its first token; a continuation scores its type and its word), so the T
increments sum to log p(x, z) − log q_τ(z | x); with the same generator seed the steps draw exactly the z of
``proposal.sample``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ...tensors import inverse_cdf, selects_rows
from ..side_by_side import document_rows, lane_uniforms
from .latents import (
    CONTINUING,
    NEW,
    NONE,
    RELATED,
    GraphTables,
    HeadTables,
    LatentHeads,
    canonical_relation,
    row_at,
)

# (position, entity) pairs of the per-document word table (KGLM.word_log_prob_table)
WORD_TABLE_LIMIT = 1 << 16


@dataclass
class WindowState:
    """What z_<t contributes to step t, for K particles: recent mention rows, parent candidates, previous mention."""

    # [K, C] embedding rows of the last C positions (0 = no mention), oldest first
    rows: torch.Tensor
    # [K, C] slot is a parent candidate (owned row with edges, last occurrence in the window)
    cand: torch.Tensor
    # [K] slots holding an owned row with edges (> 0 iff some slot is a candidate)
    num_ok: torch.Tensor
    prev_type: torch.Tensor  # [K]
    prev_ent: torch.Tensor  # [K]
    prev_par: torch.Tensor  # [K]

    @classmethod
    def empty(cls, K: int, cutoff: int, device) -> WindowState:
        zeros = torch.zeros(K, dtype=torch.long, device=device)
        return cls(
            torch.zeros(K, cutoff, dtype=torch.long, device=device),
            torch.zeros(K, cutoff, dtype=torch.bool, device=device),
            zeros,
            zeros,
            zeros - 1,
            zeros - 1,
        )

    def advance(
        self, tables: GraphTables, typ: torch.Tensor, ent: torch.Tensor, par: torch.Tensor
    ) -> WindowState:
        """The state after z_t = (typ, ent, par) [K]: shift in the new row, drop earlier slots holding it."""
        # entity -1 (no mention) -> row 0
        row = tables.row_of(ent)
        if self.rows.shape[1] == 0:
            return WindowState(self.rows, self.cand, self.num_ok, typ, ent, par)
        # row 0 has no edges
        new_ok = tables.row_has_edges[row]
        cand = torch.cat([self.cand[:, 1:] & (self.rows[:, 1:] != row.unsqueeze(1)), new_ok.unsqueeze(1)], 1)
        rows = torch.cat([self.rows[:, 1:], row.unsqueeze(1)], 1)
        num_ok = self.num_ok + new_ok.long() - tables.row_has_edges[self.rows[:, 0]].long()
        return WindowState(rows, cand, num_ok, typ, ent, par)

    def static_copy(self) -> WindowState:
        """The same state in tensors of its own (``empty`` shares one zero tensor between fields): static buffers
        that a CUDA graph's step overwrites in place (``cuda_graphs.copy_fields``)."""
        return WindowState(*(getattr(self, f).clone() for f in self.__dataclass_fields__))

    def select(self, index: torch.Tensor) -> WindowState:
        """Particle k takes the state of particle index[k]."""
        # index_select: a gather of whole rows, several times faster on the CPU than advanced indexing
        return WindowState(*(getattr(self, f).index_select(0, index) for f in self.__dataclass_fields__))


def _type_pattern(state: WindowState) -> torch.Tensor:
    """Allowed-type pattern of each particle [K] (index into HeadTables.type_lp's second axis)."""
    return HeadTables.type_pattern(state.num_ok > 0, state.prev_type != NONE)


def _parent_log_probs(
    tabs: HeadTables, rows: torch.Tensor, cand: torch.Tensor, t_vec: torch.Tensor
) -> torch.Tensor:
    """log q_τ(parent slot) [K, C] over candidate slots of windows rows [K, C] (candidates: cand [K, C]; -inf
    elsewhere; all -inf without candidates)."""
    plog = tabs.parent_logits(t_vec, rows).masked_fill(~cand, -math.inf) / tabs.tau
    plog = torch.log_softmax(plog, -1)
    return torch.where(cand, plog, -math.inf)


@dataclass
class RelatedDraw:
    """How ``draw_step`` drew the parent and the entity of the particles it sent through the parent and edge heads
    (the P that drew "related" on the CPU, every particle, masked, elsewhere): what scoring the same z_t under other
    heads reuses. Tensors [P] or [P, ...]."""

    # [P] indices of these particles among the K (None: all K, in order)
    sub: torch.Tensor | None
    # [P] the particle drew "related" (all True when ``sub`` selects them)
    mask: torch.Tensor
    t_vec: torch.Tensor  # [P]
    rows: torch.Tensor  # [P, C] window rows
    cand: torch.Tensor  # [P, C] parent candidates
    slot: torch.Tensor  # [P] the parent's window slot
    parent: torch.Tensor  # [P]
    tail: torch.Tensor  # [P] the entity
    first: torch.Tensor  # [P] the parent's first edge (its edges padded: first + j for j < D)
    count: torch.Tensor  # [P] the parent's edges: its first ``count`` slots
    relations: torch.Tensor  # [P, D] their relation embedding rows
    # [P, M] the slots (among the parent's edges) of the edges reaching the drawn entity, -1 after them
    reaching: torch.Tensor
    log_q: torch.Tensor  # [P] log q_τ(slot) + log q_τ(entity | parent), 0 where not related


@dataclass
class StepDraw:
    """z_t = (type, entity, parent) [K] drawn by ``draw_step`` with its log q_τ(z_t | x, z_<t) float64 [K], and what
    the draw found on the way (allowed-type pattern, the new entity's row, the related draw)."""

    typ: torch.Tensor
    ent: torch.Tensor
    par: torch.Tensor
    log_q: torch.Tensor
    t_vec: torch.Tensor  # [K]
    pattern: torch.Tensor  # [K] index into HeadTables.type_lp's second axis
    # [K] (None when no entity can be new): drew "new", and the row every particle draws for a new entity
    is_new: torch.Tensor | None
    new_row: torch.Tensor | None
    related: RelatedDraw | None


def sample_step(
    tabs: HeadTables,
    state: WindowState,
    t: int | torch.Tensor,
    u: torch.Tensor,
    positions: torch.Tensor | None = None,
):
    """z_t ~ q_τ(z_t | x, z_<t) for K particles from uniforms u [K, 4]: (type, entity, parent [K], log q_τ(z_t) [K]).
    t: an int, or a one-element LongTensor (the position buffer of a CUDA graph; the same numbers); ``positions``
    [K]: each particle's row of stacked tables (documents side by side, ``draw_step``)."""
    d = draw_step(tabs, state, t, u, positions)
    return d.typ, d.ent, d.par, d.log_q


def _per_particle(
    table: torch.Tensor, t: int | torch.Tensor, positions: torch.Tensor | None, index: torch.Tensor
):
    """Row t of a per-position table [T, n, ...] at each particle's ``index`` [K]: [K, ...]; with ``positions`` [K]
    (documents side by side), each particle's own row instead of t."""
    return row_at(table, t)[index] if positions is None else table[positions, index]


def draw_step(
    tabs: HeadTables,
    state: WindowState,
    t: int | torch.Tensor,
    u: torch.Tensor,
    positions: torch.Tensor | None = None,
) -> StepDraw:
    """``sample_step``'s draw, with the record of it that ``drawn_log_prob`` scores under other heads. ``positions``
    [K]: each particle's row of the (stacked) tables, for documents side by side (``step_documents``); the draws are
    those of each document's rows alone."""
    tables = tabs.tables
    K = u.shape[0]
    device = u.device
    if positions is not None:
        t_vec = positions
    else:
        t_vec = torch.full((K,), t, dtype=torch.long, device=device) if isinstance(t, int) else t.expand(K)
    pattern = _type_pattern(state)
    # [K]
    typ = inverse_cdf(None, u[:, 0], cumulative=_per_particle(tabs.type_cdf, t, positions, pattern))
    log_q = _per_particle(tabs.type_lp, t, positions, pattern).gather(1, typ.unsqueeze(1)).squeeze(1)
    none = torch.full((K,), -1, dtype=torch.long, device=device)
    ent, par, is_new, row, related = none, none, None, None, None
    if tabs.any_new:
        # [rows] each, or each particle's rows [K, rows] side by side (``init_documents`` keeps the table)
        nl, cdf = tabs.new_entity_draw_tables(t if positions is None else positions)
        row = inverse_cdf(None, u[:, 1], cumulative=cdf)
        is_new = typ == NEW
        ent = torch.where(is_new, tables.row_entity[row], ent)
        log_q = log_q + torch.where(
            is_new, nl[row] if nl.dim() == 1 else nl.gather(1, row[:, None])[:, 0], 0.0
        )
    if tabs.max_degree > 0 and state.rows.shape[1] > 0:
        is_rel = typ == RELATED
        # on the CPU a host sync costs nothing: only the particles that drew "related" go through the parent and
        # edge heads (row-wise the same numbers); elsewhere every particle does, masked, to keep the loop sync-free
        sub = torch.nonzero(is_rel, as_tuple=True)[0] if selects_rows(u.device) else None
        if sub is None or sub.numel():
            related = _draw_related(tabs, state, t_vec, is_rel, sub, u)
            if sub is None:
                ent = torch.where(is_rel, related.tail, ent)
                par = torch.where(is_rel, related.parent, par)
                log_q = log_q + related.log_q
            else:
                ent, par = ent.clone(), par.clone()
                ent[sub], par[sub] = related.tail, related.parent
                log_q = log_q.index_add(0, sub, related.log_q)
    cont = typ == CONTINUING
    ent = torch.where(cont, state.prev_ent, ent)
    par = torch.where(cont, state.prev_par, par)
    return StepDraw(typ, ent, par, log_q, t_vec, pattern, is_new, row, related)


def _draw_related(
    tabs: HeadTables,
    state: WindowState,
    t_vec: torch.Tensor,
    is_rel: torch.Tensor,
    sub: torch.Tensor | None,
    u: torch.Tensor,
) -> RelatedDraw:
    """Parent slot and entity of a "related" z_t for the particles ``sub`` (None: every particle, masked by is_rel)
    from their uniforms u[:, 2] and u[:, 3]: parent slot ~ q_τ(slot | window), then an edge of the parent ∝ q_τ."""
    tables = tabs.tables
    pick_rows = (lambda v: v) if sub is None else (lambda v: v[sub])
    rows = state.rows if sub is None else state.rows.index_select(0, sub)
    cand = state.cand if sub is None else state.cand.index_select(0, sub)
    rel_mask, t_rel = pick_rows(is_rel), pick_rows(t_vec)
    plog = _parent_log_probs(tabs, rows, cand, t_rel)
    slot = inverse_cdf(torch.where(rel_mask.unsqueeze(1), plog, 0.0).exp(), pick_rows(u[:, 2]))
    parent = tables.row_entity[rows.gather(1, slot.unsqueeze(1)).squeeze(1)]
    # the edge weights unmasked: the draw searches the cumulative sums of the parent's own edges' weights (a prefix
    # of the padded slots), the last of which is the normaliser; a particle that did not draw "related" draws from
    # a prefix of one slot: whatever it picks, its tail, parent and log q are not read (``rel_mask``)
    first, count, relations = tabs.parent_slots(parent, rel_mask)
    cdf = tabs.edge_weights(t_rel, first, relations).cumsum_(-1)
    total = cdf.gather(1, (count - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    pick = inverse_cdf(None, pick_rows(u[:, 3]), cumulative=cdf, total=total)
    norm = total.log()
    edge = first + pick
    tail = tables.edge_tail[edge].long()
    reaching = tables.edge_tail_slots[edge]
    # the logits of the parent's edges that reach the tail, from their relation rows (all to the same tail)
    at = reaching.clamp(min=0)
    reach = _reach(tabs.edge_logits(t_rel, first, relations.gather(1, at), None, tail.unsqueeze(1)), reaching)
    log_q = torch.where(rel_mask, plog.gather(1, slot.unsqueeze(1)).squeeze(1) + reach - norm, 0.0)
    return RelatedDraw(
        sub, rel_mask, t_rel, rows, cand, slot, parent, tail, first, count, relations, reaching, log_q
    )


def _reach(logits: torch.Tensor, reaching: torch.Tensor) -> torch.Tensor:
    """log Σ_{j ∈ reaching} exp(logit_j) [P]: the log-sum of the edge logits over the parent's edges that reach the
    entity, from the logits [P, M] of their slots reaching [P, M] (-1 after them; its logit is not read) instead of
    the D padded ones masked (whose other terms add exp(−inf) = 0: the same float sum wherever at most two edges
    reach the entity)."""
    return torch.where(reaching >= 0, logits, -math.inf).logsumexp(-1)


def drawn_log_prob(
    tabs: HeadTables, draw: StepDraw, t: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """log π(z_t | z_<t) under these heads (p's prior factors, in SMC) of the z_t that ``draw_step`` drew from q_τ:
    float64 [K], ``score_step``'s numbers for it, from what the draw found (allowed-type pattern, new entity row,
    parent slot and edges, the edges reaching the entity) instead of finding it again.

    A drawn z_t lies on q_τ's support, which is p's (the same masks): its structural checks all pass, and its parent
    is the one candidate slot holding the parent's row (so the log-sum over matching slots is that slot's term,
    exactly); a non-finite parent or edge term (a degenerate head) gives -inf, as there."""
    if positions is None:
        total = tabs.type_lp[t][draw.pattern, draw.typ]
    else:
        total = tabs.type_lp[positions, draw.pattern, draw.typ]
    if tabs.any_new:
        if positions is None:
            new_lp = tabs.new_entity_log_probs(draw.t_vec[:1])[0][draw.new_row]
        else:
            new_lp = tabs.new_entity_lp[positions, draw.new_row]
        total = total + torch.where(draw.is_new, new_lp, 0.0)
    rel = draw.related
    if rel is not None:
        parent_lp = (
            _parent_log_probs(tabs, rel.rows, rel.cand, rel.t_vec).gather(1, rel.slot.unsqueeze(1)).squeeze(1)
        )
        elog = tabs.edge_logits(rel.t_vec, rel.first, rel.relations, tabs.valid_slots(rel.count))
        rel_lp = _reach(elog.gather(1, rel.reaching.clamp(min=0)), rel.reaching) - elog.logsumexp(-1)
        term = torch.nan_to_num(parent_lp + rel_lp, nan=-math.inf, posinf=-math.inf, neginf=-math.inf)
        total = (
            total + torch.where(rel.mask, term, 0.0) if rel.sub is None else total.index_add(0, rel.sub, term)
        )
    return total


def score_step(
    tabs: HeadTables,
    state: WindowState,
    t: int,
    typ: torch.Tensor,
    ent: torch.Tensor,
    par: torch.Tensor,
) -> torch.Tensor:
    """log π(z_t | z_<t) of given z_t (type, entity, parent [K]) under these heads: float64 [K], -inf off the support.

    The parent and edge terms count only for particles that drew "related"; on the CPU only those go through the
    parent and edge heads (as in ``sample_step``: row by row the same numbers), elsewhere every particle, masked."""
    tables = tabs.tables
    K = typ.shape[0]
    device = typ.device
    t_vec = torch.full((K,), t, dtype=torch.long, device=device) if isinstance(t, int) else t.expand(K)
    total = tabs.type_lp[t][_type_pattern(state), typ]
    is_new, is_rel, is_cont = typ == NEW, typ == RELATED, typ == CONTINUING
    valid = torch.where(typ == NONE, (ent == -1) & (par == -1), True)
    valid &= ~is_new | (tables.owns_row(ent) & (par == -1))
    valid &= ~is_cont | ((ent == state.prev_ent) & (par == state.prev_par))
    if tabs.any_new:
        nl = tabs.new_entity_log_probs(t_vec[:1])[0]
        total = total + torch.where(is_new, nl[tables.entity_row[ent.clamp(min=0)]], 0.0)
    if state.rows.shape[1] > 0:
        sub = torch.nonzero(is_rel, as_tuple=True)[0] if selects_rows(device) else None
        if sub is None:
            rel_term, ok = _related_log_prob(tabs, state, t_vec, is_rel, ent, par)
            total = total + rel_term
            valid &= ~is_rel | ok
        elif sub.numel():
            rel_term, ok = _related_log_prob(
                tabs, state.select(sub), t_vec[sub], is_rel[sub], ent[sub], par[sub]
            )
            total = total.index_add(0, sub, rel_term)
            valid = valid.index_put((sub,), valid[sub] & ok)
    else:
        valid &= ~is_rel
    return total.masked_fill(~valid, -math.inf)


def _related_log_prob(
    tabs: HeadTables,
    state: WindowState,
    t_vec: torch.Tensor,
    is_rel: torch.Tensor,
    ent: torch.Tensor,
    par: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(parent slot) + log π(edge to ent | parent) of a "related" z_t [P] (0 elsewhere) and whether it lies on the
    support [P]: the parent must be a candidate of the window with an edge to the entity."""
    tables = tabs.tables
    plog = _parent_log_probs(tabs, state.rows, state.cand, t_vec)
    prow = tables.row_of(par)
    hit = (state.rows == prow.unsqueeze(1)) & state.cand
    ok = is_rel & hit.any(-1) & tables.owns_row(par) & (ent >= 0)
    parent_lp = plog.masked_fill(~hit, -math.inf).logsumexp(-1)
    if tabs.max_degree > 0:
        rel_lp = tabs.tail_log_prob(t_vec, par, ent, ok)
    else:
        rel_lp = torch.full_like(parent_lp, -math.inf)
    ok = ok & torch.isfinite(rel_lp) & torch.isfinite(parent_lp)
    return torch.where(ok, parent_lp + rel_lp, 0.0), ok


@dataclass
class KGLMParticles:
    """State of K particles of one document for ``KGLM.smc_step``: head tables of q_τ and p, window state, z so far."""

    x: torch.Tensor  # [T]
    q: HeadTables | None
    p: HeadTables | None
    # KGLM.alias_tables()
    alias: tuple | None
    # KGLM.generate_table() of p's states
    gen: tuple | None
    # KGLM.word_log_prob_table() [T, N + 1] where it pays (N + 1 ≤ K, a bounded table), else None (per step)
    words: torch.Tensor | None
    window: WindowState
    # mention_type / entity / parent: LongTensor [K, T]
    z: dict


@torch.no_grad()
def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> KGLMParticles:
    """K empty particles for document x [T]: q_τ's and p's head tables, the window state and the z drawn so far."""
    x = model._check_x(x)
    K, T, device = int(num_particles), x.numel(), x.device
    q_tabs = p_tabs = alias = gen = words = None
    if T:
        q_tabs = model.proposal.head_tables(x, temperature, peek)
        p_tabs = model.head_tables(x)
        alias = model.alias_tables()
        N = model.tables.num_entities
        gen, words = model.step_word_tables(x, alias, N + 1 <= K and T * (N + 1) <= WORD_TABLE_LIMIT)
    window = WindowState.empty(K, model.cutoff, device)
    return KGLMParticles(x, q_tabs, p_tabs, alias, gen, words, window, _undrawn(K, T, device))


def _undrawn(K: int, T: int, device) -> dict:
    """z of K particles before any step: mention_type / entity / parent, LongTensor [K, T] each (none drawn)."""
    return {
        k: torch.full((K, T), v, dtype=torch.long, device=device)
        for k, v in (("mention_type", NONE), ("entity", -1), ("parent", -1))
    }


@torch.no_grad()
def step_particles(
    model, state: KGLMParticles, t: int, generator: torch.Generator | None
) -> tuple[KGLMParticles, torch.Tensor]:
    """Draw z_t ~ q_τ(z_t | x, z_<t) for every particle: (state, log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t)
    float64 [K]). Consumes ``torch.rand(K, 4)`` of ``generator``, as ``proposal.sample`` does at token t."""
    K = state.window.prev_type.shape[0]
    u = torch.rand(K, 4, generator=generator, device=state.x.device, dtype=torch.float64)
    draw = draw_step(state.q, state.window, t, u)
    typ, ent, par = draw.typ, draw.ent, draw.par
    log_prior = drawn_log_prob(state.p, draw, t)
    if state.words is not None:
        log_word = state.words[t].index_select(0, ent + 1)
    else:
        gen_t = None if state.gen is None else tuple(v[t] for v in state.gen)
        log_word = model.word_log_prob_step(state.p.heads.h_type[t], state.x[t], ent, state.alias, gen_t)
    state.window = state.window.advance(model.tables, typ, ent, par)
    state.z["mention_type"][:, t], state.z["entity"][:, t], state.z["parent"][:, t] = typ, ent, par
    return state, log_prior + log_word - draw.log_q


def reorder_particles(state: KGLMParticles, ancestors: torch.Tensor) -> KGLMParticles:
    """Particle k takes the history (window state and z so far) of particle ancestors[k] (LongTensor [K])."""
    index = ancestors.to(state.x.device)
    return dataclasses.replace(
        state, window=state.window.select(index), z={k: v.index_select(0, index) for k, v in state.z.items()}
    )


def particle_latents(model, state: KGLMParticles) -> dict:
    """The configurations drawn so far, as ``log_joint`` takes them: dict of LongTensor [K, T] (undrawn: none)."""
    z = {k: v.clone() for k, v in state.z.items()}
    z["relation"] = canonical_relation(model.tables, z["parent"], z["entity"])
    return z


@dataclass
class KGLMDocumentBatch(KGLMParticles):
    """The particles of several documents side by side (``protocol.DocumentBatchLM``): document d's K_d particles are
    the d-th segment, its tables rows ``offset_d`` .. ``offset_d + T_d − 1`` of the stacked ones (x, q's and p's head
    tables, the word table), z [Σ K_d, max T_d]."""

    sizes: list[int] = dataclasses.field(default_factory=list)
    lengths: list[int] = dataclasses.field(default_factory=list)
    # [Σ K_d] each particle's document's first row and last row (offset_d + T_d − 1) of the stacked tables
    first: torch.Tensor | None = None
    last: torch.Tensor | None = None


def stack_heads(heads: list[LatentHeads]) -> LatentHeads:
    """Several documents' encoder outputs and evidence in one, positions after positions (the parameters shared)."""

    def cat(name):
        parts = [getattr(h, name) for h in heads]
        return None if parts[0] is None else torch.cat(parts)

    names = ("h_type", "h_head", "h_rel", "new_entity_scores", "parent_scores", "tail_scores")
    return dataclasses.replace(heads[0], **{n: cat(n) for n in names})


def stack_tables(tables: list[HeadTables]) -> HeadTables:
    """Several documents' head tables (one temperature) as one, positions after positions: row by row the same
    numbers, so a particle reading row offset_d + t reads its document's row t."""
    first = tables[0]
    stacked = HeadTables(
        stack_heads([t.heads for t in tables]),
        first.tables,
        first.tau,
        torch.cat([t.type_logits for t in tables]),
        torch.cat([t.type_lp for t in tables]),
        first.any_new,
        None if first.new_entity_lp is None else torch.cat([t.new_entity_lp for t in tables]),
        all(t.lane_fits for t in tables),
        # the graph's choice for every document that stacks (its new-entity tables, which stacking needs, take more)
        first.row_table,
        torch.cat([t.relation_logits for t in tables]),
        first.max_degree,
    )
    if stacked.row_table:
        # each document's own table (a product over all the documents' positions could round differently)
        stacked._parent_table = torch.cat([t.parent_table for t in tables])
    return stacked


@torch.no_grad()
def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> KGLMDocumentBatch | None:
    """``init_particles`` of every document, its tables stacked; None where a document's tables would not be read by
    position (its word table or new-entity table not built, as for a large graph: such documents run one at a
    time)."""
    xs = [model._check_x(x) for x in xs]
    N, alias = model.tables.num_entities, model.alias_tables()
    q, p, words = [], [], []
    # document by document: its word table reads p's head tables just built (the per-document caches are small)
    for x in xs:
        q.append(model.proposal.head_tables(x, temperature, peek))
        p.append(model.head_tables(x))
        words.append(model.step_word_tables(x, alias, x.numel() * (N + 1) <= WORD_TABLE_LIMIT)[1])
    if any(w is None for w in words) or any(t.any_new and t.new_entity_lp is None for t in q + p):
        return None
    lengths = [int(x.numel()) for x in xs]
    device, K = xs[0].device, sum(num_particles)
    first, last = document_rows(num_particles, lengths, device)
    return KGLMDocumentBatch(
        torch.cat(list(xs)),
        stack_tables(q),
        stack_tables(p),
        alias,
        None,
        torch.cat(words),
        WindowState.empty(K, model.cutoff, device),
        _undrawn(K, max(lengths), device),
        list(num_particles),
        lengths,
        first,
        last,
    )


@torch.no_grad()
def step_documents(
    model, state: KGLMDocumentBatch, t: int, generators
) -> tuple[KGLMDocumentBatch, torch.Tensor]:
    """``step_particles`` of every document with t < T_d, each drawing its ``torch.rand(K_d, 4)`` from its own
    generator (a document that has ended draws nothing: its particles read its last row and their increments are
    ignored)."""
    u = lane_uniforms(state.sizes, state.lengths, generators, t, 4, state.x.device)
    positions = torch.minimum(state.first + t, state.last)
    draw = draw_step(state.q, state.window, t, u, positions)
    log_prior = drawn_log_prob(state.p, draw, t, positions)
    log_word = state.words[positions, draw.ent + 1]
    state.window = state.window.advance(model.tables, draw.typ, draw.ent, draw.par)
    state.z["mention_type"][:, t], state.z["entity"][:, t], state.z["parent"][:, t] = (
        draw.typ,
        draw.ent,
        draw.par,
    )
    return state, log_prior + log_word - draw.log_q


@torch.no_grad()
def sample_documents(proposal, xs, num_samples, temperature: float, peek: bool, generators) -> list | None:
    """``KGLMProposal.sample`` of several documents side by side: per document (z, log q_τ(z | x)), the draws and
    float64 sums of ``sample`` alone with its generator (the same uniforms, read from each document's rows of the
    stacked tables); None where a document's new-entity table is not built (a large graph)."""
    tabs_list = [proposal.head_tables(x, temperature, peek) for x in xs]
    if any(t.any_new and t.new_entity_lp is None for t in tabs_list):
        return None
    tabs, device = stack_tables(tabs_list), xs[0].device
    lengths, K = [int(x.numel()) for x in xs], sum(num_samples)
    first, last = document_rows(num_samples, lengths, device)
    z = proposal._empty_latents(K, max(lengths), device)
    log_q = torch.zeros(K, dtype=torch.float64, device=device)
    state = WindowState.empty(K, proposal.cutoff, device)
    length = last - first + 1
    for t in range(max(lengths)):
        u = lane_uniforms(num_samples, lengths, generators, t, 4, device)
        typ, ent, par, lq = sample_step(tabs, state, t, u, torch.minimum(first + t, last))
        log_q += torch.where(length > t, lq, 0.0)
        z["mention_type"][:, t], z["entity"][:, t], z["parent"][:, t] = typ, ent, par
        state = state.advance(proposal.tables, typ, ent, par)
    out, start = [], 0
    for k, n in zip(num_samples, lengths):
        part = {key: v[start : start + k, :n].clone() for key, v in z.items() if key != "relation"}
        part["relation"] = canonical_relation(proposal.tables, part["parent"], part["entity"])
        out.append((part, log_q[start : start + k].clone()))
        start += k
    return out
