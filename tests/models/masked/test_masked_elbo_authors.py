"""``elbo_masks=llada`` and ``elbo_masks=mdlm``: the ELBO as LLaDA's and MDLM's evaluation code compute it, held to its
expectation computed here by listing every mask count and every set of masked positions on short texts; LLaDA's
uneven counts (round half to even) and the mask row it keeps make it another number than the ELBO, which the tests
show."""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.elbo import LLADA_GROUP, MDLM_EPS, llada_counts
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models.masked import tiny_masked_lm


@pytest.fixture(scope="module")
def model():
    return tiny_masked_lm(seed=0)


def network_log_probs(model, x: torch.Tensor, masked: list[int], keep_mask_row: bool) -> torch.Tensor:
    """log p_θ(v | x with ``masked`` masked) [T, V] from the network, the mask row kept or left out."""
    ids = x.clone()
    ids[masked] = model.mask_id
    with torch.no_grad():
        logits = model.predict(ids[None])[0].double()
    if not keep_mask_row:
        logits[:, model.mask_id] = -math.inf
    return torch.log_softmax(logits, -1)


def size_means(model, x: torch.Tensor, keep_mask_row: bool) -> dict[int, float]:
    """f(c) = the mean over the sets M of c positions of Σ_{i ∈ M} log p_θ(x_i | x outside M), every set listed."""
    T, out = x.numel(), {}
    for c in range(1, T + 1):
        sums = []
        for masked in itertools.combinations(range(T), c):
            lp = network_log_probs(model, x, list(masked), keep_mask_row)
            sums.append(sum(float(lp[i, x[i]]) for i in masked))
        out[c] = float(np.mean(sums))
    return out


def llada_expectation(model, x) -> float:
    """E[term] of LLaDA's scheme: l uniform on 1..T, row j of its group masking c_j(l) positions, weight T / c_j."""
    T, f = x.numel(), size_means(model, x, keep_mask_row=True)
    return float(
        np.mean(
            [T / c * f[c] for first in range(1, T + 1) for c in llada_counts(LLADA_GROUP, T, first).tolist()]
        )
    )


def mdlm_expectation(model, x) -> float:
    """E[term] of MDLM's scheme: t uniform on [ε, 1], M ~ Bernoulli(t) per position, weight 1 / t (quadrature)."""
    T, f = x.numel(), size_means(model, x, keep_mask_row=False)

    def term(t):
        return sum(stats.binom.pmf(c, T, t) * f[c] for c in range(1, T + 1)) / t

    return integrate.quad(term, MDLM_EPS, 1.0, epsabs=1e-12, epsrel=1e-12)[0] / (1 - MDLM_EPS)


def estimate(model, text: str, masks: str, num_samples: int):
    settings = EstimatorSettings("elbo", num_samples=num_samples, elbo_masks=masks, seed=5)
    return resolve(settings, model).estimate(text)


@pytest.mark.parametrize("masks, expectation", [("llada", llada_expectation), ("mdlm", mdlm_expectation)])
@pytest.mark.parametrize("text", ["a b c", "c c b a d"])
def test_the_authors_elbo_averages_to_its_expectation_over_every_mask(model, masks, expectation, text):
    x = model.tokenize(text)
    found = estimate(model, text, masks, 32 * 200)
    exact = expectation(model, x)
    assert abs(found.log_likelihood - exact) < 4 * found.standard_error
    assert found.standard_error < 0.2  # power: the expectation pinned to a fraction of a nat


def test_llada_counts_weigh_odd_and_even_counts_unevenly_at_eight_tokens():
    T = 8
    frequency = collections.Counter(
        c for first in range(1, T + 1) for c in llada_counts(LLADA_GROUP, T, first).tolist()
    )
    relative = {c: frequency[c] * T / sum(frequency.values()) for c in range(1, T + 1)}
    assert relative == {c: 0.75 if c % 2 else 1.25 for c in range(1, T + 1)}
    # a length that is a multiple of the group: every count as often as under U{1..T}
    assert collections.Counter(
        c for first in range(1, 33) for c in llada_counts(LLADA_GROUP, 32, first).tolist()
    ) == {c: LLADA_GROUP for c in range(1, 33)}


def test_llada_figure_is_not_the_elbo_and_keeping_the_mask_row_lowers_it(model):
    x = model.tokenize("a b c d a b c d")
    T = x.numel()
    kept, left = size_means(model, x, True), size_means(model, x, False)
    elbo = sum(left[c] / c for c in range(1, T + 1))  # the ELBO: counts uniform on 1..T, mask row left out
    uniform_kept = sum(kept[c] / c for c in range(1, T + 1))
    assert uniform_kept < elbo  # the mask row takes probability from every token
    # uneven counts: another weighting of the same terms (exact sums, no draws: 5.3e-4 nats on this model)
    assert abs(llada_expectation(model, x) - uniform_kept) > 1e-4


def test_every_mask_setting_has_its_scheme():
    from lm_latent_eval.estimators.elbo import MASK_SCHEMES
    from lm_latent_eval.estimators.settings import ELBO_MASKS

    assert set(ELBO_MASKS) == {*MASK_SCHEMES, "left_to_right"}
