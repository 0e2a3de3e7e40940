"""The latent factors of EntityNLM (Ji et al., 2017), shared by p(x, z) and its proposal q(z | x).

Latents, one triple per token (dict of LongTensor [K, T], keys ``LATENT_KEYS``):

    mention  R_t ∈ {0, 1}    x_t belongs to an entity mention
    entity   E_t             −1 when R_t = 0; otherwise the entity's index in order of first mention, so that
                             E_t = n_{t−1} (the number of entities introduced before t) starts a new entity
    length   L_t ∈ 1..ℓ_max  tokens left in the mention, x_t included (1 when R_t = 0)

Generative story of z (Ji et al., Algorithm 1). When the previous mention is over (L_{t−1} = 1, or t = 1):

    p(R_t = r | h)            ∝ exp(h · r_r)                                  (eq. 3; r_0, r_1: ``type_embedding``)
    p(E_t = e | R_t = 1, h)   ∝ exp(h · W_ent e_e + λ (t − last_e))   e < n    (eq. 4; an existing entity)
                              ∝ exp(h · W_ent u_new)                  e = n    (a new entity; only while n < M)
    p(L_t = ℓ | R_t = 1, h)   ∝ exp(W_len [h; e_{E_t}] + b_len)_ℓ              (eq. 5)

otherwise the mention goes on: R_t = 1, E_t = E_{t−1}, L_t = L_{t−1} − 1 with probability 1. After x_t is read,
the entity mentioned at t (R_t = 1, every token of a mention) is updated with the state h_t (eqs. 7-8):

    δ = σ(h_t · W_δ e),   e ← (δ e + (1 − δ) h_t) / ‖δ e + (1 − δ) h_t‖,

a new entity starting from u_new = r_1 / ‖r_1‖ (the original adds 1e-4 Gaussian noise to it; we do not, so that
p is a deterministic function of its weights). ``h`` is the *labelling* state: h_{t−1} for p and for q without
peeking, h_t (after reading x_t) for the peeking q. M = ``max_entities`` bounds the entity memory; a text is a
prefix, so a mention may be cut off by the end of x (L_T > 1).

Memory per particle: embeddings [K, M, D] (every unused slot holds u_new, so the new-entity score is the score of
slot n), position of each entity's latest mention [K, M], entity count [K] (a "particle" may be a row standing for
several: SMC's particles on the CPU keep one row per distinct history, ``stepwise.py``). Per-token kernels:
``score_step`` (log p or log q of given z_t), ``draw_step`` (draw z_t ~ q_τ) and the model's ``word_step``;
``sample_latents`` and the stepwise SMC particles (``stepwise.py``) loop over tokens calling them. ``score_latents``
(given z) runs only the memory token by token (``entity_rows``) and takes the softmaxes once over all tokens, giving
each row the numbers ``score_step`` gives it (a product over some particles' rows, or over several tokens' rows at
once, only where that holds: ``rows_apart``). No Python loop over particles or entities and no host synchronisation
inside a token loop. With gradients the memory is updated out of place (training); without, the touched rows are
written in place (on the CPU only the rows of the entities mentioned at t are moved).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ...tensors import inverse_cdf, selects_rows
from ..cuda_graphs import TokenLoop, copy_fields

LATENT_KEYS = ("mention", "entity", "length")
# see rows_apart
MIN_ROWS = 4


@dataclass
class EntityMemory:
    """Dynamic entity state of K particles after some prefix of the document."""

    embeddings: torch.Tensor  # [K, M, D]
    # [K, M] position of each entity's latest mention token (unused slots: 0)
    last_seen: torch.Tensor
    count: torch.Tensor  # [K] entities introduced so far (n)
    prev_entity: torch.Tensor  # [K] E_{t−1}
    # [K] L_{t−1} (1: the next token starts a decision)
    prev_length: torch.Tensor
    # [K] k·M: row of particle k's slot 0 in embeddings viewed as [K·M, D]
    offsets: torch.Tensor

    def row(self, entity: torch.Tensor, particles: torch.Tensor | None = None) -> torch.Tensor:
        """Embedding of entity slot ``entity`` [K] of each particle (values in 0..M−1): [K, D]; with ``particles``
        [n], slot entity[i] of particle particles[i]: [n, D]."""
        K, M, D = self.embeddings.shape
        return self.embeddings.view(K * M, D).index_select(0, self.row_index(entity, particles))

    def row_index(self, entity: torch.Tensor, particles: torch.Tensor | None = None) -> torch.Tensor:
        """Row of ``row``'s embeddings in the table viewed as [K·M, D]: [K] or [n]."""
        return (self.offsets if particles is None else self.offsets.index_select(0, particles)) + entity

    def select(self, index: torch.Tensor) -> EntityMemory:
        """The memory of particles ``index`` [K'] (resampling, beam search): new tensors, owned by the result."""
        # index_select: a gather of whole rows, several times faster on the CPU than advanced indexing
        fields = {
            f: getattr(self, f).index_select(0, index) for f in self.__dataclass_fields__ if f != "offsets"
        }
        M = self.embeddings.shape[1]
        return EntityMemory(**fields, offsets=torch.arange(index.shape[0], device=index.device) * M)


def rows_apart(num_rows: int, row: torch.Tensor) -> bool:
    """Whether a matrix product gives each of ``num_rows`` rows like ``row`` the numbers it gets in any other batch
    of ≥ 4 such rows, so that a product over some particles' rows reproduces the all-particles one: float32 rows of
    a multiple of 16 values (whole 64-byte lines) in batches of ≥ 4 on the CPU (measured on its BLAS; 1–3 rows, or
    rows of 6 or 10 values, round by position; tests/models/entitynlm/test_entitynlm_stepwise.py compares both
    paths). Not assumed of accelerator libraries, which choose kernels by shape."""
    return (
        num_rows >= MIN_ROWS
        and row.shape[-1] % 16 == 0
        and row.dtype == torch.float32
        and row.device.type == "cpu"
    )


def padded(rows: torch.Tensor, n: int = MIN_ROWS) -> torch.Tensor:
    """rows [N, ...] followed by zero rows up to n rows in all (so that a product over them runs on ≥ n rows)."""
    return (
        rows if rows.shape[0] >= n else torch.cat([rows, rows.new_zeros(n - rows.shape[0], *rows.shape[1:])])
    )


def without_autograd(fn):
    """Run ``fn`` under ``torch.inference_mode`` when grad is off (less bookkeeping per op than ``no_grad``) and hand
    back its tensors cloned, as ordinary tensors usable anywhere; with grad on, run it as is."""

    def clone(out):
        if isinstance(out, torch.Tensor):
            return out.clone()
        if isinstance(out, dict):
            return {k: clone(v) for k, v in out.items()}
        if isinstance(out, tuple):
            return tuple(clone(v) for v in out)
        return out

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if torch.is_grad_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            out = fn(*args, **kwargs)
        return clone(out)

    return wrapped


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / τ (the same tensor when τ = 1, which divides exactly)."""
    return logits if temperature == 1 else logits / temperature


class EntityHeads(nn.Module):
    """Parameters of eqs. 3-5 and 7-8 over states of size D, with M entity slots and mentions of ≤ ℓ_max tokens."""

    def __init__(self, dim: int, max_entities: int, max_mention_length: int):
        super().__init__()
        if max_entities < 1 or max_mention_length < 1:
            raise ValueError(
                f"need max_entities >= 1 and max_mention_length >= 1, got {max_entities}, {max_mention_length}"
            )
        self.dim, self.max_entities, self.max_mention_length = dim, max_entities, max_mention_length
        # rows r_0, r_1 (r_1 also seeds new entities)
        self.type_embedding = nn.Linear(dim, 2, bias=False)
        # W_ent
        self.entity_bilinear = nn.Linear(dim, dim, bias=False)
        # λ
        self.distance_weight = nn.Parameter(torch.tensor(-1e-2))
        # W_len, b_len
        self.length = nn.Linear(2 * dim, max_mention_length)
        # W_δ
        self.delta = nn.Linear(dim, dim, bias=False)

    def new_entity_embedding(self) -> torch.Tensor:
        """u_new = r_1 / ‖r_1‖: [D]."""
        return F.normalize(self.type_embedding.weight[1], dim=0)

    def initial_memory(self, num_particles: int, device=None) -> EntityMemory:
        """Empty memory of K particles: every slot holds u_new."""
        K, M = num_particles, self.max_entities
        device = device or self.type_embedding.weight.device
        zeros = torch.zeros(K, dtype=torch.long, device=device)
        return EntityMemory(
            self.new_entity_embedding().expand(K, M, self.dim).clone(),
            torch.zeros(K, M, dtype=torch.long, device=device),
            zeros,
            zeros - 1,
            zeros + 1,
            torch.arange(K, device=device) * M,
        )

    # --- the three factors (log-probabilities under temperature τ, float32) ---------------------------------------
    def type_log_probs(self, h: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """log p(R = r | h) for h [..., D]: [..., 2]."""
        return torch.log_softmax(tempered(self.type_embedding(h).float(), temperature), -1)

    def entity_choice(
        self, memory: EntityMemory, t: int, rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the entity head reads of a memory's bookkeeping (the same in every memory that has followed the same
        z): (existing entities: slot < n [K, M], slots past the new one: slot > n [K, M], t − latest mention [K, M]
        float32); with ``rows`` [n], of those particles only ([n, M] each)."""
        count, last_seen = memory.count, memory.last_seen
        if rows is not None:
            count, last_seen = count.index_select(0, rows), last_seen.index_select(0, rows)
        slots = torch.arange(self.max_entities, device=count.device)
        count = count.unsqueeze(-1)
        return slots < count, slots > count, (t - last_seen).float()

    def entity_log_probs(
        self,
        h: torch.Tensor,
        memory: EntityMemory,
        t: int,
        temperature: float = 1.0,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log p(E = e | R = 1, h) over the M slots for h [K|1, D]: [K, M] (−inf for slots beyond the new one);
        with ``rows`` [n], of those particles only: [n, M] (the same numbers)."""
        # [K|1, D]
        query = self.entity_bilinear(h)
        embeddings = memory.embeddings
        if rows is not None:
            embeddings = embeddings.index_select(0, rows)
            query = query if query.shape[0] == 1 else query.index_select(0, rows)
        existing, beyond, distance = self.entity_choice(memory, t, rows)
        # [K, M]: one batched product, no [K, M, D] temporary beside the memory
        scores = torch.matmul(embeddings, query.unsqueeze(-1)).squeeze(-1).float()
        scores = scores + torch.where(existing, self.distance_weight.float() * distance, 0.0)
        scores = tempered(scores, temperature).masked_fill(beyond, -math.inf)
        return torch.log_softmax(scores, -1)

    def length_log_probs(
        self,
        h: torch.Tensor,
        entity_embedding: torch.Tensor,
        temperature: float = 1.0,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log p(L = ℓ | R = 1, h, e) for e [..., D] (h broadcast to it): [..., ℓ_max] (index ℓ − 1); with ``rows``
        [n] (e [K, D]), the softmax of those rows only: [n, ℓ_max] (the product still runs on all K rows: with K < 4,
        BLAS rounds a row differently in a product of other rows)."""
        h = h.expand_as(entity_embedding)
        logits = self.length(torch.cat([h, entity_embedding], -1)).float()
        if rows is not None:
            logits = logits.index_select(0, rows)
        return torch.log_softmax(tempered(logits, temperature), -1)

    # --- the dynamic update ------------------------------------------------------------------------------------------
    def moved(
        self, e: torch.Tensor, h: torch.Tensor, rows: torch.Tensor | None = None, num_particles: int = 0
    ) -> torch.Tensor:
        """(δ e + (1 − δ) h) / ‖δ e + (1 − δ) h‖ with δ = σ(h · W_δ e), for e [K, D] and h [K|1, D]: [K, D].

        With ``rows`` [m] (e [m, D]: the rows of those of ``num_particles`` particles, ``rows_apart``), the numbers
        moving all rows gives them: the product runs on ≥ 4 rows and σ is taken with each row at its own position in
        a [num_particles] vector (σ of a vector's tail is evaluated apart, and rounds differently)."""
        h = h.expand_as(e)
        logit = (self.delta(e if rows is None else padded(e))[: e.shape[0]] * h).sum(-1, keepdim=True)
        if rows is None:
            gate = torch.sigmoid(logit)
        else:
            gate = torch.sigmoid(logit.new_zeros(num_particles, 1).index_copy_(0, rows, logit)).index_select(
                0, rows
            )
        return F.normalize(gate * e + (1 - gate) * h, dim=-1)

    def update(
        self,
        memory: EntityMemory,
        entity: torch.Tensor,
        active: torch.Tensor,
        h: torch.Tensor,
        t: int,
        inplace: bool = False,
    ) -> EntityMemory:
        """Memory after x_t: entity [K] (where ``active`` [K]) is moved toward h_t [K|1, D] (eqs. 7-8).

        ``inplace`` writes the moved rows into ``memory``'s own tensors (O(K·D), no grad; the caller owns them)
        instead of building a new [K, M, D] table; both give the same numbers. On the CPU it moves only the active
        rows where ``rows_apart`` holds (else all K, writing the inactive ones back unchanged)."""
        K, M, D = memory.embeddings.shape
        slot = entity.clamp(0, M - 1)
        count = torch.where(active & (entity == memory.count), memory.count + 1, memory.count)
        # the active rows only (same numbers)
        if inplace and rows_apart(K, h) and selects_rows(active.device):
            rows = active.nonzero().squeeze(1)
            if rows.numel():
                # their entities' rows of the [K·M, D] table
                flat = memory.offsets.index_select(0, rows) + slot.index_select(0, rows)
                table = memory.embeddings.view(K * M, D)
                h = h if h.shape[0] == 1 else h.index_select(0, rows)
                table.index_copy_(
                    0, flat, self.moved(table.index_select(0, flat), h, rows, K).to(table.dtype)
                )
                memory.last_seen.view(-1).index_fill_(0, flat, t)
            return replace(memory, count=count)
        # [K, D]
        e = memory.row(slot)
        moved = self.moved(e, h).to(memory.embeddings.dtype)
        if inplace:
            flat = memory.offsets + slot
            memory.embeddings.view(K * M, D).index_copy_(0, flat, torch.where(active.unsqueeze(1), moved, e))
            seen = memory.last_seen.view(-1)
            seen.index_copy_(0, flat, torch.where(active, t, seen.index_select(0, flat)))
            return replace(memory, count=count)
        # [K, M]
        hit = (torch.arange(M, device=slot.device) == slot.unsqueeze(1)) & active.unsqueeze(1)
        return replace(
            memory,
            embeddings=torch.where(hit.unsqueeze(-1), moved.unsqueeze(1), memory.embeddings),
            last_seen=torch.where(hit, t, memory.last_seen),
            count=count,
        )


def check_latents(z, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mention, entity, length), each LongTensor [K, T]; a clear error for anything else."""
    if not isinstance(z, dict) or set(z) != set(LATENT_KEYS):
        got = sorted(z) if isinstance(z, dict) else type(z).__name__
        raise ValueError(f"EntityNLM latents must be a dict with keys {LATENT_KEYS}, got {got}")
    parts = [z[k] for k in LATENT_KEYS]
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1 or len(parts[0].shape) != 2 or parts[0].shape[1] != num_tokens:
        raise ValueError(f"EntityNLM latents must each have shape [K, T={num_tokens}], got {sorted(shapes)}")
    if any(p.dtype != torch.long for p in parts):
        raise ValueError("EntityNLM latents must be LongTensors")
    return tuple(parts)


def score_step(
    heads: EntityHeads,
    memory: EntityMemory,
    type_lp: torch.Tensor,
    h: torch.Tensor,
    h_next: torch.Tensor,
    t: int,
    r: torch.Tensor,
    e: torch.Tensor,
    ell: torch.Tensor,
    temperature: float = 1.0,
    real: torch.Tensor | None = None,
) -> tuple[EntityMemory, torch.Tensor, torch.Tensor]:
    """One token of ``score_latents``: (memory after x_t, log factor of z_t float64 [K] (0 inside a mention),
    entity embedding of z_t before its update [K, D]); whether z_t is allowed at all is ``on_support``'s job.

    type_lp: log q_τ(R_t | h) [K|1, 2]; h, h_next: labelling state and h_t [K|1, D]; r, e, ell: z_t [K];
    real: [K] real tokens (padding adds nothing and changes nothing). No host synchronisation off the CPU; on the
    CPU only the particles starting a mention go through the entity and length heads (the same numbers, as in
    ``draw_step``). Without grad the memory is updated in place."""
    K = r.shape[0]
    M, Lmax = heads.max_entities, heads.max_mention_length
    decide, mention = memory.prev_length == 1, r == 1
    if real is not None:
        decide, mention = decide & real, mention & real
    slot = e.clamp(0, M - 1)
    entity_emb = memory.row(slot)
    step = type_lp.expand(K, 2).gather(1, r.clamp(0, 1).unsqueeze(1)).squeeze(1)
    if selects_rows(r.device):
        # the particles starting a mention only, with the numbers of the all-rows products (as draw_step)
        at = (decide & mention).nonzero().squeeze(1)
        if at.numel():
            slot_at = slot.index_select(0, at)
            length_at = (ell - 1).clamp(0, Lmax - 1).index_select(0, at)
            ent = heads.entity_log_probs(h, memory, t, temperature, at)
            ent = ent.gather(1, slot_at.unsqueeze(1)).squeeze(1)
            if rows_apart(K, h):
                lp_len = heads.length_log_probs(h, padded(memory.row(slot_at, at)), temperature)[
                    : at.shape[0]
                ]
            else:
                lp_len = heads.length_log_probs(h, entity_emb, temperature, at)
            length = lp_len.gather(1, length_at.unsqueeze(1)).squeeze(1)
            step = step + step.new_zeros(K).index_copy_(0, at, ent + length)
    else:
        length_index = (ell - 1).clamp(0, Lmax - 1).unsqueeze(1)
        ent = heads.entity_log_probs(h, memory, t, temperature).gather(1, slot.unsqueeze(1)).squeeze(1)
        length = heads.length_log_probs(h, entity_emb, temperature).gather(1, length_index)
        step = step + torch.where(decide & mention, ent + length.squeeze(1), 0.0)
    step = torch.where(decide, step, 0.0).double()
    memory = heads.update(memory, e, mention, h_next, t, inplace=not torch.is_grad_enabled())
    if real is None:
        return replace(memory, prev_entity=e, prev_length=ell), step, entity_emb
    memory = replace(
        memory,
        prev_entity=torch.where(real, e, memory.prev_entity),
        prev_length=torch.where(real, ell, memory.prev_length),
    )
    return memory, step, entity_emb


def on_support(
    z: dict, max_entities: int, max_mention_length: int, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """p(x, z_k) > 0: every z_t follows the generative story (see the module docstring): BoolTensor [K].

    Checked for all tokens at once: after a finished mention (or at t = 0) z_t is (0, −1, 1) or (1, e, ℓ) with
    0 ≤ e ≤ n_t (n_t = 1 + the largest entity before t), e < M, 1 ≤ ℓ ≤ ℓ_max; inside a mention it is
    (1, E_{t−1}, L_{t−1} − 1). mask [K, T]: real tokens, a prefix of each row; padding is not checked."""
    R, E, L = (z[k] for k in LATENT_KEYS)
    K, T = R.shape
    if T == 0:
        return torch.ones(K, dtype=torch.bool, device=R.device)
    prev_e = torch.cat([E.new_full((K, 1), -1), E[:, :-1]], 1)
    prev_l = torch.cat([L.new_ones(K, 1), L[:, :-1]], 1)
    count = torch.cat([E.new_zeros(K, 1), E[:, :-1].cummax(1).values.clamp(min=-1) + 1], 1)
    goes_on = (R == 1) & (E == prev_e) & (L == prev_l - 1)
    no_mention = (R == 0) & (E == -1) & (L == 1)
    starts = (R == 1) & (E >= 0) & (E <= count) & (E < max_entities) & (L >= 1) & (L <= max_mention_length)
    ok = torch.where(prev_l == 1, no_mention | starts, goes_on)
    if mask is not None:
        ok = ok | ~mask
    return ok.all(1)


def mention_context(
    context: torch.Tensor, entity_emb: torch.Tensor, r: torch.Tensor, real: torch.Tensor | None = None
) -> torch.Tensor:
    """The entity embedding x_t is generated with [K, D]: e_{E_t} when R_t = 1 (a real token), else the previous one."""
    take = r == 1 if real is None else (r == 1) & real
    return torch.where(take.unsqueeze(1), entity_emb, context)


def entity_rows(
    heads: EntityHeads,
    h_label: torch.Tensor,
    h_update: torch.Tensor,
    slot: torch.Tensor,
    mention: torch.Tensor,
    starts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The memory of K given configurations run through the document, token-major: (bilinear scores e_m · W_ent h_t
    of every slot before token t at the rows (t, k) where ``starts`` [T, K], in that order, [N, M]; embedding of
    slot_t before its update, [T + 1, K, D] with zeros at 0).

    slot: [K, T] entity slot of each token (clamped to 0..M−1); mention: [K, T] tokens whose slot is moved toward
    h_t (eqs. 7-8). The only sequential part of scoring: per token the memory rows of the particles starting a
    mention times the query, one gathered row per particle and its update, written back by flat index (in place
    without grad; row K·M is a scratch row taking the writes of tokens outside mentions). Every product has the
    shape ``score_step`` gives it. One host synchronisation (the number of starting particles per token)."""
    K, T = slot.shape
    M, D = heads.max_entities, h_label.shape[-1]
    grad = torch.is_grad_enabled()
    table = heads.new_entity_embedding().expand(K * M + 1, D).clone()
    # [K, T]
    read = torch.arange(K, device=slot.device).unsqueeze(1) * M + slot
    write = torch.where(mention, read, K * M)
    # [T, K]
    read, write = read.t().contiguous(), write.t().contiguous()
    # [K|1, 1, D]
    queries = [heads.entity_bilinear(h_label[:, t]).unsqueeze(-2) for t in range(T)]
    # particles starting a mention, per token
    chosen = starts.nonzero()[:, 1].split(starts.sum(1).tolist())
    scores, rows = [], [table.new_zeros(K, D)]
    for t in range(T):
        query = queries[t] if queries[t].shape[0] == 1 else queries[t].index_select(0, chosen[t])
        memory = table[: K * M].view(K, M, D).index_select(0, chosen[t])
        # [n, M]: the product ``entity_log_probs`` runs, so a step scores what a whole document does
        scores.append(torch.matmul(memory, query.transpose(-1, -2)).squeeze(-1))
        e = table.index_select(0, read[t])
        rows.append(e)
        moved = heads.moved(e, h_update[:, t]).to(table.dtype)
        table = table.index_copy(0, write[t], moved) if grad else table.index_copy_(0, write[t], moved)
    return torch.cat(scores).float(), torch.stack(rows)


def score_latents(
    heads: EntityHeads,
    h_label: torch.Tensor,
    h_update: torch.Tensor,
    z: dict,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
    track_context: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log Π_t (factors of z_t at decision steps) for K configurations: (float64 [K], −inf off the support;
    and, with ``track_context``, the entity embedding each token is generated with, [K, T, D]).

    h_label, h_update: [K|1, T, D] (labelling state for z_t; state h_t that updates the entity of x_t).
    mask: [K, T] real tokens (training batches of documents padded at the end); padding adds nothing and changes
    nothing. The context embedding of token t is e_{E_t} before its update when R_t = 1, and otherwise the previous
    token's context (the most recently mentioned entity as it was then; zeros before any mention), as in the
    original code.

    The same factors as ``score_step`` token by token, with the same numbers in every row: only the memory runs
    token by token (``entity_rows``); the last mention of each slot and the entity count before t follow from z
    alone (on the support), and the entity and length softmaxes are taken once, over the rows where a mention
    starts (the length head as one product over those rows where ``rows_apart``).
    """
    R, E, L = check_latents(z, h_label.shape[1])
    K, T = R.shape
    M, Lmax, D = heads.max_entities, heads.max_mention_length, h_label.shape[-1]
    device = h_label.device
    support = on_support(z, M, Lmax, mask)
    if T == 0:
        total = torch.zeros(K, dtype=torch.float64, device=device)
        return total, (h_label.new_zeros(K, 0, D) if track_context else None)
    # token-major [T, K]
    R, E, L = R.t(), E.t(), L.t()
    real = mask.t() if mask is not None else torch.ones_like(R, dtype=torch.bool)
    mention = (R == 1) & real
    # the previous mention is over
    decide = (torch.cat([L.new_ones(1, K), L[:-1]]) == 1) & real
    slot = E.clamp(0, M - 1)
    starts = decide & mention
    # [N, M], [T + 1, K, D]
    ent, rows = entity_rows(heads, h_label, h_update, slot.t(), mention.t(), starts)
    # at the rows where a mention starts: latest mention of each slot before t (0 if none) and the number of
    # entities introduced before t (n_t = 1 + the largest E before t)
    starts = starts.view(-1)
    # [T, 1]
    steps = torch.arange(T, device=device).unsqueeze(1)
    slots = torch.arange(M, device=device)
    # [T, K, M]
    hit = (slot.unsqueeze(-1) == slots) & mention.unsqueeze(-1)
    seen = torch.where(hit, steps.unsqueeze(-1), 0).cummax(0).values.view(T * K, M)
    count = torch.where(mention, E + 1, 0).cummax(0).values.view(-1)
    # flat (t, k) rows
    at = starts.nonzero().squeeze(1)
    # the same particle one token earlier (t > 0 wherever it is used)
    before = (at - K).clamp(min=0)
    t_at = at.div(K, rounding_mode="floor").unsqueeze(1)
    first = t_at == 0
    seen_at = torch.where(first, 0, seen.index_select(0, before))
    count_at = torch.where(first, 0, count.index_select(0, before).unsqueeze(1))
    ent = ent + torch.where(slots < count_at, heads.distance_weight.float() * (t_at - seen_at).float(), 0.0)
    ent = torch.log_softmax(tempered(ent, temperature).masked_fill(slots > count_at, -math.inf), -1)
    ent = ent.gather(1, slot.reshape(-1, 1).index_select(0, at))
    # the length head on [h; e]: one product over the starting rows where that gives each row its numbers in
    # score_step's K-row product (rows_apart), else per token on K rows (a fresh aligned tensor each, as score_step)
    h_rows = h_label.expand(K, T, D)
    if rows_apart(K, h_label):
        h_at = h_rows.transpose(0, 1).reshape(T * K, D).index_select(0, at)
        lengths = heads.length(padded(torch.cat([h_at, rows[1:].view(T * K, D).index_select(0, at)], -1)))
        lengths = lengths[: at.shape[0]].float()
    else:
        lengths = torch.stack([heads.length(torch.cat([h_rows[:, t], rows[t + 1]], -1)) for t in range(T)])
        lengths = lengths.float().view(T * K, Lmax).index_select(0, at)
    length = torch.log_softmax(tempered(lengths, temperature), -1)
    length = length.gather(1, (L.reshape(-1, 1).index_select(0, at) - 1).clamp(0, Lmax - 1))
    type_lp = heads.type_log_probs(h_label, temperature).transpose(0, 1).expand(T, K, 2)
    # [T·K]
    step = type_lp.gather(2, R.clamp(0, 1).unsqueeze(-1)).view(-1)
    step = step.index_add(0, at, (ent + length).squeeze(1)).view(T, K)
    total = torch.where(decide, step, 0.0).double().sum(0)
    total = total.masked_fill(~support, -math.inf)
    if not track_context:
        return total, None
    # latest mention token ≤ t (−1: none yet)
    last = torch.where(mention, steps, -1).cummax(0).values
    flat = (last + 1) * K + torch.arange(K, device=device)
    context = rows.view(-1, D).index_select(0, flat.view(-1)).view(T, K, D)
    return total, context.transpose(0, 1)


def draw_step(
    heads: EntityHeads,
    memory: EntityMemory,
    type_lp: torch.Tensor,
    h: torch.Tensor,
    h_next: torch.Tensor,
    t: int,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[EntityMemory, tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """z_t ~ q_τ(z_t | ·) for K particles: (memory after x_t, (R_t, E_t, L_t) each [K], log q_τ(z_t | ·)
    float64 [K]).

    One uniform draw [K, 3] per token (inverse CDF for type, entity and length; the entity and length draws count
    only where a mention starts), then ``draw_step_with``. type_lp: [1, 2]; h, h_next: [1, D]. The memory is updated
    in place. On an accelerator every particle's entity and length are drawn (no host synchronisation); on the CPU,
    where synchronising costs nothing, only those of the particles starting a mention, with the same numbers."""
    K = memory.count.shape[0]
    u = torch.rand((K, 3), generator=generator, device=memory.embeddings.device, dtype=torch.float64)
    every_row = not selects_rows(memory.prev_length.device)
    return draw_step_with(heads, memory, type_lp, h, h_next, t, temperature, u, every_row)


def draw_step_with(
    heads: EntityHeads,
    memory: EntityMemory,
    type_lp: torch.Tensor,
    h: torch.Tensor,
    h_next: torch.Tensor,
    t: int | torch.Tensor,
    temperature: float,
    u: torch.Tensor,
    every_row: bool,
) -> tuple[EntityMemory, tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``draw_step`` from given uniforms u [K, 3] (columns: type, entity, length); type_lp [1, 2], or [K, 2] with h,
    h_next [K, D] where each particle reads its own document's row (documents side by side). ``every_row``: entity and length
    drawn for every particle and kept where a mention starts, with no host synchronisation (an accelerator's step,
    and the static buffers a CUDA graph captures: ``sample_latents_static``); else drawn for the particles starting
    a mention only (the CPU's). Both give the same z and log q."""
    K = u.shape[0]
    decide = memory.prev_length == 1
    if type_lp.shape[0] == 1:
        r = torch.where(decide, inverse_cdf(type_lp[0].double().exp(), u[:, 0]), 1)
        step = torch.where(decide, type_lp[0].index_select(0, r), 0.0).double()
    else:
        # each particle's own row [K, 2] (documents side by side): the same numbers row by row
        r = torch.where(decide, inverse_cdf(type_lp.double().exp(), u[:, 0]), 1)
        step = torch.where(decide, type_lp.gather(1, r.unsqueeze(1)).squeeze(1), 0.0).double()
    # the particles starting a mention
    mention = r == 1
    if every_row:
        starting = decide & mention
        lp_ent = heads.entity_log_probs(h, memory, t, temperature)
        e_new = inverse_cdf(lp_ent.double().exp(), u[:, 1])
        lp_len = heads.length_log_probs(h, memory.row(e_new), temperature)
        l_new = inverse_cdf(lp_len.double().exp(), u[:, 2])
        picked = lp_ent.gather(1, e_new.unsqueeze(1)).squeeze(1) + lp_len.gather(
            1, l_new.unsqueeze(1)
        ).squeeze(1)
        step = step + torch.where(starting, picked, 0.0).double()
        e = torch.where(starting, e_new, torch.where(decide, -1, memory.prev_entity))
        ell = torch.where(starting, l_new + 1, torch.where(decide, 1, memory.prev_length - 1))
    else:
        at = (decide & mention).nonzero().squeeze(1)
        u_at = u.index_select(0, at)
        lp_ent = heads.entity_log_probs(h, memory, t, temperature, at)
        e_at = inverse_cdf(lp_ent.double().exp(), u_at[:, 1])
        e = torch.where(decide, -1, memory.prev_entity).index_copy_(0, at, e_at)
        # the product on the starting rows only gives each the numbers of the all-rows product
        if rows_apart(K, h):
            lp_len = heads.length_log_probs(h, padded(memory.row(e_at, at)), temperature)[: at.shape[0]]
        else:
            lp_len = heads.length_log_probs(h, memory.row(e.clamp(min=0)), temperature, at)
        l_at = inverse_cdf(lp_len.double().exp(), u_at[:, 2])
        ell = torch.where(decide, 1, memory.prev_length - 1).index_copy_(0, at, l_at + 1)
        picked = lp_ent.gather(1, e_at.unsqueeze(1)).squeeze(1) + lp_len.gather(1, l_at.unsqueeze(1)).squeeze(
            1
        )
        step = step.index_add_(0, at, picked.double())
    memory = heads.update(memory, e, mention, h_next, t, inplace=True)
    return replace(memory, prev_entity=e, prev_length=ell), (r, e, ell), step


@torch.no_grad()
@without_autograd
def sample_latents(
    heads: EntityHeads,
    h_label: torch.Tensor,
    h_update: torch.Tensor,
    num_samples: int,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[dict, torch.Tensor]:
    """z_k ~ Π_t q_τ(z_t | ·) (each factor's logits divided by τ): (dict of LongTensor [K, T], log q_τ float64 [K]).

    h_label, h_update: [1, T, D] (shared by all particles). Token t consumes the stream as ``draw_step``."""
    K, T = int(num_samples), h_label.shape[1]
    device = h_label.device
    memory = heads.initial_memory(K, device)
    log_q = torch.zeros(K, dtype=torch.float64, device=device)
    out = torch.empty(len(LATENT_KEYS), K, T, dtype=torch.long, device=device)
    # [T, 2]
    type_lp = heads.type_log_probs(h_label[0], temperature)
    for t in range(T):
        memory, zt, step = draw_step(
            heads, memory, type_lp[t : t + 1], h_label[:, t], h_update[:, t], t, temperature, generator
        )
        log_q += step
        out[:, :, t] = torch.stack(zt)
    return dict(zip(LATENT_KEYS, out.unbind(0))), log_q


@torch.no_grad()
@without_autograd
def sample_latents_static(
    heads: EntityHeads,
    h_label: torch.Tensor,
    h_update: torch.Tensor,
    num_samples: int,
    temperature: float,
    generator: torch.Generator | None,
    capture: bool,
) -> tuple[dict, torch.Tensor]:
    """``sample_latents`` over static buffers (u, t, the memory, z, log q) with every particle's entity and length
    drawn (``draw_step_with`` on every row, the accelerator's step), its step captured in a CUDA graph and replayed per
    token when ``capture`` (models/cuda_graphs.py), else run eagerly: the uniforms of ``draw_step``, the same z and
    log q."""
    K, T = int(num_samples), h_label.shape[1]
    device = h_label.device
    empty = heads.initial_memory(K, device)
    memory = EntityMemory(**{f: getattr(empty, f).clone() for f in empty.__dataclass_fields__})
    log_q = torch.zeros(K, dtype=torch.float64, device=device)
    out = torch.zeros(len(LATENT_KEYS), K, T, dtype=torch.long, device=device)
    # [T, 2]
    type_lp = heads.type_log_probs(h_label[0], temperature)
    u = torch.full((K, 3), 0.5, dtype=torch.float64, device=device)
    t_now = torch.zeros(1, dtype=torch.long, device=device)

    def step() -> None:
        # [1, D] each
        h, h_next = (v.index_select(1, t_now).squeeze(1) for v in (h_label, h_update))
        moved, zt, lq = draw_step_with(
            heads, memory, type_lp.index_select(0, t_now), h, h_next, t_now.view(()), temperature, u, True
        )
        log_q.add_(lq)
        out.index_copy_(2, t_now, torch.stack(zt).unsqueeze(2))
        # the embeddings and last mentions were moved in place already
        copy_fields(memory, moved)

    def reset() -> None:
        copy_fields(memory, empty)
        log_q.zero_()
        out.zero_()

    loop = TokenLoop(step, reset, capture)
    for t in range(T):
        torch.rand((K, 3), generator=generator, device=device, dtype=torch.float64, out=u)
        t_now.fill_(t)
        loop()
    return dict(zip(LATENT_KEYS, out.unbind(0))), log_q


@torch.no_grad()
def beam_latents(heads: EntityHeads, h_label: torch.Tensor, h_update: torch.Tensor, beam_size: int) -> dict:
    """Up to ``beam_size`` distinct z with the highest Π_t q(z_t | ·) (τ = 1), kept per step: dict of [k', T].

    Each step extends every kept prefix by all its continuations (none; entity e ≤ n, length ℓ; or the ongoing
    mention) and keeps the best ``beam_size``; extensions of distinct prefixes are distinct."""
    T = h_label.shape[1]
    M, Lmax = heads.max_entities, heads.max_mention_length
    device = h_label.device
    memory = heads.initial_memory(1, device)
    score = torch.zeros(1, dtype=torch.float64, device=device)
    hist = torch.zeros(1, 0, 3, dtype=torch.long, device=device)
    # [T, 2]
    type_lp = heads.type_log_probs(h_label[0])
    # the continuation choices of a decision step: (R, E, L) for column c of the candidate table
    choice = torch.tensor(
        [[0, -1, 1]] + [[1, e, ell] for e in range(M) for ell in range(1, Lmax + 1)], device=device
    )
    for t in range(T):
        B = score.shape[0]
        h = h_label[:, t]
        decide = memory.prev_length == 1
        # [B, M]
        lp_ent = heads.entity_log_probs(h, memory, t).double()
        # [B, M, Lmax]
        lp_len = heads.length_log_probs(h.unsqueeze(1), memory.embeddings).double()
        mention = type_lp[t, 1].double() + lp_ent.unsqueeze(-1) + lp_len
        table = torch.cat([type_lp[t, 0].double().expand(B, 1), mention.reshape(B, M * Lmax)], 1)
        table = torch.where(decide.unsqueeze(1), table, -math.inf)
        # column C: the ongoing mention
        goes_on = torch.where(decide, -math.inf, 0.0).double().unsqueeze(1)
        cand = (score.unsqueeze(1) + torch.cat([table, goes_on], 1)).reshape(-1)
        finite = int(torch.isfinite(cand).sum())
        top, flat = cand.topk(min(beam_size, finite))
        parent, col = flat // (table.shape[1] + 1), flat % (table.shape[1] + 1)
        memory, score = memory.select(parent), top
        on = col == table.shape[1]
        rel = choice[col.clamp(max=choice.shape[0] - 1)]
        r = torch.where(on, 1, rel[:, 0])
        e = torch.where(on, memory.prev_entity, rel[:, 1])
        ell = torch.where(on, memory.prev_length - 1, rel[:, 2])
        hist = torch.cat([hist[parent], torch.stack([r, e, ell], 1).unsqueeze(1)], 1)
        memory = heads.update(memory, e, r == 1, h_update[:, t], t, inplace=True)
        memory = replace(memory, prev_entity=e, prev_length=ell)
    return {k: hist[..., i] for i, k in enumerate(LATENT_KEYS)}
