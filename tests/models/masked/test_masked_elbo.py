"""``estimator=elbo``: the masked-diffusion papers' Monte Carlo ELBO, held to its exact value on the tiny masked LM
(every mask and every order listed), below the exact log p(x), and stated as a bound, never an interval."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.elbo import ELBOEstimate, corpus_elbo
from lm_latent_eval.estimators.registry import estimate_from_json, resolve
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked import tiny_masked_lm
from lm_latent_eval.models.masked.orders import all_orders

TEXTS = ["a b c", "d a", "c c b a", "b"]


@pytest.fixture(scope="module")
def model():
    return tiny_masked_lm(seed=0)


def order_elbo(model, x) -> float:
    """E_σ log p(x | σ) over all T! orders: log p(x, σ) + log T! averaged."""
    return float((model.log_joint(x, all_orders(x.numel())) + math.lgamma(x.numel() + 1)).mean())


def count_elbo(model, x) -> float:
    """E over LLaDA's masks, every mask listed: l ~ U{1..T}, M uniform of size l, term (T / l) Σ_{i ∈ M} log p."""
    T, total = x.numel(), 0.0
    for size in range(1, T + 1):
        sets = [list(s) for s in itertools.combinations(range(T), size)]
        masked = torch.zeros(len(sets), T, dtype=torch.bool)
        for row, s in enumerate(sets):
            masked[row, s] = True
        log_token = model.masked_token_log_probs(x, ~masked).masked_fill(~masked, 0.0).sum(1)
        total += float((T / size) * log_token.mean()) / T
    return total


@pytest.mark.parametrize("text", TEXTS)
def test_the_elbo_over_masks_is_the_elbo_over_orders_and_below_the_exact_log_likelihood(model, text):
    x = model.tokenize(text)
    assert count_elbo(model, x) == pytest.approx(order_elbo(model, x), abs=1e-12)
    assert order_elbo(model, x) <= model.log_marginal(x)


@pytest.mark.parametrize("masks", ["count", "ratio"])
def test_the_monte_carlo_elbo_is_unbiased_for_the_exact_elbo(model, masks):
    """K = 20,000 draws: within 4 standard errors of the exact ELBO (both mask schemes have the same mean)."""
    x = model.tokenize("c c b a")
    est = estimate_document(
        model, "c c b a", EstimatorSettings("elbo", num_samples=20_000, elbo_masks=masks, seed=1)
    )
    assert est.samples.shape == (20_000,) and est.log_likelihood == pytest.approx(
        est.samples.mean(), abs=1e-12
    )
    assert abs(est.log_likelihood - order_elbo(model, x)) < 4 * est.standard_error


def test_the_left_to_right_order_is_a_certain_lower_bound_and_keeps_dreams_figure(model):
    x = model.tokenize("c c b a")
    est = estimate_document(model, "c c b a", EstimatorSettings("elbo", elbo_masks="left_to_right"))
    identity = float(model.log_joint(x, torch.arange(4)[None]))
    assert est.log_likelihood == pytest.approx(identity, abs=1e-12) and est.standard_error == 0.0
    assert est.order_log_likelihood == pytest.approx(identity + math.lgamma(5), abs=1e-12)
    assert est.log_likelihood <= model.log_marginal(x)


def test_the_statement_is_a_bound_never_an_interval_and_no_certified_bound(model):
    settings = EstimatorSettings("elbo", num_samples=16, seed=3)
    estimates = [estimate_document(model, t, settings) for t in TEXTS]
    corpus = corpus_estimate(estimates)
    tokens = sum(e.num_tokens for e in estimates)
    assert not corpus.interval.two_sided and corpus.perplexity_upper_bound == math.inf
    assert corpus.perplexity == pytest.approx(math.exp(-sum(e.log_likelihood for e in estimates) / tokens))
    total, se = corpus_elbo(estimates)
    assert total == pytest.approx(sum(e.log_likelihood for e in estimates))
    assert se == pytest.approx(math.sqrt(sum(np.var(e.samples, ddof=1) / 16 for e in estimates)))


def test_the_same_seed_draws_the_same_masks_and_the_record_round_trips(model):
    settings = EstimatorSettings("elbo", num_samples=8, seed=4, elbo_masks="ratio")
    a, b = (estimate_document(model, "a b c", settings) for _ in range(2))
    assert np.array_equal(a.samples, b.samples)
    back = estimate_from_json(a.to_json())
    assert isinstance(back, ELBOEstimate) and np.array_equal(back.samples, a.samples)
    assert back.log_likelihood == a.log_likelihood and back.standard_error == a.standard_error


def test_auto_never_picks_it_and_other_models_are_refused():
    assert resolve(EstimatorSettings(), tiny_masked_lm(seed=0)).settings.estimator == "smc"
    with pytest.raises(UnsupportedError, match="uniform order policy only"):
        resolve(EstimatorSettings("elbo"), tiny_masked_lm(seed=0, policy="confidence"))
    hmm, _ = load_model("hmm")
    with pytest.raises(UnsupportedError, match="not a masked LM"):
        resolve(EstimatorSettings("elbo"), hmm)


def test_lm_eval_runs_it_from_model_args():
    from lm_eval.api.instance import Instance

    from lm_latent_eval.harness.backends import LatentMaskedEval

    lm = LatentMaskedEval(estimator="elbo", num_samples=4, elbo_masks="ratio", device="cpu")
    [value] = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, ("anna saw the dog.",), 0)], True
    )
    assert value == lm.exchange.document("anna saw the dog.", value).log_likelihood
    assert lm.get_model_info()["estimator_settings"]["elbo_masks"] == "ratio"
