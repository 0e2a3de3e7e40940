"""The KGLM latent process z_t = (mention type, parent, entity) and its log probability, shared by p and q.

Encoding of z (a dict of LongTensor [K, T]; position t labels token x_t):

- ``mention_type``: 0 = no mention, 1 = new entity, 2 = related entity (reached from a parent through a KG edge),
  3 = continuation of the mention at t-1 (same entity, parent and relation);
- ``entity``: knowledge-graph id of the mentioned entity, -1 when none;
- ``parent``: knowledge-graph id of the parent of a related mention, -1 otherwise;
- ``relation``: knowledge-graph id of *a* relation parent -> entity (the first such edge), -1 otherwise. It is a
  label: p and q sum over every edge parent -> entity (as the original KGLM does), so it never changes a number.

Per-step distributions, given the encoder outputs h_type [T, D], h_head [T, De], h_rel [T, De] and temperature τ
(every logit divided by τ; τ = 1 for the generative model):

- p(type_t) = softmax(W_type h_type_t / τ) over the *allowed* types: new needs an entity that can be new,
  related needs a parent candidate, continuing needs a mention at t-1;
- p(entity | new) = softmax((E_r · (h_head + h_rel)_t + b_r) / τ) over embedding rows r that own an entity
  (the new-entity head is tied to the entity embeddings E);
- p(parent | related) = softmax(E_parent · h_head_t / τ) over the distinct entities mentioned in the last
  ``cutoff`` tokens that have at least one KG edge;
- p(entity | parent) = Σ_{edges (parent, r, entity)} softmax_over_edges_of_parent(R_r · h_rel_t / τ).

Entities map to embedding rows through ``entity_row`` (row 0 = no entity). Several KG entities may share a row
(the original's ``@@UNKNOWN@@`` entity row); only the row's owner (``row_entity``) can be a new entity or a
parent, and mentions of a non-owner enter the recent-entity window as their row's owner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..memory_plan import DEFAULT_MEMORY_BUDGET, rows_per_chunk
from .graph import KnowledgeGraph

NONE, NEW, RELATED, CONTINUING = 0, 1, 2, 3
NUM_TYPES = 4
LATENT_KEYS = ("mention_type", "entity", "parent", "relation")


class GraphTables(nn.Module):
    """Tensor form of a KnowledgeGraph: embedding-row maps and edges in CSR order (buffers, so they follow .to())."""

    def __init__(
        self,
        graph: KnowledgeGraph,
        entity_rows: list[int] | None = None,
        relation_rows: list[int] | None = None,
    ):
        super().__init__()
        n, r = graph.num_entities, graph.num_relations
        ent_row = (
            torch.arange(1, n + 1) if entity_rows is None else torch.tensor(entity_rows, dtype=torch.long)
        )
        rel_row = (
            torch.arange(1, r + 1) if relation_rows is None else torch.tensor(relation_rows, dtype=torch.long)
        )
        if ent_row.shape != (n,) or (n and int(ent_row.min()) < 1):
            raise ValueError(f"entity_rows must give a row >= 1 for each of the {n} entities")
        if rel_row.shape != (r,) or (r and int(rel_row.min()) < 0):
            raise ValueError(f"relation_rows must give a row >= 0 for each of the {r} relations")
        num_rows = int(ent_row.max()) + 1 if n else 1
        row_entity = torch.full((num_rows,), -1, dtype=torch.long)
        # the owner of a row is the first entity mapped to it
        for e in range(n - 1, -1, -1):
            row_entity[ent_row[e]] = e
        offsets = [0]
        rels, tails = [], []
        for e in range(n):
            for rel, tail in graph.out_edges(e):
                rels.append(rel)
                tails.append(tail)
            offsets.append(len(rels))
        self.register_buffer("entity_row", ent_row, persistent=False)
        self.register_buffer(
            "_row_of", torch.cat([ent_row, torch.zeros(1, dtype=torch.long)]), persistent=False
        )
        self.register_buffer("relation_row", rel_row, persistent=False)
        self.register_buffer("row_entity", row_entity, persistent=False)
        self.register_buffer("edge_offsets", torch.tensor(offsets, dtype=torch.long), persistent=False)
        self.register_buffer("edge_relation", torch.tensor(rels, dtype=torch.long), persistent=False)
        degree = self.edge_offsets[1:] - self.edge_offsets[:-1]
        self.num_edges = len(rels)
        self.max_degree = int(degree.max()) if n else 0
        # int32 (read per padded edge of every particle: half the bytes of int64), followed by max_degree zeros (an
        # edge's window of max_degree edges stays in range): each edge's tail, and its relation embedding row (one
        # gather per edge read instead of two)
        pad = torch.zeros(self.max_degree, dtype=torch.int32)
        self.register_buffer(
            "edge_tail_padded", torch.cat([torch.tensor(tails, dtype=torch.int32), pad]), persistent=False
        )
        self.register_buffer(
            "edge_relation_row_padded", torch.cat([rel_row[self.edge_relation].int(), pad]), persistent=False
        )
        self.register_buffer(
            "edge_source", torch.repeat_interleave(torch.arange(n), degree), persistent=False
        )
        # [edges, most edges from one entity to one tail] (the slots of the parent's edges that reach the edge's tail)
        self.register_buffer(
            "edge_tail_slots",
            tail_slots(self.edge_source, self.edge_tail.long(), self.edge_offsets, n),
            persistent=False,
        )
        row_has_edges = torch.zeros(num_rows, dtype=torch.bool)
        owned = row_entity >= 0
        row_has_edges[owned] = degree[row_entity[owned]] > 0
        self.register_buffer("degree", degree, persistent=False)
        self.register_buffer("row_has_edges", row_has_edges, persistent=False)
        self.register_buffer("row_owned", owned, persistent=False)
        self.num_entities = n
        self.num_relations = r
        self.num_rows = num_rows

    @property
    def edge_tail(self) -> torch.Tensor:
        """Each edge's tail entity: [edges] int32."""
        return self.edge_tail_padded[: self.num_edges]

    @property
    def edge_relation_row(self) -> torch.Tensor:
        """Each edge's relation embedding row: [edges] int32."""
        return self.edge_relation_row_padded[: self.num_edges]

    def edge_windows(self, padded: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """padded[first_p + j] for j < max_degree of a per-edge table padded with max_degree entries
        (``edge_tail_padded``, ``edge_relation_row_padded``) at edge ids first [P]: [P, max_degree], one gather of
        rows of the table's overlapping windows (a view), with no [P, max_degree] edge ids."""
        return padded.unfold(0, self.max_degree, 1)[first]

    def row_of(self, entity: torch.Tensor) -> torch.Tensor:
        """Embedding row of each entity id, row 0 for -1 (no entity): same shape."""
        # -1 indexes the last entry, row 0
        return self._row_of[entity]

    def owns_row(self, entity: torch.Tensor) -> torch.Tensor:
        """True where entity >= 0 is the owner of its embedding row (may be new / a parent): same shape."""
        return (entity >= 0) & (self.row_entity[self.row_of(entity)] == entity)

    def mention_rows(self, types: torch.Tensor, entity: torch.Tensor) -> torch.Tensor:
        """Embedding row of the entity mentioned at each position, 0 where there is no mention: [K, T]."""
        return torch.where(types > 0, self.row_of(entity), 0)


def tail_slots(source: torch.Tensor, tail: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    """For each edge (source, tail [E], CSR ``offsets`` [n + 1]), the slots j (edge = offsets[source] + j) of its
    source's edges that reach its tail, itself included, in edge order, then -1: LongTensor [E, most such edges]
    (width 1 without edges). A stable sort by (source, tail) makes each such set a run."""
    E = source.numel()
    if E == 0:
        return torch.full((0, 1), -1, dtype=torch.long)
    order = torch.argsort(source * n + tail, stable=True)
    key = (source * n + tail)[order]
    starts = torch.ones(E, dtype=torch.bool)
    starts[1:] = key[1:] != key[:-1]
    # run of each sorted position, the runs' first sorted positions and their lengths
    run = starts.cumsum(0) - 1
    first = starts.nonzero().squeeze(1)
    size = torch.diff(first, append=torch.tensor([E]))
    m = torch.arange(int(size.max()))
    pos = first[run].unsqueeze(1) + m
    slot = (torch.arange(E) - offsets[source])[order[pos.clamp(max=E - 1)]]
    out = torch.empty(E, m.numel(), dtype=torch.long)
    out[order] = torch.where(m < size[run].unsqueeze(1), slot, -1)
    return out


@dataclass
class LatentHeads:
    """What the latent process reads: encoder outputs for T positions and the parameters of the heads."""

    h_type: torch.Tensor  # [T, D]
    h_head: torch.Tensor  # [T, De]
    h_rel: torch.Tensor  # [T, De]
    mention_type: nn.Linear  # D -> 4
    entity_embedding: torch.Tensor  # [num_rows, De]
    relation_embedding: torch.Tensor  # [num_relation_rows, De]
    new_entity_bias: torch.Tensor | None  # [num_rows] or None
    tables: GraphTables
    cutoff: int
    # optional per-position evidence added to logits (q's alias-match features; None for p): [T, num_entities]
    # + to the logit of entity e as a new entity at t
    new_entity_scores: torch.Tensor | None = None
    # + to the logit of entity e as the parent at t
    parent_scores: torch.Tensor | None = None
    # + to the logit of every edge reaching entity e at t
    tail_scores: torch.Tensor | None = None
    # bytes the chunked computations below may hold at once (the model's memory_budget)
    memory_budget: int = DEFAULT_MEMORY_BUDGET

    def type_logits(self) -> torch.Tensor:
        """[T, 4] float64."""
        return self.mention_type(self.h_type).double()

    def new_entity_logits(self, t: torch.Tensor) -> torch.Tensor:
        """Logits over embedding rows at positions t [B]: [B, num_rows] float64, -inf on rows without an owner."""
        logits = (self.h_head[t] + self.h_rel[t]) @ self.entity_embedding.t()
        if self.new_entity_bias is not None:
            logits = logits + self.new_entity_bias
        if self.new_entity_scores is not None:
            logits = logits + self.new_entity_scores[t][:, self.tables.row_entity.clamp(min=0)]
        return logits.double().masked_fill(~self.tables.row_owned, -math.inf)

    def parent_logits(self, t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """E_row · h_head_t for positions t [...] and candidate rows [..., C]: [..., C] float64.

        ``parent_chunk`` rows of ``rows`` at a time (its [n, C, De] window embeddings would not fit the budget for all
        of a full-size model's particles at once); each row's product is the same batched kernel whatever the chunk."""
        C = rows.shape[-1]
        n = rows.numel() // max(C, 1)
        step = parent_chunk(
            C, self.entity_embedding.shape[-1], self.entity_embedding.element_size(), self.memory_budget
        )
        if n <= step:
            return self._parent_logits(t, rows)
        flat_t, flat_rows = t.reshape(-1), rows.reshape(-1, C)
        parts = [
            self._parent_logits(flat_t[s : s + step], flat_rows[s : s + step]) for s in range(0, n, step)
        ]
        return torch.cat(parts).view(rows.shape)

    def _parent_logits(self, t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        logits = torch.einsum("...d,...cd->...c", self.h_head[t], self.entity_embedding[rows])
        if self.parent_scores is not None:
            logits = logits + self.parent_scores[t].gather(-1, self.tables.row_entity[rows].clamp(min=0))
        return logits.double()

    def edge_logits(self, t: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        """R_relation(edge) · h_rel_t for flat edges [M] at positions t [M]: [M] float64."""
        rel = self.relation_embedding[self.tables.edge_relation_row[edges]]
        logits = (rel * self.h_rel[t]).sum(-1)
        if self.tail_scores is not None:
            logits = logits + self.tail_scores[t, self.tables.edge_tail[edges]]
        return logits.double()


def parent_row_bytes(cutoff: int, entity_dim: int, itemsize: int = 4) -> int:
    """Bytes ``LatentHeads.parent_logits`` holds per row (a particle's window of ``cutoff`` slots): the gathered
    window embeddings [C, De] and the copy a batched product may make of them, the position's h_head [De], and the
    [C]-sized index, gather, sum and float64 results (8 + 8 + 4 + 4 + 4 + 8 bytes a slot)."""
    return 2 * cutoff * entity_dim * itemsize + entity_dim * itemsize + 36 * cutoff


def parent_chunk(cutoff: int, entity_dim: int, itemsize: int, budget: int) -> int:
    """Rows per ``LatentHeads.parent_logits`` product: a quarter of the budget (``log_joint``'s [k, T] arrays hold
    half, the related pairs around the product the last quarter)."""
    return rows_per_chunk(parent_row_bytes(cutoff, entity_dim, itemsize), budget // 4)


def related_pair_bytes(cutoff: int, max_degree: int) -> int:
    """Bytes ``latent_log_prob`` holds per related (particle, position) pair besides the parent head's product: its
    window [C] (ids, masks, the slot-repeat tests, the parent log probabilities: 13 eight-byte and 6 one-byte
    values a slot) and its parent's edges padded to the largest out-degree [D] (ids, relation rows, logits, masks,
    the reach and norm sums: 15 eight-byte and 3 one-byte values an edge), and a few scalars."""
    return cutoff * (13 * 8 + 6) + max(max_degree, 1) * (15 * 8 + 3) + 128


def new_entity_row_bytes(num_rows: int, itemsize: int = 4) -> int:
    """Bytes ``HeadTables.new_entity_log_probs`` holds per position without the precomputed table: the logits over
    the embedding rows in the model's precision (product, bias, evidence: 3 values) and in float64 (cast, masked,
    divided by τ, normalised: 4 values), and the evidence's row index."""
    return num_rows * (3 * itemsize + 4 * 8 + 8)


# entries of the [T, cutoff, num_rows] parent-logit table built per call
_LANE_TABLE_LIMIT = 1 << 22
# a graph with more window slots · rows than this reads its parent logits from the [T, rows] table (its lane table
# would fit no document of more than _LANE_TABLE_LIMIT / this = 64 tokens)
_ROW_TABLE_MIN_SLOT_ROWS = _LANE_TABLE_LIMIT // 64
# floats of the window operand of one parent-lane product
_LANE_CHUNK = 1 << 22


# bytes a (position, row) of a document's tables holds: q's and p's new-entity log probabilities and q's cumulative
# sums (float64), q's and p's parent logits and the evidence added while one is built (float32)
NEW_TABLE_BYTES, PARENT_TABLE_BYTES = 3 * 8, 3 * 4


def parent_table_fits(num_tokens: int, num_rows: int, cutoff: int, budget: int) -> bool:
    """Whether a document's parent logits come from the [T, rows] table (``HeadTables.parent_table``): a graph too
    large for the lane table (``_ROW_TABLE_MIN_SLOT_ROWS``) whose tables of q and p fit an eighth of the memory
    budget; else the lane table (small graphs) or the per-particle product."""
    large = cutoff * num_rows > _ROW_TABLE_MIN_SLOT_ROWS
    return large and PARENT_TABLE_BYTES * num_tokens * num_rows <= budget // 8


def new_entity_table_fits(num_tokens: int, num_rows: int, budget: int) -> bool:
    """Whether a document's new-entity log probabilities are one [T, rows] table (``HeadTables.new_entity_lp``, and
    q's cumulative sums for draws) within an eighth of the memory budget for q's and p's; else they are computed per
    position."""
    return NEW_TABLE_BYTES * num_tokens * num_rows <= budget // 8


def new_entity_table(heads: LatentHeads, tau: float) -> torch.Tensor:
    """log q_τ(new row | t) of every position t: [T, rows] float64, from ``LatentHeads.new_entity_logits``,
    ``new_entity_row_bytes`` positions at a time within a quarter of the memory budget (one call when they fit)."""
    T, rows = heads.h_type.shape[0], heads.tables.num_rows
    device = heads.h_type.device
    row_bytes = new_entity_row_bytes(rows, heads.entity_embedding.element_size())
    step = rows_per_chunk(row_bytes, heads.memory_budget // 4)
    if step >= T:
        return torch.log_softmax(heads.new_entity_logits(torch.arange(T, device=device)) / tau, -1)
    out = torch.empty(T, rows, dtype=torch.float64, device=device)
    for s in range(0, T, step):
        out[s : s + step] = torch.log_softmax(
            heads.new_entity_logits(torch.arange(s, min(s + step, T), device=device)) / tau, -1
        )
    return out


def row_at(table: torch.Tensor, t: int | torch.Tensor) -> torch.Tensor:
    """Row t of a per-position table [T, ...]: t an int, or a one-element LongTensor (a CUDA graph's position)."""
    return table[t] if isinstance(t, int) else table.index_select(0, t.view(-1)).squeeze(0)


def relation_logits(heads: LatentHeads) -> torch.Tensor:
    """R_r · h_rel_t for every position t and relation row r: [T, relation rows] float32, as elementwise products
    summed over the last axis (the numbers of ``LatentHeads.edge_logits``), ``_LANE_CHUNK`` products at a time at
    most, fewer where a quarter of the memory budget does not hold them (a full-size graph's [T, rows, De] would not
    fit)."""
    R, h = heads.relation_embedding, heads.h_rel
    step = max(1, min(_LANE_CHUNK, heads.memory_budget // (4 * 2 * R.element_size())) // max(1, R.numel()))
    return torch.cat(
        [(R.unsqueeze(0) * h[s : s + step].unsqueeze(1)).sum(-1) for s in range(0, max(1, h.shape[0]), step)]
    )


def parent_lane_logits(heads: LatentHeads, rows: int, cutoff: int) -> torch.Tensor:
    """E_r · h_head_t for every position t, window slot c and row r: [T, C, rows] float32.

    Computed with the same batched product (``...d,...cd->...c`` over C-slot windows) as ``LatentHeads.parent_logits``
    on the particles' windows, with row r placed in slot c of the window (j + c) mod rows, so that a gather from
    the table equals the per-particle product bit for bit (the kernel's result depends on the slot, not on the
    other slots' rows)."""
    h, E = heads.h_head, heads.entity_embedding[:rows]
    T, De = h.shape
    dev = h.device
    j, c = torch.arange(rows, device=dev), torch.arange(cutoff, device=dev)
    # [rows, C, De]: slot c of window j holds row (j + c) mod rows
    windows = E[(j[:, None] + c[None, :]) % rows]
    r = torch.arange(rows, device=dev)
    # (window, slot) of (c, r)
    unroll = ((r[None, :] - c[:, None]) % rows, c[:, None].expand(cutoff, rows))
    # positions per product (bounded operand size: ``_LANE_CHUNK`` floats at most, and its expanded copy and result
    # within a quarter of the memory budget)
    floats = min(_LANE_CHUNK, heads.memory_budget // (4 * 2 * E.element_size()))
    step = max(1, floats // max(1, rows * cutoff * De))
    out = []
    for s in range(0, T, step):
        n = min(step, T - s)
        hh = h[s : s + n].unsqueeze(1).expand(n, rows, De).reshape(n * rows, De)
        ww = windows.unsqueeze(0).expand(n, rows, cutoff, De).reshape(n * rows, cutoff, De)
        res = torch.einsum("...d,...cd->...c", hh, ww).view(n, rows, cutoff)
        out.append(res[:, unroll[0], unroll[1]])
    return torch.cat(out)


@dataclass
class HeadTables:
    """Parameter-derived tables of one document's latent heads at temperature τ (built once per call)."""

    heads: LatentHeads
    tables: GraphTables
    tau: float
    type_logits: torch.Tensor  # [T, 4] float64, divided by τ
    # [T, 4 patterns, 4] float64 log q_τ(type | t) for pattern = any parent + 2 · (mention at t-1)
    type_lp: torch.Tensor
    any_new: bool
    # [T, rows] float64 log q_τ(new row | t), None when too large (computed per t)
    new_entity_lp: torch.Tensor | None
    # the [T, C, rows] parent-logit table may be built (built on first use by many particles)
    lane_fits: bool
    # parent logits from the [T, rows] table (a large graph: ``parent_table_fits``), not the lane or the product
    row_table: bool
    # [T, relation rows] float32: R_r · h_rel_t
    relation_logits: torch.Tensor
    max_degree: int

    @classmethod
    def build(cls, heads: LatentHeads, temperature: float = 1.0) -> HeadTables:
        tables, C = heads.tables, heads.cutoff
        T = heads.h_type.shape[0]
        tau = float(temperature)
        rows = tables.num_rows
        any_new = bool(tables.row_owned.any())
        new_lp = None
        if any_new and new_entity_table_fits(T, rows, heads.memory_budget):
            new_lp = new_entity_table(heads, tau)
        row_table = C > 0 and parent_table_fits(T, rows, C, heads.memory_budget)
        lane_fits = C > 0 and not row_table and T * C * rows <= _LANE_TABLE_LIMIT
        rel = relation_logits(heads)
        max_degree = tables.max_degree
        type_logits = heads.type_logits() / tau
        patterns = torch.arange(4, device=type_logits.device)
        # [4, 4]
        allowed = allowed_types(any_new, patterns % 2 == 1, torch.where(patterns >= 2, CONTINUING, NONE))
        type_lp = torch.log_softmax(type_logits.unsqueeze(1).masked_fill(~allowed, -math.inf), -1)
        return cls(
            heads, tables, tau, type_logits, type_lp, any_new, new_lp, lane_fits, row_table, rel, max_degree
        )

    @property
    def relation_weights(self) -> torch.Tensor:
        """exp(R_r · h_rel_t / τ) [T, relation rows] float64: the edge weights of a q without tail evidence (built
        once, on the first draw)."""
        if not hasattr(self, "_relation_weights"):
            self._relation_weights = (self.relation_logits.double() / self.tau).exp()
        return self._relation_weights

    @property
    def type_cdf(self) -> torch.Tensor:
        """Cumulative q_τ(type | t, pattern) [T, 4 patterns, 4] (for inverse-CDF draws)."""
        if not hasattr(self, "_type_cdf"):
            self._type_cdf = self.type_lp.exp().cumsum(-1)
        return self._type_cdf

    def new_entity_draw_tables(self, t: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log q_τ(new row | t) [rows], its cumulative sum Σ_{r' ≤ r} q_τ(r' | t) [rows]) for inverse-CDF draws."""
        if self.new_entity_lp is None:
            nl = torch.log_softmax(self.heads.new_entity_logits(torch.as_tensor(t).view(1)) / self.tau, -1)[0]
            return nl, nl.exp().cumsum(0)
        if not hasattr(self, "_new_cdf"):
            self._new_cdf = self.new_entity_lp.exp().cumsum(-1)
        return row_at(self.new_entity_lp, t), row_at(self._new_cdf, t)

    @staticmethod
    def type_pattern(any_parent: torch.Tensor, after_mention: torch.Tensor) -> torch.Tensor:
        """Index of the allowed-type pattern: 1 · (some parent candidate) + 2 · (a mention at t-1)."""
        return any_parent.long() + 2 * after_mention.long()

    def new_entity_log_probs(self, t: torch.Tensor) -> torch.Tensor:
        """log q_τ(new entity row | position t) for positions t [B]: [B, rows] float64."""
        if self.new_entity_lp is not None:
            return self.new_entity_lp[t]
        return torch.log_softmax(self.heads.new_entity_logits(t) / self.tau, -1)

    @property
    def parent_lane(self) -> torch.Tensor:
        """Parent logits (before τ) of every position, window slot and row: [T, C, rows] float64 (built once)."""
        if not hasattr(self, "_lane"):
            heads, tables = self.heads, self.tables
            lane = parent_lane_logits(heads, tables.num_rows, heads.cutoff)
            if heads.parent_scores is not None:
                lane = lane + heads.parent_scores[:, tables.row_entity.clamp(min=0)].unsqueeze(1)
            self._lane = lane.double()
        return self._lane

    @property
    def parent_table(self) -> torch.Tensor:
        """Parent logits (before τ) of every position and row, E_r · h_head_t (+ q's parent evidence): [T, rows]
        float32, one product over the positions (built once; float32 rounding apart from the per-particle product)."""
        if not hasattr(self, "_parent_table"):
            heads = self.heads
            table = heads.h_head @ heads.entity_embedding.t()
            if heads.parent_scores is not None:
                table = table + heads.parent_scores[:, self.tables.row_entity.clamp(min=0)]
            self._parent_table = table
        return self._parent_table

    def parent_logits(self, t: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        """E_row · h_head_t (+ q's parent evidence) for positions t [P] and windows [P, C]: [P, C] float64 (before τ).

        A large graph's from ``parent_table`` (C reads a window, whatever the particles); a small graph's from
        ``parent_lane`` (bit-identical to the per-particle product) once more windows than rows ask at one call, or
        once the table exists; else the per-particle product itself (cheaper for a few particles)."""
        if self.row_table:
            return self.parent_table[t.unsqueeze(-1), window].double()
        if not self.lane_fits or (not hasattr(self, "_lane") and window.shape[0] <= self.tables.num_rows):
            return self.heads.parent_logits(t, window)
        C = window.shape[-1]
        slot = torch.arange(C, device=window.device)
        return self.parent_lane[t.unsqueeze(-1), slot, window]

    def edge_logits(
        self,
        t: torch.Tensor,
        first: torch.Tensor,
        relations: torch.Tensor,
        valid: torch.Tensor | None,
        tails: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """R_relation(e) · h_rel_t (+ q's tail evidence) / τ for the D = max_degree edges e = first_p + j from edge ids
        first [P] (their relation embedding rows ``relations`` [P, D], ``parent_slots``') at positions t [P], −inf
        where not ``valid`` [P, D]: float64 [P, D], the float32 logits widened by the mask itself (a float64 −inf
        operand of one element: one pass, the numbers of masking then casting). ``valid`` None: no mask, the float32
        logits widened by the division by τ (one pass; a padded slot holds another edge's logit or a padding row's),
        the same numbers at the valid slots. ``tails``: the edges' tail entities where ``relations`` are not the
        parent's padded edges' (any [P, D'] broadcasting against them), read only with tail evidence."""
        tables = self.tables
        logits = self.relation_logits[t.unsqueeze(-1), relations]
        if self.heads.tail_scores is not None:
            if tails is None:
                tails = tables.edge_windows(tables.edge_tail_padded, first)
            logits = logits + self.heads.tail_scores[t.unsqueeze(-1), tails]
        if valid is None:
            return logits / torch.full((1,), self.tau, dtype=torch.float64, device=logits.device)
        off = torch.full((1,), -math.inf, dtype=torch.float64, device=logits.device)
        logits = torch.where(valid, logits, off)
        return logits if self.tau == 1.0 else logits / self.tau  # x / 1 is x: one [P, D] pass fewer

    def edge_weights(self, t: torch.Tensor, first: torch.Tensor, relations: torch.Tensor) -> torch.Tensor:
        """exp(``edge_logits``) unmasked: float64 [P, D]. Without tail evidence an edge's weight is its relation's at
        t, so one gather from ``relation_weights`` gives them (no [P, D] division or exp, the same numbers)."""
        if self.heads.tail_scores is None:
            return self.relation_weights[t.unsqueeze(-1), relations]
        return self.edge_logits(t, first, relations, None).exp()

    def parent_slots(self, parent: torch.Tensor, ok: torch.Tensor):
        """Edges of each parent padded to the largest degree D: (first edge id [P], count [P], relation embedding rows
        [P, D] int32): slot j is edge first + j, one of the parent's for j < count (``valid_slots``), else a later
        parent's edge or a table's padding; a parent not ``ok`` has count 0."""
        tables = self.tables
        safe = torch.where(ok, parent, 0)
        first = tables.edge_offsets[safe]
        count = torch.where(ok, tables.degree[safe], 0)
        return first, count, tables.edge_windows(tables.edge_relation_row_padded, first)

    def valid_slots(self, count: torch.Tensor) -> torch.Tensor:
        """The slots j < count of each row of ``parent_slots``: [P, D] bool."""
        j = torch.arange(self.max_degree, device=count.device, dtype=torch.int32)
        return j < count.unsqueeze(-1)

    def parent_edges(self, t: torch.Tensor, parent: torch.Tensor, ok: torch.Tensor):
        """``parent_slots`` with the slots' mask instead of the count (first, valid [P, D], relations) and their
        logits / τ [P, D], −inf off the valid slots."""
        first, count, relations = self.parent_slots(parent, ok)
        valid = self.valid_slots(count)
        return first, valid, relations, self.edge_logits(t, first, relations, valid)

    def tail_log_prob(self, t: torch.Tensor, parent: torch.Tensor, tail: torch.Tensor, ok: torch.Tensor):
        """log π_τ(an edge to ``tail`` | parent) [P] at positions t: the log-sum of the parent's edge logits over its
        edges reaching the tail less that over all its edges (``parent_edges``; −inf or NaN where none is valid)."""
        first, _, _, elog = self.parent_edges(t, parent, ok)
        tails = self.tables.edge_windows(self.tables.edge_tail_padded, first)
        return elog.masked_fill(tails != tail.unsqueeze(-1), -math.inf).logsumexp(-1) - elog.logsumexp(-1)


def candidate_slots(window: torch.Tensor, tables: GraphTables) -> torch.Tensor:
    """Parent candidates in recent-entity windows [..., C] of rows: distinct owned rows with edges (last occurrence)."""
    ok = (window > 0) & tables.row_has_edges[window]
    if window.shape[-1] < 2:
        return ok
    # a slot is a duplicate when a later slot holds the same row: in a stable sort it is not the last of its run
    ordered, order = window.sort(dim=-1, stable=True)
    not_last = torch.cat(
        [ordered[..., :-1] == ordered[..., 1:], torch.zeros_like(ordered[..., :1], dtype=torch.bool)], -1
    )
    dup = torch.zeros_like(not_last).scatter_(-1, order, not_last)
    return ok & ~dup


def allowed_types(any_new: bool, any_parent: torch.Tensor, prev_type: torch.Tensor | None) -> torch.Tensor:
    """Mask of allowed mention types [..., 4] given parent availability [...] and the previous type [...] (None at t=0)."""
    shape = any_parent.shape
    allowed = torch.ones(*shape, NUM_TYPES, dtype=torch.bool, device=any_parent.device)
    allowed[..., NEW] = bool(any_new)
    allowed[..., RELATED] = any_parent
    allowed[..., CONTINUING] = False if prev_type is None else prev_type != NONE
    return allowed


def segment_logsumexp(values: torch.Tensor, segment: torch.Tensor, num_segments: int) -> torch.Tensor:
    """log Σ exp(values) within each segment: values [M], segment ids [M] -> [num_segments] (-inf when empty)."""
    out = torch.full((num_segments,), -math.inf, dtype=values.dtype, device=values.device)
    if values.numel() == 0:
        return out
    peak = out.scatter_reduce(0, segment, values, reduce="amax", include_self=True)
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros_like(out).index_add_(0, segment, torch.exp(values - safe_peak[segment]))
    return torch.log(total) + safe_peak


def expand_edges(parents: torch.Tensor, tables: GraphTables) -> tuple[torch.Tensor, torch.Tensor]:
    """All KG edges of each parent entity [P]: (flat edge ids [M], owning pair index [M])."""
    deg = tables.degree[parents]
    pair = torch.repeat_interleave(torch.arange(parents.numel(), device=parents.device), deg)
    start = tables.edge_offsets[parents]
    first = torch.cumsum(deg, 0) - deg
    edges = start[pair] + (torch.arange(pair.numel(), device=parents.device) - first[pair])
    return edges, pair


def _related_terms(
    tabs: HeadTables,
    padded: torch.Tensor,
    ok: torch.Tensor,
    k_rel: torch.Tensor,
    t_rel: torch.Tensor,
    par: torch.Tensor,
    ent: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log q_τ(parent | window) + log q_τ(entity | parent) of related pairs (particle k_rel, position t_rel) [P] and
    whether the pair is on the support: (float64 [P], bool [P]). padded, ok: the particles' mention rows and their
    "owned row with edges" mask, [K, cutoff + T]."""
    tables, cutoff, tau = tabs.tables, tabs.heads.cutoff, tabs.tau
    device = padded.device
    prow = torch.where(par >= 0, tables.row_of(par), -1)
    slots = torch.arange(cutoff, device=device)
    # [P, C]
    win = padded[k_rel.unsqueeze(1), t_rel.unsqueeze(1) + slots]
    # a later slot repeats the row
    later = torch.zeros_like(win, dtype=torch.bool)
    for j in range(1, cutoff):
        later[:, : cutoff - j] |= win[:, : cutoff - j] == win[:, j:]
    cmask = ok[k_rel.unsqueeze(1), t_rel.unsqueeze(1) + slots] & ~later
    hit = (win == prow.unsqueeze(-1)) & cmask
    okp = hit.any(-1) & tables.owns_row(par)
    plog = tabs.parent_logits(t_rel, win).masked_fill(~cmask, -math.inf) / tau
    plog = torch.log_softmax(plog, -1)
    parent_lp = torch.where(okp, plog.masked_fill(~hit, -math.inf).logsumexp(-1), -math.inf)
    rel_lp = tabs.tail_log_prob(t_rel, par, ent, okp)
    okp = okp & torch.isfinite(rel_lp)
    return parent_lp + rel_lp, okp


def latent_log_prob(
    heads: LatentHeads,
    z: dict,
    temperature: float = 1.0,
    per_position: bool = False,
    head_tables: HeadTables | None = None,
) -> torch.Tensor:
    """Σ_t log π(z_t | z_<t, h) for K configurations: float64 [K] ([K, T] terms if ``per_position``); -inf outside the support."""
    types, entity, parent = z["mention_type"], z["entity"], z["parent"]
    tables = heads.tables
    T = heads.h_type.shape[0]
    check_latents(z, tables.num_entities, T)
    K = types.shape[0]
    device = types.device
    cutoff = heads.cutoff
    tabs = head_tables if head_tables is not None else HeadTables.build(heads, temperature)
    valid = torch.ones(K, T, dtype=torch.bool, device=device)
    total = torch.zeros(K, T, dtype=torch.float64, device=device)

    # structural consistency of each position with its predecessor
    prev_type = torch.cat([torch.zeros(K, 1, dtype=torch.long, device=device), types[:, :-1]], 1)
    prev_ent = torch.cat([torch.full((K, 1), -1, dtype=torch.long, device=device), entity[:, :-1]], 1)
    prev_par = torch.cat([torch.full((K, 1), -1, dtype=torch.long, device=device), parent[:, :-1]], 1)
    is_none, is_new, is_rel, is_cont = (
        (types == NONE),
        (types == NEW),
        (types == RELATED),
        (types == CONTINUING),
    )
    valid &= ~is_none | ((entity == -1) & (parent == -1))
    valid &= ~is_new | (tables.owns_row(entity) & (parent == -1))
    valid &= ~is_rel | (entity >= 0)
    valid &= ~is_cont | ((prev_type != NONE) & (entity == prev_ent) & (parent == prev_par))

    rows = tables.mention_rows(types, entity)
    padded = torch.cat([torch.zeros(K, cutoff, dtype=torch.long, device=device), rows], 1)
    # [K, cutoff + T]
    ok = (padded > 0) & tables.row_has_edges[padded]
    # some window slot is a candidate iff some slot holds an owned row with edges (its last occurrence is one)
    seen = torch.cat([ok.new_zeros(K, 1, dtype=torch.long), ok.long().cumsum(1)], 1)
    # window of t = padded[t : t + cutoff]
    any_parent = (seen[:, cutoff : cutoff + T] - seen[:, :T]) > 0
    pattern = tabs.type_pattern(any_parent, prev_type != NONE)
    # into type_lp [T, 4, 4]
    flat = (torch.arange(T, device=device) * 4 + pattern) * NUM_TYPES + types
    total += tabs.type_lp.reshape(-1)[flat]
    valid &= torch.isfinite(total)

    # new entities: from the table of every position, else ``new_entity_row_bytes`` positions at a time (half the
    # budget)
    k_new, t_new = torch.nonzero(is_new & valid, as_tuple=True)
    if k_new.numel():
        new_rows = tables.entity_row[entity[k_new, t_new]]
        if tabs.new_entity_lp is not None:
            total[k_new, t_new] += tabs.new_entity_lp[t_new, new_rows]
        else:
            uniq_t, inv = torch.unique(t_new, return_inverse=True)
            row_bytes = new_entity_row_bytes(tables.num_rows, heads.entity_embedding.element_size())
            step = rows_per_chunk(row_bytes, heads.memory_budget // 2)
            for s in range(0, uniq_t.numel(), step):
                pick = torch.nonzero((inv >= s) & (inv < s + step), as_tuple=True)[0]
                ne_logp = tabs.new_entity_log_probs(uniq_t[s : s + step])
                total[k_new[pick], t_new[pick]] += ne_logp[inv[pick] - s, new_rows[pick]]

    # related entities: parent among window candidates, then edges parent -> entity; ``related_pair_bytes`` pairs
    # at a time (a quarter of the budget, as the parent head's product; log_joint's [k, T] arrays hold half)
    k_rel, t_rel = torch.nonzero(is_rel & valid, as_tuple=True)
    step = rows_per_chunk(related_pair_bytes(cutoff, tabs.max_degree), heads.memory_budget // 4)
    for s in range(0, k_rel.numel(), step):
        k_r, t_r = k_rel[s : s + step], t_rel[s : s + step]
        term, okp = _related_terms(tabs, padded, ok, k_r, t_r, parent[k_r, t_r], entity[k_r, t_r])
        total[k_r, t_r] += torch.where(okp, term, 0.0)
        valid[k_r, t_r] &= okp

    if per_position:
        return total.masked_fill(~valid, -math.inf)
    return total.sum(-1).masked_fill(~valid.all(-1), -math.inf)


def check_latents(z: dict, num_entities: int, T: int) -> None:
    """Raise ValueError for malformed latent configurations (wrong keys, shapes or out-of-range ids)."""
    if not isinstance(z, dict) or any(k not in z for k in ("mention_type", "entity", "parent")):
        raise ValueError(f"KGLM latents must be a dict with keys {LATENT_KEYS}; got {type(z).__name__}")
    shape = z["mention_type"].shape
    for key in ("mention_type", "entity", "parent"):
        v = z[key]
        if v.dim() != 2 or v.shape != shape or v.shape[1] != T:
            raise ValueError(f"latent {key!r} must have shape [K, {T}], got {tuple(v.shape)}")
        if v.dtype != torch.long:
            raise ValueError(f"latent {key!r} must be a LongTensor, got {v.dtype}")
    if shape[1] and (int(z["mention_type"].min()) < 0 or int(z["mention_type"].max()) >= NUM_TYPES):
        raise ValueError("mention_type values must be 0 (none), 1 (new), 2 (related) or 3 (continuing)")
    for key in ("entity", "parent"):
        v = z[key]
        if v.numel() and (int(v.min()) < -1 or int(v.max()) >= num_entities):
            raise ValueError(f"latent {key!r} holds ids outside [-1, {num_entities - 1}]")


def canonical_relation(tables: GraphTables, parent: torch.Tensor, entity: torch.Tensor) -> torch.Tensor:
    """Relation id of the first KG edge parent -> entity (the label stored in z), -1 where there is none: same shape."""
    out = torch.full_like(parent, -1)
    flat_p, flat_e = parent.reshape(-1), entity.reshape(-1)
    idx = torch.nonzero((flat_p >= 0) & (flat_e >= 0), as_tuple=True)[0]
    if idx.numel():
        edges, pair = expand_edges(flat_p[idx], tables)
        match = tables.edge_tail[edges] == flat_e[idx][pair]
        big = torch.iinfo(torch.long).max
        first = torch.full((idx.numel(),), big, dtype=torch.long, device=parent.device)
        first = first.scatter_reduce(0, pair, torch.where(match, edges, big), reduce="amin")
        found = first < big
        res = torch.full((idx.numel(),), -1, dtype=torch.long, device=parent.device)
        res[found] = tables.edge_relation[first[found]]
        out.view(-1)[idx] = res
    return out
