"""The bundled masked-diffusion LM through lm-eval: ``masked_ppl_tiny`` with estimator=exact, is and smc."""

from __future__ import annotations

import math

import pytest

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.masked.corpus import TEST_FILE, read_sentences

LIMIT = 4


def run_task(**model_args) -> tuple[dict, object]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentMaskedEval

    lm = LatentMaskedEval(device="cpu", **model_args)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["masked_ppl_tiny"],
        limit=LIMIT,
        task_manager=TaskManager(include_path=lm_latent_eval.tasks_path()),
    )
    return results["results"]["masked_ppl_tiny"], lm


def exact_perplexity(model) -> float:
    """exp(−Σ log p(x) / Σ T) over the first LIMIT held-out sentences, by the dynamic program."""
    estimates = [
        estimate_document(model, s, EstimatorSettings("exact")) for s in read_sentences(TEST_FILE)[:LIMIT]
    ]
    return math.exp(-sum(e.log_likelihood for e in estimates) / sum(e.num_tokens for e in estimates))


def test_the_task_reports_the_exact_perplexity_with_estimator_exact():
    metrics, lm = run_task(estimator="exact")
    assert metrics["latent_perplexity,none"] == pytest.approx(exact_perplexity(lm.model), rel=1e-12)


@pytest.mark.parametrize("estimator", ["is", "smc"])
def test_sampling_estimators_run_the_task_and_land_near_the_exact_value(estimator):
    """Uniform orders (peek=false), K = 100: within 5% of the exact perplexity, and the certified bound above it."""
    metrics, lm = run_task(estimator=estimator, num_samples=100, peek=False)
    exact = exact_perplexity(lm.model)
    assert metrics["latent_perplexity,none"] == pytest.approx(exact, rel=0.05)
    assert metrics["perplexity_upper_bound,none"] >= exact


def test_the_elbo_reports_its_standard_error_labelled_as_a_bound_never_an_interval(caplog):
    """estimator=elbo: lm-eval's Stderr of perplexity is the ELBO's Monte Carlo error, exp(−Σ ELBÔ / T) · √(Σ SE²) / T
    (it printed N/A), and the run says the figure is a bound with that error, not an interval on the true perplexity."""
    import logging

    import numpy as np

    from lm_latent_eval.estimators.elbo import corpus_elbo

    with caplog.at_level(logging.INFO, logger="lm_latent_eval"):
        metrics, lm = run_task(estimator="elbo", num_samples=16, seed=2)
    settings = EstimatorSettings("elbo", num_samples=16, seed=2)
    estimates = [estimate_document(lm.model, s, settings) for s in read_sentences(TEST_FILE)[:LIMIT]]
    total, se = corpus_elbo(estimates)
    tokens = sum(e.num_tokens for e in estimates)
    figure = math.exp(-total / tokens)
    assert se > 0 and np.isfinite(se)
    assert metrics["latent_perplexity,none"] == pytest.approx(figure, rel=1e-12)
    assert metrics["latent_perplexity_stderr,none"] == pytest.approx(figure * se / tokens, rel=1e-12)
    assert metrics["perplexity_upper_bound,none"] == math.inf  # no certified bound
    [label] = [r.getMessage() for r in caplog.records if "is a bound, not an estimate" in r.getMessage()]
    assert f"perplexity {figure:.4f} ± {figure * se / tokens:.4f} (Stderr)" in label
    assert "never an interval on the true perplexity" in label and "upper bound in expectation" in label
