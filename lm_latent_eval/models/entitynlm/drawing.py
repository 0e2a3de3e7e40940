"""Drawing latents from q_τ: one token for every row (``draw_step``), whole texts (``sample_latents``, and its
CUDA-graph form), and a beam over q's factors (``beam_latents``)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ...tensors import inverse_cdf, selects_rows
from ..cuda_graphs import TokenLoop, copy_fields
from .heads import EntityHeads
from .latents import LATENT_KEYS, EntityMemory, padded, rows_apart, without_autograd


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
