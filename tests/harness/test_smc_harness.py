"""estimator=smc through lm-eval: model_args, the latent_ppl_tiny metrics, resumable results, a clear error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")
from hmm_tiny import WholeDocumentOnly
from lm_eval.tasks import TaskManager

from lm_latent_eval.estimators import EstimatorSettings, estimate_document, recorded_settings
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.smc import runs_corpus_log_likelihood
from lm_latent_eval.harness import backends
from lm_latent_eval.harness.backends import LatentHMMEval, LatentLMEval
from lm_latent_eval.harness.results_store import ResultsStore

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"
CORPUS = [json.loads(line)["text"] for line in (REPO / "lm_latent_eval/data/corpus/tiny_test.jsonl").open()]
ARGS = "estimator=smc,num_samples=40,smc_runs=2,resample_threshold=0.6,peek=false,seed=5"


@pytest.fixture(scope="module")
def smc_run():
    lm = LatentHMMEval.create_from_arg_string(ARGS, {"device": "cpu", "batch_size": "auto"})
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=["latent_ppl_tiny"],
        bootstrap_iters=0,
        task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
    )
    return lm, out


def test_task_reports_smc_perplexity_and_diagnostics_from_the_same_estimates(smc_run):
    lm, out = smc_run
    res = out["results"]["latent_ppl_tiny"]
    settings = EstimatorSettings("smc", 40, 1.0, False, seed=5, resample_threshold=0.6, smc_runs=2)
    assert lm.get_model_info()["estimator_settings"] == recorded_settings(settings)
    estimates = [
        estimate_document(lm.model, t, settings) for t in CORPUS
    ]  # a fresh run: same seeds, same numbers
    tokens = sum(e.num_tokens for e in estimates)
    ll = sum(e.log_likelihood for e in estimates)
    assert res["instance_perplexity,none"] == pytest.approx(math.exp(-ll / tokens), rel=1e-12)
    corpus = runs_corpus_log_likelihood(
        [e.diagnostics.run_log_likelihoods for e in estimates], [e.diagnostics.run_sizes for e in estimates]
    )
    assert res["corpus_perplexity,none"] == pytest.approx(math.exp(-corpus / tokens), rel=1e-12)
    assert res["corpus_perplexity,none"] != pytest.approx(res["instance_perplexity,none"], rel=1e-6)
    diags = [e.diagnostics for e in estimates if e.num_tokens]
    assert res["smc_ess_min,none"] == pytest.approx(min(d.ess_min for d in diags))
    assert res["smc_resampling_steps,none"] == pytest.approx(np.mean([d.resampling_steps for d in diags]))
    assert res["smc_resampling_steps,none"] > 0
    # the honest statement: two runs per document give the Monte Carlo error (documents fixed)
    corpus_est = corpus_estimate(estimates)
    assert res["latent_perplexity,none"] == pytest.approx(corpus_est.perplexity, rel=1e-12)
    assert res["perplexity_upper_bound,none"] == pytest.approx(corpus_est.perplexity_upper_bound, rel=1e-12)
    stderr = res["latent_perplexity_stderr,none"]
    assert stderr == (pytest.approx(corpus_est.interval_stderr) if corpus_est.interval.two_sided else "N/A")
    assert (
        "is_ess_mean,none" not in res and "is_pareto_k_share,none" not in res
    )  # IS-only diagnostics: no rows


def test_smc_estimates_are_resumed_with_their_diagnostics(
    tmp_path, smc_run
):  # smc_run fills the estimate table
    est = smc_run[0].exchange.peek(CORPUS[3])
    store = ResultsStore(tmp_path, {"any": "identity"})
    store.put(est)
    back = store.get(CORPUS[3])
    np.testing.assert_array_equal(back.log_weights, est.log_weights)
    assert back.diagnostics == est.diagnostics and back.estimator == "smc"


@pytest.mark.parametrize(
    "arg_string, match",
    [
        ("estimator=smc,resample_threshold=2", "resample_threshold must be"),
        ("estimator=smc,smc_runs=0", "smc_runs must be a positive"),
        ("estimator=smc,resample_threshold=x", "must be a number"),
    ],
)
def test_bad_smc_model_args_raise_clear_errors(arg_string, match):
    with pytest.raises(ValueError, match=match):
        LatentHMMEval.create_from_arg_string(arg_string, {"device": "cpu"})


def test_smc_on_a_model_without_the_stepwise_part_is_refused_by_name(monkeypatch):
    real_load = backends.load_model

    def load_whole_document_only(*args, **kwargs):
        model, path = real_load(*args, **kwargs)
        return WholeDocumentOnly(model), path

    monkeypatch.setattr(backends, "load_model", load_whole_document_only)
    assert math.isfinite(
        LatentLMEval(model="hmm", device="cpu", num_samples=4).loglikelihood_rolling(
            [lm_eval.api.instance.Instance("loglikelihood_rolling", {}, (CORPUS[0],), 0)], disable_tqdm=True
        )[0]
    )
    with pytest.raises(TypeError, match="does not define smc_init, smc_step, smc_reorder, smc_latents"):
        LatentLMEval(model="hmm", device="cpu", estimator="smc")
