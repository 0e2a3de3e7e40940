"""RNNG through lm-eval: ``--model latent_rnng`` on ``ptb_rnng_tiny`` (bundled) and ``ptb_rnng`` (a user's file),
with the sentence-end option recorded in the results' config."""

import math

import pytest

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.rnng.treebank import load_ptb, load_ptb_tiny


def test_both_tasks_report_the_backends_own_estimates(tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentRNNGEval

    user_file = tmp_path / "sentences.txt"
    user_file.write_text("the dog saw a cat .\nanna slept in the park .\n")
    for count_eos in (True, False):
        lm = LatentRNNGEval(num_samples=16, seed=3, device="cpu", batch_size="auto", count_eos=count_eos)
        results = lm_eval.simple_evaluate(
            model=lm, tasks=["ptb_rnng_tiny", "ptb_rnng"], limit=5,
            task_manager=TaskManager(include_path=lm_latent_eval.tasks_path(), metadata={"data_file": str(user_file)}),
        )
        assert results["config"]["count_eos"] is count_eos
        settings = EstimatorSettings(num_samples=16, seed=3)
        for task, dataset in (("ptb_rnng_tiny", load_ptb_tiny()), ("ptb_rnng", load_ptb(str(user_file)))):
            texts = dataset["test"]["text"][:5]
            estimates = [estimate_document(lm.model, t, settings) for t in texts]
            assert sum(e.num_tokens for e in estimates) == sum(len(t.split()) + count_eos for t in texts)
            expected = math.exp(-sum(e.log_likelihood for e in estimates) / sum(e.num_tokens for e in estimates))
            metrics = results["results"][task]
            assert metrics["is_instance_perplexity,none"] == pytest.approx(expected, rel=1e-12)
            assert metrics["is_corpus_perplexity,none"] >= 1.0


def test_peek_false_is_a_clear_error():
    from lm_latent_eval.harness.backends import LatentRNNGEval

    lm = LatentRNNGEval(num_samples=4, peek=False, device="cpu")
    with pytest.raises(ValueError, match="always reads all of x"):
        lm.loglikelihood_rolling([type("R", (), {"args": ("the dog slept .",)})()], disable_tqdm=True)
