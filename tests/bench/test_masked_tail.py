"""bench/masked_tail.py (issue 52, item 2): its recorders leave the runs as they are, and its interval restated with
another stage's variance per sample is the package's interval with that v̂."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from masked_tail import RunWatcher, StageRecorder, restated, stages_agreement

from lm_latent_eval.estimators import EstimatorSettings, resolve, smc
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.models import load_model


def test_the_watched_runs_are_the_runs_unwatched():
    hmm, _ = load_model("hmm")
    texts = ["the cat sat on the mat", "a dog ran"]
    run = resolve(EstimatorSettings("smc", 64, resample_threshold=0.9, target_se=0.05, seed=3), hmm)
    plain = estimate_corpus(run, texts, progress=False)
    watcher, original = RunWatcher(), smc.smc_lanes
    store = StageRecorder(watcher, {t: float(hmm.log_marginal(hmm.tokenize(t))) for t in texts})
    with watcher.installed():
        watched = estimate_corpus(run, texts, progress=False, store=store)
    assert smc.smc_lanes is original
    assert [watched[t].log_likelihood for t in texts] == [plain[t].log_likelihood for t in texts]
    assert {s["text"] for s in store.stages} == {0, 1} and not watcher.records
    assert any(stage["resampling_steps"] > 0 for stage in store.stages)
    for stage in store.stages:
        assert len(stage["runs"]) == len(stage["run_log_likelihoods"])
        for record in stage["runs"]:
            assert 1 <= record["distinct_eves"] <= record["size"]
        # every resampling step of every run was seen: the runs' mean count is the diagnostics'
        steps = [len(r["epoch_khat"]) for r in stage["runs"]]
        assert sum(steps) / len(steps) == stage["resampling_steps"]


def _stage(stage: int, ll: float, v: float, k: int, runs: int) -> dict:
    return {
        "stage": stage,
        "text": 0,
        "num_samples": k,
        "log_likelihood": ll,
        "exact": -10.0,
        "relative_variance": v,
        "runs": [{"size": k // runs}] * runs,
    }


def test_restated_takes_the_largest_variance_per_sample_of_any_stage():
    # stage 2's spread came out small with its low estimate; stage 1's c = v̂ K = 400 says the last stage's v̂ is 0.04
    record = {
        "truth": -10.0,
        "stages": [_stage(1, -10.2, 0.4, 1_000, 4), _stage(2, -10.3, 0.001, 10_000, 10)],
    }
    own_covered, own = restated(record, "own")
    largest_covered, largest = restated(record, "largest")
    assert not own_covered and largest_covered
    assert abs(own.standard_error**2 - 0.001) < 1e-12 and abs(largest.standard_error**2 - 0.04) < 1e-12
    assert largest.lower < own.lower and largest.upper > own.upper
    # pooled over the stages' 3 + 9 degrees of freedom: (400 · 3 + 10 · 9) / 12 per sample
    assert abs(restated(record, "pooled")[1].standard_error ** 2 - (1200 + 90) / 12 / 10_000) < 1e-12
    # the two stages' corrected estimates, -10.0 and -10.2995, are far apart for v̂ = 0.4 and 0.001: p = 0.64
    assert 0.6 < stages_agreement(record) < 0.7
