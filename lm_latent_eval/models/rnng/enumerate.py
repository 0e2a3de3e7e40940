"""Exact log p(x) = log Σ_z p(x, z) for the RNNG by listing every binary tree over the words (short sentences).

The trees are built here in plain Python from the split structure (every split point of every span), independently
of the tensor code that scores them; there are Catalan(T − 1) of them (429 for T = 8, 4,862 for T = 10).
"""

from __future__ import annotations

import math
from functools import cache

import torch

from ...errors import UnsupportedError
from ...protocol import enumerated_log_marginal
from .latents import REDUCE, SHIFT

# Catalan(11) = 58,786 trees
MAX_WORDS = 12


@cache
def _trees(n: int) -> tuple[tuple[int, ...], ...]:
    """Action sequences of every binary tree over n ≥ 1 leaves."""
    if n == 1:
        return ((SHIFT,),)
    return tuple(
        left + right + (REDUCE,) for k in range(1, n) for left in _trees(k) for right in _trees(n - k)
    )


def enumerate_trees(num_words: int) -> torch.Tensor:
    """Every binary tree over ``num_words`` words as actions: LongTensor [Catalan(T − 1), 2T − 1] ([1, 0] for T = 0)."""
    if num_words == 0:
        return torch.zeros(1, 0, dtype=torch.long)
    if num_words > MAX_WORDS:
        raise UnsupportedError(
            f"{num_words} words: more than {MAX_WORDS} is too many trees to enumerate (Catalan({num_words - 1}) = "
            f"{catalan(num_words - 1):,})"
        )
    return torch.tensor(_trees(num_words), dtype=torch.long)


def catalan(n: int) -> int:
    """Number of binary trees over n + 1 leaves."""
    return math.comb(2 * n, n) // (n + 1)


@torch.no_grad()
def exact_log_marginal(model, x: torch.Tensor, batch_size: int = 4096) -> float:
    """log Σ_z p(x, z) over every tree of the words of x, float64 (0.0 for T = 0)."""
    z = enumerate_trees(model.proposal.words(x).numel()).to(x.device)
    return enumerated_log_marginal(model, x, z, batch_size)
