"""The record contract over every estimator of the table (``estimators.registry.ESTIMATORS``): what
CONTRIBUTING.md's "Adding an estimator" asks of an estimator's record holds for each one, on the first model of the
contract table that can serve it. A new estimator is checked here without a line of this file changing."""

from __future__ import annotations

import json
import math

import pytest
from cases import CASES

from lm_latent_eval.estimators import ESTIMATORS, DocumentEstimate, EstimatorSettings, resolve
from lm_latent_eval.estimators.intervals import DocumentError
from lm_latent_eval.estimators.registry import estimate_from_json, recorded_settings

# the keys every family's to_json writes (None where a field does not apply), besides its own
KEYS = set(DocumentEstimate("a", 1, -1.0).to_json())


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


def serving(models: dict, estimator):
    """The first case of the contract table whose model can serve ``estimator``, and that model."""
    for case in CASES:
        if case.name not in models:
            models[case.name] = case.build()
        if estimator.missing(models[case.name]) is None:
            return case, models[case.name]
    raise AssertionError(f"no model of the contract table serves estimator={estimator.name}")


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_keeps_the_record_contract(models, name):
    """Its record is its family (``result``) and names it; K samples where it draws them; ``error`` states log p̂;
    ``diagnostic_items`` are floats by name; ``to_json`` writes the keys every family writes and ``estimate_from_json`` reads
    the text back as the same record; a text without tokens is log p = 0 and ``known`` a record of the family;
    ``describe`` and ``figure_name`` name the recorded settings."""
    estimator = ESTIMATORS[name]
    case, model = serving(models, estimator)
    run = resolve(EstimatorSettings(name, num_samples=8, beam_size=4), model)
    estimate = run.estimate(case.short_text).summarized()
    assert type(estimate) is estimator.result and estimate.estimator == name
    assert estimate.num_tokens > 0 and math.isfinite(estimate.log_likelihood)
    if estimator.draws_samples:
        assert estimate.num_samples == 8 and estimate.log_weights.shape == (8,)
    error = estimate.error()
    assert isinstance(error, DocumentError) and error.log_likelihood == estimate.log_likelihood
    items = estimate.diagnostic_items()
    assert all(isinstance(k, str) and isinstance(v, float) for k, v in items.items()), items

    record = estimate.to_json()
    assert KEYS <= set(record) and record["estimator"] == name
    back = estimate_from_json(json.loads(json.dumps(record)))
    assert type(back) is type(estimate) and json.dumps(back.to_json()) == json.dumps(record)

    empty = run.estimate("")
    assert type(empty) is estimator.result and (empty.num_tokens, empty.log_likelihood) == (0, 0.0)
    known = estimator.known(case.short_text, estimate.num_tokens, -1.0, run.settings, model)
    assert type(known) is estimator.result and known.log_likelihood == -1.0
    recorded = recorded_settings(run.settings)
    assert recorded["estimator"] == name and estimator.describe(recorded) and estimator.figure_name(recorded)
