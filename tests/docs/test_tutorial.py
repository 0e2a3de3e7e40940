"""The tutorial of docs/your-model.md, run as written: its code blocks are read from that page, so the two cannot drift
apart."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
from python_subprocess import run_checked, run_python

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your-model.md"
SECTION = "## Tutorial: evaluate your own latent LM"


def tutorial_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the tutorial section, in order."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.slow  # three fresh lm_eval processes
def test_tutorial_runs_as_written(tmp_path):
    blocks = tutorial_blocks()
    assert [lang for lang, _ in blocks] == ["python", "python", "bash", "python"]
    (_, module), (_, fit), (_, shell), (_, metrics) = blocks
    assert module.startswith("# my_latent_lm.py\n")
    (tmp_path / "my_latent_lm.py").write_text(module)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "OMP_NUM_THREADS": "1"}

    def python(code: str) -> str:
        return run_python(code, cwd=tmp_path, pythonpath=[tmp_path, REPO])

    python(fit)
    assert (tmp_path / "topic_lm" / "model.safetensors").is_file()
    # the console scripts as modules of this interpreter (the same programs; the test need not find them on PATH), and
    # this checkout after the tutorial's folder (an installed lm-latent-eval may be another version)
    script = (
        shell.replace("PYTHONPATH=. ", f"PYTHONPATH=.{os.pathsep}{REPO} ")
        .replace("lm_eval ", f"{sys.executable} -m lm_eval ")
        .replace("lm-latent-eval ", f"{sys.executable} -m lm_latent_eval.cli ")
    )
    run_checked(["bash", "-euo", "pipefail", "-c", script], env=env, timeout=900, cwd=tmp_path)
    cards = sorted((tmp_path / "out" / "cards").glob("*.json"))
    assert len(cards) == 2
    is_card = next(
        json.loads(c.read_text()) for c in cards if json.loads(c.read_text())["settings"]["estimator"] == "is"
    )
    figures = {f["name"]: f["value"] for f in is_card["figures"]}
    exact = figures["exact perplexity"]
    assert 1 < exact < len(json.loads((tmp_path / "topic_lm" / "config.json").read_text())["vocab"])
    # K = 100 samples of a 4-topic posterior: IS is close to exact (a loose check; the estimators have their own)
    assert math.isclose(figures["instance-level perplexity (Eq. 5)"], exact, rel_tol=0.05)
    # the certified bound holds for the true perplexity (P ≥ 95%; with certainty where the distinct draws' Σ p(x, z)
    # sets it), not for the estimate: that Σ can prove the truth lies below an IS estimate, so the two are not ordered
    assert figures["certified upper bound (95%)"] >= exact * (1 - 1e-9)
    out = python(metrics)
    assert f"instance-level PPL {figures['instance-level perplexity (Eq. 5)']:.2f}" in out
