"""Exact log p(x) = log Σ_z p(x, z) for EntityNLM by listing every latent configuration (tiny documents only).

The support is built here in plain Python from the generative story, independently of the tensor code that scores
it: after a finished mention (or at t = 1) z_t is "no mention" (0, −1, 1) or a mention (1, e, ℓ) of an existing
entity e < n or the new one e = n (only while n < M) with ℓ ∈ 1..ℓ_max; inside a mention z_t = (1, E_{t−1},
L_{t−1} − 1).
"""

from __future__ import annotations

import torch

from ...protocol import enumerated_log_marginal
from .latents import LATENT_KEYS

MAX_CONFIGURATIONS = 200_000


def enumerate_latents(
    num_tokens: int, max_entities: int, max_mention_length: int, max_configurations: int = MAX_CONFIGURATIONS
) -> dict:
    """Every z with p(x, z) > 0 for a document of ``num_tokens`` tokens: dict of LongTensor [N, T]."""
    configs: list[list[tuple[int, int, int]]] = []

    def extend(history: list, count: int) -> None:
        if len(configs) > max_configurations:
            raise ValueError(f"more than {max_configurations} latent configurations: too large to enumerate")
        if len(history) == num_tokens:
            configs.append(list(history))
            return
        _, prev_e, prev_l = history[-1] if history else (0, -1, 1)
        if prev_l > 1:
            choices = [(1, prev_e, prev_l - 1)]
        else:
            choices = [(0, -1, 1)] + [
                (1, e, ell)
                for e in range(min(count + 1, max_entities))
                for ell in range(1, max_mention_length + 1)
            ]
        for choice in choices:
            history.append(choice)
            extend(history, max(count, choice[1] + 1))
            history.pop()

    extend([], 0)
    arr = torch.tensor(configs, dtype=torch.long).reshape(len(configs), num_tokens, 3)
    return {k: arr[..., i].contiguous() for i, k in enumerate(LATENT_KEYS)}


@torch.no_grad()
def exact_log_marginal(
    model, x: torch.Tensor, max_configurations: int = MAX_CONFIGURATIONS, batch_size: int = 4096
) -> float:
    """log Σ_z p(x, z) over every configuration of ``enumerate_latents``, float64 (0.0 for T = 0)."""
    z = enumerate_latents(x.numel(), model.max_entities, model.max_mention_length, max_configurations)
    return enumerated_log_marginal(model, x, z, batch_size)
