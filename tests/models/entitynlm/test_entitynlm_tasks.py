"""EntityNLM's lm-eval tasks: ``coref_tiny`` (bundled) and ``conll2012_ppl`` (a user's CoNLL-2012 JSONL file)."""

import math
from pathlib import Path

import pytest

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.entitynlm.conll import load_conll2012, load_coref_tiny

FIXTURE = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model" / "conll2012.jsonl"


@pytest.mark.skipif(not FIXTURE.is_file(), reason="shared CoNLL-2012 fixture absent")
def test_both_tasks_report_the_backends_own_estimates():
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentEntityNLMEval

    lm = LatentEntityNLMEval(estimator="is", num_samples=8, seed=3, device="cpu", batch_size="auto")
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["coref_tiny", "conll2012_ppl"],
        limit=4,  # --metadata reaches tasks via the TaskManager
        task_manager=TaskManager(
            include_path=lm_latent_eval.tasks_path(), metadata={"data_file": str(FIXTURE)}
        ),
    )
    settings = EstimatorSettings("is", num_samples=8, seed=3)
    for task, dataset in (("coref_tiny", load_coref_tiny()), ("conll2012_ppl", load_conll2012(str(FIXTURE)))):
        texts = dataset["test"]["text"][:4]
        estimates = [estimate_document(lm.model, t, settings) for t in texts]
        expected = math.exp(-sum(e.log_likelihood for e in estimates) / sum(e.num_tokens for e in estimates))
        metrics = results["results"][task]
        assert metrics["instance_perplexity,none"] == pytest.approx(expected, rel=1e-12)
        assert metrics["corpus_perplexity,none"] >= 1.0


def test_conll2012_task_needs_a_file():
    with pytest.raises(ValueError, match="data_file"):
        load_conll2012()
    with pytest.raises(FileNotFoundError, match="not found"):
        load_conll2012("/nonexistent/test.jsonl")
