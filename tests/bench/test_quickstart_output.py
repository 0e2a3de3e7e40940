"""The committed output of the README's first command (bench/quickstart/output.md, whose figures the README quotes:
tests/docs/test_docs_figures.py) is what the command prints today.

The docs-figure test compares the README with the committed file; this compares the committed file with a fresh run,
so that a change which moves a figure cannot leave the README quoting the old one. A figure may differ by one unit
of its last printed digit: CPUs whose float32 matrix products round differently (MKL on AVX-512 against AMD's) move
a diagnostic such as the mean ESS by about 1e-8 of itself, which can cross a rounding boundary."""

from __future__ import annotations

import sys
from pathlib import Path

import committed_tables
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from quickstart import OUTPUT, run_readme_command


def same_row(committed: str, fresh: str) -> bool:
    """``committed_tables.same_row`` to one unit of each figure's last printed digit."""
    return committed_tables.same_row(committed, fresh, last_digit=True)


def table(text: str) -> list[str]:
    """The metric rows of lm-eval's table (every figure with its Stderr), in order."""
    return [line for line in text.splitlines() if line.startswith("|") and "|none" in line]


def test_a_figure_may_differ_by_one_unit_of_its_last_printed_digit():
    assert same_row("|a|3243.6528|N/A|", "|a|3243.6527|N/A|")
    assert same_row("|a|11.5855|N/A|", "|a|11.5856|N/A|")
    assert not same_row("|a|3243.6529|N/A|", "|a|3243.6527|N/A|")
    assert not same_row("|a|11.5856|N/A|", "|b|11.5856|N/A|")
    assert not same_row("|a|11.5856|", "|a|11.5856|N/A|")


@pytest.mark.slow  # one lm_eval process: the README's command (about a minute on 2 cores)
def test_the_readme_command_prints_the_committed_table(tmp_path):
    committed = table((OUTPUT / "output.md").read_text(encoding="utf-8"))
    assert any("|latent_perplexity " in row for row in committed)
    proc, _, _ = run_readme_command(str(tmp_path))
    fresh = table(proc.stdout)
    assert len(fresh) == len(committed), proc.stdout[-3000:]
    assert all(same_row(a, b) for a, b in zip(committed, fresh)), proc.stdout[-3000:]
