"""Multiple-choice answers under Monte Carlo error (issue 53, item 4): acc is an argmax over estimates, so estimator
noise flips answers. Each question's flip probability, the run's expected flips per task, and, under a precision
target, more samples for the questions not yet settled: acc then equals the exact-values acc."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("lm_eval")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import choice_flips

from lm_latent_eval.estimators.decisions import flip_probability
from lm_latent_eval.estimators.intervals import DocumentError
from lm_latent_eval.harness.backends import LatentHMMEval

# (context ⊕ a) − context, (context ⊕ b) − context over the documents [context ⊕ a, context, context ⊕ b]
TWO = np.array([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]])


@pytest.mark.parametrize("gap", [0.0, 0.05, 0.2, 0.5])
def test_two_choices_flip_with_the_normal_tail_of_their_corrected_gap(gap):
    """Two choices: P(flip) = Φ(−Δ / √(v_a + v_b)), Δ the bias-corrected gap in favour of the chosen one; the
    shared context's v̂, however large, changes nothing."""
    v_a, v_b = 0.01, 0.03
    docs = [DocumentError(-10.0, v_a, 99), DocumentError(-3.0, 5.0, 99), DocumentError(-10.0 - gap, v_b, 99)]
    corrected = (-10.0 + v_a / 2) - (-10.0 - gap + v_b / 2)
    expected = stats.norm.cdf(-corrected / math.sqrt(v_a + v_b))
    assert flip_probability(TWO, docs) == pytest.approx(expected, abs=4 * math.sqrt(0.25 / 2**15))


def test_an_error_estimated_from_few_runs_has_the_heavier_tail_of_students_t():
    """v̂ from 4 SMC runs (3 degrees of freedom) is itself uncertain: the flip probability reads t_3, not the normal."""
    docs = [DocumentError(-10.0, 0.01, dof) for dof in (3, 3)]
    far = [docs[0], DocumentError(-3.0, 5.0, 3), DocumentError(-10.5, 0.01, 3)]
    t3 = stats.t.sf(0.5 / math.sqrt(0.02), df=3)  # the gap over a t-like spread, well above the normal tail
    assert flip_probability(TWO, far) > 10 * stats.norm.sf(0.5 / math.sqrt(0.02))
    assert flip_probability(TWO, far) == pytest.approx(t3, rel=0.5)


def test_exact_estimates_never_flip_and_an_untrusted_error_is_unknown():
    exact = [
        DocumentError(-10.0, 0.0, math.inf),
        DocumentError(-3.0, 0.0, math.inf),
        DocumentError(-10.0, 0.0, math.inf),
    ]
    assert flip_probability(TWO, exact) == 0.0
    doubted = [DocumentError(-10.0, 0.01, 99, "heavy-tailed"), *exact[1:]]
    assert math.isnan(flip_probability(TWO, doubted))
    # an untrusted context is shared by both choices: it moves neither apart
    shared = [exact[0], DocumentError(-3.0, 0.5, 99, "heavy-tailed"), exact[2]]
    assert flip_probability(TWO, shared) == 0.0


def test_four_choices_against_simulated_noise():
    """The flip probability is the share of fresh estimates, drawn with the stated errors, whose argmax moves."""
    rng = np.random.default_rng(0)
    truth, v = np.array([-9.0, -9.1, -9.3, -10.0]), np.array([0.02, 0.01, 0.04, 0.02])
    signs = np.eye(4)
    estimates = truth - v / 2 + np.sqrt(v) * rng.standard_normal((400, 4))
    flips = [
        flip_probability(signs, [DocumentError(e, vi, 99) for e, vi in zip(row, v)]) for row in estimates
    ]
    observed = float((estimates.argmax(axis=1) != truth.argmax()).mean())
    # the reported probabilities average to the observed rate of flips (first-order normal errors: calibrated)
    assert float(np.mean(flips)) == pytest.approx(observed, abs=0.06)


@pytest.fixture(scope="module")
def hmm_choice(tmp_path_factory):
    """lm-eval's arc_easy over tests/data/hmm_choice, and its exact acc and answers."""
    manager = choice_flips.task_manager(tmp_path_factory.mktemp("tasks"))
    return manager, choice_flips.answers(LatentHMMEval(estimator="exact", device="cpu"), manager)


def test_a_run_without_a_target_reports_its_expected_flips(hmm_choice):
    """SMC at K = 100 without a precision target: the run says how many answers its noise may have flipped; the exact
    estimator says none."""
    manager, (_, _, exact_summary) = hmm_choice
    per_question = exact_summary.pop("per_question")
    assert len(per_question) == 40
    assert all(q == {"flip_probability": 0.0, "stderr": [0.0] * 4} for q in per_question.values())
    assert exact_summary == {
        "questions": 40,
        "expected_flips": 0.0,
        "unknown": 0,
        "unsettled": 0,
        "mean_samples": 0.0,
    }
    _, _, summary = choice_flips.answers(
        LatentHMMEval(estimator="smc", num_samples=100, seed=1, device="cpu"), manager
    )
    assert summary["questions"] == 40 and summary["expected_flips"] > 0.5 and summary["unsettled"] > 0
    assert summary["mean_samples"] == 100
    flips = [q["flip_probability"] for q in summary["per_question"].values()]
    assert sum(f for f in flips if f is not None) == pytest.approx(summary["expected_flips"])
    assert all(len(q["stderr"]) == 4 for q in summary["per_question"].values())


def test_the_precision_target_settles_every_answer(hmm_choice):
    """SMC with target_se: the questions not settled get more samples until their flip probability is at most
    UncertaintyPolicy.max_flip_probability; acc is the exact acc (bench/choice_flips: 20 of 20 seeds)."""
    manager, (exact_acc, exact, _) = hmm_choice
    lm = LatentHMMEval(estimator="smc", num_samples=100, target_se=0.002, seed=1, device="cpu")
    acc, chosen, summary = choice_flips.answers(lm, manager)
    assert chosen == exact and acc == exact_acc
    assert summary["unsettled"] == 0 and summary["expected_flips"] < 40 * 1e-3
    assert summary["mean_samples"] > 100


@pytest.mark.slow
def test_with_the_precision_target_acc_is_exact_at_other_seeds(hmm_choice):
    """Seeds 2 to 9 (bench/choice_flips.py runs 20: the exact acc at every one)."""
    manager, (exact_acc, _, _) = hmm_choice
    runs = [
        choice_flips.answers(
            LatentHMMEval(estimator="smc", num_samples=100, target_se=0.002, seed=seed, device="cpu"), manager
        )[0]
        for seed in range(2, 10)
    ]
    assert sum(acc == exact_acc for acc in runs) >= 7


def test_answers_on_common_draws_flip_as_their_paired_weights_say():
    """Two answers whose estimates average weights of the same draws (a reasoning view with ``share_chains``) flip
    as their correlation says: negatively correlated weights spread the gap more than independent ones would, and
    answers on one stream but different draws (other K) have an unknown flip probability."""
    from lm_latent_eval.estimators import UncertaintyPolicy
    from lm_latent_eval.estimators.importance import ISEstimate
    from lm_latent_eval.harness.choices import Question, _flip, _signs
    from lm_latent_eval.harness.conditionals import ConditionalEstimates

    z = np.random.default_rng(0).standard_normal(64)
    log_w = {" a": 0.3 * z, " b": 0.05 - 0.3 * z}
    pairs = (("Q", " a"), ("Q", " b"))

    def found(streams, k=64):
        estimates = {
            (q, c): ISEstimate(q + c, 1, float(np.log(np.mean(np.exp(log_w[c][:k])))), log_w[c][:k])
            for q, c in pairs
        }
        estimates["Q", " a"] = ISEstimate("Q a", 1, float(np.log(np.mean(np.exp(log_w[" a"])))), log_w[" a"])
        return ConditionalEstimates({p: ((1.0, p),) for p in pairs}, estimates, streams)

    policy = UncertaintyPolicy()
    signs, keys = _signs(Question("t", 0, pairs), found({}))
    apart = _flip(signs, keys, found({}), policy)
    shared = _flip(signs, keys, found(dict.fromkeys(pairs, "Q")), policy)
    assert 0 < apart < shared < 0.5
    assert math.isnan(_flip(signs, keys, found(dict.fromkeys(pairs, "Q"), k=32), policy))
