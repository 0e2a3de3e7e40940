"""Reveal orders σ as latents: z = LongTensor [K, T], row k = (σ_1, ..., σ_T), the position revealed at each step.

Only permutations of 0..T−1 have p(x, σ) > 0; any other row of positions is scored −inf. The state before step t is
the revealed set S_{t−1} = {σ_1, ..., σ_{t−1}}.
"""

from __future__ import annotations

import itertools

import torch

from .conditionals import StepScores, step_scores


def check_orders(z: torch.Tensor, length: int) -> torch.Tensor:
    """z as a LongTensor [K, T] of positions in [0, T); ValueError otherwise.

    Examples
    --------
    >>> check_orders(torch.tensor([[1, 0]]), 2)
    tensor([[1, 0]])
    >>> check_orders(torch.tensor([[1, 2]]), 2)
    Traceback (most recent call last):
    ...
    ValueError: orders must hold positions in [0, 2), got range [1, 2]
    """
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != length:
        raise ValueError(
            f"z must be a LongTensor [K, T={length}] of orders, got {getattr(z, 'shape', type(z))}"
        )
    if z.dtype.is_floating_point or z.dtype == torch.bool:
        raise ValueError(f"z must hold integer positions, got {z.dtype}")
    if z.numel() and (int(z.min()) < 0 or int(z.max()) >= length):
        raise ValueError(
            f"orders must hold positions in [0, {length}), got range [{int(z.min())}, {int(z.max())}]"
        )
    return z.long()


def is_permutation(z: torch.Tensor) -> torch.Tensor:
    """Whether each row of z [K, T] (positions in [0, T)) lists every position once: BoolTensor [K].

    Examples
    --------
    >>> is_permutation(torch.tensor([[2, 0, 1], [0, 0, 1]]))
    tensor([ True, False])
    """
    T = z.shape[1]
    counts = torch.zeros(z.shape[0], T, dtype=torch.long, device=z.device).scatter_add_(
        1, z, torch.ones_like(z)
    )
    return (counts == 1).all(1)


def prefix_revealed(z: torch.Tensor) -> torch.Tensor:
    """The revealed set before each step of each order: BoolTensor [K, T (step), T (position)].

    Examples
    --------
    >>> prefix_revealed(torch.tensor([[2, 0, 1]]))[0].int()
    tensor([[0, 0, 0],
            [0, 0, 1],
            [1, 0, 1]], dtype=torch.int32)
    """
    one_hot = torch.nn.functional.one_hot(z, z.shape[1])
    return (one_hot.cumsum(1) - one_hot) > 0


def all_orders(length: int) -> torch.Tensor:
    """Every order of ``length`` positions, in lexicographic order: LongTensor [T!, T] ([1, 0] for T = 0).

    Examples
    --------
    >>> all_orders(3).tolist()
    [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
    """
    return torch.tensor(list(itertools.permutations(range(length))), dtype=torch.long).reshape(-1, length)


def order_scores(model, x: torch.Tensor, z: torch.Tensor, need_tokens: bool = True):
    """The step scores of K orders at their own states: (valid [K], z' [K, T], StepScores of [K, T, T]).

    Rows of z that are not permutations are marked invalid and scored as the identity order in z' (the caller
    puts −inf there); ``StepScores`` rows are [K, T (step), T (position)].
    """
    K, T = z.shape
    valid = is_permutation(z)
    identity = torch.arange(T, device=z.device).expand(K, T)
    z = torch.where(valid[:, None], z, identity)
    scores = step_scores(model, x, prefix_revealed(z).reshape(K * T, T), need_tokens)
    shaped = StepScores(scores.log_token.reshape(K, T, T), scores.log_order.reshape(K, T, T))
    return valid, z, shaped


def picked(table: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Σ_t table[k, t, σ_t] for tables [K, T, T] and orders z [K, T]: float64 [K].

    Examples
    --------
    >>> picked(torch.arange(8.0).reshape(1, 2, 4)[:, :, :2], torch.tensor([[1, 0]]))
    tensor([5.])
    """
    return table.gather(-1, z[..., None]).squeeze(-1).sum(1)
