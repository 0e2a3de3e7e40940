"""The parts of the contract as one table (``protocol.PARTS``): on every bundled model and on a continuous latent,
``has`` agrees with the methods present and ``missing`` names exactly the absent ones; each row's methods are
stated by its Protocol, and a misspelled part is refused rather than answered False."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
from gaussian_tiny import GaussianLatentLM

from lm_latent_eval.models import MODELS, default_checkpoint, load_model
from lm_latent_eval.protocol import PARTS, has, missing

MODELS_TRIED = [name for name in MODELS if default_checkpoint(name) is not None] + ["gaussian"]


@functools.cache
def model(name: str):
    return GaussianLatentLM() if name == "gaussian" else load_model(name)[0]


def methods(part: str) -> list[str]:
    """The methods a part asks for, those of the parts it builds on first."""
    row = PARTS[part]
    return [m for need in row.needs for m in methods(need)] + list(row.methods)


def offers(obj, path: str) -> bool:
    """Whether ``obj`` has the method ``path`` (``proposal.beam``: on its proposal)."""
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return callable(obj)


@pytest.mark.parametrize("name", MODELS_TRIED)
def test_has_and_missing_agree_with_the_methods_present(name):
    lm = model(name)
    for part, row in PARTS.items():
        absent = [m for m in methods(part) if not offers(lm, m)]
        lacks = missing(lm, part)
        unmet = [] if row.condition is None or row.condition[1](lm) else [row.condition[0]]
        assert lacks == unmet + absent, (part, lacks)
        assert has(lm, part) == (not lacks), part


def test_the_conditions_beyond_the_methods():
    """A continuous latent has no beam; a model whose exact marginal is not declared tractable is not picked by
    ``auto``; an unknown-word penalty leaves no stated exact cost."""
    gaussian, hmm = model("gaussian"), model("hmm")
    assert missing(gaussian, "beam_proposal")[0] == "a discrete latent" and has(hmm, "beam_proposal")
    assert has(gaussian, "tractable_marginal") and not has(model("rnng"), "tractable_marginal")
    assert has(model("masked"), "exact_marginal_cost") and not has(hmm, "exact_marginal_cost")
    stated = SimpleNamespace(log_marginal=len, exact_marginal_cost=len)
    assert has(stated, "exact_marginal_cost")
    assert missing(SimpleNamespace(**vars(stated), unknown_word_penalty=len), "exact_marginal_cost") == [
        "no unknown_word_penalty"
    ]


@pytest.mark.parametrize("part", PARTS)
def test_every_method_of_a_part_is_stated_by_its_protocol(part):
    protocol = PARTS[part].protocol
    for path in PARTS[part].methods:
        method = path.rpartition(".")[2]
        assert method in vars(protocol) or f"``{method}" in protocol.__doc__, (
            part,
            method,
            protocol.__name__,
        )


def test_an_unknown_part_is_refused():
    with pytest.raises(
        ValueError, match=r"unknown part 'stepwize': the parts are latent_lm, stepwise, .*beam_proposal"
    ):
        has(model("hmm"), "stepwize")
    with pytest.raises(ValueError, match="unknown part 'beams'"):
        missing(model("hmm"), "beams")
