"""The estimate exchange between a latent backend and the perplexity tasks: its lifecycle, and the run's ``level``
reaching the corpus statement (the interval, the Stderr column and the certified bound)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from lm_latent_eval.estimators import UncertaintyPolicy
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import estimate_from_json
from lm_latent_eval.harness.backends import LatentHMMEval
from lm_latent_eval.harness.exchange import EstimateExchange, NoEstimateError

REPO = Path(__file__).resolve().parents[2]
CORPUS = [json.loads(line)["text"] for line in (REPO / "lm_latent_eval/data/corpus/tiny_test.jsonl").open()]


def rolling(text: str) -> Instance:
    return Instance("loglikelihood_rolling", {}, (text,), 0)


def test_each_backend_begins_an_exchange_and_the_one_that_answers_last_is_read():
    first = LatentHMMEval(estimator="exact", device="cpu")
    assert EstimateExchange.current() is first.exchange
    second = LatentHMMEval(estimator="exact", device="cpu")
    assert EstimateExchange.current() is second.exchange is not first.exchange
    (value,) = first.loglikelihood_rolling([rolling(CORPUS[0])], disable_tqdm=True)
    assert EstimateExchange.current() is first.exchange
    assert EstimateExchange.current().document(CORPUS[0], value).log_likelihood == value
    assert second.exchange.peek(CORPUS[0]) is None
    # a new batch replaces the previous one
    first.loglikelihood_rolling([rolling(CORPUS[1])], disable_tqdm=True)
    assert first.exchange.peek(CORPUS[0]) is None and first.exchange.peek(CORPUS[1]) is not None
    first.exchange.clear()
    with pytest.raises(NoEstimateError, match="no estimate for document"):
        EstimateExchange.current().document(CORPUS[1], value)


def test_without_a_begun_exchange_a_task_gets_one_clear_line(monkeypatch):
    """Issue 42 item 5: an exchange becomes current only by ``begin`` (or by the backend answering a batch), never
    by being filled; with none begun, a task's read says so at once instead of handing out an empty exchange."""
    monkeypatch.setattr(EstimateExchange, "_current", None)
    with pytest.raises(NoEstimateError, match="no lm-latent-eval backend has begun an evaluation"):
        EstimateExchange.current()
    filled = EstimateExchange()
    filled.put_documents({})
    with pytest.raises(NoEstimateError):
        EstimateExchange.current()
    assert EstimateExchange.begin() is EstimateExchange.current()


def test_level_in_model_args_sets_the_interval_the_stderr_column_and_the_bound():
    """``--model_args level=0.9``: the task's statement is made at 90% (it was fixed at 95%)."""
    manager = TaskManager(include_path=str(REPO / "tasks"), include_defaults=False)
    out = lm_eval.simple_evaluate(
        model="latent_hmm",
        model_args="estimator=smc,num_samples=256,smc_runs=4,seed=1,level=0.9",
        tasks=["latent_ppl_tiny"],
        task_manager=manager,
        bootstrap_iters=0,
        device="cpu",
        batch_size="auto",
        log_samples=True,
    )
    metrics, samples = out["results"]["latent_ppl_tiny"], out["samples"]["latent_ppl_tiny"]
    items = [s["latent_perplexity"] for s in samples]
    estimates = [estimate_from_json({**i, "document": s["doc"]["text"]}) for i, s in zip(items, samples)]
    at = {
        level: corpus_estimate(estimates, UncertaintyPolicy(level=level), keys=[i["key"] for i in items])
        for level in (0.9, 0.95)
    }
    assert at[0.9].interval.two_sided and at[0.9].interval.level == 0.9
    assert metrics["latent_perplexity,none"] == pytest.approx(at[0.9].perplexity, rel=1e-12)
    assert metrics["latent_perplexity_stderr,none"] == pytest.approx(at[0.9].interval_stderr, rel=1e-12)
    assert metrics["perplexity_upper_bound,none"] == pytest.approx(at[0.9].perplexity_upper_bound, rel=1e-12)
    assert metrics["latent_perplexity_stderr,none"] != pytest.approx(at[0.95].interval_stderr, rel=1e-6)
    assert metrics["perplexity_upper_bound,none"] < at[0.95].perplexity_upper_bound
    assert out["config"]["estimator_settings"]["level"] == 0.9


def test_references_read_as_the_estimates_they_stand_for():
    """A metric's items may be references to another metric's whole estimates (the samples file holds each estimate
    once): they carry the estimate in memory, so they give the same corpus statement whether or not the whole
    estimates were aggregated before them (issue 43, item 10); a reference read back from JSON carries none, and
    gives a clear error unless the whole estimates were aggregated first."""
    import json

    from lm_latent_eval.estimators import EstimatorSettings, ISEstimate

    exchange = EstimateExchange.begin(EstimatorSettings(estimator="is", num_samples=4))
    whole = []
    for n, text in enumerate(["a b", "c d e"]):
        est = ISEstimate(text, 2 + n, -3.0 - n, log_weights=[-3.0 - n, -3.5 - n, -2.5 - n, -3.1 - n])
        whole.append({**est.to_json(), "key": f"k{n}"})
    refs = [EstimateExchange.reference(item, "latent_perplexity") for item in whole]
    assert all(r["same_as"] == "latent_perplexity" and "log_weights" not in r for r in refs)
    by_refs = exchange.corpus(refs)  # before the whole estimates
    assert by_refs is exchange.corpus(whole)
    exchange.clear()
    read_back = [json.loads(json.dumps(r)) for r in refs]
    with pytest.raises(
        NoEstimateError, match="refer to the estimates of 'latent_perplexity' without carrying"
    ):
        exchange.corpus(read_back)
    assert exchange.corpus(whole).perplexity == exchange.corpus(read_back).perplexity == by_refs.perplexity
