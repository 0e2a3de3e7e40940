"""The committed output of the README's first command (bench/quickstart/output.md, whose figures the README quotes:
tests/docs/test_docs_figures.py) is what the command prints today.

The docs-figure test compares the README with the committed file; this compares the committed file with a fresh run,
so that a change which moves a figure cannot leave the README quoting the old one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from quickstart import OUTPUT, run_readme_command


def table(text: str) -> list[str]:
    """The metric rows of lm-eval's table (every figure with its Stderr), in order."""
    return [line for line in text.splitlines() if line.startswith("|") and "|none" in line]


@pytest.mark.slow  # one lm_eval process: the README's command (about a minute on 2 cores)
def test_the_readme_command_prints_the_committed_table(tmp_path):
    committed = table((OUTPUT / "output.md").read_text(encoding="utf-8"))
    assert any("|latent_perplexity " in row for row in committed)
    proc, _, _ = run_readme_command(str(tmp_path))
    assert table(proc.stdout) == committed, proc.stdout[-3000:]
