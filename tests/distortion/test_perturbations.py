"""Table 3 edits (swap, delete, insert, substitute), recursion, random Σ* sequences, Good–Turing P_N."""

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from lm_latent_eval.distortion import perturbations as P

SIGMA = list(range(10, 16))  # alphabet Σ of 6 token ids


def one_edit_apart(a: list[int], b: list[int]) -> str | None:
    """Which single edit turns a into b (None if none does)."""
    if len(b) == len(a) + 1 and any(b[:i] + b[i + 1 :] == a for i in range(len(b))):
        return "insert"
    if len(b) == len(a) - 1 and any(a[:i] + a[i + 1 :] == b for i in range(len(a))):
        return "delete"
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return "substitute"
        if (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        ):
            return "swap"
    return None


def test_forced_edits_hand_computed():
    rng = np.random.default_rng(0)
    assert P.swap([1, 1, 2], rng) == [1, 2, 1]  # the only pair of different neighbours
    assert P.delete([7], rng) == []
    assert P.insert([], [3], rng) == [3]
    assert P.substitute([5], [5, 6], rng) == [6]  # never the same token
    assert P.substitute([5, 6], [5], rng) == [5, 5]  # Σ = {5}: only position 1 can change


def test_inapplicable_edits_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="two different adjacent tokens"):
        P.swap([4, 4, 4], rng)
    with pytest.raises(ValueError, match="non-empty"):
        P.delete([], rng)
    with pytest.raises(ValueError, match="none of"):
        P.perturb_once([], SIGMA, rng, operations=("delete", "swap", "substitute"))
    with pytest.raises(ValueError, match="subset of"):
        P.perturb_once([1, 2], SIGMA, rng, operations=("shuffle",))
    with pytest.raises(ValueError, match="non-negative integer"):
        P.perturbation_chain([1, 2], -1, SIGMA, rng)


def test_delete_and_insert_positions_and_tokens_are_uniform():
    rng = np.random.default_rng(1)
    x = [0, 1, 2, 3]
    deleted = Counter(set(x).difference(P.delete(x, rng)).pop() for _ in range(4000))
    assert chisquare([deleted[t] for t in x]).pvalue > 1e-3
    slots, tokens = Counter(), Counter()
    for _ in range(6000):
        y = P.insert(x, SIGMA, rng)
        i = next(i for i in range(5) if y[:i] + y[i + 1 :] == x and y[i] in SIGMA)
        slots[i] += 1
        tokens[y[i]] += 1
    assert chisquare([slots[i] for i in range(5)]).pvalue > 1e-3  # n + 1 = 5 slots
    assert chisquare([tokens[t] for t in SIGMA]).pvalue > 1e-3


def test_substitute_draws_uniformly_from_other_tokens():
    rng = np.random.default_rng(2)
    counts = Counter()
    for _ in range(5000):
        y = P.substitute([10, 11], SIGMA, rng)
        i = 0 if y[0] != 10 else 1
        assert y[i] != [10, 11][i] and y[1 - i] == [10, 11][1 - i]
        counts[(i, y[i])] += 1
    # 2 positions × 5 replacement tokens each, all equally likely
    assert len(counts) == 10 and chisquare(list(counts.values())).pvalue > 1e-3


def test_operations_are_drawn_uniformly_among_applicable():
    rng = np.random.default_rng(3)
    ops = Counter(P.perturb_once([10, 11, 12, 13, 14], SIGMA, rng)[1] for _ in range(4000))
    assert chisquare([ops[o] for o in P.PERTURBATIONS]).pvalue > 1e-3
    # swap and delete/substitute cannot apply to an empty sequence: only insert
    assert {P.perturb_once([], SIGMA, rng)[1] for _ in range(50)} == {"insert"}


def test_chain_applies_one_edit_per_step_recursively_and_is_seeded():
    x = [10, 11, 12, 13, 14, 15, 10, 11]
    chain = P.perturbation_chain(x, 12, SIGMA, rng=5)
    assert len(chain) == 12
    kinds = [one_edit_apart(a, b) for a, b in zip([x] + chain, chain)]
    assert None not in kinds, kinds
    assert chain == P.perturbation_chain(x, 12, SIGMA, rng=np.random.default_rng(5))
    assert chain != P.perturbation_chain(x, 12, SIGMA, rng=6)
    assert P.perturb(x, 12, SIGMA, rng=5) == chain[-1]
    assert P.perturb(x, 0, SIGMA, rng=5) == x
    # swap and substitute keep the length, insert adds one token, delete removes one
    lengths = np.diff([len(x)] + [len(c) for c in chain])
    expected = {"swap": 0, "substitute": 0, "insert": 1, "delete": -1}
    assert [expected[k] for k in kinds] == lengths.tolist()


def test_random_sequences_are_poisson_length_uniform_tokens():
    seqs = P.random_sequences(5000, SIGMA, rng=7)
    lengths = np.array([len(s) for s in seqs])
    # Poisson(10): mean 10 ± 3·sqrt(10/5000), variance 10
    assert abs(lengths.mean() - 10.0) < 3 * np.sqrt(10.0 / 5000)
    assert lengths.var() == pytest.approx(10.0, rel=0.1)
    tokens = Counter(t for s in seqs for t in s)
    assert set(tokens) == set(SIGMA) and chisquare([tokens[t] for t in SIGMA]).pvalue > 1e-3
    assert seqs == P.random_sequences(5000, SIGMA, rng=7)
    short = P.random_sequences(2000, SIGMA, rng=8, mean_length=2.0)
    assert np.mean([len(s) == 0 for s in short]) == pytest.approx(np.exp(-2.0), abs=0.03)


def test_potential_productivity_hand_computed():
    assert P.potential_productivity([(1, 2), (1, 2), (3,), (4, 5)]) == 0.5
    assert P.potential_productivity([[1], [2], [3]]) == 1.0
    assert P.potential_productivity([[1], [1]]) == 0.0
    assert P.potential_productivity(["the cat", "a dog", "the cat"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least one"):
        P.potential_productivity([])


def test_potential_productivity_matches_good_turing_expectation():
    # N draws from M equally likely types: E[N1] / N = (1 − 1/M)^(N−1)
    rng = np.random.default_rng(9)
    m, n = 500, 300
    values = [P.potential_productivity(rng.integers(m, size=n).tolist()) for _ in range(200)]
    expected = (1 - 1 / m) ** (n - 1)
    assert np.mean(values) == pytest.approx(expected, abs=4 * np.std(values) / np.sqrt(200))
