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

from lm_latent_eval import tensors
from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.stepwise_module import StepwiseFromModule
from lm_latent_eval.protocol import CheckedStepwise, has, num_particles

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
# views of another model (P(a text starts with x)): one text at a time
PREFIX_VIEWS = ("rnng-prefix", "causal")
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


# ---- the side-by-side path (protocol.DocumentBatchLM) of every row that offers it ------------------------------------

# the model's two layouts: the CPU's (rows selected per distinct history where a family does) and an accelerator's
LAYOUTS = {"cpu": tensors.SELECT_ROWS_ON, "one row per particle": ()}


def side_by_side_rows() -> list[str]:
    return [name for name in BUNDLED if has(built(name), "document_batches")]


def run_apart(model, xs, sizes, tau, peek, reorder_at):
    """Each document alone: its increments per step, [T_d] lists of [K_d] tensors."""
    out = []
    for d, (x, k) in enumerate(zip(xs, sizes)):
        state, generator, steps = model.smc_init(x, k, tau, peek), torch.Generator().manual_seed(100 + d), []
        for t in range(x.numel()):
            state, increment = model.smc_step(state, t, generator)
            steps.append(increment)
            if t in reorder_at:
                state = model.smc_reorder(state, reorder_at[t][d])
        out.append(steps)
    return out


def test_every_family_writes_its_stepwise_part_one_way():
    """The families (not the prefix views, which adapt another model) derive from StepwiseFromModule and leave both
    inits to it: the checks run in one place."""
    families = {type(built(name)) for name in side_by_side_rows()}
    assert {base.__name__ for cls in families for base in cls.__mro__} >= {
        "HMMLanguageModel", "LDA", "EntityNLM", "KGLM", "MaskedOrderLM", "RNNG", "TokenizationLM"
    }  # fmt: skip
    for cls in families:
        assert issubclass(cls, StepwiseFromModule), cls.__name__
        for method in ("smc_init", "smc_init_documents", "smc_step", "smc_step_documents"):
            assert getattr(cls, method) is getattr(StepwiseFromModule, method), f"{cls.__name__}.{method}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", BUNDLED)
def test_each_document_side_by_side_equals_it_alone(name, layout, monkeypatch):
    """Three documents (one of them twice, sharing its tensor) with their own K and stream: every document's
    increments at every step, before and after a reorder within its segment, equal its own alone (bit for bit, or
    to the row's ``side_by_side_atol``), peeking and not, τ = 1 and, where the proposal tempers, τ = 0.7. A model
    may decline a batch (None) in one layout, not in both."""
    case, model = case_named(name), built(name)
    if not has(model, "document_batches"):
        assert name in PREFIX_VIEWS, f"{name} has no side-by-side path"
        return
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", LAYOUTS[layout])
    x, short = model.tokenize(case.text), model.tokenize(case.short_text)
    xs, sizes = [x, short, x], [5, 3, 4]
    offsets = [0, 5, 8]
    temperatures = (1.0, 0.7) if getattr(model.proposal, "tempers", True) else (1.0,)
    declined = []
    for peek in case.peeks:
        for tau in temperatures:
            generator = torch.Generator().manual_seed(7)
            # step 0: each document's particles reordered within its own segment
            local = {0: [torch.randint(k, (k,), generator=generator) for k in sizes]}
            state = model.smc_init_documents(xs, sizes, tau, peek)
            if state is None:
                declined.append((peek, tau))
                continue
            generators = [torch.Generator().manual_seed(100 + d) for d in range(len(xs))]
            apart = run_apart(model, xs, sizes, tau, peek, local)
            for t in range(max(x.numel() for x in xs)):
                state, together = model.smc_step_documents(state, t, generators)
                assert together.dtype == torch.float64 and together.shape == (sum(sizes),)
                for d, (o, k) in enumerate(zip(offsets, sizes)):
                    if t < xs[d].numel():
                        torch.testing.assert_close(
                            together[o : o + k],
                            apart[d][t],
                            rtol=0,
                            atol=case.side_by_side_atol,
                            msg=f"{name} peek={peek} τ={tau} document {d} step {t}",
                        )
                if t in local:
                    state = model.smc_reorder(state, torch.cat([o + a for o, a in zip(offsets, local[t])]))
    if layout == "one row per particle":
        assert not declined, f"{name} declines every batch in its accelerator layout: {declined}"


@pytest.mark.parametrize("name", BUNDLED)
def test_bad_particle_counts_and_temperatures_are_refused_side_by_side_as_alone(name):
    """The side-by-side init checks every document's K and τ once, with smc_init's words."""
    model = built(name)
    if not has(model, "document_batches"):
        return
    x = model.tokenize(case_named(name).text)
    for k in BAD_COUNTS:
        together = refusal(functools.partial(model.smc_init_documents, [x, x], [4, k]))
        assert together == refusal(functools.partial(model.smc_init, x, k))
    for tau in BAD_TEMPERATURES:
        together = refusal(functools.partial(model.smc_init_documents, [x, x], [4, 4], tau))
        assert together == refusal(functools.partial(model.smc_init, x, 4, tau))
    with pytest.raises(ValueError, match="2 documents but 1 particle counts"):
        model.smc_init_documents([x, x], [4])
