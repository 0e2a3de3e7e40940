"""RNNG through lm-eval: ``--model latent_rnng`` on ``ptb_rnng_tiny`` (bundled) and ``ptb_rnng`` (a user's file),
with the sentence-end option recorded in the results' config."""

import math

import pytest
from python_subprocess import run_python

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
        lm = LatentRNNGEval(
            estimator="is", num_samples=16, seed=3, device="cpu", batch_size="auto", count_eos=count_eos
        )
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=["ptb_rnng_tiny", "ptb_rnng"],
            limit=5,
            task_manager=TaskManager(
                include_path=lm_latent_eval.tasks_path(), metadata={"data_file": str(user_file)}
            ),
        )
        assert results["config"]["count_eos"] is count_eos
        settings = EstimatorSettings("is", num_samples=16, seed=3)
        for task, dataset in (("ptb_rnng_tiny", load_ptb_tiny()), ("ptb_rnng", load_ptb(str(user_file)))):
            texts = dataset["test"]["text"][:5]
            estimates = [estimate_document(lm.model, t, settings) for t in texts]
            assert sum(e.num_tokens for e in estimates) == sum(len(t.split()) + count_eos for t in texts)
            expected = math.exp(
                -sum(e.log_likelihood for e in estimates) / sum(e.num_tokens for e in estimates)
            )
            metrics = results["results"][task]
            assert metrics["instance_perplexity,none"] == pytest.approx(expected, rel=1e-12)
            assert metrics["corpus_perplexity,none"] >= 1.0


@pytest.mark.parametrize("estimator", ["is", "smc"])
def test_every_estimator_runs_with_and_without_peeking(estimator):
    """latent_rnng answers loglikelihood_rolling under IS and SMC, peek=true and false, with the estimates of
    estimate_document (the no-peeking proposal is the model's own action distribution)."""
    from lm_latent_eval.harness.backends import LatentRNNGEval

    text = "the dog slept ."
    for peek in (True, False):
        lm = LatentRNNGEval(estimator=estimator, num_samples=8, smc_runs=2, peek=peek, seed=4, device="cpu")
        (value,) = lm.loglikelihood_rolling([type("R", (), {"args": (text,)})()], disable_tqdm=True)
        assert value == estimate_document(lm.model, text, lm.settings).log_likelihood
        assert math.isfinite(value) and value < 0


def test_sweep_on_the_rnng_reads_trees_and_reports_both_proposals(tmp_path):
    from lm_latent_eval.cli import main
    from lm_latent_eval.models.corpora import read_documents

    trees = tmp_path / "trees.mrg"
    trees.write_text(
        "(S (NP (NNP anna)) (VP (VBD slept)) (. .))\n(S (NP (DT the) (NN dog))\n   (VP (VBD saw) (NP (NNP bob))))\n"
    )
    assert read_documents(trees) == ["anna slept .", "the dog saw bob"]
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "--model",
                "rnng",
                "--data",
                str(trees),
                "--num-samples",
                "8",
                "--temperatures",
                "1,2",
                "--beam-sizes",
                "1,100",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    tables = (out / "tables.md").read_text()
    assert "| τ = 2 |" in tables and "| No peeking, τ = 2 |" in tables


@pytest.mark.slow
def test_lm_eval_cli_runs_latent_rnng_on_ptb_rnng_tiny(tmp_path):
    """`lm_eval --model latent_rnng --tasks ptb_rnng_tiny --include_path tasks` in a fresh interpreter that sees the
    package only through the start-up hook (as after pip install); count_eos=false is recorded in the results."""
    import json

    from hook_site import REPO, hook_site_dir

    out = tmp_path / "out"
    code = (
        f"import site, sys; site.addsitedir({str(hook_site_dir(tmp_path))!r})\n"
        "from lm_eval.__main__ import cli_evaluate\n"
        "sys.argv = ['lm_eval', '--model', 'latent_rnng', '--model_args', 'estimator=is,num_samples=8,seed=3,count_eos=false',"
        " '--tasks', 'ptb_rnng_tiny', '--include_path', 'tasks', '--limit', '4', '--device', 'cpu',"
        f" '--batch_size', 'auto', '--output_path', {str(out)!r}]\n"
        "cli_evaluate()\n"
    )
    run_python(code, cwd=REPO, pythonpath=[REPO])
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert 1 < results["results"]["ptb_rnng_tiny"]["instance_perplexity,none"] < math.inf
    assert results["config"]["model"] == "latent_rnng" and results["config"]["count_eos"] is False


def test_loglikelihood_is_a_prefix_probability_conditional():
    """loglikelihood(context, continuation) = log P(a sentence starts with context ⊕ continuation) − log P(starts
    with context): exact by enumeration (estimator=exact, ≤ 12 words), and SMC's estimate of the same; a
    continuation's probability is at most 1, and so is the sum over the next word's choices."""
    from lm_eval.api.instance import Instance

    from lm_latent_eval.harness.backends import LatentRNNGEval

    exact = LatentRNNGEval(estimator="exact", device="cpu")
    view = exact.model.prefix_model()
    context = "the dog saw"
    words = [w for w in exact.model.vocab if w not in ("<s>", "</s>", "<unk>")]
    requests = [Instance("loglikelihood", {}, (context, f" {w}"), i) for i, w in enumerate(words)]
    values = [v for v, _ in exact.loglikelihood(requests, disable_tqdm=True)]
    for w, v in zip(words, values):
        expected = view.log_marginal(view.tokenize(f"{context} {w}")) - view.log_marginal(
            view.tokenize(context)
        )
        assert v == pytest.approx(expected, abs=1e-9)
    assert max(values) < 0 and math.fsum(math.exp(v) for v in values) < 1
    smc = LatentRNNGEval(num_samples=200, target_se=0, seed=1, device="cpu")
    (estimate, _), *_ = smc.loglikelihood(requests[:1], disable_tqdm=True)
    assert estimate == pytest.approx(values[0], abs=0.05)
