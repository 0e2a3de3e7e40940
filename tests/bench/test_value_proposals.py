"""bench/masked_value.py --proposals (issue 52, item 1): its bench-only sampler ``proposal_smc`` is unbiased under
both proposals, whatever the head (a random one here), held to the oracle's exact p(x) at 6 tokens."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import torch
from masked_value import proposal_smc

from lm_latent_eval.models.masked.oracle import make_oracle_model, oracle_log_marginal, sample_oracle_text
from lm_latent_eval.models.masked.value import ValueHead

SEEDS = 300


@pytest.mark.parametrize("proposal", ["one row", "adapted"])
def test_proposal_smc_is_unbiased(proposal):
    oracle = make_oracle_model()
    torch.manual_seed(3)
    oracle.value_head = ValueHead(8).double().eval()
    x = sample_oracle_text(oracle, 6, seed=5)
    truth = oracle_log_marginal(oracle, x)
    ratios = torch.tensor(
        [math.exp(proposal_smc(oracle, x, 8, seed, proposal)[0] - truth) for seed in range(SEEDS)]
    )
    # p̂ / p has mean 1; 4 standard errors (a wrong increment, e.g. ψ(∅) not 1 or the proposal's log q left out,
    # moves the mean by far more)
    assert abs(float(ratios.mean()) - 1) < 4 * float(ratios.std()) / math.sqrt(SEEDS)
    assert float(ratios.std()) > 0
