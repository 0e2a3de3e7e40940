"""The contract's optional capabilities and declarations, each with a function that tells whether a model has it.

``is_latent_lm``, ``has_stepwise``, ``has_exact_marginal``, ``has_tractable_marginal``, ``has_beam``,
``has_text_sampler``, ``has_unknown_word_penalty``, ``has_exact_marginal_cost`` (``exact_marginal_cost``); the declarations ``prefix_probability`` (``is_prefix_probability``,
``prefix_view``), ``latent_support`` and ``tempers`` (``can_temper``). A model whose latent is continuous
(``latent_support = "continuous"``) has no beam (``has_beam``, ``require_beam`` states why); a proposal that cannot
temper refuses τ ≠ 1 (``check_tempering``). Which estimators a model can then use is the estimator table's answer
(``estimators.registry.require``), not this module's: the contract names no estimator.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UnsupportedError
from .contract import DOCUMENT_BATCH_METHODS, SMC_METHODS

LATENT_SUPPORTS = ("discrete", "continuous")


def missing_contract(obj: Any) -> list[str]:
    """The parts of the contract that ``obj`` lacks: ``proposal`` (an attribute), ``tokenize`` and ``log_joint``
    (callables), in that order; empty for a latent LM.

    Parameters
    ----------
    obj : Any
        A candidate model.

    Returns
    -------
    list of str
        The missing names.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> missing_contract(SimpleNamespace(log_joint=max))
    ['proposal', 'tokenize']
    """
    missing = [] if hasattr(obj, "proposal") else ["proposal"]
    return missing + [name for name in ("tokenize", "log_joint") if not callable(getattr(obj, name, None))]


def is_latent_lm(obj: Any) -> bool:
    """Whether ``obj`` has the contract's ``proposal``, ``tokenize`` and ``log_joint``.

    Use this, not ``isinstance(obj, LatentLM)``: from Python 3.12 that check misses attributes an nn.Module keeps
    in ``_modules``, such as its proposal.

    Parameters
    ----------
    obj : Any
        A candidate model.

    Returns
    -------
    bool
        True when ``obj.proposal`` exists and ``tokenize`` and ``log_joint`` are callable (``missing_contract`` names
        what is not).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> is_latent_lm(SimpleNamespace(proposal=None, tokenize=str.split, log_joint=max))
    True
    >>> is_latent_lm(SimpleNamespace(tokenize=str.split, log_joint=max))
    False
    """
    return not missing_contract(obj)


def is_prefix_probability(model: Any) -> bool | None:
    """The model's declaration ``prefix_probability``.

    Parameters
    ----------
    model : Any
        A latent LM, asked for its ``prefix_probability`` declaration.

    Returns
    -------
    bool or None
        True when Σ_z p(x, z) is the probability that a text starts with x (no end-of-text event), False when it
        scores complete texts, None when the model does not declare it.

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


def missing_stepwise_methods(model: Any) -> list[str]:
    """Names of the SMC methods (``SMC_METHODS``) that ``model`` does not offer.

    Parameters
    ----------
    model : Any
        A latent LM whose stepwise methods are listed.

    Returns
    -------
    list of str
        The missing ones among smc_init, smc_step, smc_reorder, smc_latents, in that order.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> missing_stepwise_methods(SimpleNamespace(smc_init=print, smc_step=print))
    ['smc_reorder', 'smc_latents']
    """
    return [name for name in SMC_METHODS if not callable(getattr(model, name, None))]


def has_stepwise(model: Any) -> bool:
    """Whether the model offers the stepwise part (smc_init, smc_step, smc_reorder, smc_latents) that SMC needs.

    Parameters
    ----------
    model : Any
        A latent LM that may offer the stepwise part (SMC).

    Returns
    -------
    bool
        True when none of ``SMC_METHODS`` is missing.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_stepwise(SimpleNamespace(smc_init=print, smc_step=print, smc_reorder=print, smc_latents=print))
    True
    >>> has_stepwise(SimpleNamespace(smc_init=print))
    False
    """
    return not missing_stepwise_methods(model)


def has_document_batches(model: Any) -> bool:
    """Whether the model advances the particles of several documents side by side (``DocumentBatchLM``, beside the
    stepwise part).

    Parameters
    ----------
    model : Any
        A latent LM.

    Returns
    -------
    bool
        True when it has the stepwise part and ``smc_init_documents`` / ``smc_step_documents``.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> has_document_batches(load_model("hmm")[0])
    True
    """
    if not has_stepwise(model) or not all(callable(getattr(model, n, None)) for n in DOCUMENT_BATCH_METHODS):
        return False
    return _as_derived(
        model, ("smc_step_documents", "smc_init_documents"), ("smc_step", "_smc_init", "smc_init")
    )


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


def has_document_sampler(model: Any) -> bool:
    """Whether the model's proposal draws several documents side by side (``DocumentSampler.sample_documents``).

    Parameters
    ----------
    model : Any
        A latent LM.

    Returns
    -------
    bool

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> has_document_sampler(load_model("kglm")[0]), has_document_sampler(load_model("hmm")[0])
    (True, False)
    """
    proposal = getattr(model, "proposal", None)
    if not callable(getattr(proposal, "sample_documents", None)):
        return False
    return _as_derived(proposal, ("sample_documents",), ("_sample", "sample"))


def prefix_view(model: Any) -> Any | None:
    """The model whose Σ_z p(x, z) is the probability that a text starts with x (itself, or its ``prefix_model()``:
    ``PrefixModelLM``).

    Parameters
    ----------
    model : Any
        A latent LM, a prefix probability itself or offering ``prefix_model()``.

    Returns
    -------
    Any or None
        The model itself when it declares ``prefix_probability = True``, else its ``prefix_model()`` where it
        offers one, else None.

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
    view = model.prefix_model() if callable(getattr(model, "prefix_model", None)) else None
    if view is not None and not is_prefix_probability(view):
        raise TypeError(
            f"{type(model).__name__}.prefix_model() returned a model that is not a prefix probability"
        )
    return view


def has_exact_marginal(model: Any) -> bool:
    """Whether the model offers ``log_marginal(x) = log Σ_z p(x, z)`` (a float; an integral for a continuous z;
    ``ExactMarginalLM``).

    Parameters
    ----------
    model : Any
        A latent LM that may offer ``log_marginal``.

    Returns
    -------
    bool
        True when ``model.log_marginal`` is callable.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_exact_marginal(SimpleNamespace(log_marginal=lambda x: 0.0)), has_exact_marginal(SimpleNamespace())
    (True, False)
    """
    return callable(getattr(model, "log_marginal", None))


def has_tractable_marginal(model: Any) -> bool:
    """Whether the model declares its ``log_marginal`` cheap on any text, so that ``estimator=auto`` picks it.

    A ``log_marginal`` is not trusted to be tractable by its existence: one that enumerates every z (trees,
    segmentations) works on short texts only. The model declares ``exact_marginal_tractable = True`` (a forward
    algorithm, a sum over a few values, a quadrature); without the declaration ``auto`` uses the sampling estimators,
    and ``estimator=exact`` still calls ``log_marginal``.

    Parameters
    ----------
    model : Any
        A latent LM that may declare its ``log_marginal`` tractable.

    Returns
    -------
    bool
        True when the model has ``log_marginal`` and declares ``exact_marginal_tractable = True``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_tractable_marginal(SimpleNamespace(log_marginal=len, exact_marginal_tractable=True))
    True
    >>> has_tractable_marginal(SimpleNamespace(log_marginal=len))
    False
    """
    return has_exact_marginal(model) and bool(getattr(model, "exact_marginal_tractable", False))


def exact_marginal_cost(model: Any, x: torch.Tensor) -> float | None:
    """What the model's ``log_marginal(x)`` costs, counted in samples: how many particles of its sampler cost as much
    over x (the model's optional ``exact_marginal_cost(x)``), or None where the model has no ``log_marginal`` or does
    not state its cost.

    A sampling estimator with ``exact_where_cheaper`` computes exactly the documents whose cost is at most their K
    (``ResolvedEstimator.estimate_documents``): decided from the text's length and K alone, before anything is drawn,
    so no document is picked by what its samples showed. The masked LMs state (2^T − 1) / T: the exact program runs
    every revealed set of the T tokens once, a particle at most T of them.

    Parameters
    ----------
    model : Any
        A latent LM that may state the cost of its ``log_marginal``.
    x : torch.Tensor
        The text, LongTensor [T].

    Returns
    -------
    float or None
        The cost in samples (inf where ``log_marginal`` refuses x), or None (``has_exact_marginal_cost``).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> lm = SimpleNamespace(log_marginal=len, exact_marginal_cost=lambda x: (2 ** len(x) - 1) / len(x))
    >>> exact_marginal_cost(lm, torch.zeros(4)), exact_marginal_cost(SimpleNamespace(log_marginal=len), torch.zeros(4))
    (3.75, None)
    """
    return float(model.exact_marginal_cost(x)) if has_exact_marginal_cost(model) else None


def has_exact_marginal_cost(model: Any) -> bool:
    """Whether the model states what its ``log_marginal`` costs per text (``exact_marginal_cost``), and has no
    unknown-word penalty (one log p cannot give the perplexity with and without it).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_exact_marginal_cost(SimpleNamespace(log_marginal=len, exact_marginal_cost=len))
    True
    >>> has_exact_marginal_cost(SimpleNamespace(exact_marginal_cost=len))  # no log_marginal
    False
    """
    return (
        has_exact_marginal(model)
        and callable(getattr(model, "exact_marginal_cost", None))
        and not has_unknown_word_penalty(model)
    )


def has_unknown_word_penalty(model: Any) -> bool:
    """Whether ``log_joint`` subtracts a penalty for unknown words that the model reports per configuration
    (``UnknownWordPenaltyLM``).

    With ``unknown_word_penalty(x, z) -> float64 [K]`` (nats), perplexity with (UPP) and without it (PPL) come from
    one run.

    Parameters
    ----------
    model : Any
        A latent LM that may report an unknown-word penalty.

    Returns
    -------
    bool
        True when ``model.unknown_word_penalty`` is callable.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_unknown_word_penalty(SimpleNamespace())
    False
    """
    return callable(getattr(model, "unknown_word_penalty", None))


def has_canonical_scoring(model: Any) -> bool:
    """Whether the model scores its canonical configuration z* its own tooling's way (``CanonicalScoringLM``:
    ``canonical_log_likelihood``), for ``estimator=canonical``.

    Parameters
    ----------
    model : Any
        A latent LM that may have a canonical configuration.

    Returns
    -------
    bool
        True when ``model.canonical_log_likelihood`` is callable.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_canonical_scoring(SimpleNamespace(canonical_log_likelihood=len)), has_canonical_scoring(SimpleNamespace())
    (True, False)
    """
    return callable(getattr(model, "canonical_log_likelihood", None))


def has_text_sampler(model: Any) -> bool:
    """Whether the model offers ancestral sampling ``sample_text(prefix_text, max_tokens, generator) -> str``
    (``TextSamplerLM``).

    Parameters
    ----------
    model : Any
        A latent LM that may sample text (``sample_text``).

    Returns
    -------
    bool
        True when ``model.sample_text`` is callable.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_text_sampler(SimpleNamespace(sample_text=lambda prefix, max_tokens, generator: prefix))
    True
    """
    return callable(getattr(model, "sample_text", None))


def latent_support(model: Any) -> str:
    """The model's declaration ``latent_support``: whether z is discrete or continuous.

    Parameters
    ----------
    model : Any
        A latent LM that may declare ``latent_support``.

    Returns
    -------
    str
        "discrete" (configurations that can be listed and ranked; the default when the model declares nothing) or
        "continuous" (z real-valued, p(x, z) and q(z | x) densities in z).

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


def has_beam(model: Any) -> bool:
    """Whether ``estimator=beam`` can run on the model: a discrete latent and a proposal with ``beam(x, k)``.

    Parameters
    ----------
    model : Any
        A latent LM whose proposal may offer ``beam``.

    Returns
    -------
    bool
        True when ``latent_support(model)`` is "discrete" and ``model.proposal.beam`` is callable; False for a
        continuous latent (there are no configurations to rank) and for a proposal without ``beam``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> with_beam = SimpleNamespace(sample=print, beam=print)
    >>> has_beam(SimpleNamespace(proposal=with_beam))
    True
    >>> has_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print)))
    False
    >>> has_beam(SimpleNamespace(proposal=with_beam, latent_support="continuous"))
    False
    """
    return latent_support(model) == "discrete" and callable(
        getattr(getattr(model, "proposal", None), "beam", None)
    )


def missing_beam(model: Any) -> str | None:
    """Why the model has no beam over configurations (the reason ``require_beam`` states), or None when it has one.

    Parameters
    ----------
    model : Any
        A latent LM, asked why it has no beam.

    Returns
    -------
    str or None
        None when ``has_beam(model)``; else one clause naming the model: "<Model> has a continuous latent: no beam
        over configurations" or "<Model>'s proposal has no beam(x, k)". It names no estimator: the estimator table
        (``estimators.registry.require``) adds the ones the model can use.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> class Gaussian:
    ...     latent_support = "continuous"
    ...     proposal = SimpleNamespace(sample=print)
    >>> missing_beam(Gaussian())
    'Gaussian has a continuous latent: no beam over configurations'
    >>> print(missing_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print, beam=print))))
    None
    """
    if has_beam(model):
        return None
    if latent_support(model) == "continuous":
        return f"{type(model).__name__} has a continuous latent: no beam over configurations"
    return f"{type(model).__name__}'s proposal has no beam(x, k)"


def require_beam(model: Any) -> None:
    """Refuse a beam over configurations for a model without one, in one line saying why.

    Which estimators the model can use instead is the estimator table's to say: ``estimator=beam`` is refused by
    ``estimators.registry.require``, whose message adds them to this reason ("...; use estimator=auto, or one of
    exact, is").

    Parameters
    ----------
    model : Any
        A latent LM that ``estimator=beam`` is to run on.

    Raises
    ------
    lm_latent_eval.errors.UnsupportedError
        (a ``TypeError`` and a ``UserError``) unless ``has_beam(model)``, with ``missing_beam``'s reason.

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


def can_temper(proposal: Any) -> bool:
    """Whether the proposal draws from q_τ(z | x) ∝ q(z | x)^{1/τ} for any τ > 0.

    Parameters
    ----------
    proposal : Any
        A model's ``proposal``.

    Returns
    -------
    bool
        The proposal's declaration ``tempers``; True when it declares nothing (a proposal over a discrete latent
        divides its logits by τ).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> can_temper(SimpleNamespace(sample=print)), can_temper(SimpleNamespace(sample=print, tempers=False))
    (True, False)
    """
    return bool(getattr(proposal, "tempers", True))


def check_tempering(proposal: Any, temperature: float) -> None:
    """Refuse τ ≠ 1 for a proposal that cannot temper (``can_temper``).

    Parameters
    ----------
    proposal : Any
        A model's ``proposal``.
    temperature : float
        τ.

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
    if temperature != 1 and not can_temper(proposal):
        raise UnsupportedError(
            f"{type(proposal).__name__} cannot temper (it declares tempers = False): use temperature=1, "
            f"got {temperature!r}"
        )
