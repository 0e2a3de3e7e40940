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


def test_sweep_on_the_rnng_reads_trees_and_reports_peeking_rows_only(tmp_path, capsys):
    from lm_latent_eval.cli import main
    from lm_latent_eval.reports.sweep import read_documents

    trees = tmp_path / "trees.mrg"
    trees.write_text("(S (NP (NNP anna)) (VP (VBD slept)) (. .))\n(S (NP (DT the) (NN dog))\n   (VP (VBD saw) (NP (NNP bob))))\n")
    assert read_documents(trees) == ["anna slept .", "the dog saw bob"]
    out = tmp_path / "sweep"
    assert main(["sweep", "--model", "rnng", "--data", str(trees), "--num-samples", "8", "--temperatures", "1,2",
                 "--beam-sizes", "1,100", "--output-dir", str(out)]) == 0
    tables = (out / "tables.md").read_text()
    assert "| τ = 2 |" in tables and "No peeking" not in tables and "peeking rows only" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no no-peeking proposal"):
        main(["sweep", "--model", "rnng", "--data", str(trees), "--peek", "no-peek", "--output-dir", str(out)])
