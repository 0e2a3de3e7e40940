"""The bundled masked-diffusion LM with a bfloat16 network: float64 log probabilities within bf16 rounding of float32,
and IS / SMC over uniform orders close to float32's estimate."""

from __future__ import annotations

import numpy as np
import torch

from lm_latent_eval.estimators import importance_log_weights, smc_log_weights
from lm_latent_eval.estimators.aggregate import log_mean_exp
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.corpus import TEST_FILE, read_sentences


@torch.no_grad()
def test_bfloat16_network_keeps_float64_log_probabilities():
    full, _ = load_model("masked")
    low, _ = load_model("masked", dtype=torch.bfloat16)
    assert {p.dtype for p in low.parameters() if p.is_floating_point()} == {torch.bfloat16}
    x = full.tokenize(read_sentences(TEST_FILE)[1])
    for peek in (True, False):
        z, log_q = full.proposal.sample(x, 64, 1.0, peek, torch.Generator().manual_seed(0))
        log_p = full.log_joint(x, z)
        low_p, low_q = low.log_joint(x, z), low.proposal.log_prob(x, z, 1.0, peek)
        assert low_p.dtype == torch.float64 and low_q.dtype == torch.float64
        assert (low_p - log_p).abs().max() / x.numel() < 0.05 and (
            low_q - log_q
        ).abs().max() / x.numel() < 0.05
        assert not torch.equal(low_p, log_p)  # the network really ran in bf16
    assert abs(low.log_marginal(x) - full.log_marginal(x)) / x.numel() < 0.05


def test_bfloat16_estimates_stay_near_float32():
    text = read_sentences(TEST_FILE)[1]
    estimates = []
    for dtype in (None, torch.bfloat16):
        model, _ = load_model("masked", dtype=dtype)
        x = model.tokenize(text)
        lw_is = importance_log_weights(model, x, num_samples=64, peek=False, seed=2, document=text)
        lw_smc, _ = smc_log_weights(model, x, num_samples=64, peek=False, seed=2, document=text, smc_runs=1)
        assert lw_is.dtype == lw_smc.dtype == np.float64 and np.isfinite(lw_smc).all()
        estimates.append((log_mean_exp(lw_is), log_mean_exp(lw_smc)))
    assert all(abs(a - b) / x.numel() < 0.05 for a, b in zip(*estimates))
