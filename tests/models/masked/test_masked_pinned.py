"""Pinned numbers of the bundled masked-diffusion LM (recorded with torch 2.13.0+cpu, AVX512, AMD EPYC; ``pins.py``):
a speed-up must not move log p(x, σ), log q_τ(σ | x), the exact log p(x) or the log weights of fixed seeds."""

from __future__ import annotations

import torch
from pins import pinned

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.smc import smc_log_weights
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.corpus import TEST_FILE, read_sentences

TEXT = "The busy teacher waited."  # the first held-out sentence
ORDERS = torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]])


def test_pinned_joint_proposal_and_exact_values():
    model, _ = load_model("masked")
    assert read_sentences(TEST_FILE)[0] == TEXT
    x = model.tokenize(TEXT)
    assert x.tolist() == [3, 70, 15, 44, 2]
    with torch.no_grad():
        assert model.log_joint(x, ORDERS).tolist() == pinned(
            [-14.574728910140445, -12.699954930953433, -14.984605971984315], abs=1e-9
        )
        assert model.proposal.log_prob(x, ORDERS, 1.0, True).tolist() == pinned(
            [-10.589859659005821, -5.681570459674337, -7.623694983238252], abs=1e-9
        )
        assert model.proposal.log_prob(x, ORDERS, 0.5, True).tolist() == pinned(
            [-19.68415319753013, -9.386624157693817, -13.043371652140882], abs=1e-9
        )
    assert model.log_marginal(x) == pinned(-9.052683715578004, abs=1e-9)
    confident, _ = load_model("masked", policy="confidence", policy_temperature=0.5)
    assert confident.log_marginal(x) == pinned(-8.64910391540047, abs=1e-9)
    assert confident.log_joint(x, ORDERS).tolist() == pinned(
        [-21.207227219386432, -13.211118786864333, -18.19524453110077], abs=1e-9
    )


def test_pinned_log_weights_of_fixed_seeds():
    model, _ = load_model("masked")
    x = model.tokenize(TEXT)
    expected = [-10.045456171035767, -8.44512140750885, -10.314550638198853, -8.503015041351318]
    lw_is = importance_log_weights(model, x, num_samples=4, peek=False, seed=0, document=TEXT)
    lw_smc, diagnostics = smc_log_weights(
        model, x, num_samples=4, peek=False, seed=0, document=TEXT, smc_runs=1
    )
    assert lw_is.tolist() == pinned(expected, abs=1e-9)
    # the ESS never fell below K/2 on this text: no resampling, so SMC's weights are IS's, draw for draw
    assert diagnostics.resampling_steps == 0
    assert lw_smc.tolist() == pinned(expected, abs=1e-9)
