"""KGLM exactness on tiny cases: enumeration of every latent configuration gives log p(x); q sums to one over the
same support; samples stay in it with the right frequencies; IS converges to the exact value and p̂ is unbiased;
beam marginalization is a lower bound that becomes exact once the beam covers the support."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from is_checks import assert_frequencies_match, assert_is_unbiased_on, exact_is_standard_error
from kglm_tiny import tiny_kglm

from lm_latent_eval.estimators import beam_log_marginal, importance_log_weights, log_mean_exp
from lm_latent_eval.models.kglm.enumerate import enumerate_latents, exact_log_marginal

TEXT = "Ada Lovelace born London"


@pytest.fixture(scope="module", params=[False, True], ids=["plain-q", "q-with-nopeek-heads-and-alias-features"])
def model(request):
    return tiny_kglm(proposal_features=request.param)


def _keys(z):
    return [tuple(r) for r in torch.stack([z["mention_type"], z["entity"], z["parent"]], -1).reshape(z["entity"].shape[0], -1).tolist()]


def test_enumerated_support_equals_brute_force_support(model):
    """log_joint > -inf exactly on the enumerated configurations, over every (type, entity, parent) assignment."""
    x = model.tokenize("Ada Lovelace born")
    N = model.graph.num_entities
    per_token = list(itertools.product(range(4), range(-1, N), range(-1, N)))
    combos = torch.tensor(list(itertools.product(per_token, repeat=3)))  # [M, 3, 3]
    z = {"mention_type": combos[..., 0], "entity": combos[..., 1], "parent": combos[..., 2]}
    z["relation"] = torch.full_like(z["entity"], -1)
    with torch.no_grad():
        finite = torch.isfinite(model.log_joint(x, z))
    brute = {tuple(r) for r in combos[finite].reshape(-1, 9).tolist()}
    enum = enumerate_latents(model, 3)
    assert brute == set(_keys(enum)) and len(brute) == enum["entity"].shape[0] > 50


@pytest.mark.parametrize("peek", [True, False])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_proposal_sums_to_one_over_the_support(model, peek, temperature):
    x = model.tokenize(TEXT)
    z = enumerate_latents(model, x.numel())
    with torch.no_grad():
        log_q = model.proposal.log_prob(x, z, temperature, peek)
    assert torch.isfinite(log_q).all()
    assert float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=1e-9)


def test_exact_marginal_is_a_probability_and_beats_any_single_configuration(model):
    x = model.tokenize(TEXT)
    z = enumerate_latents(model, x.numel())
    exact = exact_log_marginal(model, x)
    with torch.no_grad():
        assert exact > float(model.log_joint(x, z).max())
    assert exact < 0
    # the distribution over a whole vocabulary position sums to at most 1 (the unk penalty removes mass)
    total = [exact_log_marginal(model, model.tokenize(f"Ada {w}")) for w in model.vocab + model.extended_words]
    assert float(torch.logsumexp(torch.tensor(total), 0)) < 1e-9


@pytest.mark.parametrize("peek,temperature", [(True, 1.0), (False, 0.5), (True, 2.0)])
def test_samples_follow_q_and_stay_in_the_support(model, peek, temperature):
    """20,000 draws on a 2-token document: every draw is enumerated (p > 0) and frequencies match exp(log q)."""
    x = model.tokenize("Ada Lovelace")
    support = enumerate_latents(model, 2)
    index = {k: i for i, k in enumerate(_keys(support))}
    with torch.no_grad():
        probs = model.proposal.log_prob(x, support, temperature, peek).exp().numpy()
    z, log_q = model.proposal.sample(x, 20_000, temperature, peek, torch.Generator().manual_seed(11))
    assert torch.isfinite(model.log_joint(x, z)).all()
    counts = np.bincount([index[k] for k in _keys(z)], minlength=len(index))
    assert_frequencies_match(counts, probs)


def test_importance_sampling_converges_to_exact(model):
    x = model.tokenize(TEXT)
    exact = exact_log_marginal(model, x)
    for peek, temperature in [(True, 1.0), (False, 1.0), (True, 2.0)]:
        lw = importance_log_weights(model, x, num_samples=8192, temperature=temperature, peek=peek, seed=3, document=TEXT)
        assert np.isfinite(lw).all()
        support = enumerate_latents(model, x.numel())
        se = exact_is_standard_error(model, x, support, temperature, peek, exact, lw.size)
        assert se < 0.1
        assert log_mean_exp(lw) == pytest.approx(exact, abs=4 * se)


def test_importance_estimate_is_unbiased(model):
    """Mean of p̂/p over 300 independent runs of K = 4 is 1 within 3 standard errors; E[log p̂] <= log p."""
    assert_is_unbiased_on(model, TEXT, exact_log_marginal(model, model.tokenize(TEXT)))


def test_beam_is_a_lower_bound_and_exact_once_it_covers_the_support(model):
    x = model.tokenize(TEXT)
    exact = exact_log_marginal(model, x)
    M = enumerate_latents(model, x.numel())["entity"].shape[0]
    values = [beam_log_marginal(model, x, k, TEXT) for k in (1, 5, 50, 200)]
    assert all(v <= exact + 1e-9 for v in values)
    assert all(a <= b + 1e-9 for a, b in zip(values, values[1:]))
    assert values[0] < exact - 1e-3
    z = model.proposal.beam(x, M + 10)
    assert z["entity"].shape[0] == M and len(set(_keys(z))) == M  # distinct configurations, the whole support
    assert beam_log_marginal(model, x, M + 10, TEXT) == pytest.approx(exact, abs=1e-6)
    # the beam keeps the configurations with the highest q
    with torch.no_grad():
        top = model.proposal.log_prob(x, model.proposal.beam(x, 10)).sort(descending=True).values
        everything = model.proposal.log_prob(x, enumerate_latents(model, x.numel())).sort(descending=True).values
    assert torch.allclose(top, everything[:10], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cutoff", [1, 3])
def test_five_token_documents_exact(cutoff):
    """5 tokens (tens of thousands of configurations): Σ q = 1, IS within 0.03 nats, beam exact on the full support."""
    model = tiny_kglm(seed=4, cutoff=cutoff)
    x = model.tokenize("Ada Lovelace was born London")
    z = enumerate_latents(model, 5)
    with torch.no_grad():
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 1.0, True), 0)) == pytest.approx(0, abs=1e-9)
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 0.7, False), 0)) == pytest.approx(0, abs=1e-9)
    exact = exact_log_marginal(model, x)
    lw = importance_log_weights(model, x, num_samples=50_000, temperature=1.0, peek=True, seed=0, document="five")
    assert log_mean_exp(lw) == pytest.approx(exact, abs=0.03)
    M = z["entity"].shape[0]
    assert beam_log_marginal(model, x, M, "five") == pytest.approx(exact, abs=1e-6)
