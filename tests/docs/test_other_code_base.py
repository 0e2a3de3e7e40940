"""docs/other-code-base.md, run as written: its adapter around a model from another code base (whose sampler draws
from the global torch RNG and scores in the same call) gives exact numbers where q is the posterior, numbers that do
not depend on the global RNG, takes the model's own option as a model_arg, and runs from a copied task YAML."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "other-code-base.md"
DOCS = ["The dog saw a cat .", "A cat ran .", "The dog ran ."]


def example_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the worked example, in order."""
    section = PAGE.read_text(encoding="utf-8").split("## Worked example", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture
def adapter_dir(tmp_path, monkeypatch):
    """A folder with their_lm.py, their_adapter.py and their checkpoint, importable, as the page builds them."""
    blocks = example_blocks()
    assert [lang for lang, _ in blocks] == ["python", "python", "python", "bash"]
    (_, their_lm), (_, adapter), (_, checkpoint), _ = blocks
    (tmp_path / "their_lm.py").write_text(their_lm)
    (tmp_path / "their_adapter.py").write_text(adapter)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("their_lm", "their_adapter"):
        sys.modules.pop(name, None)
    exec(checkpoint, {})  # noqa: S102  (the page's own code)
    return tmp_path


def _exact(lm, text: str) -> float:
    """log p(x) = Σ_t log Σ_c π(c) B(c, x_t): the class model's marginal, from their parameters."""
    with torch.no_grad():
        return float(torch.logsumexp(lm.lm.posterior_logits(lm.tokenize(text)).double(), -1).sum())


def _backend(**settings):
    from lm_latent_eval.harness.backends import LatentLMEval

    return LatentLMEval(
        model="their_adapter:TheirLM",
        pretrained="their_checkpoint",
        lowercase="true",
        device="cpu",
        **settings,
    )


def _estimates(lm) -> list[float]:
    from lm_eval.api.instance import Instance

    requests = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(DOCS)]
    return lm.loglikelihood_rolling(requests, disable_tqdm=True)


def test_adapter_is_exact_where_q_is_the_posterior_and_takes_their_option(adapter_dir):
    lm = _backend(estimator="is", num_samples=64, temperature=1.0)
    assert lm.model_kwargs == {"lowercase": True}  # MODEL_ARGS: their option reached from_pretrained
    assert int(lm.model.tokenize("The")[0]) == lm.model.ids["the"]
    assert _estimates(lm) == pytest.approx([_exact(lm.model, t) for t in DOCS], abs=1e-5)  # their float32


def test_adapter_numbers_do_not_depend_on_the_global_rng_and_leave_it_alone(adapter_dir):
    """Their sampler draws from the global RNG; the adapter's fork_rng makes the draws a function of our stream."""
    lm = _backend(estimator="is", num_samples=256, temperature=2.0)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = _estimates(lm)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(1)
    assert _estimates(lm) == first
    exact = [_exact(lm.model, t) for t in DOCS]
    assert first == pytest.approx(exact, abs=0.2) and first != pytest.approx(
        exact, abs=1e-9
    )  # noisy, unbiased
    beam = _backend(estimator="beam", beam_size=3**6)  # covers every z of these ≤ 6-word documents: exact
    assert _estimates(beam) == pytest.approx(exact, abs=1e-5)


@pytest.mark.slow  # two fresh processes
def test_worked_example_commands_run_as_written(adapter_dir):
    (_, _, _, (_, shell)) = example_blocks()
    script = (
        shell.replace("PYTHONPATH=. ", f"PYTHONPATH=.{os.pathsep}{REPO} ")
        .replace("lm_eval ", f"{sys.executable} -m lm_eval ")
        .replace("lm-latent-eval ", f"{sys.executable} -m lm_latent_eval.cli ")
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(adapter_dir), str(REPO)]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=adapter_dir, env=env, capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (card_file,) = (adapter_dir / "out" / "cards").glob("*.json")
    card = json.loads(card_file.read_text())
    assert card["reproduce"].startswith(f"PYTHONPATH={adapter_dir} lm_eval")
    from their_adapter import TheirLM

    model = TheirLM.from_pretrained("their_checkpoint", lowercase=True)
    tokens = sum(model.tokenize(t).numel() for t in DOCS)
    exact = math.exp(-sum(_exact(model, t) for t in DOCS) / tokens)
    value = next(f["value"] for f in card["figures"] if f["name"].startswith("instance-level perplexity"))
    assert value == pytest.approx(exact, rel=1e-5)  # τ = 1: the proposal is the posterior


def test_the_worked_examples_check_model_command_passes_on_the_adapter(adapter_dir, capsys):
    """The page's ``check-model`` line, run as written (in this process), on the adapter it builds: no check fails,
    the prefix declaration checked over their whole vocabulary."""
    import shlex

    from lm_latent_eval.cli import main

    (_, _, _, (_, shell)) = example_blocks()
    lines = shell.splitlines()
    (command,) = [line for line in lines if "lm-latent-eval check-model" in line]
    for line in lines[: lines.index(command)]:
        if line.startswith("printf "):  # the files it reads
            subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=adapter_dir, check=True)
    args = shlex.split(command.split("lm-latent-eval ", 1)[1])
    assert main(args) == 0
    rows = capsys.readouterr().out.splitlines()
    assert not any(" FAILED " in row for row in rows), (
        rows
    )  # "estimators agree" skipped: IS only, no log_marginal
    assert "whole vocabulary = 1.00" in next(r for r in rows if r.startswith("prefix"))
