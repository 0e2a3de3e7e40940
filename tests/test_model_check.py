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


def test_a_vocabulary_file_is_the_whole_vocabulary_so_a_complete_text_model_declared_a_prefix_fails(
    tmp_path, monkeypatch, capsys
):
    """docs/other-code-base.md has a user without a ``vocab`` attribute pass ``--words`` with the model's whole
    vocabulary; the check read that file as "some words", so a sum far below 1 (URNNG's 0.71, the RNNG's 0.04) passed a
    True declaration. Now the file is the whole vocabulary unless ``--partial-words`` says otherwise."""
    rnng = load_model("rnng")[0]
    words = tmp_path / "vocab.txt"
    words.write_text("".join(f"{w}\n" for w in rnng.vocab if w.strip()))
    monkeypatch.setattr(type(rnng), "prefix_probability", True)
    assert main(["check-model", "--model", "rnng", "--words", str(words)]) == 1
    row = next(r for r in capsys.readouterr().out.splitlines() if r.startswith("prefix"))
    assert "FAILED" in row and "whole vocabulary" in row and "declare False" in row
    # a partial list cannot show a sum below 1 to be wrong, only one above 1
    assert main(["check-model", "--model", "rnng", "--words", str(words), "--partial-words"]) == 0


def test_the_tutorials_check_model_command_passes_on_its_topic_model(tmp_path, monkeypatch, capsys):
    """docs/your-model.md's tutorial runs ``check-model`` on its TopicLM (the whole tutorial, with lm_eval, is a slow
    test): the page's command, run as written in this process on the page's module (saved unfitted), passes."""
    import re
    import shlex
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "your-model.md").read_text(encoding="utf-8")
    section = page.split("## Tutorial: evaluate your own latent LM", 1)[1].split("\n## ", 1)[0]
    (_, module), _, (_, shell), _ = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL)
    (tmp_path / "my_latent_lm.py").write_text(module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_latent_lm", None)
    from my_latent_lm import TopicLM

    TopicLM(["<unk>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]).save_pretrained("topic_lm")
    (command,) = [line for line in shell.splitlines() if "lm-latent-eval check-model" in line]
    assert main(shlex.split(command.split("lm-latent-eval ", 1)[1])) == 0
    rows = {r.split("  ")[0]: r for r in capsys.readouterr().out.splitlines()}
    assert all(" passed " in row for row in rows.values()), rows
    assert "whole vocabulary = 1.000" in rows["prefix declaration"]


MODELS_WITHOUT_PARTS = """
import torch


class NoTokenizeNoProposal(torch.nn.Module):
    @classmethod
    def from_pretrained(cls, path, **kwargs):
        return cls()

    def log_joint(self, x, z):
        return torch.zeros(1, dtype=torch.float64)


class NoFromPretrained:
    pass
"""


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (
            "NoTokenizeNoProposal",
            (
                "model class 'my_models:NoTokenizeNoProposal' is not a latent LM: it has no proposal, tokenize (the "
                "contract: proposal, tokenize(text), log_joint(x, z); docs/your-model.md)"
            ),
        ),
        (
            "NoFromPretrained",
            (
                "model class 'my_models:NoFromPretrained' has no from_pretrained(path, **kwargs): a model class needs it "
                "to be loaded (docs/your-model.md)"
            ),
        ),
    ],
)
def test_a_class_without_the_contract_gets_the_list_of_what_is_missing(
    cls, expected, tmp_path, monkeypatch, capsys
):
    """Issue 43, item 7: check-model (and ``--model latent model=...``) on a class without ``tokenize`` or
    ``proposal`` was an AttributeError traceback; loading the model names what the class lacks, in one line."""
    from lm_latent_eval.errors import UserError
    from lm_latent_eval.harness.backends import LatentLMEval

    (tmp_path / "my_models.py").write_text(MODELS_WITHOUT_PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "ckpt").mkdir()
    argv = ["check-model", "--model", f"my_models:{cls}", "--pretrained", str(tmp_path / "ckpt")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lm-latent-eval check-model: error: {expected}"]
    with pytest.raises(UserError) as caught:
        LatentLMEval(model=f"my_models:{cls}", pretrained=str(tmp_path / "ckpt"), device="cpu")
    assert str(caught.value) == expected
