"""EntityNLM's heads: the parameters of the latent factors (eqs. 3-5) and of the entity memory's update (eqs. 7-8);
the factors themselves are stated in ``latents.py``."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ...tensors import selects_rows
from .latents import EntityMemory, padded, rows_apart, tempered


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
