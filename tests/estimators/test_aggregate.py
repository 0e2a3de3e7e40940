"""Aggregation and diagnostics of log importance weights against closed forms."""

import math

import numpy as np
import pytest

from lm_latent_eval.estimators import aggregate, diagnostics, summarize


def test_log_mean_exp_matches_direct_mean():
    rng = np.random.default_rng(0)
    lw = rng.normal(size=50)
    assert aggregate.log_mean_exp(lw) == pytest.approx(math.log(np.exp(lw).mean()), abs=1e-12)


def test_log_mean_exp_is_stable_for_huge_magnitudes():
    lw = np.array([-5000.0, -5000.0 + math.log(3.0)])
    assert aggregate.log_mean_exp(lw) == pytest.approx(-5000.0 + math.log(2.0), abs=1e-12)


def test_instance_and_corpus_ppl_hand_computed():
    # two documents, K = 2: weights (1, 3) and (2, 2) -> p̂ = 2 and 2; corpus: mean(1*2, 3*2) = 4
    lw = [np.log([1.0, 3.0]), np.log([2.0, 2.0])]
    tokens = [2, 3]
    assert aggregate.instance_ppl(lw, tokens) == pytest.approx(math.exp(-math.log(4.0) / 5))
    assert aggregate.corpus_ppl(lw, tokens) == pytest.approx(math.exp(-math.log(4.0) / 5))
    # anti-correlated weights: (1, 3), (3, 1) -> instance p̂ = 2*2, corpus mean(3, 3) = 3 < 4
    lw = [np.log([1.0, 3.0]), np.log([3.0, 1.0])]
    assert aggregate.instance_ppl(lw, tokens) == pytest.approx(math.exp(-math.log(4.0) / 5))
    assert aggregate.corpus_ppl(lw, tokens) == pytest.approx(math.exp(-math.log(3.0) / 5))


def test_corpus_level_needs_equal_sample_counts():
    with pytest.raises(ValueError, match="same number of samples"):
        aggregate.corpus_ppl([np.zeros(3), np.zeros(4)], [1, 1])


def test_instance_level_allows_unequal_sample_counts():
    assert aggregate.instance_ppl([np.zeros(3), np.zeros(4)], [1, 1]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([np.nan, 0.0], "NaN"),
        ([np.inf, 0.0], r"\+inf"),
        ([-np.inf, -np.inf], "misses the support"),
        ([], "non-empty"),
    ],
)
def test_bad_weights_are_rejected_naming_the_document(bad, message):
    with pytest.raises(ValueError, match=message) as err:
        aggregate.instance_ppl([np.zeros(2), np.array(bad)], [1, 1])
    assert "document 1" in str(err.value)


def test_zero_tokens_and_mismatched_counts_are_errors():
    with pytest.raises(ValueError, match="zero tokens"):
        aggregate.instance_ppl([np.zeros(2)], [0])
    with pytest.raises(ValueError, match="token counts"):
        aggregate.instance_ppl([np.zeros(2)], [1, 2])


def test_jensen_instance_le_corpus_in_expectation_and_both_above_truth():
    """E[log p̂] ≤ log p per document; averaging K-sample estimates, instance PPL ≤ corpus PPL on average."""
    rng = np.random.default_rng(1)
    sigma, k, n_docs, reps = 1.0, 10, 20, 400
    # log w ~ N(-σ²/2, σ²) so that E[w] = 1 (true p = 1, true PPL = 1)
    lw = rng.normal(-(sigma**2) / 2, sigma, size=(reps, n_docs, k))
    tokens = [5] * n_docs
    inst = np.array([aggregate.instance_ppl(list(r), tokens) for r in lw])
    corp = np.array([aggregate.corpus_ppl(list(r), tokens) for r in lw])
    assert inst.mean() < corp.mean()
    log_inst = np.log(inst)  # E[log p̂] < log p, so E[log PPL] > log(true PPL) = 0
    assert log_inst.mean() - 3 * log_inst.std() / math.sqrt(reps) > 0.0
    assert np.log(corp).mean() > np.log(inst).mean() + 3 * np.log(inst).std() / math.sqrt(reps)


def test_ess_closed_forms():
    assert diagnostics.effective_sample_size(np.zeros(17)) == pytest.approx(17.0)
    assert diagnostics.effective_sample_size(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(1.0)
    w = np.array([1.0, 2.0, 3.0])
    assert diagnostics.effective_sample_size(np.log(w)) == pytest.approx(36.0 / 14.0)


def test_pareto_khat_separates_light_and_heavy_tails():
    rng = np.random.default_rng(2)
    light = diagnostics.pareto_khat(rng.normal(0, 0.1, size=4000))
    heavy = diagnostics.pareto_khat(np.log(rng.pareto(1 / 1.2, size=4000) + 1.0))  # true shape 1.2
    assert light < 0.3
    assert heavy > diagnostics.pareto_k_threshold(4000)
    assert diagnostics.pareto_khat(np.zeros(3)) != diagnostics.pareto_khat(np.zeros(3))  # NaN for K < 5


def test_document_interval_covers_the_estimate_and_shrinks_with_k():
    """The per-document interval (the corpus method with one document) contains log p̂ and narrows as K grows."""
    rng = np.random.default_rng(3)
    small, large = summarize(rng.normal(size=100)), summarize(rng.normal(size=10000))
    for d in (small, large):
        assert d.interval[0] <= d.log_likelihood + d.relative_variance / 2 <= d.interval[1]
    assert (large.interval[1] - large.interval[0]) < (small.interval[1] - small.interval[0]) / 5


def test_convergence_curve_uses_prefixes_of_one_run():
    lw = np.log(np.arange(1.0, 11.0))
    ks, curve = diagnostics.convergence_curve(lw)
    assert ks.tolist() == [1, 2, 4, 8, 10]
    for k, value in zip(ks, curve):
        assert value == pytest.approx(math.log(np.arange(1.0, k + 1).mean()))


def test_summarize_reports_every_diagnostic():
    rng = np.random.default_rng(4)
    out = summarize(rng.normal(size=64))
    assert {
        "num_samples",
        "log_likelihood",
        "ess",
        "pareto_k",
        "pareto_k_threshold",
        "relative_variance",
        "interval",
        "convergence_k",
    } <= set(vars(out))
    assert out.num_samples == 64 and 1.0 <= out.ess <= 64.0


def test_pareto_khat_is_undefined_not_infinite_for_a_few_tied_weights():
    """A proposal with mass on a few configurations gives tied weights; a GPD tail fit to ties is meaningless."""
    rng = np.random.default_rng(5)
    tied = rng.choice(rng.normal(size=4), size=100)
    assert math.isnan(diagnostics.pareto_khat(tied))
    assert diagnostics.pareto_khat(np.full(100, -3.0)) == 0.0  # q ∝ p: exact, no tail at all
