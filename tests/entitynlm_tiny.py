"""A tiny randomly initialised EntityNLM whose configurations can be listed (EntityNLM and contract tests)."""

from __future__ import annotations

import torch
from is_checks import randomize_weights

from lm_latent_eval.models.entitynlm import EntityNLM, build_vocabulary

TEXT = "anna saw her there"


def tiny_entitynlm(seed: int = 0, max_entities: int = 2, max_mention_length: int = 2) -> EntityNLM:
    """Random weights (std 0.7) so that every factor matters; q = p's encoder and heads plus noise (0.3)."""
    torch.manual_seed(seed)
    model = EntityNLM(
        build_vocabulary([["anna", "saw", "her", "there"]]),
        dim=6,
        hidden_size=7,
        num_layers=2,
        max_entities=max_entities,
        max_mention_length=max_mention_length,
        chunk_size=3,
    )
    return randomize_weights(model, std=0.7)
