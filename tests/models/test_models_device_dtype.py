"""The bundled KGLM, EntityNLM and RNNG in bfloat16 (CPU; IS and SMC) and on CUDA (skipped without a device).

bfloat16 rounds the network only: log p(x, z) and log q(z | x) of the same z stay float64 and within bf16 rounding
of float32. On CUDA the same z gets the CPU's numbers (float32 on other hardware: 1e-4 relative), the device
sampler's log q equals the rescoring of its own draws, and an IS estimate agrees with the CPU's within the noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.aggregate import log_mean_exp
from lm_latent_eval.estimators.diagnostics import relative_variance
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.protocol import select_particles

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def to_device(z, device):
    """z (a tensor or a dict of tensors) on ``device``."""
    return {k: v.to(device) for k, v in z.items()} if isinstance(z, dict) else z.to(device)


@torch.no_grad()
def draw_and_score(model, x, k=64, seed=0):
    z, log_q = model.proposal.sample(x, k, generator=torch.Generator(device=x.device).manual_seed(seed))
    return z, log_q, model.log_joint(x, z)


@pytest.mark.parametrize("name", ["entitynlm", "kglm", "rnng"])
@torch.no_grad()
def test_bfloat16_network_keeps_float64_log_probabilities(name):
    full, _ = load_model(name)
    low, _ = load_model(name, dtype=torch.bfloat16)
    assert {p.dtype for p in low.parameters() if p.is_floating_point()} == {torch.bfloat16}
    doc = bundled_documents(name)[1]
    x = full.tokenize(doc)
    z, log_q, log_p = draw_and_score(full, x)
    low_p, low_q = low.log_joint(x, z), low.proposal.log_prob(x, z)
    assert low_p.dtype == torch.float64 and low_q.dtype == torch.float64
    assert torch.isfinite(low_p).all() and torch.isfinite(low_q).all()
    # bf16 keeps 8 significant bits: per-token log-probabilities move by about 1%, not more
    tokens = x.numel()
    assert (low_p - log_p).abs().max() / tokens < 0.05 and (low_q - log_q).abs().max() / tokens < 0.05
    assert not torch.equal(low_p, log_p)  # the network really ran in bf16


@pytest.mark.parametrize("name", ["entitynlm", "kglm", "rnng"])
def test_bfloat16_network_runs_smc(name):
    """The stepwise kernels keep the network's dtype (bfloat16 stacks and states) and float64 weights: SMC in bf16
    lands within bf16 rounding of float32's estimate."""
    from lm_latent_eval.estimators import smc_log_weights

    doc = bundled_documents(name)[1]
    estimates = []
    for dtype in (None, torch.bfloat16):
        model, _ = load_model(name, dtype=dtype)
        x = model.tokenize(doc)
        lw, _ = smc_log_weights(model, x, num_samples=64, seed=2, document=doc, smc_runs=1)
        assert lw.dtype == np.float64 and np.isfinite(lw).all()
        estimates.append(log_mean_exp(lw))
    assert abs(estimates[0] - estimates[1]) / x.numel() < 0.05


@needs_cuda
@pytest.mark.parametrize("name", ["entitynlm", "kglm", "rnng"])
@torch.no_grad()
def test_cuda_gives_the_cpu_numbers(name):
    cpu, _ = load_model(name)
    cuda, _ = load_model(name, device="cuda")
    doc = bundled_documents(name)[1]
    x = cpu.tokenize(doc)
    z, log_q, log_p = draw_and_score(cpu, x)
    xc, zc = x.to("cuda"), to_device(z, "cuda")
    assert torch.allclose(cuda.log_joint(xc, zc).cpu(), log_p, rtol=1e-4, atol=1e-4)
    assert torch.allclose(cuda.proposal.log_prob(xc, zc).cpu(), log_q, rtol=1e-4, atol=1e-4)
    zg, log_qg, log_pg = draw_and_score(cuda, xc, k=256)  # the device sampler (sync-free kernels)
    assert log_qg.device.type == "cuda" and torch.isfinite(log_pg).all()
    assert torch.allclose(cuda.proposal.log_prob(xc, zg), log_qg, rtol=1e-6, atol=1e-6)
    cpu_again = cpu.log_joint(x, to_device(select_particles(zg, slice(0, 32)), "cpu"))
    assert torch.allclose(cpu_again, log_pg[:32].cpu(), rtol=1e-4, atol=1e-4)


@needs_cuda
@pytest.mark.parametrize("name", ["entitynlm", "kglm", "rnng"])
def test_cuda_estimate_agrees_with_cpu_within_noise(name):
    """Other generators draw other samples: the two log p̂ differ by noise only (5 standard errors)."""
    doc = bundled_documents(name)[1]
    estimates = []
    for device in ("cpu", "cuda"):
        model, _ = load_model(name, device=device)
        lw = importance_log_weights(
            model, model.tokenize(doc).to(device), num_samples=4096, seed=3, document=doc, device=device
        )
        estimates.append((log_mean_exp(lw), math.sqrt(relative_variance(lw))))  # se of log p̂ (delta method)
    (a, se_a), (b, se_b) = estimates
    assert abs(a - b) <= 5 * np.hypot(se_a, se_b) + 1e-3


def test_sample_block_is_per_device():
    from lm_latent_eval.estimators import EstimatorSettings, recorded_settings, sample_block

    assert (
        sample_block("cpu") == 1024 and sample_block("cuda") == sample_block(torch.device("cuda:0")) == 16384
    )
    assert recorded_settings(EstimatorSettings("is"), "cuda")["sample_block"] == 16384
    assert recorded_settings(EstimatorSettings("is"))["sample_block"] == 1024


@needs_cuda
def test_cuda_weights_do_not_depend_on_batch_size():
    model, _ = load_model("kglm", device="cuda")
    doc = bundled_documents("kglm")[1]
    x = model.tokenize(doc).to("cuda")
    one_block = importance_log_weights(model, x, num_samples=3000, seed=5, document=doc, device="cuda")
    chunked = importance_log_weights(
        model, x, num_samples=3000, seed=5, document=doc, device="cuda", batch_size=700
    )
    # the same particles (the sample block fixes them); cuBLAS picks its kernel by row count, so float32 rounding
    np.testing.assert_allclose(chunked, one_block, rtol=1e-6, atol=1e-4)
