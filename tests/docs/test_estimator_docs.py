"""docs/estimators.md names every registered estimator: its heading counts them, its table has a row for each."""

from __future__ import annotations

import re
from pathlib import Path

from lm_latent_eval.estimators.registry import ESTIMATORS

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimators.md"
NUMBERS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def test_the_heading_counts_the_registered_estimators_and_the_table_lists_each():
    """The heading said "The four estimators" after estimator=elbo made five."""
    text = DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^## The (\w+) estimators$", text, flags=re.MULTILINE)
    assert headings == [NUMBERS[len(ESTIMATORS)]]
    anchor = f"(#the-{NUMBERS[len(ESTIMATORS)]}-estimators)"
    assert anchor in text
    for name in ESTIMATORS:
        assert re.search(rf"^\| `{name}`", text, flags=re.MULTILINE), name
