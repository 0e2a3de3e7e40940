"""KGLM exactness beyond the contract table (tests/contract/): a vocabulary position has total probability at most one
(the unknown-word penalty removes mass), the beam search keeps the configurations of highest q, and five-token
documents under other cutoffs are exact."""

from __future__ import annotations

import itertools

import pytest
import torch
from kglm_tiny import tiny_kglm

from lm_latent_eval.estimators import beam_log_marginal, importance_log_weights, log_mean_exp
from lm_latent_eval.models.kglm.enumerate import enumerate_latents, exact_log_marginal

TEXT = "Ada Lovelace born London"


@pytest.fixture(
    scope="module", params=[False, True], ids=["plain-q", "q-with-nopeek-heads-and-alias-features"]
)
def model(request):
    return tiny_kglm(proposal_features=request.param)


def test_a_vocabulary_position_has_total_probability_at_most_one(model):
    """Σ_w p(Ada w) ≤ 1 over every vocabulary and alias word: the unknown-word penalty removes mass."""
    total = [
        exact_log_marginal(model, model.tokenize(f"Ada {w}")) for w in model.vocab + model.extended_words
    ]
    assert float(torch.logsumexp(torch.tensor(total), 0)) < 1e-9


def test_beam_search_keeps_the_configurations_of_highest_q(model):
    """The left-to-right beam search: a larger beam never loses mass, and 10 beams hold q's 10 best configurations."""
    x = model.tokenize(TEXT)
    values = [beam_log_marginal(model, x, k, TEXT) for k in (1, 5, 50, 200)]
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(values))
    with torch.no_grad():
        top = model.proposal.log_prob(x, model.proposal.beam(x, 10)).sort(descending=True).values
        everything = (
            model.proposal.log_prob(x, enumerate_latents(model, x.numel())).sort(descending=True).values
        )
    assert torch.allclose(top, everything[:10], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cutoff", [1, 3])
def test_five_token_documents_exact(cutoff):
    """5 tokens (tens of thousands of configurations): Σ q = 1, IS within 0.03 nats, beam exact on the full support."""
    model = tiny_kglm(seed=4, cutoff=cutoff)
    x = model.tokenize("Ada Lovelace was born London")
    z = enumerate_latents(model, 5)
    with torch.no_grad():
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 1.0, True), 0)) == pytest.approx(
            0, abs=1e-9
        )
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 0.7, False), 0)) == pytest.approx(
            0, abs=1e-9
        )
    exact = exact_log_marginal(model, x)
    lw = importance_log_weights(
        model, x, num_samples=50_000, temperature=1.0, peek=True, seed=0, document="five"
    )
    assert log_mean_exp(lw) == pytest.approx(exact, abs=0.03)
    M = z["entity"].shape[0]
    assert beam_log_marginal(model, x, M, "five") == pytest.approx(exact, abs=1e-6)
