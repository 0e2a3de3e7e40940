"""bench/masked_length.py --conditionals (issue 52, item 4): the oracle's multiple-choice questions at length, held to
the exact Σ log p(choice | context). Fast: a short question is computed exactly and holds it (to rounding). Slow: at
16 tokens per choice the default statement's interval covers in at least 90% of 30 seeds, the bound in every one."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import torch
from masked_coverage import coverage, holds
from masked_length import (
    CHOICES,
    block_rows,
    blocked_log_weights,
    exact_twist,
    fitted_twist,
    make_oracle_model,
    oracle_log_marginal,
    oracle_texts,
    question,
    row_features,
    row_log_probs,
)

from lm_latent_eval.models.masked.conditionals import step_scores


@pytest.fixture(scope="module")
def oracle():
    return make_oracle_model()


def test_exact_intervals_hold_the_truth_to_rounding():
    assert holds(-21.814608718089236, -21.814608718089236, -21.814608718089232)
    assert not holds(-21.8146, -21.8146, -21.8147)


def test_a_short_question_is_computed_exactly(oracle):
    view, texts, truth = question(oracle, 4)
    assert len(set(texts)) == CHOICES and all(len(view.tokenize(t)) == 4 for t in texts)
    out = coverage(view, texts, {}, range(2), truth, lambda _: None, None)
    assert out["covered"] == out["two_sided"] == 2
    assert all(run["computed_exactly"] == CHOICES for run in out["runs"])


def test_blocked_weights_average_to_the_exact_marginal_over_every_order(oracle):
    """``--blocks``: over all T! orders each block size's weights average to p(x) exactly; b = 1 is p(x | σ) (the
    model's log joint plus log T!), b = T the 2^T program (no spread), and a coarser partition of the steps (b = 4
    against 2, 2 against 1) never has more variance."""
    x = oracle.tokenize(oracle_texts(oracle, 5)[0])
    orders = torch.tensor(list(itertools.permutations(range(5))))
    truth = float(oracle_log_marginal(oracle, x))
    log_w = {b: blocked_log_weights(oracle, x, orders, b) for b in (1, 2, 3, 4, 5)}
    for b, lw in log_w.items():
        assert float(torch.logsumexp(lw, 0)) - math.log(len(orders)) == pytest.approx(truth, abs=1e-12), b
    torch.testing.assert_close(log_w[1], oracle.log_joint(x, orders) + math.lgamma(6), rtol=0, atol=1e-12)
    spread = {b: float((lw - truth).exp().var()) for b, lw in log_w.items()}
    assert spread[1] > spread[2] > spread[4] > 0 and spread[5] < 1e-20
    assert [block_rows(5, b) for b in (1, 2, 3, 5)] == [5, 3 + 3 + 1, 7 + 3, 31]


def test_row_features_sum_the_row_at_s(oracle):
    x = oracle.tokenize(oracle_texts(oracle, 6)[0])
    revealed = torch.tensor([[True, False, False, True, False, False], [False] * 6])
    pseudo = torch.arange(6, dtype=torch.float64)
    phi = row_features(row_log_probs(oracle, x, revealed), x, revealed, pseudo)
    mean_field = step_scores(oracle, x, revealed).log_token.masked_fill(revealed, 0.0).sum(-1)
    torch.testing.assert_close(phi[:, 0], mean_field)
    torch.testing.assert_close(phi[:, 3], torch.tensor([1.0 + 2 + 4 + 5, 15.0], dtype=torch.float64))


def test_a_twist_fitted_to_the_exact_values_is_exact_one_token_before_the_end(oracle):
    # with one position j masked, V(S) = p(x_j | x_−j): a feature, so the fit is exact up to the step's constant
    x = oracle.tokenize(oracle_texts(oracle, 6)[0])
    exact = exact_twist(oracle)
    log_psi = fitted_twist(oracle, x, "exact", seed=0, exact=exact)
    revealed = ~torch.eye(6, dtype=torch.bool)
    fitted, truth = log_psi(x, revealed, None, 4), exact(x, revealed)
    torch.testing.assert_close(fitted - fitted[0], truth - truth[0])


@pytest.mark.slow
def test_sixteen_token_choices_cover(oracle):
    view, texts, truth = question(oracle, 16)
    out = coverage(view, texts, {}, range(30), truth, lambda _: None, None)
    assert out["bound_held"] == 30
    assert out["covered"] >= 27
