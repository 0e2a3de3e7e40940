"""A tiny randomly initialised RNNG over six words, whose trees can be listed (RNNG and contract tests)."""

from __future__ import annotations

import torch

from lm_latent_eval.models.rnng import RNNG, build_vocabulary

WORDS = ["the", "dog", "saw", "a", "cat", "with"]
TEXT = "the dog saw a cat with a cat"  # 8 words: 429 trees


def tiny_rnng(seed: int = 0, count_eos: bool = True, num_layers: int = 2) -> RNNG:
    """Random weights (std 0.4 for p, 0.2 for q) so that every factor matters; p and q are unrelated."""
    torch.manual_seed(seed)
    model = RNNG(
        build_vocabulary([WORDS]),
        dim=6,
        hidden_size=6,
        num_layers=num_layers,
        count_eos=count_eos,
        proposal_hidden_size=5,
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.2 if name.startswith("proposal.") else 0.4)
    return model.eval()
