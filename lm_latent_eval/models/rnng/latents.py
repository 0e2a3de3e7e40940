"""Unlabeled binary trees as SHIFT/REDUCE sequences: z = LongTensor [K, 2T − 1] for a sentence of T words.

SHIFT (0) pushes the next word, REDUCE (1) pops the two top elements and pushes their constituent. A sequence is
a tree over T words iff it has T SHIFTs, REDUCE only finds ≥ 2 elements on the stack, and ends with one element;
the trees over T words are then in one-to-one correspondence with these sequences (Catalan(T − 1) of them).
Spans are (i, j), word i to word j inclusive, 0-based; every tree has 2T − 1 of them (T leaves and the root).
"""

from __future__ import annotations

import torch

SHIFT, REDUCE = 0, 1


def num_actions(num_words: int) -> int:
    """2T − 1 actions for T ≥ 1 words (0 for T = 0)."""
    return max(2 * num_words - 1, 0)


def check_actions(z, num_words: int) -> torch.Tensor:
    """z as LongTensor [K, 2T − 1] with values in {SHIFT, REDUCE}; a clear error for any other shape or value."""
    if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.dtype != torch.long:
        raise ValueError(
            f"z must be a LongTensor [K, 2T-1] of SHIFT/REDUCE actions, got {getattr(z, 'shape', type(z))}"
        )
    if z.shape[1] != num_actions(num_words):
        raise ValueError(
            f"z must have shape [K, 2T-1={num_actions(num_words)}] for T={num_words} words, got {tuple(z.shape)}"
        )
    if z.numel() and not ((z == SHIFT) | (z == REDUCE)).all():
        raise ValueError("z holds values other than SHIFT (0) and REDUCE (1)")
    return z


def stack_sizes(actions: torch.Tensor) -> torch.Tensor:
    """Number of stack elements *before* each action: LongTensor [K, A]."""
    delta = torch.where(actions == SHIFT, 1, -1)
    return torch.cumsum(delta, 1) - delta


def is_tree(actions: torch.Tensor, num_words: int) -> torch.Tensor:
    """BoolTensor [K]: the sequence is a binary tree over ``num_words`` words (see module docstring)."""
    K = actions.shape[0]
    if num_words == 0:
        return torch.ones(K, dtype=torch.bool, device=actions.device)
    sizes = stack_sizes(actions)
    reduce_ok = ((actions == SHIFT) | (sizes >= 2)).all(1)
    shifts = (actions == SHIFT).sum(1) == num_words
    return reduce_ok & shifts & (actions[:, 0] == SHIFT)


def right_branching(num_words: int, k: int = 1, device=None) -> torch.Tensor:
    """The right-branching tree (w_1 (w_2 (… w_T))) as actions [k, 2T − 1]: T SHIFTs then T − 1 REDUCEs."""
    row = [SHIFT] * num_words + [REDUCE] * max(num_words - 1, 0)
    return torch.tensor([row] * k, dtype=torch.long, device=device).reshape(k, num_actions(num_words))


def spans_from_actions(actions: torch.Tensor, num_words: int) -> torch.Tensor:
    """Constituent indicator [K, T, T] (True at (i, j) when words i..j form a constituent); meaningless for non-trees."""
    K, A = actions.shape
    T = num_words
    spans = torch.zeros(K, T, T, dtype=torch.bool, device=actions.device)
    if T == 0:
        return spans
    rows = torch.arange(K, device=actions.device)
    # left end of each stack element
    left = torch.zeros(K, T, dtype=torch.long, device=actions.device)
    size = torch.zeros(K, dtype=torch.long, device=actions.device)
    ptr = torch.zeros(K, dtype=torch.long, device=actions.device)
    for t in range(A):
        shift = actions[:, t] == SHIFT
        p = ptr.clamp(max=T - 1)
        below = (size - 2).clamp(min=0)
        start = torch.where(shift, p, left[rows, below])
        end = torch.where(shift, p, (ptr - 1).clamp(0, T - 1))
        spans[rows, start, end] = True
        pos = torch.where(shift, size, below).clamp(max=T - 1)
        left[rows, pos] = start
        size = pos + 1
        ptr = ptr + shift.long()
    return spans


def actions_from_spans(spans: torch.Tensor) -> torch.Tensor:
    """Actions [K, 2T − 1] of the trees whose constituent indicators are ``spans`` [K, T, T] (inverse of above).

    After the SHIFT of word j come as many REDUCEs as there are constituents of ≥ 2 words ending at j.
    """
    K, T, _ = spans.shape
    if T == 0:
        return torch.zeros(K, 0, dtype=torch.long, device=spans.device)
    # [K, T]: constituents (i < j) ending at j
    reduces = spans.triu(1).sum(1)
    before = torch.cumsum(reduces, 1) - reduces
    # position of the SHIFT of word j
    shift_at = torch.arange(T, device=spans.device) + before
    actions = torch.full((K, 2 * T - 1), REDUCE, dtype=torch.long, device=spans.device)
    return actions.scatter(1, shift_at, SHIFT)


# --- trees as nested tuples (for data and display) ---------------------------------------------------------------
def actions_from_tree(tree) -> list[int]:
    """Post-order SHIFT/REDUCE actions of a binary tree given as nested 2-tuples with words (str) at the leaves."""
    if isinstance(tree, str):
        return [SHIFT]
    if not (isinstance(tree, tuple) and len(tree) == 2):
        raise ValueError(f"a binary tree node must be a word or a pair, got {tree!r}")
    return actions_from_tree(tree[0]) + actions_from_tree(tree[1]) + [REDUCE]


def tree_from_actions(words: list[str], actions) -> object:
    """Nested 2-tuples of the tree that ``actions`` (a list or [2T − 1] tensor) builds over ``words``."""
    stack: list = []
    it = iter(words)
    for a in actions.tolist() if isinstance(actions, torch.Tensor) else actions:
        if a == SHIFT:
            stack.append(next(it))
        else:
            if len(stack) < 2:
                raise ValueError("REDUCE with fewer than two stack elements")
            right, left = stack.pop(), stack.pop()
            stack.append((left, right))
    if len(stack) != 1 or next(it, None) is not None:
        raise ValueError("actions do not build one tree over all the words")
    return stack[0]


def bracketed(tree) -> str:
    """Unlabeled bracketing "(w1 (w2 w3))" of a nested-tuple tree."""
    return tree if isinstance(tree, str) else f"({bracketed(tree[0])} {bracketed(tree[1])})"
