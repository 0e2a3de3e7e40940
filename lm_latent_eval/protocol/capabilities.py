"""What a model offers of the contract and what it declares.

``PARTS`` states each part once: the Protocol of ``contract.py`` that describes it, the methods it needs
(``proposal.<name>``: on the model's proposal), the parts it builds on and, for a few, a condition beyond the methods;
``has(model, part)`` and ``missing(model, part)`` read it. The declarations have their own functions:
``is_prefix_probability`` and ``prefix_view``, ``latent_support`` (a continuous latent has no beam: ``missing_beam``,
``require_beam``), ``tempers`` (``check_tempering``); ``exact_marginal_cost`` is the cost a model states,
``smc_interval_doubt`` where its SMC's interval has no measured coverage. Which
estimators a model can then use is the estimator table's answer (``estimators.registry.require``): the contract
names no estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ..errors import UnsupportedError
from .contract import (
    DOCUMENT_BATCH_METHODS,
    SMC_METHODS,
    BeamProposal,
    CanonicalScoringLM,
    DocumentBatchLM,
    DocumentBeam,
    DocumentSampler,
    ExactMarginalLM,
    LatentLM,
    PrefixModelLM,
    StepwiseLatentLM,
    TextSamplerLM,
    UnknownWordPenaltyLM,
)

LATENT_SUPPORTS = ("discrete", "continuous")


class Part(NamedTuple):
    """One row of ``PARTS``: the Protocol that states the part, its methods (``proposal.<name>`` on the proposal),
    the parts it builds on, and a condition beyond the methods (what it asks for, and its test)."""

    protocol: type
    methods: tuple[str, ...]
    needs: tuple[str, ...] = ()
    condition: tuple[str, Callable[[Any], Any]] | None = None


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines ``name`` (None: none does, e.g. an instance attribute)."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _as_derived(obj: Any, batched: tuple[str, ...], single: tuple[str, ...]) -> bool:
    """Whether the side-by-side methods ``batched`` are defined at least as far down ``obj``'s class hierarchy as
    the one-document methods ``single`` they must agree with: a subclass that overrides ``smc_step`` (or a
    proposal's ``_sample``) but inherits its parent's side-by-side version would be batched with the parent's
    numbers, so it is not batched at all."""
    cls = type(obj)
    owners = [o for o in (_owner(cls, n) for n in batched) if o is not None]
    return all(issubclass(b, s) for b in owners for s in (_owner(cls, n) for n in single) if s is not None)


PARTS: dict[str, Part] = {
    # the required part: has(obj, "latent_lm"), not isinstance(obj, LatentLM), which from Python 3.12 misses the
    # proposal an nn.Module keeps in _modules
    "latent_lm": Part(
        LatentLM, ("tokenize", "log_joint"), condition=("proposal", lambda m: hasattr(m, "proposal"))
    ),
    "stepwise": Part(StepwiseLatentLM, SMC_METHODS),
    "document_batches": Part(
        DocumentBatchLM,
        DOCUMENT_BATCH_METHODS,
        ("stepwise",),
        (
            "its own side-by-side steps",
            lambda m: _as_derived(m, DOCUMENT_BATCH_METHODS, ("smc_step", "_smc_init", "smc_init")),
        ),
    ),
    "document_sampler": Part(
        DocumentSampler,
        ("proposal.sample_documents",),
        condition=(
            "its proposal's own sample_documents",
            lambda m: _as_derived(getattr(m, "proposal", None), ("sample_documents",), ("_sample", "sample")),
        ),
    ),
    "document_beam": Part(
        DocumentBeam,
        ("proposal.beam_documents",),
        (),
        (
            "its proposal's own beam_documents",
            lambda m: _as_derived(getattr(m, "proposal", None), ("beam_documents",), ("_beam",)),
        ),
    ),
    # where its SMC's interval has no measured coverage, stated from the text's length and the settings
    "smc_interval_doubt": Part(StepwiseLatentLM, ("smc_interval_doubt",), ("stepwise",)),
    "exact_marginal": Part(ExactMarginalLM, ("log_marginal",)),
    # log_marginal declared cheap on any text, so that estimator=auto picks it (one that lists every z is not)
    "tractable_marginal": Part(
        ExactMarginalLM,
        (),
        ("exact_marginal",),
        ("exact_marginal_tractable = True", lambda m: getattr(m, "exact_marginal_tractable", False)),
    ),
    # its cost per text stated; not with an unknown-word penalty (one log p cannot give the perplexity with and
    # without it)
    "exact_marginal_cost": Part(
        ExactMarginalLM,
        ("exact_marginal_cost",),
        ("exact_marginal",),
        ("no unknown_word_penalty", lambda m: not has(m, "unknown_word_penalty")),
    ),
    "unknown_word_penalty": Part(UnknownWordPenaltyLM, ("unknown_word_penalty",)),
    "canonical_scoring": Part(CanonicalScoringLM, ("canonical_log_likelihood",)),
    "text_sampler": Part(TextSamplerLM, ("sample_text",)),
    "prefix_model": Part(PrefixModelLM, ("prefix_model",)),
    "beam_proposal": Part(
        BeamProposal,
        ("proposal.beam",),
        condition=("a discrete latent", lambda m: latent_support(m) == "discrete"),
    ),
}


def _method(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj


def missing(model: Any, part: str) -> list[str]:
    """What ``model`` lacks of a part of the contract: the row of ``PARTS`` named ``part`` (its condition, then what it
    lacks of the parts it builds on, then its absent methods).

    Parameters
    ----------
    model : Any
        A latent LM, or a candidate for the required part "latent_lm".
    part : str
        A key of ``PARTS`` ("stepwise", "exact_marginal", "beam_proposal", ...).

    Returns
    -------
    list of str
        Empty when the model has the part (``has``).

    Raises
    ------
    ValueError
        For a part not in ``PARTS``, naming them.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> missing(SimpleNamespace(smc_init=print, smc_step=print), "stepwise")
    ['smc_reorder', 'smc_latents']
    >>> missing(SimpleNamespace(log_joint=max), "latent_lm")
    ['proposal', 'tokenize']
    >>> missing(SimpleNamespace(), "stepwize")
    Traceback (most recent call last):
    ...
    ValueError: unknown part 'stepwize': the parts are latent_lm, stepwise, ...
    """
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}: the parts are {', '.join(PARTS)}")
    row = PARTS[part]
    unmet = [row.condition[0]] if row.condition is not None and not row.condition[1](model) else []
    return (
        unmet
        + [name for need in row.needs for name in missing(model, need)]
        + [name for name in row.methods if not callable(_method(model, name))]
    )


def has(model: Any, part: str) -> bool:
    """Whether ``model`` offers a part of the contract (a key of ``PARTS``; ``missing`` says what it lacks).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has(SimpleNamespace(log_marginal=len), "exact_marginal"), has(SimpleNamespace(), "exact_marginal")
    (True, False)
    >>> has(SimpleNamespace(log_marginal=len, exact_marginal_tractable=True), "tractable_marginal")
    True
    >>> has(SimpleNamespace(proposal=SimpleNamespace(beam=print), latent_support="continuous"), "beam_proposal")
    False
    """
    return not missing(model, part)


def is_prefix_probability(model: Any) -> bool | None:
    """The model's declaration ``prefix_probability``: True when Σ_z p(x, z) is the probability that a text starts
    with x (no end-of-text event), False when it scores complete texts, None when it declares nothing.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> is_prefix_probability(SimpleNamespace(prefix_probability=True))
    True
    >>> print(is_prefix_probability(SimpleNamespace()))
    None
    """
    value = getattr(model, "prefix_probability", None)
    return None if value is None else bool(value)


def prefix_view(model: Any) -> Any | None:
    """The model whose Σ_z p(x, z) is the probability that a text starts with x: the model itself when it declares
    ``prefix_probability = True``, else its ``prefix_model()`` (``PrefixModelLM``) where it offers one, else None.

    Raises
    ------
    TypeError
        When ``prefix_model()`` returns a model that does not declare ``prefix_probability = True``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> prefix = SimpleNamespace(prefix_probability=True)
    >>> prefix_view(prefix) is prefix
    True
    >>> prefix_view(SimpleNamespace(prefix_probability=False, prefix_model=lambda: prefix)) is prefix
    True
    >>> print(prefix_view(SimpleNamespace(prefix_probability=False)))
    None
    """
    if is_prefix_probability(model):
        return model
    view = model.prefix_model() if has(model, "prefix_model") else None
    if view is not None and not is_prefix_probability(view):
        raise TypeError(
            f"{type(model).__name__}.prefix_model() returned a model that is not a prefix probability"
        )
    return view


def exact_marginal_cost(model: Any, x: torch.Tensor) -> float | None:
    """What the model's ``log_marginal(x)`` costs, counted in samples: how many particles of its sampler cost as much
    over x (the model's optional ``exact_marginal_cost(x)``; inf where ``log_marginal`` refuses x), or None where
    the model lacks the part "exact_marginal_cost".

    A sampling estimator with ``exact_where_cheaper`` computes exactly the documents whose cost is at most their K
    (``ResolvedEstimator.estimate_documents``): decided from the text's length and K alone, before anything is drawn,
    so no document is picked by what its samples showed. The masked LMs state (2^T − 1) / T: the exact program runs
    every revealed set of the T tokens once, a particle at most T of them.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> lm = SimpleNamespace(log_marginal=len, exact_marginal_cost=lambda x: (2 ** len(x) - 1) / len(x))
    >>> exact_marginal_cost(lm, torch.zeros(4)), exact_marginal_cost(SimpleNamespace(log_marginal=len), torch.zeros(4))
    (3.75, None)
    """
    return float(model.exact_marginal_cost(x)) if has(model, "exact_marginal_cost") else None


def smc_interval_doubt(model: Any, x: torch.Tensor, settings: Any) -> str | None:
    """Why SMC under ``settings`` over x gives no interval the model's measurements support (its optional
    ``smc_interval_doubt(x, settings)``), or None, also where the model lacks the part "smc_interval_doubt".

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> lm = SimpleNamespace(smc_init=len, smc_step=len, smc_reorder=len, smc_latents=len,
    ...                      smc_interval_doubt=lambda x, s: "longer than measured" if len(x) > 2 else None)
    >>> smc_interval_doubt(lm, torch.zeros(4), None), smc_interval_doubt(lm, torch.zeros(2), None)
    ('longer than measured', None)
    """
    return model.smc_interval_doubt(x, settings) if has(model, "smc_interval_doubt") else None


def latent_support(model: Any) -> str:
    """The model's declaration ``latent_support``: "discrete" (configurations that can be listed and ranked; the
    default when the model declares nothing) or "continuous" (z real-valued, p(x, z) and q(z | x) densities in z).

    Raises
    ------
    ValueError
        When the model declares another value.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> latent_support(SimpleNamespace()), latent_support(SimpleNamespace(latent_support="continuous"))
    ('discrete', 'continuous')
    """
    value = getattr(model, "latent_support", "discrete")
    if value not in LATENT_SUPPORTS:
        raise ValueError(
            f"{type(model).__name__}.latent_support must be one of {LATENT_SUPPORTS}, got {value!r}"
        )
    return value


def missing_beam(model: Any) -> str | None:
    """Why the model has no beam over configurations (``has(model, "beam_proposal")``), in one clause naming the model, or
    None when it has one. It names no estimator: the estimator table (``estimators.registry.require``) adds the
    ones the model can use.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> class Gaussian:
    ...     latent_support = "continuous"
    ...     proposal = SimpleNamespace(sample=print)
    >>> missing_beam(Gaussian())
    'Gaussian has a continuous latent: no beam over configurations'
    >>> missing_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print)))
    "SimpleNamespace's proposal has no beam(x, k)"
    """
    if has(model, "beam_proposal"):
        return None
    if latent_support(model) == "continuous":
        return f"{type(model).__name__} has a continuous latent: no beam over configurations"
    return f"{type(model).__name__}'s proposal has no beam(x, k)"


def require_beam(model: Any) -> None:
    """Refuse a beam over configurations for a model without one: ``UnsupportedError`` (a ``TypeError`` and a
    ``UserError``) with ``missing_beam``'s reason, to which ``estimators.registry.require`` adds the estimators the
    model can use instead.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> require_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print)))
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: SimpleNamespace's proposal has no beam(x, k)
    >>> require_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print, beam=print)))
    """
    reason = missing_beam(model)
    if reason is not None:
        raise UnsupportedError(reason)


def check_tempering(proposal: Any, temperature: float) -> None:
    """Refuse τ ≠ 1 for a proposal that declares ``tempers = False``: one that declares nothing is taken to draw from
    q_τ(z | x) ∝ q(z | x)^{1/τ} for any τ > 0 (a proposal over a discrete latent divides its logits by τ).

    Raises
    ------
    lm_latent_eval.errors.UnsupportedError
        (a ``TypeError`` and a ``UserError``) when τ ≠ 1 and the proposal declares ``tempers = False``.

    Examples
    --------
    >>> class Fixed:
    ...     tempers = False
    >>> check_tempering(Fixed(), 1.0)
    >>> check_tempering(Fixed(), 0.5)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: Fixed cannot temper (it declares tempers = False): use temperature=1, got 0.5
    """
    if temperature != 1 and not getattr(proposal, "tempers", True):
        raise UnsupportedError(
            f"{type(proposal).__name__} cannot temper (it declares tempers = False): use temperature=1, "
            f"got {temperature!r}"
        )
