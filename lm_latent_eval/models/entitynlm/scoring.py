"""log p or log q of given latents: one token for every row (``score_step``), or every token of given z at once
(``score_latents``: the memory token by token, the softmaxes once), each row the numbers ``score_step`` gives it."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ...tensors import selects_rows
from .heads import EntityHeads
from .latents import (
    LATENT_KEYS,
    EntityMemory,
    check_latents,
    padded,
    rows_apart,
    tempered,
)


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
