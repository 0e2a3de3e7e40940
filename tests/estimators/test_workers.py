"""Documents estimated side by side in forked processes (estimators/workers.py): the same numbers, bit for bit, as
one process; errors and Ctrl-C reach the caller as they would from one process."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import EstimatorSettings, ResolvedEstimator, workers
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.harness.results_store import ResultsStore

pytestmark = pytest.mark.skipif(not workers.fork_available(), reason="this platform cannot fork")


@pytest.mark.parametrize("estimator", ["is", "smc"])
def test_side_by_side_equals_one_process_through_every_stage(bundled_hmm, bundled_test_texts, estimator):
    """Under the precision target (several stages, sizes per document) two processes give every stage's log p̂
    and the reported log weights of every document exactly as one process does."""
    texts = bundled_test_texts[:12]
    settings = EstimatorSettings(estimator, 16, seed=5, target_se=0.01)
    alone = estimate_corpus(resolve(settings, bundled_hmm), texts, progress=False)
    shared = estimate_corpus(resolve(settings, bundled_hmm), texts, progress=False, workers=2)
    assert list(shared) == list(alone)
    assert max(len(e.stage_log_likelihoods) for e in alone.values()) >= 2
    for text, e in alone.items():
        assert shared[text].stage_log_likelihoods == e.stage_log_likelihoods
        assert np.array_equal(shared[text].log_weights, e.log_weights)


def test_a_documents_error_reaches_the_caller_unchanged(bundled_hmm, bundled_test_texts, monkeypatch):
    """A document's InputError raised in a worker arrives as the same InputError with the same message."""
    bad = bundled_test_texts[3]
    real = ResolvedEstimator.estimate_documents

    def failing(self, texts, *args, **kwargs):
        if bad in texts:
            raise InputError(f"document {bad[:20]!r}: cannot be estimated")
        return real(self, texts, *args, **kwargs)

    # set before the fork: the workers inherit it
    monkeypatch.setattr(ResolvedEstimator, "estimate_documents", failing)
    with pytest.raises(InputError, match="cannot be estimated"):
        estimate_corpus(
            resolve(EstimatorSettings("is", 8), bundled_hmm),
            bundled_test_texts[:6],
            progress=False,
            workers=2,
        )


def test_the_store_is_written_and_read_by_the_caller(bundled_hmm, bundled_test_texts, tmp_path):
    """With a results store, the estimates the workers return are stored (by this process) and a rerun loads
    them all, equal to what was stored."""
    texts, settings = bundled_test_texts[:5], EstimatorSettings("smc", 16, seed=2)
    store = ResultsStore(tmp_path, {"test": 1})
    first = estimate_corpus(resolve(settings, bundled_hmm), texts, progress=False, store=store, workers=2)
    assert store.tally == {(0, False): 5}
    again = estimate_corpus(resolve(settings, bundled_hmm), texts, progress=False, store=store, workers=2)
    assert store.tally == {(0, False): 5, (0, True): 5}
    assert all(np.array_equal(again[t].log_weights, first[t].log_weights) for t in texts)


def test_an_accelerator_or_a_daemon_keeps_one_process():
    """A CUDA model cannot be shared by fork; a multiprocessing.Pool's worker (a daemon) may not start processes."""
    assert workers.usable_workers(4, "cuda") == 1 and workers.usable_workers(0, "cpu") == 1
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(workers.usable_workers, (2, "cpu")) == 1
    assert workers.usable_workers(2, "cpu") == 2


def test_no_more_processes_than_documents(bundled_hmm, bundled_test_texts, monkeypatch, caplog):
    """Issue 53, item 8: workers=100 on 3 documents started 100 processes; the processes are capped at the documents,
    with an info line saying so, and the numbers are those of one process."""
    started = []
    enter = workers.DocumentWorkers.__enter__

    def spy(self):
        started.append(self.workers)
        return enter(self)

    monkeypatch.setattr(workers.DocumentWorkers, "__enter__", spy)
    texts, run = bundled_test_texts[:3], resolve(EstimatorSettings("is", 8, seed=3), bundled_hmm)
    with caplog.at_level(logging.INFO, logger="lm_latent_eval"):
        shared = estimate_corpus(run, texts, progress=False, workers=5)
    assert started == [3]
    assert (
        "3 documents: 3 process(es), not the 5 workers planned (one per document at most)" in caplog.messages
    )
    alone = estimate_corpus(run, texts, progress=False)
    assert all(np.array_equal(shared[t].log_weights, alone[t].log_weights) for t in texts)


def test_ctrl_c_stops_the_workers_at_once_without_their_tracebacks(tmp_path):
    """Ctrl-C reaches this process only (the workers ignore it), which stops the workers mid-document: no worker's
    KeyboardInterrupt traceback, no process left behind, and no wait for the documents in progress."""
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing, signal
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from lm_latent_eval.estimators import EstimatorSettings, resolve
            from lm_latent_eval.estimators.adaptive import estimate_corpus
            from lm_latent_eval.models import load_model
            model, _ = load_model("hmm")
            texts = [f"the cat sat on the mat number {i}" for i in range(8)]
            print("started", flush=True)
            try:
                estimate_corpus(resolve(EstimatorSettings("smc", 2_000_000), model), texts, progress=False, workers=2)
            except KeyboardInterrupt:
                print("interrupted", len(multiprocessing.active_children()), flush=True)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "started"
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "interrupted 0", (out, err)
    assert "Traceback" not in err, err
