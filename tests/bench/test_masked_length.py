"""bench/masked_length.py --conditionals (issue 52, item 4): the oracle's multiple-choice questions at length, held to
the exact Σ log p(choice | context). Fast: a short question is computed exactly and holds it (to rounding). Slow: at
16 tokens per choice the default statement's interval covers in at least 90% of 30 seeds, the bound in every one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from masked_coverage import coverage, holds
from masked_length import CHOICES, make_oracle_model, question


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


@pytest.mark.slow
def test_sixteen_token_choices_cover(oracle):
    view, texts, truth = question(oracle, 16)
    out = coverage(view, texts, {}, range(30), truth, lambda _: None, None)
    assert out["bound_held"] == 30
    assert out["covered"] >= 27
