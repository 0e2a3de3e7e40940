"""A tiny randomly initialised KGLM with a small knowledge graph, shared by the KGLM tests."""

from __future__ import annotations

import torch
from is_checks import randomize_weights

from lm_latent_eval.models.kglm import KGLM, KnowledgeGraph, build_vocabulary


def tiny_graph() -> KnowledgeGraph:
    """3 entities; Q1 reaches Q2 by two relations (their probabilities add up), Q1 <-> Q3; multi-token aliases."""
    return KnowledgeGraph.from_dicts(
        edges={"Q1": [("born_in", "Q2"), ("lives_in", "Q2"), ("spouse", "Q3")], "Q3": [("spouse", "Q1")]},
        aliases={"Q1": [["Ada", "Lovelace"], ["Ada"]], "Q2": [["London"]], "Q3": [["William", "King"]]},
    )


def tiny_kglm(seed: int = 0, cutoff: int = 2, proposal_features: bool = False) -> KGLM:
    """Random weights (std 0.5) so that every factor matters; q = p's heads plus noise (a different distribution).

    ``proposal_features``: q also has its own no-peeking heads and the peeking alias-match features."""
    torch.manual_seed(seed)
    vocab = build_vocabulary([["Ada", "was", "born", "in", "the", "city", "King"]])
    model = KGLM(
        vocab,
        tiny_graph(),
        token_dim=8,
        entity_dim=6,
        hidden_size=10,
        num_layers=2,
        cutoff=cutoff,
        unk_penalty=1.0,
        chunk_size=2,
        proposal_nopeek_heads=proposal_features,
        proposal_alias_features=proposal_features,
    )
    return randomize_weights(model, std=0.5)
