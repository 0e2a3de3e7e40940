"""A tiny LDA over four words and three topics, whose 3^T topic assignments can be listed (LDA and contract tests)."""

from __future__ import annotations

import torch

from lm_latent_eval.models.lda import LDA

WORDS = ["apple", "banana", "cherry", "date"]
TEXT = "apple banana cherry apple date"  # 5 tokens: 243 assignments
SHORT_TEXT = "banana apple date"


def tiny_lda(seed: int = 0, zeros: bool = False, **config) -> LDA:
    """Random topics Φ (rows of Dirichlet(1) draws; ``zeros``: Φ[k, w] = 0 for some pairs) and an asymmetric α."""
    gen = torch.Generator().manual_seed(seed)
    phi = -torch.log(
        torch.rand(3, len(WORDS), generator=gen, dtype=torch.float64)
    )  # Exp(1): Dirichlet(1) rows
    if zeros:
        phi[0, 0] = phi[1, 2] = phi[2, 3] = 0.0
    alpha = torch.tensor([0.3, 0.8, 1.5], dtype=torch.float64)
    return LDA.from_parameters(phi, alpha, WORDS, **config).eval()
