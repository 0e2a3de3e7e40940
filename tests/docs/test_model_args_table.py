"""docs/lm-eval.md's model_args table against what the backends accept (issue 51, item 5): every setting of
``EstimatorSettings``, every backend argument and every model's ``MODEL_ARGS`` has a row, the ``model`` row names every
model of the table ``MODELS``, and the ``elbo_masks`` row every mask scheme; the table is one block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_latent_eval.estimators.settings import ELBO_MASKS
from lm_latent_eval.harness.model_args import BACKEND_ARGS, settings_args
from lm_latent_eval.models import MODELS, resolve_class

PAGE = Path(__file__).resolve().parents[2] / "docs" / "lm-eval.md"


def table() -> dict[str, str]:
    """Each name of the first column (``a``, ``b``, ...) -> its row; the rows below the section's header."""
    lines = PAGE.read_text(encoding="utf-8").split("## model_args\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model_arg |"))
    block = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        block.append(line)
    rows = {}
    for line in block:
        first = line.split("|")[1]
        rows |= dict.fromkeys(re.findall(r"`([a-z_]+)`", first), line)
    return rows


def test_every_accepted_model_arg_has_a_row():
    names = {a.name for a in (*settings_args(), *BACKEND_ARGS)}
    for model in MODELS:
        names |= set(getattr(resolve_class(model), "MODEL_ARGS", {}))
    missing = sorted(names - set(table()))
    assert not missing, f"docs/lm-eval.md's model_args table has no row for {missing}"


def test_the_rows_that_list_choices_list_every_one():
    rows = table()
    assert all(f"`{model}`" in rows["model"] for model in MODELS), rows["model"]
    assert all(f"`{scheme}`" in rows["elbo_masks"] for scheme in ELBO_MASKS), rows["elbo_masks"]
