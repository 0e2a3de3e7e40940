"""The stepwise part's boundary: every bundled stepwise model's ``smc_init`` checks its arguments once
(``protocol.CheckedStepwise``), as the proposals' ``sample`` does, and hands over to the model's ``_smc_init``.

A bad K or τ is refused with ``InputError`` (one line, the proposals' wording) by every model alike; valid calls
still advance particles; a model of one's own that implements ``smc_init`` directly (the tests' Gaussian) keeps
working under SMC.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from cases import CASES

from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.protocol import CheckedStepwise, num_particles

STEPWISE = [case for case in CASES if case.stepwise]
BAD_COUNTS = [0, -1, 2.5, True]
BAD_TEMPERATURES = [0, -1, math.nan, math.inf]


def case_named(name: str):
    return next(case for case in STEPWISE if case.name == name)


@functools.cache
def built(name: str):
    return case_named(name).build()


def bundled(model) -> bool:
    return type(model).__module__.startswith("lm_latent_eval.")


# the rows whose model is not the package's: a model of one's own, implementing smc_init itself
OWN = ("gaussian",)
BUNDLED = [case.name for case in STEPWISE if case.name not in OWN]


def refusal(call) -> str:
    with pytest.raises(InputError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_every_bundled_stepwise_model_checks_at_the_boundary():
    """Each of the package's stepwise models (one row of the contract table or more) derives from CheckedStepwise
    and leaves smc_init to it; the table has rows for every one of them."""
    assert [name for name in (*BUNDLED, *OWN) if bundled(built(name)) != (name in BUNDLED)] == []
    classes = {type(built(name)) for name in BUNDLED}
    for cls in classes:
        assert issubclass(cls, CheckedStepwise), cls.__name__
        assert cls.smc_init is CheckedStepwise.smc_init, f"{cls.__name__} overrides smc_init"
    assert {base.__name__ for cls in classes for base in cls.__mro__} >= {
        "HMMLanguageModel", "LDA", "EntityNLM", "KGLM", "MaskedOrderLM", "RNNG", "RNNGPrefix", "TokenizationLM",
        "CausalLMAsLatent",
    }  # fmt: skip


@pytest.mark.parametrize("name", BUNDLED)
@pytest.mark.parametrize("num_particles", BAD_COUNTS, ids=repr)
def test_a_bad_number_of_particles_is_refused_in_the_proposals_words(name, num_particles):
    model = built(name)
    x = model.tokenize(case_named(name).text)
    message = refusal(lambda: model.smc_init(x, num_particles))
    assert message == f"num_samples must be a positive integer, got {num_particles!r}"
    assert message == refusal(lambda: model.proposal.sample(x, num_particles))


@pytest.mark.parametrize("name", BUNDLED)
@pytest.mark.parametrize("temperature", BAD_TEMPERATURES, ids=repr)
def test_a_bad_temperature_is_refused_in_the_proposals_words(name, temperature):
    model = built(name)
    x = model.tokenize(case_named(name).text)
    message = refusal(lambda: model.smc_init(x, 4, temperature))
    assert message == f"temperature must be a finite number > 0, got {temperature!r}"
    assert message == refusal(lambda: model.proposal.sample(x, 4, temperature))


@pytest.mark.parametrize("name", BUNDLED)
def test_a_valid_call_still_advances_the_particles(name):
    """K as any integer type, τ as an int or a float: the particles step through the text and give K
    configurations that log_joint scores."""
    case = case_named(name)
    model = built(name)
    x = model.tokenize(case.short_text)
    generator = torch.Generator().manual_seed(0)
    state = model.smc_init(x, torch.tensor(3).numpy()[()], 1, case.peeks[-1])
    for t in range(x.numel()):
        state, increment = model.smc_step(state, t, generator)
        assert increment.shape == (3,) and torch.isfinite(increment).all()
        state = model.smc_reorder(state, torch.tensor([2, 0, 0]))
    z = model.smc_latents(state)
    assert num_particles(z) == 3
    assert torch.isfinite(model.log_joint(x, z)).all()


def test_an_own_model_implementing_smc_init_directly_still_runs_smc():
    """The base is a convenience of the bundled models, not part of the contract."""
    own = OWN
    assert own, "the contract table has no model of one's own with the stepwise part (the tests' Gaussian)"
    for name in own:
        model = built(name)
        assert not isinstance(model, CheckedStepwise)
        case = case_named(name)
        estimate = estimate_document(model, case.text, EstimatorSettings("smc", num_samples=8, seed=1))
        assert math.isfinite(estimate.log_likelihood)


def test_smc_init_runs_without_autograd_and_hands_over_its_arguments():
    class Recording(CheckedStepwise):
        def _smc_init(self, x, num_particles, temperature, peek):
            return torch.is_grad_enabled(), num_particles, temperature, peek

    assert Recording().smc_init(torch.tensor([1, 2]), 5) == (False, 5, 1.0, True)
    assert Recording().smc_init(torch.tensor([1, 2]), 5, 0.5, False) == (False, 5, 0.5, False)
    with pytest.raises(ValueError, match="1-d LongTensor"):
        Recording().smc_init(torch.zeros(2, 2, dtype=torch.long), 5)
