"""Exact log p(x) = log Σ_z p(x, z) for a KGLM by listing every latent configuration (tiny documents and graphs only).

The support is built here in plain Python from the rules of the generative story, independently of the tensor
code that scores it: at each position z_t is none; new (any entity owning an embedding row); related (a parent
among the distinct row-owners mentioned in the last ``cutoff`` positions that has KG edges, and any tail of its
edges); or continuing (only after a mention).
"""

from __future__ import annotations

import torch

from ...protocol import enumerated_log_marginal
from .latents import CONTINUING, NEW, NONE, RELATED, canonical_relation

MAX_CONFIGURATIONS = 200_000


def enumerate_latents(model, num_tokens: int, max_configurations: int = MAX_CONFIGURATIONS) -> dict:
    """Every z with p(x, z) > 0 for a document of ``num_tokens`` tokens: dict of LongTensor [M, T]."""
    tables, graph, C = model.tables, model.graph, model.cutoff
    entity_row = tables.entity_row.tolist()
    row_entity = tables.row_entity.tolist()
    owners = [e for e in range(graph.num_entities) if row_entity[entity_row[e]] == e]
    configs: list[list[tuple[int, int, int]]] = []

    def choices(history):
        t = len(history)
        out = [(NONE, -1, -1)]
        out += [(NEW, e, -1) for e in owners]
        recent = []
        for typ, ent, _ in history[max(0, t - C) : t] if C > 0 else []:
            if typ != NONE:
                owner = row_entity[entity_row[ent]]
                if owner not in recent and graph.out_edges(owner):
                    recent.append(owner)
        for parent in recent:
            for tail in dict.fromkeys(tail for _, tail in graph.out_edges(parent)):
                out.append((RELATED, tail, parent))
        if t > 0 and history[-1][0] != NONE:
            out.append((CONTINUING, history[-1][1], history[-1][2]))
        return out

    def extend(history):
        if len(configs) > max_configurations:
            raise ValueError(f"more than {max_configurations} latent configurations: too large to enumerate")
        if len(history) == num_tokens:
            configs.append(list(history))
            return
        for choice in choices(history):
            history.append(choice)
            extend(history)
            history.pop()

    extend([])
    arr = torch.tensor(configs, dtype=torch.long).reshape(len(configs), num_tokens, 3)
    device = tables.entity_row.device
    z = {
        "mention_type": arr[..., 0].to(device),
        "entity": arr[..., 1].to(device),
        "parent": arr[..., 2].to(device),
    }
    z["relation"] = canonical_relation(tables, z["parent"], z["entity"])
    return z


@torch.no_grad()
def exact_log_marginal(
    model, x: torch.Tensor, max_configurations: int = MAX_CONFIGURATIONS, batch_size: int = 4096
) -> float:
    """log Σ_z p(x, z) over every configuration of ``enumerate_latents``, float64."""
    z = enumerate_latents(model, x.numel(), max_configurations)
    return enumerated_log_marginal(model, x, z, batch_size)
