"""Texts longer than the network reads: windows of w positions, each revealed in turn after the one before it.

With R positions of room (the network's ``max_length``, less a conditional view's context) a text of T ≤ R tokens
is one window. A longer text is cut into windows of w = ⌊R / 2⌋ positions, [0, w), [w, 2w), …; the sampler reveals
every position of window j before any of window j + 1, and the network reads window j after window j − 1 (all of it
revealed), nothing else. So

    p(x) = Π_j p(x_{window j} | x_{window j−1} revealed),    each factor a sum over the orders of window j,

the order policy π chooses among the masked positions of the current window only, and an order that leaves a
window before it is complete has probability 0. ``loglikelihood_rolling`` thus scores documents of any length.
"""

from __future__ import annotations

import torch

from ...errors import UnsupportedError


def room(model) -> int | None:
    """R: the text positions the network reads after a conditional view's context (None: no limit)."""
    if model.max_length is None:
        return None
    return model.max_length - (0 if model.context_ids is None else model.context_ids.numel())


def window_size(model, length: int) -> int | None:
    """w for a text of ``length`` tokens, or None when it fits in one network input; UnsupportedError when the
    context leaves fewer than 2 positions.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(max_length=8, context_ids=None)
    >>> window_size(model, 8), window_size(model, 9)
    (None, 4)
    """
    space = room(model)
    if space is None or length <= space:
        return None
    if space < 2:
        raise UnsupportedError(
            f"{type(model).__name__}: the context leaves {space} positions of the network's {model.max_length}"
        )
    return space // 2


def current_window(revealed: torch.Tensor, size: int) -> torch.Tensor:
    """The window j of each state's first masked position: LongTensor [N] (0 for a state with none masked).

    Examples
    --------
    >>> current_window(torch.tensor([[True, True, False, False, False], [False] * 5]), 2)
    tensor([1, 0])
    """
    return (~revealed).to(torch.uint8).argmax(1) // size


def closed_positions(model, revealed: torch.Tensor) -> torch.Tensor:
    """The positions the next step cannot reveal: revealed ones, and every position outside the current window."""
    size = window_size(model, revealed.shape[1])
    if size is None:
        return revealed
    window = torch.arange(revealed.shape[1], device=revealed.device) // size
    return revealed | (window[None, :] != current_window(revealed, size)[:, None])


def window_spans(length: int, size: int) -> list[tuple[int, int, int]]:
    """(start, mid, end) of each window j: the network reads [start, end), window j is [mid, end).

    Examples
    --------
    >>> window_spans(5, 2)
    [(0, 0, 2), (0, 2, 4), (2, 4, 5)]
    """
    return [(max(0, mid - size), mid, min(length, mid + size)) for mid in range(0, length, size)]
