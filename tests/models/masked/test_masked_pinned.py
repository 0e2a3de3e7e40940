"""Pinned numbers of the bundled masked-diffusion LM (recorded with torch 2.13.0+cpu, AVX512, AMD EPYC; ``pins.py``;
re-pinned when the token normalizer went from float32 to float64, which moved them by up to 1e-6): a speed-up must not
move log p(x, σ), log q_τ(σ | x), the exact log p(x) or the log weights of fixed seeds."""

from __future__ import annotations

import pytest
import torch
from pins import pinned

from lm_latent_eval.estimators import importance_log_weights, smc_log_weights
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
            [-14.574729774631852, -12.699955407848693, -14.98460578608923], abs=1e-9
        )
        # peeking through the checkpoint's value head, then the myopic q ∝ π p_θ(x_i | S) (the head set aside)
        assert model.proposal.log_prob(x, ORDERS, 1.0, True).tolist() == pinned(
            [-5.016588520588505, -4.01589556636843, -5.939294756119756], abs=1e-9
        )
        assert model.proposal.log_prob(x, ORDERS, 0.5, True).tolist() == pinned(
            [-5.596069212992615, -3.556595001185729, -7.255561644896057], abs=1e-9
        )
        model.value_head = None
        assert model.proposal.log_prob(x, ORDERS, 1.0, True).tolist() == pinned(
            [-10.589859714184831, -5.681570822469126, -7.623694593416972], abs=1e-9
        )
        assert model.proposal.log_prob(x, ORDERS, 0.5, True).tolist() == pinned(
            [-19.684153293154413, -9.38662464068744, -13.043370543413571], abs=1e-9
        )
    assert model.log_marginal(x) == pinned(-9.052683987110948, abs=1e-9)
    confident, _ = load_model("masked", policy="confidence", policy_temperature=0.5)
    assert confident.log_marginal(x) == pinned(-8.64910435254089, abs=1e-9)
    assert confident.log_joint(x, ORDERS).tolist() == pinned(
        [-21.207228144577073, -13.211119719251815, -18.19524399041142], abs=1e-9
    )


def test_pinned_log_weights_of_fixed_seeds():
    model, _ = load_model("masked")
    x = model.tokenize(TEXT)
    expected = [-10.045456066439172, -8.445121845982968, -10.314551031029541, -8.503015861077753]
    lw_is = importance_log_weights(model, x, num_samples=4, peek=False, seed=0, document=TEXT)
    lw_smc, diagnostics = smc_log_weights(
        model, x, num_samples=4, peek=False, seed=0, document=TEXT, smc_runs=1
    )
    assert lw_is.tolist() == pinned(expected, abs=1e-9)
    # the ESS never fell below K/2 on this text: no resampling, so SMC's weights are IS's, draw for draw, up to the
    # network's float32 rounding, which depends on how many revealed sets one call scores (SMC: one step's, IS: all
    # the orders'): logits differing by ~1e-6 in a few improbable entries move the float64 normalizer by ~3e-8 (the
    # float32 normalizer, before, rounded that away; 1.8e-7 on an Intel Xeon's BLAS, whose kernels differ by batch
    # size more often: still a few float32 ulps of |log w| ≈ 10)
    assert diagnostics.resampling_steps == 0
    assert lw_smc.tolist() == pytest.approx(lw_is.tolist(), abs=1e-6)
