"""The model × estimator and model × request-type tables of docs/estimators.md are true of the contract's models.

A cell that starts with "yes" runs (a finite estimate of the row's text, with that estimator or peek=false; a text
from ``sample_text`` for ``generate_until``; a prefix-probability model, own or ``prefix_model()``, or the tokenization
LM's own handling for ``loglikelihood``); a cell that starts with "no" or "not yet" is refused with a clean
ValueError (or the model lacks the method the cell names). The ``auto picks`` column is what ``estimator=auto``
resolves to. A row of the docs without a contract model (your model) is skipped; a model without a docs row fails.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from cases import CASES

from lm_latent_eval.estimators import ESTIMATORS, EstimatorSettings, estimate_document, resolve
from lm_latent_eval.harness.conditionals import has_conditional_model
from lm_latent_eval.protocol import has, prefix_view

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimators.md"
SECTION = "## Which estimator works with which model"
ROW_MODELS = {  # the docs' row label → the contract case of that model
    "HMM": "hmm",
    "KGLM": "kglm",
    "EntityNLM": "entitynlm",
    "RNNG": "rnng",
    "LDA": "lda",
    "`latent_tokenization`": "tokenization",
    "causal LM (`model=causal`)": "causal",
    "causal LM": "causal",
    "continuous latent (tests' Gaussian)": "gaussian",
    "masked LM (`latent_masked`; z = the reveal order)": "masked",
    "masked LM": "masked",
    "chain of thought (`latent_reasoning`; z = the chain before the answer)": "reasoning",
    "chain of thought (`latent_reasoning`)": "reasoning",
}
BY_NAME = {case.name: case for case in CASES}


def tables() -> list[list[dict[str, str]]]:
    """The markdown tables of the section, each a list of rows {header: cell}."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    found, current = [], []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif current:
            header, *rows = [row for row in current if not set("".join(row)) <= set("-: ")]
            found.append([dict(zip(header, row, strict=True)) for row in rows])
            current = []
    return found


def cells(table_index: int, column: str) -> list[tuple[str, str]]:
    """(case name, cell) of every row of one table naming a contract model (a row may name several)."""
    out = []
    for row in tables()[table_index]:
        labels = [row["model"]] if row["model"] in ROW_MODELS else row["model"].split(", ")
        for label in labels:
            if label in ROW_MODELS:
                out.append((ROW_MODELS[label], row[column]))
    return out


def verdict(cell: str) -> bool:
    assert re.match(r"(yes|no|not yet)\b", cell), f"a cell is 'yes' or the reason it cannot be: {cell!r}"
    return cell.startswith("yes")


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


def model_of(models: dict, name: str):
    if name not in models:
        models[name] = BY_NAME[name].build()
    return models[name]


def test_every_model_of_the_contract_has_a_row():
    """A model added to the contract table (tests/contract/cases.py) needs its row in both tables of the docs."""
    families = {
        case.name.split("-")[0] for case in CASES
    }  # kglm-q-features is a KGLM, rnng-prefix an RNNG, ...
    assert {name for name, _ in cells(0, "`is`")} == families
    assert {name for name, _ in cells(1, "`generate_until`")} == families


def params(table_index: int, column: str) -> list:
    return [pytest.param(name, cell, id=name) for name, cell in cells(table_index, column)]


@pytest.mark.parametrize("name,cell", params(0, "`auto` picks"))
def test_auto_picks_what_the_table_says(models, name, cell):
    run = resolve(EstimatorSettings(), model_of(models, name))
    settings, why = run.settings, run.reason
    assert cell == f"`{settings.estimator}`", why


def test_the_table_has_a_column_per_registered_estimator():
    """The columns come from the estimator table: a new estimator needs its column in the docs (elbo had none)."""
    header = set(tables()[0][0])
    assert {f"`{name}`" for name in ESTIMATORS} <= header


@pytest.mark.parametrize(
    "name,column,cell",
    [pytest.param(name, column, cell, id=f"{name}-{column}") for column in (*ESTIMATORS, "peek=false")
     for name, cell in cells(0, f"`{column}`")],
)  # fmt: skip
def test_estimator_cells(models, name, column, cell):
    model = model_of(models, name)
    if column == "peek=false":
        settings = EstimatorSettings(estimator="is", num_samples=4, peek=False)
    else:
        settings = EstimatorSettings(estimator=column, num_samples=4, beam_size=4)
    text = BY_NAME[name].text
    if verdict(cell):
        estimate = estimate_document(model, text, settings)
        assert math.isfinite(estimate.log_likelihood) and estimate.num_tokens > 0
    else:
        with pytest.raises(ValueError):
            estimate_document(model, text, settings)


def rnng_sentence(num_words: int) -> str:
    words = BY_NAME["rnng"].text.split()
    return " ".join((words * 2)[:num_words])


@pytest.mark.slow
def test_rnng_exact_lists_every_tree_up_to_twelve_words(models):
    """The RNNG's exact cell, first half: 12 words (58,786 trees) are listed and summed."""
    estimate = estimate_document(model_of(models, "rnng"), rnng_sentence(12), EstimatorSettings("exact"))
    assert math.isfinite(estimate.log_likelihood)


def test_rnng_exact_is_an_error_above_twelve_words(models):
    with pytest.raises(ValueError, match="13 words"):
        estimate_document(model_of(models, "rnng"), rnng_sentence(13), EstimatorSettings("exact"))


@pytest.mark.parametrize("name,cell", params(1, "`generate_until`"))
def test_generate_until_cells(models, name, cell):
    model = model_of(models, name)
    assert has(model, "text_sampler") == verdict(cell)
    if verdict(cell):
        text = model.sample_text(BY_NAME[name].short_text, 3, torch.Generator().manual_seed(0))
        assert isinstance(text, str)


@pytest.mark.parametrize("name,cell", params(1, "`loglikelihood` (context, continuation)"))
def test_loglikelihood_cells(models, name, cell):
    """yes: a prefix probability to difference (own or prefix_model()), a view of the context revealed
    (conditional_model: the masked LMs), or the tokenization LM's own contexts."""
    model = model_of(models, name)
    answers = prefix_view(model) is not None or has_conditional_model(model) or name == "tokenization"
    assert answers == verdict(cell)
