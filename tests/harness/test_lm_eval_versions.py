"""The package on lm-eval 0.4.13 and the 0.5 preview (issue 43, items 1 to 4): what differs between the releases
lives in ``harness/lm_eval_versions.py``; these tests check each defect 0.5 exposed, most without 0.5 installed (a
request object of 0.5's shape suffices). The tests marked ``needs_05`` run only where lm-eval 0.5 is installed
(CI's compatibility job) and skip on 0.4.13.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

lm_eval = pytest.importorskip("lm_eval")

from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.harness import lm_eval_versions, perplexity_task
from lm_latent_eval.harness.backends import LatentHMMEval
from lm_latent_eval.harness.hook import backend_targets
from lm_latent_eval.harness.lm_eval_versions import (
    OWN_STDERR,
    installed_version,
    rolling_answers,
    rolling_log_likelihood,
    rolling_returns_pairs,
    rolling_texts,
    version_line,
)
from lm_latent_eval.harness.template_task import PerplexityTask, template_config

ON_05 = lm_eval_versions.release(installed_version()) >= (0, 5, 0)
needs_05 = pytest.mark.skipif(not ON_05, reason=f"needs lm-eval 0.5 (installed: {installed_version()})")
TEXTS = ["the cat sat", "a dog ran on the mat"]


@pytest.fixture(scope="module")
def hmm_exact():
    return LatentHMMEval(estimator="exact", device="cpu")


def request(*args) -> SimpleNamespace:
    """A request as the backend reads it (lm-eval's Instance has ``args``; 0.4 and 0.5 build it differently)."""
    return SimpleNamespace(args=args)


def test_rolling_requests_of_05_are_scored_as_their_text_not_their_empty_context(hmm_exact):
    """0.5 sends ``("", text)``: reading ``args[0]`` scored the empty context, log p = 0 for every document."""
    old = [
        rolling_log_likelihood([answer])
        for answer in hmm_exact.loglikelihood_rolling([request(t) for t in TEXTS])
    ]
    new = [
        rolling_log_likelihood([answer])
        for answer in hmm_exact.loglikelihood_rolling([request("", t) for t in TEXTS])
    ]
    exact = [hmm_exact.model.log_marginal(hmm_exact.model.tokenize(t)) for t in TEXTS]
    assert new == old and all(value < 0 for value in new)
    assert new == pytest.approx(exact, abs=1e-9)


def test_a_rolling_request_with_a_context_is_refused_in_one_line(hmm_exact):
    with pytest.raises(
        UnsupportedError, match=r"loglikelihood_rolling request has arguments \('the', ' cat'\)"
    ):
        hmm_exact.loglikelihood_rolling([request("the", " cat")])
    with pytest.raises(UnsupportedError, match="reads \\(text,\\)"):
        rolling_texts([request()])


def test_rolling_answers_have_the_type_each_release_expects(hmm_exact):
    """0.4 wants floats (a tuple breaks its perplexity aggregations); 0.5 wants (log p, False) (a float breaks its
    process_results)."""
    assert rolling_answers([-2.5], "0.4.13") == [-2.5]
    assert rolling_answers([-2.5], "0.5.0.dev1") == [(-2.5, False)]
    (answer,) = hmm_exact.loglikelihood_rolling([request("the cat sat")])
    if rolling_returns_pairs():
        assert isinstance(answer, tuple) and answer[1] is False and answer[0] < 0
    else:
        assert isinstance(answer, float) and answer < 0


def test_process_results_reads_both_releases_results(hmm_exact):
    (value,) = hmm_exact.loglikelihood_rolling([request("the cat sat")])
    log_p = rolling_log_likelihood([value])
    as_04 = perplexity_task.process_results({"text": "the cat sat"}, [log_p])
    as_05 = perplexity_task.process_results({"text": "the cat sat"}, [(log_p, False)])
    assert as_04 == as_05 and as_04[perplexity_task.SAMPLES_FIELD]["log_likelihood"] == log_p


def test_a_version_outside_the_supported_range_gets_one_line_at_start_up(monkeypatch, caplog):
    assert (
        version_line("0.4.13") is None
        and version_line("0.5.0.dev1") is None
        and version_line("0.5.3") is None
    )
    for version in ("0.4.12", "0.6.0", "1.0"):
        line = version_line(version)
        assert (
            "\n" not in line
            and f"lm-eval {version} is outside" in line
            and 'pip install "lm-eval>=0.4.13,<0.6"' in line
        )
    monkeypatch.setattr(lm_eval_versions, "installed_version", lambda: "0.6.1")
    lm_eval_versions.adapt_lm_eval.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
            assert lm_eval_versions.adapt_lm_eval() is False
        assert [r.getMessage() for r in caplog.records] == [version_line("0.6.1")]
    finally:
        lm_eval_versions.adapt_lm_eval.cache_clear()


def test_the_supported_range_is_pyprojects_bound():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (bound,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("lm-eval")]
    assert bound == f"lm-eval{lm_eval_versions.SUPPORTED}"
    assert all(lm_eval_versions.is_supported(v) for v in lm_eval_versions.TESTED)


def _lm_eval_metric_names() -> set[str]:
    """The metric names lm-eval registers for itself (0.4: ``METRIC_REGISTRY``, 0.5: ``metric_registry``)."""
    import lm_eval.api.metrics  # noqa: F401  (registers them)
    from lm_eval.api import registry

    table = getattr(registry, "metric_registry", None) or registry.METRIC_REGISTRY
    return set(table.keys())


def test_our_metric_names_are_not_lm_evals():
    """0.5 checks a task's metric names against its registry: our ``perplexity`` (a loglikelihood_rolling metric)
    clashed with its loglikelihood ``perplexity``. Only the metrics that use lm-eval's own aggregation may carry
    lm-eval's names."""
    theirs = _lm_eval_metric_names()
    assert "perplexity" in theirs  # 0.4.13 registers it too; 0.5 checks it
    ours = {m["metric"] for m in template_config()["metric_list"] if callable(m.get("aggregation"))}
    assert "latent_perplexity" in ours and not ours & theirs
    lm_evals_own = {
        m["metric"] for m in template_config()["metric_list"] if not callable(m.get("aggregation"))
    }
    assert lm_evals_own == {"word_perplexity"}


def test_the_old_metric_names_still_name_the_renamed_metrics():
    assert perplexity_task.RENAMED_METRICS == {
        "perplexity": "latent_perplexity",
        "perplexity_stderr": "latent_perplexity_stderr",
    }
    assert set(perplexity_task.RENAMED_METRICS.values()) <= set(perplexity_task.PERPLEXITY_METRICS)
    task = PerplexityTask(
        {"task": "mine", "metric_list": [{"metric": "perplexity", "higher_is_better": True}]}
    )
    names = [m["metric"] for m in task.config.metric_list]
    assert "perplexity" not in names and names.count("latent_perplexity") == 1


def test_our_aggregations_are_never_bootstrapped():
    """0.5 bootstraps every aggregation but the mean by re-running it on resampled documents (minutes for 30
    documents, and beside our own Monte Carlo error): every aggregation of ours is marked and gets no bootstrap."""
    from lm_eval.api import metrics

    lm_eval_versions.skip_bootstrap_of_own()
    ours = [m["aggregation"] for m in template_config()["metric_list"] if callable(m.get("aggregation"))]
    assert ours and all(getattr(fn, OWN_STDERR, False) for fn in ours)
    assert all(metrics.stderr_for_metric(fn, 1000) is None for fn in ours)
    assert metrics.stderr_for_metric(metrics.mean, 1000) is not None  # lm-eval's own keep theirs
    lm_eval_versions.skip_bootstrap_of_own()  # once: a second call wraps nothing again
    assert metrics.stderr_for_metric.__wrapped__.__module__.startswith("lm_eval")


def test_perplexity_task_builds_one_rolling_request_per_document():
    """0.5's ConfigurableTask is its base Task, whose construct_requests builds nothing."""
    task = PerplexityTask({"task": "my_ppl"})
    assert issubclass(PerplexityTask, lm_eval_versions.rolling_task_base())
    task.build_all_requests(limit=3, rank=0, world_size=1)
    texts = rolling_texts(task.instances)
    docs = list(task.test_docs())[:3]
    assert len(task.instances) == 3 and texts == [perplexity_task.doc_to_target(d) for d in docs]


def test_entry_points_load_as_upstream_discovery_loads_them():
    """Upstream's discovery (PR #4013, merged after 0.4.13): ``importlib.metadata.entry_points(group=
    "lm_eval.models")``, each registered by its name and loaded with ``EntryPoint.load()`` when asked for. Ours
    must be the hook's names and load to the backends' classes, lm-eval LMs."""
    from lm_eval.api.model import LM

    from lm_latent_eval.harness import backends

    try:
        importlib.metadata.distribution("lm-latent-eval")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("lm-latent-eval is not installed here (no entry points to read)")
    ours = {
        ep.name: ep
        for ep in importlib.metadata.entry_points(group="lm_eval.models")
        if ep.value.startswith("lm_latent_eval.")
    }
    assert {name: ep.value for name, ep in ours.items()} == backend_targets()
    for name, ep in ours.items():
        cls = ep.load()
        assert issubclass(cls, LM) and cls is getattr(backends, ep.attr), name


@needs_05
def test_05_runs_a_bundled_perplexity_task_to_the_forward_algorithm(hmm_exact):
    """The whole path on 0.5: task load (metric names), requests (PerplexityTask's base), answers, process_results,
    aggregation (no bootstrap) give the exact perplexity of the bundled HMM."""
    from lm_eval.tasks import TaskManager

    from lm_latent_eval import tasks_path

    out = lm_eval.simple_evaluate(
        model=hmm_exact,
        tasks=["latent_ppl_tiny", "linked_wikitext2_tiny"],
        task_manager=TaskManager(include_path=str(tasks_path()), include_defaults=False),
        log_samples=True,
    )
    res = out["results"]["latent_ppl_tiny"]
    corpus = perplexity_task.load_corpus()["test"]["text"]
    log_p = sum(hmm_exact.model.log_marginal(hmm_exact.model.tokenize(t)) for t in corpus)
    tokens = sum(len(hmm_exact.model.tokenize(t)) for t in corpus)
    assert res["latent_perplexity,none"] == pytest.approx(math.exp(-log_p / tokens), rel=1e-12)
    assert res["latent_perplexity_stderr,none"] == 0.0
    assert (
        res["instance_perplexity_stderr,none"] == "N/A" and "latent_perplexity_stderr_stderr,none" not in res
    )
    assert out["results"]["linked_wikitext2_tiny"]["sample_len"] == 20


SIDE_BY_SIDE = Path(__file__).resolve().parents[2] / "bench" / "lm_eval_versions" / "README.md"


def test_the_committed_side_by_side_run_has_every_request_type_and_equal_figures():
    """bench/lm_eval_versions.py's committed output (what docs/lm-eval.md quotes): both tested releases, the
    README's command and a task of every request type, and no figure that differs except the Stderr lm-eval 0.5
    bootstraps for its own aggregations."""
    lines = SIDE_BY_SIDE.read_text(encoding="utf-8").splitlines()
    (header,) = [line for line in lines if line.startswith("| run |")]
    assert all(f"lm-eval {version}" in header for version in lm_eval_versions.TESTED)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
    rows = [row for row in rows if row[0] != "run"]
    tasks = {row[1] for row in rows}
    # loglikelihood_rolling (ours and lm-eval's), multiple_choice (ours and lm-eval's), loglikelihood, generate_until
    assert {
        "linked_wikitext2_tiny", "latent_ppl_tiny", "wikitext_local", "contrastive_entropy_tiny", "arc_easy_local",
        "lda_pydoc_completion", "gsm8k_local",
    } <= tasks  # fmt: skip
    verdicts = {row[5] for row in rows}
    assert verdicts <= {"yes", "no (lm-eval's bootstrap)"}, verdicts
    for row in rows:
        if row[5] != "yes":
            assert row[2].split(",")[0].endswith("_stderr") and row[3] == "N/A", row
    quoted = {row[2] for row in rows if row[1] == "linked_wikitext2_tiny" and row[5] == "yes"}
    assert {
        "latent_perplexity,none",
        "latent_perplexity_stderr,none",
        "perplexity_upper_bound,none",
    } <= quoted


@needs_05
def test_05_runs_report_and_compare_with_the_tables_figures(tmp_path):
    """Issue 53 (1): under 0.5 ``report`` read every document as "0" (its samples' ``target``): a certified bound of
    4.23 beside the table's 16.83, and ``compare`` of a 6- and a 4-document run found "0 only in A". The card's
    figures are the table's, and compare names the 2 documents only one run scored."""
    from lm_eval_runs import hmm_run

    from lm_latent_eval.reports import card, compare
    from lm_latent_eval.reports.lm_eval_output import read_runs

    six = hmm_run(tmp_path / "six", "estimator=is,num_samples=100", limit=6)
    four = hmm_run(tmp_path / "four", "estimator=is,num_samples=100", limit=4)
    (run,) = read_runs(six)
    texts = perplexity_task.load_corpus()["test"]["text"][:6]
    assert [d.document for d in run.documents] == texts
    figures = {f["name"]: f["value"] for f in card.build_card(run, progress=False)["figures"]}
    assert figures["certified upper bound (95%)"] == pytest.approx(
        run.metrics["perplexity_upper_bound,none"], rel=1e-12
    )
    assert figures["perplexity"] == pytest.approx(run.metrics["latent_perplexity,none"], rel=1e-12)
    with pytest.raises(compare.DocumentMismatch, match="2 only in A, 0 only in B"):
        compare.paired_comparison(compare.select_run(six), compare.select_run(four))
