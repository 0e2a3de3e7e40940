"""bench/masked_value.py --proposals and bench/masked_head_levers.py (issue 52, item 1): the bench-only sampler
``proposal_smc`` is unbiased under every proposal (DUEL's policies' scores among them), tempered or not, mixed with
uniform orders or not, under either twist, whatever the head (a random one here), held to the oracle's exact p(x) at
6 tokens; the one-row proposal's normaliser Z(S) is exact where one position is masked, and the consistency fit's
sets have the sizes asked for."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import torch
from masked_head_levers import STATES, draw_sets
from masked_value import one_row_values, proposal_smc

from lm_latent_eval.models.masked.conditionals import step_scores
from lm_latent_eval.models.masked.oracle import make_oracle_model, oracle_log_marginal, sample_oracle_text
from lm_latent_eval.models.masked.value import ValueHead, pseudo_log_likelihoods

SEEDS = 300


def oracle_with_random_head():
    oracle = make_oracle_model()
    torch.manual_seed(3)
    oracle.value_head = ValueHead(8).double().eval()
    return oracle


def ratios(oracle, x, K: int, seeds: int, *settings) -> torch.Tensor:
    """p̂ / p [seeds] of ``proposal_smc`` with K particles and ``settings`` (proposal, temperature, ...), seeds 0, 1, ..."""
    truth = oracle_log_marginal(oracle, x)
    return torch.tensor(
        [math.exp(proposal_smc(oracle, x, K, seed, *settings)[0] - truth) for seed in range(seeds)]
    )


@pytest.mark.parametrize(
    "proposal, temperature, twist, defensive",
    [
        ("one row", 1.0, "head", 0.0),
        ("one row", 1.5, "head", 0.0),
        ("one row", 1.0, "proposal", 0.0),
        ("one row", 1.0, "head", 0.3),
        ("adapted", 1.0, "head", 0.0),
        ("greedy_confidence", 1.0, "head", 0.0),
        ("margin", 0.5, "head", 0.1),
    ],
)
def test_proposal_smc_is_unbiased(proposal, temperature, twist, defensive):
    oracle = oracle_with_random_head()
    x = sample_oracle_text(oracle, 6, seed=5)
    r = ratios(oracle, x, 8, SEEDS, proposal, temperature, twist, defensive)
    # p̂ / p has mean 1; 4 standard errors (a wrong increment, e.g. ψ(∅) not 1 or the proposal's log q left out,
    # moves the mean by far more)
    assert abs(float(r.mean()) - 1) < 4 * float(r.std()) / math.sqrt(SEEDS)
    assert float(r.std()) > 0


def test_defensive_mixture_is_weighted_by_what_it_draws():
    # one particle never resamples, so p̂ = p(x, σ) / q(σ) for the one order drawn: unbiased for any q with full
    # support, if q is the mixture the order was drawn from; a sharp proposal (τ = 0.25) half mixed with uniform
    # orders sets the mixture far from q (weighting by q alone is off by about 6 standard errors here)
    oracle = oracle_with_random_head()
    x = sample_oracle_text(oracle, 4, seed=5)
    seeds = 2000
    r = ratios(oracle, x, 1, seeds, "one row", 0.25, "head", 0.5)
    assert abs(float(r.mean()) - 1) < 4 * float(r.std()) / math.sqrt(seeds)


def test_one_row_normaliser_is_exact_with_one_position_masked():
    oracle = oracle_with_random_head()
    x = sample_oracle_text(oracle, 6, seed=5)
    revealed = ~torch.eye(6, dtype=torch.bool)  # row j: every position but j revealed
    scores = step_scores(oracle, x, revealed)
    with torch.no_grad():
        log_z = one_row_values(oracle.value_head, scores, revealed, pseudo_log_likelihoods(oracle, x))[1]
    # Z(S) = π(j | S) p_θ(x_j | S) ψ(all) with ψ(all) = 1, whatever the head
    assert torch.allclose(log_z, scores.log_joint.diagonal(), atol=1e-12)


@pytest.mark.parametrize("states", list(STATES))
def test_consistency_sets_have_the_size_asked_for(states):
    oracle = oracle_with_random_head()
    x = sample_oracle_text(oracle, 8, seed=5)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        sets = draw_sets(oracle, x, pseudo_log_likelihoods(oracle, x), 3, 16, states, generator)
    assert sets.shape == (16, 8) and bool((sets.sum(1) == 3).all())
