"""SMC on KGLM and EntityNLM against exact enumeration on tiny documents (runs once their stepwise part exists)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from is_checks import assert_unbiased, randomize_weights
from kglm_tiny import tiny_kglm

from lm_latent_eval.estimators import importance_log_weights, log_mean_exp
from lm_latent_eval.estimators.smc import smc_log_weights
from lm_latent_eval.models.entitynlm import EntityNLM, build_vocabulary
from lm_latent_eval.models.entitynlm.enumerate import exact_log_marginal as entitynlm_exact
from lm_latent_eval.models.kglm.enumerate import exact_log_marginal as kglm_exact
from lm_latent_eval.protocol import has_stepwise, missing_stepwise_methods

ATOL = 1e-6  # float32 network math, float64 accumulation


def tiny_entitynlm() -> EntityNLM:
    torch.manual_seed(0)
    model = EntityNLM(build_vocabulary([["anna", "saw", "her", "there"]]), dim=6, hidden_size=7, num_layers=2,
                      max_entities=2, max_mention_length=2, chunk_size=3)
    return randomize_weights(model, std=0.7)


CASES = {
    "kglm": (lambda: tiny_kglm(proposal_features=True), "Ada Lovelace born London", kglm_exact),
    "entitynlm": (tiny_entitynlm, "anna saw her there", entitynlm_exact),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    build, text, exact = CASES[request.param]
    model = build()
    if not has_stepwise(model):
        pytest.skip(f"{request.param} has no stepwise part yet (missing {', '.join(missing_stepwise_methods(model))})")
    x = model.tokenize(text)
    return model, text, x, exact(model, x)


@pytest.mark.parametrize("peek,tau", [(True, 1.0), (False, 1.0), (True, 0.7)])
def test_increments_sum_to_log_joint_minus_log_q(case, peek, tau):
    """Σ_t increments of every particle = log p(x, z) − log q_τ(z | x) of the path it drew (whole-document code)."""
    model, _, x, _ = case
    state = model.smc_init(x, 64, temperature=tau, peek=peek)
    gen = torch.Generator().manual_seed(3)
    total = torch.zeros(64, dtype=torch.float64)
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        total += inc.to("cpu", torch.float64)
    z = model.smc_latents(state)
    with torch.no_grad():
        expected = model.log_joint(x, z) - model.proposal.log_prob(x, z, tau, peek)
    torch.testing.assert_close(total, expected.to(torch.float64), rtol=0, atol=ATOL)


@pytest.mark.parametrize("peek,tau", [(True, 1.0), (False, 0.7)])
def test_without_resampling_smc_weights_are_the_is_weights_of_the_same_draws(case, peek, tau):
    """Threshold 0: the stepwise proposal consumes the random stream as proposal.sample does, draw for draw."""
    model, text, x, _ = case
    lw_is = importance_log_weights(model, x, num_samples=200, temperature=tau, peek=peek, seed=4, document=text)
    lw_smc, _ = smc_log_weights(model, x, num_samples=200, temperature=tau, peek=peek, seed=4, document=text, resample_threshold=0.0, smc_runs=1)
    np.testing.assert_allclose(lw_smc, lw_is, rtol=0, atol=ATOL)
    assert np.unique(lw_is).size > 5


@pytest.mark.parametrize("peek,threshold", [(True, 0.5), (False, 1.0)])
def test_smc_is_unbiased_against_enumeration(case, peek, threshold):
    """Mean of p̂/p over 300 runs of K = 4 is 1 within 3 standard errors; E log p̂ ≤ log p."""
    model, text, x, log_p = case
    runs = [smc_log_weights(model, x, num_samples=4, temperature=1.0, peek=peek, seed=s, document=text, resample_threshold=threshold, smc_runs=1) for s in range(300)]
    log_phat = np.array([log_mean_exp(lw) for lw, _ in runs])
    assert_unbiased(log_phat, log_p)
    assert log_phat.mean() < log_p
    if threshold == 1.0:
        assert np.mean([d.resampling_steps for _, d in runs]) > 0.5
