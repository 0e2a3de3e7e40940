"""The LDA through lm-eval: ``lda_pydoc`` (perplexity) and ``lda_pydoc_completion`` (document completion)."""

from __future__ import annotations

import math

import pytest

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.lda.corpus import CORPUS_DIR, completion_halves, read_texts


def test_both_tasks_report_the_exact_values():
    """estimator=exact: lda_pydoc's perplexity is the DP's; completion_perplexity = exp(−Σ (log p(whole) −
    log p(first half)) / Σ tokens of the second halves), the tokens counted by the model."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentLDAEval

    lm = LatentLDAEval(estimator="exact", device="cpu")
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["lda_pydoc", "lda_pydoc_completion"],
        limit=6,
        task_manager=TaskManager(include_path=lm_latent_eval.tasks_path()),
    )
    texts = read_texts(CORPUS_DIR / "test.jsonl")[:6]
    exact = EstimatorSettings("exact")
    whole = [estimate_document(lm.model, t, exact) for t in texts]
    ppl = math.exp(-sum(e.log_likelihood for e in whole) / sum(e.num_tokens for e in whole))
    assert results["results"]["lda_pydoc"]["latent_perplexity,none"] == pytest.approx(ppl, rel=1e-12)
    firsts = [estimate_document(lm.model, completion_halves(t)[0], exact) for t in texts]
    ll = sum(w.log_likelihood - f.log_likelihood for w, f in zip(whole, firsts))
    n = sum(w.num_tokens - f.num_tokens for w, f in zip(whole, firsts))
    completion = results["results"]["lda_pydoc_completion"]["completion_perplexity,none"]
    assert completion == pytest.approx(math.exp(-ll / n), rel=1e-9)


def test_default_run_is_smc_with_an_honest_statement():
    """estimator=auto picks SMC (the DP is not tractable in general) and the task reports the certified bound."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentLDAEval

    lm = LatentLDAEval(device="cpu", num_samples=32, target_se=0)
    assert lm.settings.estimator == "smc"
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["lda_pydoc"],
        limit=4,
        task_manager=TaskManager(include_path=lm_latent_eval.tasks_path()),
    )
    metrics = results["results"]["lda_pydoc"]
    texts = read_texts(CORPUS_DIR / "test.jsonl")[:4]
    exact = [estimate_document(lm.model, t, EstimatorSettings("exact")) for t in texts]
    truth = math.exp(-sum(e.log_likelihood for e in exact) / sum(e.num_tokens for e in exact))
    assert metrics["perplexity_upper_bound,none"] >= truth
    assert abs(math.log(metrics["instance_perplexity,none"] / truth)) < 0.05
    assert metrics["smc_ess_min,none"] > 0
