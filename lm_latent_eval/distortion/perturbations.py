"""Ill-formed sequences for the distortion analysis (LeBrun, Sordoni, O'Donnell 2022, Table 3), Σ* samples.

A sequence is a list of token ids from the alphabet Σ (``vocabulary``, special tokens such as BOS/EOS
excluded). The four edit operations are applied recursively: step k edits the output of step k − 1. Every
function takes a ``numpy.random.Generator`` (or an int seed), so results are reproducible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

PERTURBATIONS = ("swap", "delete", "insert", "substitute")
# length of a random Σ* sequence ~ Poisson(10)
MEAN_RANDOM_LENGTH = 10.0


def _generator(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _alphabet(vocabulary) -> np.ndarray:
    """Σ as a non-empty int64 [V] array of distinct ids."""
    v = np.unique(np.asarray(vocabulary, dtype=np.int64))
    if v.ndim != 1 or v.size == 0:
        raise ValueError("the vocabulary (alphabet Σ) must be a non-empty list of token ids")
    return v


def _swappable(tokens: Sequence[int]) -> np.ndarray:
    """Positions i with x_i ≠ x_{i+1} (swapping equal neighbours would not change the sequence)."""
    t = np.asarray(tokens, dtype=np.int64)
    return np.flatnonzero(t[:-1] != t[1:]) if t.size > 1 else np.empty(0, dtype=np.int64)


def swap(tokens: Sequence[int], rng) -> list[int]:
    """Transpose two different adjacent tokens x_i, x_{i+1} at a uniformly drawn position i."""
    positions = _swappable(tokens)
    if positions.size == 0:
        raise ValueError(f"swap needs two different adjacent tokens, got {list(tokens)}")
    i = int(_generator(rng).choice(positions))
    out = list(tokens)
    out[i], out[i + 1] = out[i + 1], out[i]
    return out


def delete(tokens: Sequence[int], rng) -> list[int]:
    """Remove the token at a uniformly drawn position."""
    if len(tokens) == 0:
        raise ValueError("delete needs a non-empty sequence")
    i = int(_generator(rng).integers(len(tokens)))
    return list(tokens[:i]) + list(tokens[i + 1 :])


def insert(tokens: Sequence[int], vocabulary, rng) -> list[int]:
    """Insert a uniformly drawn w ∈ Σ at a uniformly drawn position 0..n (n + 1 slots)."""
    rng = _generator(rng)
    i = int(rng.integers(len(tokens) + 1))
    w = int(rng.choice(_alphabet(vocabulary)))
    return list(tokens[:i]) + [w] + list(tokens[i:])


def _substitutable(tokens: Sequence[int], alphabet: np.ndarray) -> np.ndarray:
    """Positions i where Σ \\ {x_i} is non-empty (all of them unless |Σ| = 1)."""
    t = np.asarray(tokens, dtype=np.int64)
    return np.arange(t.size) if alphabet.size > 1 else np.flatnonzero(t != alphabet[0])


def substitute(tokens: Sequence[int], vocabulary, rng) -> list[int]:
    """Replace the token at a uniformly drawn position i by a uniformly drawn w ∈ Σ \\ {x_i}."""
    rng = _generator(rng)
    alphabet = _alphabet(vocabulary)
    positions = _substitutable(tokens, alphabet)
    if positions.size == 0:
        raise ValueError(
            f"substitute needs a token that Σ = {alphabet.tolist()} can replace, got {list(tokens)}"
        )
    i = int(rng.choice(positions))
    out = list(tokens)
    out[i] = int(rng.choice(alphabet[alphabet != out[i]]))
    return out


def applicable(operation: str, tokens: Sequence[int], vocabulary) -> bool:
    """Whether ``operation`` can change ``tokens`` (delete needs a token, swap two different neighbours)."""
    if operation == "swap":
        return _swappable(tokens).size > 0
    if operation == "delete":
        return len(tokens) > 0
    if operation == "insert":
        return True
    if operation == "substitute":
        return _substitutable(tokens, _alphabet(vocabulary)).size > 0
    raise ValueError(f"unknown perturbation {operation!r}; expected one of {PERTURBATIONS}")


def perturb_once(
    tokens: Sequence[int], vocabulary, rng, operations: Sequence[str] = PERTURBATIONS
) -> tuple[list[int], str]:
    """One edit: an operation drawn uniformly among those of ``operations`` applicable to ``tokens``."""
    rng = _generator(rng)
    unknown = [op for op in operations if op not in PERTURBATIONS]
    if unknown or not operations:
        raise ValueError(f"operations must be a non-empty subset of {PERTURBATIONS}, got {list(operations)}")
    possible = [op for op in operations if applicable(op, tokens, vocabulary)]
    if not possible:
        raise ValueError(f"none of {list(operations)} applies to the sequence {list(tokens)}")
    op = possible[int(rng.integers(len(possible)))]
    if op == "swap":
        return swap(tokens, rng), op
    if op == "delete":
        return delete(tokens, rng), op
    if op == "insert":
        return insert(tokens, vocabulary, rng), op
    return substitute(tokens, vocabulary, rng), op


def perturbation_chain(
    tokens: Sequence[int], num_steps: int, vocabulary, rng, operations: Sequence[str] = PERTURBATIONS
) -> list[list[int]]:
    """The recursively perturbed versions [x^(1), …, x^(S)] of x, x^(k) = one edit of x^(k−1)."""
    if not isinstance(num_steps, (int, np.integer)) or num_steps < 0:
        raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
    rng = _generator(rng)
    chain, current = [], list(tokens)
    for _ in range(num_steps):
        current, _ = perturb_once(current, vocabulary, rng, operations)
        chain.append(current)
    return chain


def perturb(
    tokens: Sequence[int], num_steps: int, vocabulary, rng, operations: Sequence[str] = PERTURBATIONS
) -> list[int]:
    """x^(num_steps): ``num_steps`` edits applied recursively (x itself for 0 steps)."""
    chain = perturbation_chain(tokens, num_steps, vocabulary, rng, operations)
    return chain[-1] if chain else list(tokens)


def random_sequences(
    num_sequences: int, vocabulary, rng, mean_length: float = MEAN_RANDOM_LENGTH
) -> list[list[int]]:
    """Σ* samples: length n ~ Poisson(mean_length), then n tokens drawn uniformly from Σ."""
    if not isinstance(num_sequences, (int, np.integer)) or num_sequences < 0:
        raise ValueError(f"num_sequences must be a non-negative integer, got {num_sequences!r}")
    if mean_length < 0:
        raise ValueError(f"mean_length must be non-negative, got {mean_length}")
    rng = _generator(rng)
    alphabet = _alphabet(vocabulary)
    lengths = rng.poisson(mean_length, size=num_sequences)
    return [rng.choice(alphabet, size=int(n)).tolist() for n in lengths]


def potential_productivity(sequences: Iterable[Hashable | Sequence[int]]) -> float:
    """Good–Turing P_N = N1 / N: share of the N samples whose type occurs exactly once (the unseen mass)."""
    counts = Counter(tuple(s) if isinstance(s, (list, np.ndarray)) else s for s in sequences)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("potential productivity needs at least one sequence")
    return sum(1 for c in counts.values() if c == 1) / total
