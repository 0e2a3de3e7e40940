"""Sequential Monte Carlo on the HMM, whose exact log p(x) (forward algorithm) is the ground truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hmm_tiny import WholeDocumentOnly, make_tiny_hmm
from is_checks import assert_unbiased

from lm_latent_eval.estimators import (
    EstimatorSettings,
    estimate_document,
    importance_log_weights,
    log_mean_exp,
    recorded_settings,
    resolve,
    smc_log_weights,
)
from lm_latent_eval.estimators.smc import (
    lee_whiteley_relative_variance,
    run_sizes,
    runs_corpus_log_likelihood,
    systematic_resample,
)
from lm_latent_eval.models.hmm.parameters import forward_log_alpha
from lm_latent_eval.protocol import has, missing

DOC = "a c b b a c a c"  # 8 tokens on the tiny HMM: 3^8 configurations


@pytest.fixture
def tiny_hmm():
    """The tiny HMM (S = 3, {a, b, c}) with a proposal far enough from p that SMC resamples at threshold 0.5."""
    model = make_tiny_hmm()
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for param, own in zip(model.proposal.parameters(), model.hmm.parameters()):
            param.copy_(own + 0.7 * torch.randn(param.shape, generator=gen))
    return model


def smc(model, text, k=10, seed=0, peek=False, tau=1.0, threshold=0.5, runs=1):
    x = model.tokenize(text)
    return smc_log_weights(
        model,
        x,
        num_samples=k,
        temperature=tau,
        peek=peek,
        seed=seed,
        document=text,
        resample_threshold=threshold,
        smc_runs=runs,
    )


def smc_estimate(model, text, **kw) -> float:
    return float(log_mean_exp(smc(model, text, **kw)[0]))


def advance(model, x, k: int, tau: float, peek: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run K particles through every token without resampling: (Σ_t increments float64 [K], z [K, T])."""
    state = model.smc_init(x, k, temperature=tau, peek=peek)
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros(k, dtype=torch.float64)
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        total += inc
    return total, model.smc_latents(state)


def proposal_log_joint(model, x, z) -> torch.Tensor:
    """log q'(x, z) under the proposal HMM (π', A', B') for z [K, T]."""
    log_pi, log_A, log_B = model.proposal.log_probs()
    return log_pi[z[:, 0]] + log_B[z, x].sum(1) + log_A[z[:, :-1], z[:, 1:]].sum(1)


# ---------------------------------------------------------------- stepwise and whole-document paths agree


def test_without_resampling_smc_weights_are_the_is_weights_of_the_same_draws(tiny_hmm):
    """Threshold 0, one run: the filtering proposal draws exactly what IS (no peeking) draws from the same stream."""
    for k, seed in ((50, 3), (1024, 0)):
        x = tiny_hmm.tokenize(DOC)
        lw_is = importance_log_weights(
            tiny_hmm, x, num_samples=k, temperature=1.0, peek=False, seed=seed, document=DOC
        )
        lw_smc, diag = smc(tiny_hmm, DOC, k=k, seed=seed, threshold=0.0)
        np.testing.assert_allclose(lw_smc, lw_is, rtol=0, atol=1e-12)
        assert diag.resampling_steps == 0 and np.unique(lw_is).size > 10


@pytest.mark.parametrize("peek,tau", [(False, 1.0), (False, 0.7), (True, 1.0), (True, 1.6)])
def test_increments_sum_to_log_joint_minus_the_log_q_of_the_drawn_path(tiny_hmm, peek, tau):
    """Σ_t increments = log p(x, z) − log q_τ(z | x), with log q_τ recomputed from the tempered conditionals of z."""
    x = tiny_hmm.tokenize(DOC)
    total, z = advance(tiny_hmm, x, 64, tau, peek, seed=5)
    assert z.shape == (64, x.numel())
    log_pi, log_A, _ = tiny_hmm.proposal.log_probs()
    emissions = tiny_hmm.proposal.emission_scores(x)
    if peek:  # look-ahead: add log β'_t, recomputed here from the forward algorithm run backwards in time
        beta = torch.zeros_like(emissions)
        for t in range(x.numel() - 2, -1, -1):
            beta[t] = torch.logsumexp(log_A + emissions[t + 1] + beta[t + 1], 1)
        emissions = emissions + beta
    log_q = torch.log_softmax((log_pi + emissions[0]) / tau, -1)[z[:, 0]]
    for t in range(1, x.numel()):
        log_q += torch.log_softmax((log_A[z[:, t - 1]] + emissions[t]) / tau, -1).gather(1, z[:, t : t + 1])[
            :, 0
        ]
    torch.testing.assert_close(total, tiny_hmm.log_joint(x, z) - log_q, rtol=0, atol=1e-10)


def test_look_ahead_proposal_at_tau_one_is_the_proposal_posterior(tiny_hmm):
    """peek=True, τ = 1: log q(z | x) of the drawn paths = log q'(x, z) − log q'(x), FFBS's distribution."""
    x = tiny_hmm.tokenize(DOC)
    total, z = advance(tiny_hmm, x, 200, 1.0, True, seed=1)
    log_pi, log_A, _ = tiny_hmm.proposal.log_probs()
    log_qx = torch.logsumexp(forward_log_alpha(log_pi, log_A, tiny_hmm.proposal.emission_scores(x))[-1], 0)
    expected = tiny_hmm.log_joint(x, z) - (proposal_log_joint(tiny_hmm, x, z) - log_qx)
    torch.testing.assert_close(total, expected, rtol=0, atol=1e-10)
    # and IS with FFBS scores its own draws by the same formula
    z_is, log_q_is = tiny_hmm.proposal.sample(x, 50, peek=True, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(log_q_is, proposal_log_joint(tiny_hmm, x, z_is) - log_qx, rtol=0, atol=1e-10)


def test_reorder_gives_each_particle_its_ancestors_history(tiny_hmm):
    x = tiny_hmm.tokenize(DOC)
    state = tiny_hmm.smc_init(x, 6, peek=False)
    gen = torch.Generator().manual_seed(0)
    for t in range(3):
        state, _ = tiny_hmm.smc_step(state, t, gen)
    before = tiny_hmm.smc_latents(state).clone()
    ancestors = torch.tensor([5, 5, 0, 2, 1, 3])
    after = tiny_hmm.smc_latents(tiny_hmm.smc_reorder(state, ancestors))
    assert torch.equal(after, before[ancestors])
    with pytest.raises(ValueError, match="expected token 3"):
        tiny_hmm.smc_step(state, 5, gen)


# ---------------------------------------------------------------- resampling


def test_systematic_resampling_counts_stay_within_one_of_n_times_the_weight():
    n = 40
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(n, dtype=torch.float64, generator=gen) ** 3
    weights[[3, 17]] = 0.0
    weights /= weights.sum()
    means = torch.zeros(n, dtype=torch.float64)
    for _ in range(4000):
        counts = torch.bincount(systematic_resample(weights.log(), gen), minlength=n).double()
        assert counts.sum() == n and ((counts - n * weights).abs() < 1).all()  # floor or ceil of N W_i
        means += counts / 4000
    assert means[3] == means[17] == 0.0  # a zero-weight particle never has children
    torch.testing.assert_close(
        means, n * weights, rtol=0, atol=0.03
    )  # E[children] = N W_i (unbiased resampling)


def test_threshold_controls_how_often_smc_resamples(tiny_hmm):
    steps = {
        thr: smc(tiny_hmm, DOC, k=30, seed=2, threshold=thr)[1].resampling_steps for thr in (0.0, 0.5, 1.0)
    }
    assert steps[0.0] == 0 < steps[0.5] <= steps[1.0] == tiny_hmm.tokenize(DOC).numel() - 1


def test_diagnostics_are_within_their_ranges(tiny_hmm):
    lw, diag = smc(tiny_hmm, DOC, k=40, seed=1)
    assert lw.shape == (40,) and diag.log_likelihood == pytest.approx(log_mean_exp(lw), abs=1e-12)
    assert 1.0 <= diag.ess_min <= diag.ess_mean <= 40.0
    assert diag.smc_runs == 1 and math.isnan(diag.run_log_likelihood_sd)
    assert 0 < diag.log_likelihood_stderr < 1


def test_lee_whiteley_without_resampling_is_the_is_variance_estimate():
    """n = 0: 1 − N/(N−1) (1 − Σ W_i²) = (N Σ W_i² − 1) / (N − 1), the unbiased IS estimate of Var(p̂)/p̂²."""
    log_w = torch.randn(50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    W = torch.softmax(log_w, 0)
    expected = float((50 * (W**2).sum() - 1) / 49)
    assert lee_whiteley_relative_variance(log_w, torch.arange(50), 0) == pytest.approx(expected, rel=1e-12)
    # one common ancestor after resampling: the genealogy has collapsed and no variance can be estimated from it
    assert lee_whiteley_relative_variance(log_w, torch.zeros(50, dtype=torch.long), 2) == pytest.approx(1.0)


# ---------------------------------------------------------------- statistics against the forward algorithm


@pytest.mark.parametrize("peek,tau,threshold", [(False, 1.0, 0.5), (True, 1.0, 0.5), (False, 0.8, 1.0)])
def test_smc_is_unbiased_for_p(tiny_hmm, peek, tau, threshold):
    """Mean of p̂/p over 400 runs is 1 within 3 standard errors; mean log p̂ ≤ log p; resampling really happened."""
    truth = tiny_hmm.log_marginal(tiny_hmm.tokenize(DOC))
    runs = [smc(tiny_hmm, DOC, k=8, seed=s, peek=peek, tau=tau, threshold=threshold) for s in range(400)]
    log_phat = np.array([log_mean_exp(lw) for lw, _ in runs])
    assert_unbiased(log_phat, truth)
    assert log_phat.mean() < truth
    assert np.mean([d.resampling_steps for _, d in runs]) > 0.3
    assert np.exp(log_phat - truth).std() > 0.05  # power: the estimates really vary


@pytest.mark.parametrize(
    "doc,peek,tau,threshold",
    [(7, False, 1.0, 1.0), (7, True, 1.0, 1.0), (0, False, 1.0, 1.0), (3, False, 0.8, 0.5)],
)
def test_smc_is_unbiased_on_bundled_documents(bundled_hmm, bundled_test_texts, doc, peek, tau, threshold):
    """The bundled HMM's mismatched proposal makes resampling matter: weight-blind resampling fails here by > 5 SE."""
    text = bundled_test_texts[doc]
    truth = bundled_hmm.log_marginal(bundled_hmm.tokenize(text))
    runs = [smc(bundled_hmm, text, k=12, seed=s, peek=peek, tau=tau, threshold=threshold) for s in range(400)]
    assert_unbiased([d.log_likelihood for _, d in runs], truth)
    assert np.mean([d.resampling_steps for _, d in runs]) > 0.3


@pytest.mark.slow
@pytest.mark.parametrize(
    "peek,threshold,runs", [(False, 0.5, 1), (True, 0.5, 1), (False, 1.0, 3), (False, 0.5, 4)]
)
def test_smc_unbiased_on_a_bundled_document_many_runs(bundled_hmm, bundled_test_texts, peek, threshold, runs):
    text = bundled_test_texts[15]  # 9 tokens, heavy-tailed IS weights
    truth = bundled_hmm.log_marginal(bundled_hmm.tokenize(text))
    log_phat = [
        smc_estimate(bundled_hmm, text, k=12, seed=s, peek=peek, threshold=threshold, runs=runs)
        for s in range(2000)
    ]
    assert_unbiased(log_phat, truth)


@pytest.mark.slow
def test_lee_whiteley_standard_error_matches_the_spread_over_seeds(bundled_hmm, bundled_test_texts):
    """Mean of the per-run variance estimate is within 25% of the variance of p̂/p over 400 seeds (systematic)."""
    text = bundled_test_texts[3]  # 13 tokens: resamples about twice per run at K = 100
    truth = bundled_hmm.log_marginal(bundled_hmm.tokenize(text))
    runs = [smc(bundled_hmm, text, k=100, seed=s) for s in range(400)]
    ratio = np.exp(np.array([d.log_likelihood for _, d in runs]) - truth)
    estimated = np.mean([d.log_likelihood_stderr**2 for _, d in runs])
    assert np.mean([d.resampling_steps for _, d in runs]) >= 1
    assert estimated == pytest.approx(ratio.var(), rel=0.25)


# ---------------------------------------------------------------- runs, seeds, corpus level


def test_runs_cover_k_in_bounded_blocks():
    assert run_sizes(100, 1) == [100] and run_sizes(100, 3) == [34, 33, 33]
    sizes = run_sizes(100_000, 1)
    assert sum(sizes) == 100_000 and max(sizes) <= 1024 and len(sizes) == 98


def test_k_beyond_one_block_is_several_independent_runs(tiny_hmm):
    lw, diag = smc(tiny_hmm, DOC, k=2100, seed=0)
    assert diag.run_sizes == [700, 700, 700] and lw.shape == (2100,)
    run_ll = np.array(diag.run_log_likelihoods)
    assert float(log_mean_exp(lw)) == pytest.approx(
        float(log_mean_exp(run_ll)), abs=1e-12
    )  # p̂ = mean of run p̂
    assert np.unique(run_ll).size == 3 and diag.run_log_likelihood_sd > 0


def test_seeds_depend_on_seed_and_document_only(bundled_hmm, bundled_test_texts):
    docs = bundled_test_texts[:4]
    runs = {}
    for batch_size in (1, 64):
        settings = EstimatorSettings("smc", num_samples=30, peek=False, batch_size=batch_size, smc_runs=2)
        for order in (docs, docs[::-1]):
            out = {d: estimate_document(bundled_hmm, d, settings).log_weights for d in order}
            runs[batch_size, order[0]] = np.stack([out[d] for d in docs])
    first = next(iter(runs.values()))
    for value in runs.values():
        np.testing.assert_array_equal(value, first)
    other = estimate_document(
        bundled_hmm, docs[0], EstimatorSettings("smc", num_samples=30, peek=False, seed=9)
    )
    assert not np.array_equal(other.log_weights, first[0])


def test_run_r_of_every_document_forms_one_corpus_sample():
    lls = [[-1.0, -3.0], [-2.0, -2.5]]
    expected = math.log(0.5 * math.exp(-3.0) + 0.5 * math.exp(-5.5))
    assert runs_corpus_log_likelihood(lls, [[5, 5], [5, 5]]) == pytest.approx(expected)
    assert runs_corpus_log_likelihood([[-1.0], [-2.0]], [[7], [7]]) == pytest.approx(
        -3.0
    )  # R = 1: the product
    with pytest.raises(ValueError, match="same runs"):
        runs_corpus_log_likelihood(lls, [[5, 5], [4, 4]])


def test_runs_of_a_block_resample_among_their_own_particles(tiny_hmm):
    """Four runs advanced as one batch: resampling after every token never crosses runs, so each run's estimate is
    the mean of its own final weights and the runs differ (independent)."""
    lw, diag = smc(tiny_hmm, DOC, k=40, seed=3, threshold=1.0, runs=4)
    assert diag.run_sizes == [10, 10, 10, 10] and diag.resampling_steps > 3
    for r in range(4):
        assert float(log_mean_exp(lw[10 * r : 10 * r + 10])) == pytest.approx(
            diag.run_log_likelihoods[r], abs=1e-12
        )
    assert np.unique(np.round(diag.run_log_likelihoods, 12)).size == 4


def test_the_error_of_an_smc_estimate_is_never_a_printed_zero(bundled_hmm, bundled_test_texts):
    """Resampling after every token collapses a run's genealogy, and the Lee-Whiteley estimate goes negative: it is
    NaN then (one run: no trusted error), never a clipped 0; with several runs their spread gives the error."""
    text = bundled_test_texts[3]
    one = [smc(bundled_hmm, text, k=20, seed=s, threshold=1.0, runs=1)[1] for s in range(30)]
    assert np.std([d.log_likelihood for d in one]) > 0.05  # the estimate varies over seeds...
    assert all(d.log_likelihood_stderr != 0.0 for d in one)  # ... so no run may claim it does not
    four = [smc(bundled_hmm, text, k=80, seed=s, threshold=1.0, runs=4)[1] for s in range(10)]
    assert all(d.relative_variance >= d.runs_relative_variance > 0 for d in four)


# ---------------------------------------------------------------- settings and bad input


def test_settings_record_smc_choices_and_leave_is_keys_unchanged(bundled_hmm):
    d = recorded_settings(EstimatorSettings("smc", resample_threshold=0.3, smc_runs=2))
    assert d["resample_threshold"] == 0.3 and d["smc_runs"] == 2 and d["sample_block"] == 1024
    assert "resample_threshold" not in recorded_settings(EstimatorSettings("is"))
    for bad in (
        {"resample_threshold": 1.5},
        {"resample_threshold": -0.1},
        {"smc_runs": 0},
        {"num_samples": 3, "smc_runs": 4},
        {"temperature": 0.0},
    ):
        # a single value is refused by the record, SMC's K ≥ R when it is resolved for a model
        with pytest.raises(ValueError):
            resolve(EstimatorSettings("smc", **bad), bundled_hmm)


def test_empty_document_under_smc(bundled_hmm):
    est = estimate_document(bundled_hmm, "", EstimatorSettings("smc", num_samples=8))
    assert est.num_tokens == 0 and est.log_likelihood == 0.0 and est.estimator == "smc"
    assert (
        est.diagnostics.log_likelihood_stderr == 0.0 and est.diagnostics.resampling_steps == 0.0
    )  # p̂ = 1 exactly
    real = estimate_document(bundled_hmm, "a b", EstimatorSettings("smc", num_samples=8))
    assert type(est.diagnostics) is type(real.diagnostics)  # the same diagnostics as any document


def test_a_model_without_the_stepwise_part_serves_is_and_refuses_smc_by_name():
    model = WholeDocumentOnly(make_tiny_hmm())
    assert not has(model, "stepwise") and has(model.model, "stepwise")
    assert missing(model, "stepwise") == ["smc_init", "smc_step", "smc_reorder", "smc_latents"]
    assert math.isfinite(estimate_document(model, DOC, EstimatorSettings("is", num_samples=5)).log_likelihood)
    with pytest.raises(TypeError, match="smc_init, smc_step, smc_reorder, smc_latents"):
        estimate_document(model, DOC, EstimatorSettings("smc"))


class _ZeroStep:
    """The tiny HMM whose stepwise joint is 0 for every particle drawn into state 0 at token 2 (and NaN on demand)."""

    def __init__(self, model, value):
        self.model, self.proposal, self.value = model, model.proposal, value

    def __getattr__(self, name):
        return getattr(self.model, name)

    def smc_step(self, state, t, generator):
        state, inc = self.model.smc_step(state, t, generator)
        if t == 2:
            inc = torch.where(state.z[:, 2] == 0, torch.tensor(self.value, dtype=torch.float64), inc)
        return state, inc


def test_zero_weight_particles_are_dropped_and_nan_increments_named():
    model = _ZeroStep(make_tiny_hmm(), -math.inf)
    lw, _ = smc(model, DOC, k=50, threshold=1.0)
    assert np.isfinite(log_mean_exp(lw))
    with pytest.raises(ValueError, match="NaN or \\+inf .* token 2"):
        bad = _ZeroStep(make_tiny_hmm(), math.nan)
        smc(bad, DOC, k=50, threshold=1.0)


def test_run_r_draws_from_importance_sampling_block_r(tiny_hmm):
    """K = 2048 is two runs of 1,024; without resampling they are IS's two blocks, draw for draw."""
    x = tiny_hmm.tokenize(DOC)
    lw_is = importance_log_weights(
        tiny_hmm, x, num_samples=2048, temperature=1.0, peek=False, seed=7, document=DOC
    )
    lw_smc, diag = smc(tiny_hmm, DOC, k=2048, seed=7, threshold=0.0)
    assert diag.run_sizes == [1024, 1024]
    np.testing.assert_allclose(lw_smc, lw_is, rtol=0, atol=1e-12)
