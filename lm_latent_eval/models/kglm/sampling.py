"""Ancestral sampling of text from a KGLM: z_prefix ~ p(z | prefix) (approximately), then (z_t, x_t) ~ p step by step.

The prefix's latents are drawn by sampling-importance-resampling: ``PREFIX_PARTICLES`` draws from the peeking
proposal, one kept with probability ∝ p(x, z) / q(z | x) (exact as the particle count grows). Each new token then
follows the generative story: mention type among the allowed ones, a new entity or a parent + edge (or the
continued entity), and the word from the one softmax over generating a vocabulary word and copying an alias token.
"""

from __future__ import annotations

import math

import torch

from .awd_lstm import embedding_dropout
from .latents import CONTINUING, NEW, NONE, RELATED, allowed_types, candidate_slots, expand_edges

PREFIX_PARTICLES = 32


def _draw(log_probs: torch.Tensor, generator) -> int:
    """One index from a vector of log probabilities (−inf allowed)."""
    return int(torch.multinomial(torch.softmax(log_probs.double(), -1).float(), 1, generator=generator))


def _prefix_latents(model, x: torch.Tensor, generator) -> dict:
    """One z ~ SIR(p(z | x)) with PREFIX_PARTICLES proposals: dict of LongTensor [T]."""
    z, log_q = model.proposal.sample(x, PREFIX_PARTICLES, generator=generator)
    log_w = model.log_joint(x, z) - log_q
    k = _draw(log_w, generator)
    return {key: v[k] for key, v in z.items()}


@torch.no_grad()
def sample_text(
    model, prefix_text: str, max_tokens: int, generator=None, stop: list[str] | None = None
) -> str:
    """A continuation of ``prefix_text`` drawn from p (led by a space when the prefix is non-empty), cut before the
    first ``stop`` string."""
    x = model.tokenize(prefix_text)
    device = x.device
    tables, C = model.tables, model.cutoff
    types, ents, pars = [], [], []
    if x.numel():
        z = _prefix_latents(model, x, generator)
        types, ents, pars = z["mention_type"].tolist(), z["entity"].tolist(), z["parent"].tolist()
    inputs = torch.cat([x.new_tensor([model.bos_id]), model.input_ids(x)])
    emb = embedding_dropout(model.token_embedding.weight, inputs, 0.0, False)
    out, state = model.encoder(emb.unsqueeze(0))
    # [1, D]: state after the last prefix token
    h = out[0, -1:]
    rows = [
        int(tables.row_of(torch.tensor(e, device=device))) if t != NONE else 0 for t, e in zip(types, ents)
    ]
    stops = [s for s in (stop or []) if s]
    generated: list[str] = []
    text = ""
    any_new = bool(tables.row_owned.any())
    for _ in range(max(0, int(max_tokens))):
        heads = model.latent_heads(h)
        t0 = torch.zeros(1, dtype=torch.long, device=device)
        window = torch.tensor(
            ([0] * C + rows)[len(rows) :] if C else [], dtype=torch.long, device=device
        ).unsqueeze(0)
        # [1, C]
        cand = candidate_slots(window, tables)
        prev_type = torch.tensor([types[-1]], device=device) if types else None
        allowed = allowed_types(any_new, cand.any(-1), prev_type)[0]
        typ = _draw(heads.type_logits()[0].masked_fill(~allowed, -math.inf), generator)
        ent = par = -1
        if typ == NEW:
            ent = int(tables.row_entity[_draw(heads.new_entity_logits(t0)[0], generator)])
        elif typ == RELATED:
            slot = _draw(heads.parent_logits(t0, window)[0].masked_fill(~cand[0], -math.inf), generator)
            par = int(tables.row_entity[window[0, slot]])
            edges, _ = expand_edges(torch.tensor([par], device=device), tables)
            ent = int(
                tables.edge_tail[edges[_draw(heads.edge_logits(torch.zeros_like(edges), edges), generator)]]
            )
        elif typ == CONTINUING:
            ent, par = ents[-1], pars[-1]
        word_id = _draw_word(model, heads.h_type[0], ent, generator)
        types.append(typ), ents.append(ent), pars.append(par)
        rows.append(int(tables.row_of(torch.tensor(ent, device=device))) if typ != NONE else 0)
        generated.append(model.vocabulary.word(word_id))
        body = " ".join(generated)
        text = " " + body if x.numel() else body
        if any(s in text for s in stops):
            break
        step = embedding_dropout(
            model.token_embedding.weight, model.input_ids(x.new_tensor([word_id])), 0.0, False
        )
        out, state = model.encoder(step.unsqueeze(0), state)
        h = out[0, -1:]
    return text[: min((text.find(s) for s in stops if s in text), default=len(text))]


def _draw_word(model, h_type: torch.Tensor, entity: int, generator) -> int:
    """x_t from the softmax over generating a vocabulary word and copying an alias token of ``entity`` (id, maybe ≥ V)."""
    row = model.tables.row_of(torch.tensor(entity, device=h_type.device))
    cond = model.condense(torch.cat([h_type, model.entity_embedding.weight[row]], -1))
    scores = model.generate(cond).double()
    ids = torch.arange(scores.numel(), device=h_type.device)
    table = model.alias_table(entity) if entity >= 0 else None
    if table is not None:
        proj, match = table
        scores = torch.cat([scores, (proj @ h_type).double()])
        ids = torch.cat([ids, match])
    return int(ids[_draw(scores, generator)])
