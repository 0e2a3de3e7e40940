"""The Examples sections of the public API run as doctests: the contract (every module of ``protocol/``) and its
argument rules (``checks``), the families' stepwise base (``models.stepwise_module``), the estimators, the harness entry points and the masked LM's modules.

A module added to one of these packages is collected here automatically; an example that no longer prints what it
shows fails this test (``python -m pytest tests/test_doctests.py -n 0 -v`` names the example)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lm_latent_eval.estimators
import lm_latent_eval.harness
import lm_latent_eval.models.masked
import lm_latent_eval.protocol

PACKAGES = (
    lm_latent_eval.protocol,
    lm_latent_eval.estimators,
    lm_latent_eval.harness,
    lm_latent_eval.models.masked,
)
MODULES = [
    "lm_latent_eval.protocol",
    "lm_latent_eval.checks",
    "lm_latent_eval.models.stepwise_module",
    "lm_latent_eval.reports.json_files",
    "lm_latent_eval.reports.card.compute",
    "lm_latent_eval.reports.card.reproduce",
    "lm_latent_eval.reports.sweep.compute",
    *(f"{p.__name__}.{m.name}" for p in PACKAGES for m in pkgutil.iter_modules(p.__path__)),
]
# the start-up hook runs at interpreter start (it installs a finder when imported): nothing to run here
SKIPPED = {"lm_latent_eval.harness.hook"}


@pytest.mark.parametrize("name", [m for m in MODULES if m not in SKIPPED])
def test_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples of {name} failed (see the output)"
    )


def test_the_public_api_has_examples():
    """Every estimator module with public functions shows at least one example."""
    with_examples = {
        name
        for name in MODULES
        if any(t.examples for t in doctest.DocTestFinder().find(importlib.import_module(name), name))
    }
    for required in (
        "lm_latent_eval.checks",
        "lm_latent_eval.protocol.contract",
        "lm_latent_eval.protocol.checked",
        "lm_latent_eval.protocol.capabilities",
        "lm_latent_eval.protocol.particles",
        "lm_latent_eval.estimators.settings",
        "lm_latent_eval.estimators.policy",
        "lm_latent_eval.estimators.registry",
        "lm_latent_eval.estimators.document",
        "lm_latent_eval.estimators.importance",
        "lm_latent_eval.estimators.smc",
        "lm_latent_eval.estimators.beam",
        "lm_latent_eval.estimators.exact",
        "lm_latent_eval.estimators.corpus",
    ):
        assert required in with_examples, f"{required} has no Examples section"
