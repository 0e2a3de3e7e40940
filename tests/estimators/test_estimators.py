"""IS, beam and exact estimators on the HMM, whose exact log p(x) (forward algorithm) is the ground truth."""

from __future__ import annotations

import functools
import itertools
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from is_checks import assert_unbiased

from lm_latent_eval.errors import InputError, UserError
from lm_latent_eval.estimators import (
    EstimatorSettings,
    ISEstimate,
    beam_log_marginal,
    corpus_ppl,
    estimate_document,
    exact_log_marginal,
    importance_log_weights,
    instance_ppl,
    log_mean_exp,
    registry,
    resolve,
    smc_log_weights,
)
from lm_latent_eval.estimators.diagnostics import effective_sample_size

SHORT_DOC = "a b c a"  # tiny HMM: 3^4 = 81 configurations


def exact(model, text: str) -> float:
    return model.log_marginal(model.tokenize(text))


def log_weights(model, text, k, seed, peek=True, tau=1.0) -> np.ndarray:
    """importance_log_weights of one document: K log weights (the document's own text names its stream)."""
    x = model.tokenize(text)
    return importance_log_weights(
        model, x, num_samples=k, temperature=tau, peek=peek, seed=seed, document=text
    )


def is_estimate(model, text, k, seed, peek=True, tau=1.0) -> float:
    return estimate_document(
        model, text, EstimatorSettings("is", num_samples=k, seed=seed, peek=peek, temperature=tau)
    ).log_likelihood


# ---------------------------------------------------------------- exact and beam


def test_exact_estimator_equals_forward_and_enumeration(tiny_hmm):
    text = "c b a a b"
    x = tiny_hmm.tokenize(text)
    z = torch.tensor(list(itertools.product(range(3), repeat=5)))
    brute = torch.logsumexp(tiny_hmm.log_joint(x, z), 0).item()
    est = estimate_document(tiny_hmm, text, EstimatorSettings(estimator="exact"))
    assert est.num_tokens == 5
    assert est.log_likelihood == pytest.approx(brute, abs=1e-5)
    assert exact_log_marginal(tiny_hmm, x) == tiny_hmm.log_marginal(x)


def test_beam_is_a_lower_bound_that_becomes_exact(tiny_hmm):
    x = tiny_hmm.tokenize(SHORT_DOC)
    truth = tiny_hmm.log_marginal(x)
    values = [beam_log_marginal(tiny_hmm, x, k) for k in (1, 2, 5, 10, 40, 80)]
    assert all(v <= truth + 1e-9 for v in values) and values[-1] < truth
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))  # a larger beam never loses mass
    for k in (81, 82, 500):
        assert beam_log_marginal(tiny_hmm, x, k) == pytest.approx(truth, abs=1e-6)
    settings = EstimatorSettings(estimator="beam", beam_size=81)
    assert estimate_document(tiny_hmm, SHORT_DOC, settings).log_likelihood == pytest.approx(truth, abs=1e-6)


def test_beam_lower_bound_on_the_bundled_model(bundled_hmm, bundled_test_texts):
    for text in bundled_test_texts[:5]:
        x = bundled_hmm.tokenize(text)
        assert beam_log_marginal(bundled_hmm, x, 20) <= bundled_hmm.log_marginal(x) + 1e-9


# ---------------------------------------------------------------- importance sampling: statistics


@pytest.mark.parametrize("peek,tau", [(True, 1.0), (False, 1.0), (True, 0.8), (False, 2.0)])
def test_is_converges_to_the_exact_value(tiny_hmm, peek, tau):
    truth = exact(tiny_hmm, SHORT_DOC)
    small = np.mean([abs(is_estimate(tiny_hmm, SHORT_DOC, 4, s, peek, tau) - truth) for s in range(20)])
    large = np.mean([abs(is_estimate(tiny_hmm, SHORT_DOC, 4096, s, peek, tau) - truth) for s in range(3)])
    assert large < 0.05 and large < small / 4


def test_is_is_unbiased_for_p_and_biased_down_in_log_space(tiny_hmm):
    """E[p̂ / p] = 1 (within 3 standard errors over 400 runs) and E[log p̂] ≤ log p (Jensen)."""
    text = "a c b b a"
    truth = exact(tiny_hmm, text)
    log_phat = np.array([is_estimate(tiny_hmm, text, 3, seed, peek=False) for seed in range(400)])
    assert_unbiased(log_phat, truth)
    assert (
        np.exp(log_phat - truth).std(ddof=1) / math.sqrt(log_phat.size) > 1e-3
    )  # power: estimates really vary
    assert log_phat.mean() < truth


def test_instance_ppl_is_at_most_corpus_ppl_in_expectation(bundled_hmm, bundled_test_texts):
    """Instance-level IS averages all K^N pairings of samples, corpus-level only K: E log is larger."""
    docs = bundled_test_texts[:6]
    tokens = [len(bundled_hmm.tokenize(d)) for d in docs]
    true_log_ppl = -sum(exact(bundled_hmm, d) for d in docs) / sum(tokens)
    inst, corp = [], []
    for seed in range(40):
        lw = [log_weights(bundled_hmm, d, 16, seed, peek=False) for d in docs]
        inst.append(math.log(instance_ppl(lw, tokens)))
        corp.append(math.log(corpus_ppl(lw, tokens)))
    inst, corp = np.array(inst), np.array(corp)
    diff = corp - inst
    assert diff.mean() > 3 * diff.std(ddof=1) / math.sqrt(diff.size)
    assert inst.mean() > true_log_ppl  # both are stochastic upper bounds on the true perplexity


def test_no_peek_log_weights_vary_more_than_peek(bundled_hmm, bundled_test_texts):
    var = {}
    for peek in (True, False):
        lw = [log_weights(bundled_hmm, t, 100, 0, peek=peek) for t in bundled_test_texts]
        var[peek] = np.mean([np.var(w) for w in lw])
    assert var[False] > 2 * var[True] > 0


def test_bundled_model_has_real_but_manageable_is_variance(bundled_hmm, bundled_test_texts):
    """ESS at K = 100: clearly below K with peeking, lower without, not degenerate; estimates near truth."""
    ess, errors = {True: [], False: []}, {True: [], False: []}
    for peek in (True, False):
        settings = EstimatorSettings("is", num_samples=100, peek=peek, seed=7)
        for text in bundled_test_texts:
            est = estimate_document(bundled_hmm, text, settings)
            ess[peek].append(effective_sample_size(est.log_weights))
            errors[peek].append(est.log_likelihood - exact(bundled_hmm, text))
    peek_ess, blind_ess = np.median(ess[True]), np.median(ess[False])
    assert 20 < peek_ess < 95 and 5 < blind_ess < 0.8 * peek_ess
    assert abs(np.mean(errors[True])) < 0.5 and abs(np.mean(errors[False])) < 0.5


# ---------------------------------------------------------------- invariances


def test_batch_size_and_document_order_never_change_a_number(bundled_hmm, bundled_test_texts):
    docs = bundled_test_texts[:6]
    runs = {}
    for batch_size in (1, 16):
        settings = EstimatorSettings("is", num_samples=40, batch_size=batch_size, peek=False, temperature=1.3)
        for order in ("forward", "reverse"):
            seq = docs if order == "forward" else docs[::-1]
            out = {d: estimate_document(bundled_hmm, d, settings).log_weights for d in seq}
            runs[batch_size, order] = np.stack([out[d] for d in docs])
    first = runs[1, "forward"]
    for key, value in runs.items():
        np.testing.assert_array_equal(value, first, err_msg=str(key))
    assert np.unique(first[0]).size > 1


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("estimator", ["is", "beam", "exact"])
def test_empty_document_has_log_p_zero_over_zero_tokens(bundled_hmm, estimator):
    est = estimate_document(bundled_hmm, "", EstimatorSettings(estimator=estimator))
    assert est.num_tokens == 0 and est.log_likelihood == 0.0


def test_unknown_words_map_to_unk_and_give_a_finite_estimate(bundled_hmm):
    text = "Xylophonic quarks zigzagged beside the dog."
    x = bundled_hmm.tokenize(text)
    assert x[:3].tolist() == [bundled_hmm.vocab.index("<unk>")] * 3
    est = estimate_document(bundled_hmm, text, EstimatorSettings("is", num_samples=50))
    assert math.isfinite(est.log_likelihood) and est.num_tokens == 7
    assert abs(est.log_likelihood - bundled_hmm.log_marginal(x)) < 2.0


def refused_as_resolve_refuses(settings: EstimatorSettings, model, helper) -> str:
    """``helper()`` raises ``resolve(settings, model)``'s error, in the same words; returns them."""
    with pytest.raises(UserError) as caught:
        resolve(settings, model)
    with pytest.raises(type(caught.value), match=f"^{re.escape(str(caught.value))}$"):
        helper()
    return str(caught.value)


@pytest.mark.parametrize("k,tau", [(0, 1.0), (-3, 1.0), (10, 0.0), (10, -0.5), (10, float("inf"))])
def test_bad_sample_count_or_temperature_is_refused_as_resolve_refuses_it(tiny_hmm, k, tau):
    with pytest.raises(InputError) as caught:
        EstimatorSettings("is", num_samples=k, temperature=tau)
    with pytest.raises(InputError, match=f"^{re.escape(str(caught.value))}$"):
        log_weights(tiny_hmm, SHORT_DOC, k, 0, peek=True, tau=tau)


SAMPLING_HELPERS = {"is": importance_log_weights, "smc": smc_log_weights}


@pytest.mark.parametrize("estimator", SAMPLING_HELPERS)
@pytest.mark.parametrize(
    "fields,words",
    [({"num_samples": 8, "temperature": 0.5}, "cannot temper"), ({"num_samples": 10**9}, "needs 29.8 GiB")],
    ids=["tempering", "sample_memory"],
)
def test_sampling_helpers_run_resolves_checks(tiny_hmm, monkeypatch, estimator, fields, words):
    """check_tempering (a proposal that declares tempers = False) and check_sample_memory refuse the helper's
    arguments in resolve's words."""
    monkeypatch.setattr(tiny_hmm.proposal, "tempers", False, raising=False)
    monkeypatch.setattr(registry, "available_memory", lambda device: 2**30)
    x = tiny_hmm.tokenize(SHORT_DOC)
    helper = functools.partial(SAMPLING_HELPERS[estimator], tiny_hmm, x, seed=0, document=SHORT_DOC, **fields)
    assert words in refused_as_resolve_refuses(
        EstimatorSettings(estimator, seed=0, **fields), tiny_hmm, helper
    )


def test_beam_helper_runs_resolves_checks(tiny_hmm):
    x = tiny_hmm.tokenize(SHORT_DOC)
    settings = EstimatorSettings("beam", beam_size=4)
    no_beam = _Wrapped(tiny_hmm, proposal=SimpleNamespace(sample=tiny_hmm.proposal.sample))
    helper = functools.partial(beam_log_marginal, no_beam, x, 4, SHORT_DOC)
    assert "use estimator=auto" in refused_as_resolve_refuses(settings, no_beam, helper)
    with pytest.raises(InputError) as caught:
        settings.replace(beam_size=0)
    with pytest.raises(InputError, match=f"^{re.escape(str(caught.value))}$"):
        beam_log_marginal(tiny_hmm, x, 0, SHORT_DOC)


class _WrappedProposal:
    """The tiny HMM's proposal with one drawn log q replaced by ``bad``."""

    def __init__(self, inner, bad):
        self.inner, self.bad = inner, bad

    def sample(self, x, num_samples, temperature=1.0, peek=True, generator=None):
        z, log_q = self.inner.sample(x, num_samples, temperature, peek, generator)
        log_q = log_q.clone()
        log_q[0] = self.bad
        return z, log_q

    def beam(self, x, beam_size):
        return self.inner.beam(x, beam_size)


class _Wrapped:
    """A contract-conforming wrapper around the tiny HMM with a replaceable proposal / log_joint."""

    def __init__(self, model, proposal=None, log_joint=None):
        self.model = model
        self.proposal = proposal or model.proposal
        self._log_joint = log_joint or model.log_joint

    def tokenize(self, text):
        return self.model.tokenize(text)

    def log_joint(self, x, z):
        return self._log_joint(x, z)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_log_q_raises(tiny_hmm, bad):
    model = _Wrapped(tiny_hmm, proposal=_WrappedProposal(tiny_hmm.proposal, bad))
    with pytest.raises(ValueError, match="non-finite log q"):
        estimate_document(model, SHORT_DOC, EstimatorSettings("is", num_samples=10))


def test_a_model_with_zero_joint_everywhere_misses_the_support(tiny_hmm):
    model = _Wrapped(
        tiny_hmm, log_joint=lambda x, z: torch.full((z.shape[0],), -math.inf, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="misses the support"):
        estimate_document(model, SHORT_DOC, EstimatorSettings("is", num_samples=10))
    with pytest.raises(ValueError, match="misses the support"):
        estimate_document(model, SHORT_DOC, EstimatorSettings(estimator="beam", beam_size=4))


# ---------------------------------------------------------------- slow: heavier repeats


@pytest.mark.slow
@pytest.mark.parametrize("peek,tau", [(True, 1.0), (False, 1.0), (True, 0.5), (False, 2.0)])
def test_unbiased_on_a_bundled_document_many_runs(bundled_hmm, bundled_test_texts, peek, tau):
    text = bundled_test_texts[15]  # 9 tokens, heavy-tailed weights (ESS ≈ 4% of K)
    truth = exact(bundled_hmm, text)
    assert_unbiased([is_estimate(bundled_hmm, text, 10, seed, peek, tau) for seed in range(2000)], truth)


@pytest.mark.slow
def test_is_on_the_bundled_corpus_converges(bundled_hmm, bundled_test_texts):
    """Summed over the 30 test documents, the IS error shrinks from K = 100 to K = 10000 and ends small."""
    errors = {}
    for k in (100, 10000):
        errors[k] = np.array(
            [
                [is_estimate(bundled_hmm, t, k, seed) - exact(bundled_hmm, t) for t in bundled_test_texts]
                for seed in range(3)
            ]
        )
    rmse = {k: math.sqrt((e**2).mean()) for k, e in errors.items()}
    assert rmse[10000] < rmse[100] / 3
    assert abs(errors[10000].sum(1)).max() < 0.5  # corpus log-likelihood within half a nat


# ---------------------------------------------------------------- Monte Carlo standard error and the reliability warning


def test_monte_carlo_stderr_matches_the_spread_over_independent_runs(bundled_hmm, bundled_test_texts):
    """SMC with four runs per document: the corpus's Monte Carlo standard error of the perplexity estimates the
    standard deviation of the perplexity over independent seeds (documents fixed)."""
    from lm_latent_eval.estimators.corpus import corpus_estimate

    texts = bundled_test_texts[:6]
    settings = [EstimatorSettings("smc", 200, peek=False, seed=s) for s in range(60)]
    corpora = [corpus_estimate([estimate_document(bundled_hmm, t, s) for t in texts]) for s in settings]
    two_sided = [c for c in corpora if c.interval.two_sided]
    assert len(two_sided) >= 0.8 * len(corpora)
    spread = np.std([c.perplexity for c in corpora], ddof=1)
    stderr = np.median([c.monte_carlo_stderr for c in two_sided])
    assert spread > 0 and 0.6 < stderr / spread < 1.5, (stderr, spread)


def test_reliability_warning_names_the_share_the_bound_and_what_to_try():
    from lm_latent_eval.estimators.corpus import reliability_warning

    rng = np.random.default_rng(0)
    heavy = [rng.exponential(2.0, 200) for _ in range(3)]  # w = U^(-2): Pareto tail with k = 2
    light = [rng.normal(0, 0.1, 200) for _ in range(1)]
    estimates = [ISEstimate(f"d{n}", 10, float(log_mean_exp(lw)), lw) for n, lw in enumerate(heavy + light)]
    message = reliability_warning(estimates, ["more samples"])
    assert message.startswith("no two-sided interval of the perplexity is honest for these 4 documents")
    assert "3 of 4 documents (75%) have Pareto k̂ at or above the threshold" in message
    assert "true perplexity is at most" in message and message.endswith("Try more samples.")
    assert reliability_warning(estimates[3:], ["x"]) is None and reliability_warning([], ["x"]) is None
