"""``lm-latent-eval check-model`` (issue 34, item 12): a user's model checked against the contract on short texts; each
check must fail on the mistake it is there to catch."""

from __future__ import annotations

import pytest

from lm_latent_eval.cli import main
from lm_latent_eval.model_check import run_checks
from lm_latent_eval.models import load_model

TEXTS = ["the cat sat on the mat", "a dog ran"]


class ShiftedLogQ:
    """The bundled HMM's proposal reporting log q + 0.2 for every draw (a wrong normalizer)."""

    def __init__(self, inner):
        self.inner = inner

    def sample(self, x, num_samples, temperature=1.0, peek=True, generator=None):
        z, log_q = self.inner.sample(x, num_samples, temperature, peek, generator)
        return z, log_q + 0.2


def by_name(checks):
    return {c.name: c for c in checks}


@pytest.fixture(scope="module")
def hmm():
    return load_model("hmm")[0]


def test_the_bundled_hmm_passes_every_check(hmm):
    checks = by_name(run_checks(hmm, TEXTS, list(hmm.vocab), full_vocabulary=True))
    assert all(c.passed for c in checks.values()), checks
    assert "= 1.000" in checks["prefix declaration"].detail


class WithProposal:
    """A model with another proposal (everything else the wrapped model's)."""

    def __init__(self, model, proposal):
        self.model, self.proposal = model, proposal

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_a_wrong_log_q_fails(hmm):
    checks = by_name(run_checks(WithProposal(hmm, ShiftedLogQ(hmm.proposal)), TEXTS))
    assert checks["log q"].passed is False and "q-mass" in checks["log q"].detail


def test_a_model_of_complete_trees_declared_a_prefix_probability_fails(monkeypatch):
    """The RNNG scores complete trees: Σ_w p(next word) is far below 1, so a True declaration is caught."""
    rnng = load_model("rnng")[0]
    assert by_name(run_checks(rnng, TEXTS, list(rnng.vocab), True))["prefix declaration"].passed
    monkeypatch.setattr(type(rnng), "prefix_probability", True)
    check = by_name(run_checks(rnng, TEXTS, list(rnng.vocab), True))["prefix declaration"]
    assert check.passed is False and "declare False" in check.detail


def test_the_command_prints_one_row_per_check_and_exits_0(capsys):
    assert main(["check-model", "--model", "hmm"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split()[0] for r in rows] == ["texts", "shapes", "log", "estimators", "prefix"]
