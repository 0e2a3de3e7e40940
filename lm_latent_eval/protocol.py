"""The one contract every latent LM implements: text x, hidden structure z, joint p(x, z), proposal q(z | x).

Latent configurations ``z`` are opaque to the estimators except for one rule: ``z`` is a tensor, or a (nested)
tuple/list/dict of tensors, whose leading dimension is the particle dimension ``K``. The estimators slice it
along that dimension (``select_particles``) and never look inside.

Shapes: ``x`` is a ``LongTensor[T]`` of the model's own token ids; ``log_joint`` and ``log_q`` are ``[K]``.
A model declares whether ``log_joint(x, z)`` is the log probability of the *prefix* x_1..x_T together with z (no
end-of-text event; ``prefix_probability = True``): then Σ_z p(x, z) is the probability that a text starts with x and
log p(context ⊕ continuation) − log p(context) is the log probability of the continuation given the context. A model
that scores complete texts (an RNNG scores whole trees, often with an end-of-sentence event) declares False, and
``loglikelihood(context, continuation)`` is refused for it rather than silently wrong, unless it offers
``prefix_model()``: a view of itself whose ``log_joint`` is a prefix probability (the RNNG's stops at the last SHIFT),
from which ``loglikelihood`` is then answered.

Optional capabilities, each with a function that tells whether a model has it (``has_stepwise``,
``has_exact_marginal``, ``has_beam``, ...). The proposal's ``sample`` is required; its ``beam(x, k)`` is not
(``BeamProposal``): a model whose latent is discrete offers a beam over configurations, a model whose latent is
continuous (a text VAE's Gaussian z) declares ``latent_support = "continuous"`` and has none (``has_beam``,
``require_beam``). Temperature: ``sample(..., temperature=τ)`` draws from q_τ(z | x) ∝ q(z | x)^{1/τ} and returns
log q_τ; a proposal over a discrete latent tempers by dividing every logit by τ, a Gaussian N(μ, σ²) by drawing from
N(μ, τσ²), and a proposal that cannot temper declares ``tempers = False`` and refuses τ ≠ 1 (``can_temper``,
``check_tempering``).
"""

from __future__ import annotations

import importlib
import math
import numbers
import warnings
from typing import Any, Protocol, runtime_checkable

import torch

from .errors import InputError, UnsupportedError

Latents = Any  # tensor or nested tuple/list/dict of tensors with leading dimension K


@runtime_checkable
class Proposal(Protocol):
    """q(z | x): samples latent configurations for a fixed text and scores them (the required part).

    Tempering: ``sample(..., temperature=τ)`` draws from q_τ(z | x) ∝ q(z | x)^{1/τ} and returns log q_τ, the log
    probability (a density for a continuous z) under the distribution actually sampled. A proposal over a discrete
    latent divides every logit by τ; a Gaussian N(μ, σ²) draws from N(μ, τσ²), its q^{1/τ} normalized. A proposal
    that cannot temper declares the class attribute ``tempers = False`` and refuses τ ≠ 1 (``check_tempering``);
    without the attribute it is taken to temper (``can_temper``).
    """

    def sample(
        self,
        x: torch.Tensor,
        num_samples: int,
        temperature: float = 1.0,
        peek: bool = True,
        generator: torch.Generator | None = None,
    ) -> tuple[Latents, torch.Tensor]:
        """Draw K configurations z_k ~ q_τ(z | x); return (z [K, ...], log q_τ(z_k | x) [K]) under the tempered q."""
        ...


@runtime_checkable
class BeamProposal(Proposal, Protocol):
    """A proposal over a discrete latent that also lists its best configurations (optional: ``has_beam``)."""

    def beam(self, x: torch.Tensor, beam_size: int) -> Latents:
        """Return up to ``beam_size`` *distinct* configurations with the highest q(z | x) (peeking, τ = 1)."""
        ...


class CheckedSampler:
    """Base of a proposal without a beam (a continuous latent): ``sample`` as the contract states it (``Proposal``),
    checking its arguments (``check_proposal_args``; τ ≠ 1 refused where the class declares ``tempers = False``)
    and running without autograd, then handing over to the subclass's ``_sample``, which takes the same arguments
    and returns the same values."""

    @torch.no_grad()
    def sample(
        self, x, num_samples, temperature=1.0, peek=True, generator=None
    ) -> tuple[Latents, torch.Tensor]:
        """``Proposal.sample`` (types there): (z [K, ...], log q_τ(z_k | x) [K]) from ``_sample`` once the arguments
        passed ``check_proposal_args`` and ``check_tempering``."""
        check_proposal_args(x, num_samples, temperature)
        check_tempering(self, temperature)
        return self._sample(x, num_samples, temperature, peek, generator)

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[Latents, torch.Tensor]:
        raise NotImplementedError


class CheckedProposal(CheckedSampler):
    """Base of the bundled proposals (discrete latents): ``CheckedSampler``'s ``sample`` and ``beam`` as the contract
    states it (``BeamProposal``), checking its arguments (``check_beam_args``) and running without autograd, then
    handing over to the subclass's ``_beam``, which takes the same arguments and returns the same values."""

    @torch.no_grad()
    def beam(self, x, beam_size) -> Latents:
        """``BeamProposal.beam``: up to ``beam_size`` distinct configurations from ``_beam`` once the arguments passed
        ``check_beam_args``."""
        check_beam_args(x, beam_size)
        return self._beam(x, beam_size)

    def _beam(self, x, beam_size) -> Latents:
        raise NotImplementedError


@runtime_checkable
class LatentLM(Protocol):
    """A language model with hidden structure: p(x) = Σ_z p(x, z) (∫ p(x, z) dz for a continuous z).

    Declared as class attributes: ``prefix_probability`` (below) and, optionally, ``latent_support``: "discrete"
    (the default when absent) or "continuous" (z real-valued, p(x, z) a density in z: no beam, ``has_beam``).
    """

    proposal: Proposal

    def tokenize(self, text: str) -> torch.Tensor:
        """Map any string (empty, unknown words included) to LongTensor[T] of the model's ids; T = 0 is allowed."""
        ...

    def log_joint(self, x: torch.Tensor, z: Latents) -> torch.Tensor:
        """log p(x, z_k) for each of K configurations (a log density in z for a continuous latent): float64 [K];
        −inf where p(x, z_k) = 0."""
        ...

    # declared (class attribute): whether Σ_z p(x, z) is the probability that a text starts with x
    prefix_probability: bool


SMC_METHODS = ("smc_init", "smc_step", "smc_reorder", "smc_latents")


@runtime_checkable
class StepwiseLatentLM(Protocol):
    """Optional part for sequential Monte Carlo: advance K particles one token at a time, reorder after resampling.

    For t = 0..T-1, ``smc_step`` draws z_t ~ q_τ(z_t | x, z_<t) for every particle and returns the log incremental
    weight log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t); the T increments of one particle sum to
    log p(x, z) − log q_τ(z | x) of the configuration z = ``smc_latents(state)`` it drew, in ``log_joint``'s format.
    A model may add a telescoping look-ahead term log ψ_t(z_≤t) − log ψ_{t−1}(z_<t) to each increment (ψ_{−1}
    constant, ψ_{T−1} = 1, as the HMM does when peeking): the sum, hence the estimate's expectation, is unchanged,
    and the weights after token t then target p(x_≤t, z_≤t) ψ_t (twisted SMC).
    ``smc_reorder(state, ancestors)`` makes particle k continue the history of particle ``ancestors[k]``
    (a CPU LongTensor [K]). The state is opaque to the estimator. z_t may be several latent decisions: the RNNG's
    step t draws the REDUCEs before word t and shifts it (word-synchronous), ``latent_tokenization``'s draws model
    tokens until every particle has spelled the bytes of canonical tokens 0..t (byte-synchronous); the estimator
    compares and may resample the particles after any step.
    """

    def smc_init(
        self, x: torch.Tensor, num_particles: int, temperature: float = 1.0, peek: bool = True
    ) -> Any:
        """State of K particles with empty histories for the text x [T]."""
        ...

    def smc_step(self, state: Any, t: int, generator: torch.Generator | None) -> tuple[Any, torch.Tensor]:
        """Draw z_t for every particle; return (state, log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t): float64 [K])."""
        ...

    def smc_reorder(self, state: Any, ancestors: torch.Tensor) -> Any:
        """State in which particle k carries the history of particle ``ancestors[k]`` (LongTensor [K])."""
        ...

    def smc_latents(self, state: Any) -> Latents:
        """The configurations z_<t drawn so far, [K, ...] in the format ``log_joint`` accepts once t = T."""
        ...


LATENT_SUPPORTS = ("discrete", "continuous")


def check_num_samples(num_samples: int, name: str = "num_samples") -> None:
    """Refuse a number of samples or particles that is not a positive integer.

    Parameters
    ----------
    num_samples : int
        K, the number asked for.
    name : str
        The argument's name in the error message.

    Raises
    ------
    lm_latent_eval.errors.InputError
        (a ValueError) naming ``name``, unless ``num_samples`` is an integer > 0 (a bool is refused). The one
        definition of this rule: ``EstimatorSettings`` applies it to every count it holds.

    Examples
    --------
    >>> check_num_samples(4)
    >>> check_num_samples(0, "beam_size")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: beam_size must be a positive integer, got 0
    """
    if not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool) or num_samples <= 0:
        raise InputError(f"{name} must be a positive integer, got {num_samples!r}")


def check_temperature(temperature: float) -> None:
    """Refuse a temperature τ that is not a finite number > 0.

    Parameters
    ----------
    temperature : float
        τ of q_τ(z | x) ∝ q(z | x)^{1/τ}.

    Raises
    ------
    lm_latent_eval.errors.InputError
        (a ValueError) unless τ is a finite int or float > 0 (the one definition of this rule).

    Examples
    --------
    >>> check_temperature(0.5)
    >>> check_temperature(0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: temperature must be a finite number > 0, got 0
    """
    valid = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not (valid and math.isfinite(temperature) and temperature > 0):
        raise InputError(f"temperature must be a finite number > 0, got {temperature!r}")


def check_proposal_args(x: torch.Tensor, num_samples: int, temperature: float) -> None:
    """Refuse bad arguments of ``Proposal.sample``: x a 1-d tensor [T], K a positive integer, τ a finite number > 0.

    Parameters
    ----------
    x : torch.Tensor
        The model's token ids, LongTensor [T].
    num_samples : int
        K.
    temperature : float
        τ.

    Raises
    ------
    ValueError
        Naming the first bad argument.

    Examples
    --------
    >>> check_proposal_args(torch.tensor([3, 1]), 8, 1.0)
    >>> check_proposal_args(torch.tensor([3, 1]), 8, -1.0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: temperature must be a finite number > 0, got -1.0
    """
    check_text(x)
    check_num_samples(num_samples)
    check_temperature(temperature)


def check_beam_args(x: torch.Tensor, beam_size: int) -> None:
    """Refuse bad arguments of ``BeamProposal.beam``: x a 1-d tensor [T], ``beam_size`` a positive integer.

    Parameters
    ----------
    x : torch.Tensor
        The model's token ids, LongTensor [T].
    beam_size : int
        k.

    Raises
    ------
    ValueError
        Naming the first bad argument.

    Examples
    --------
    >>> check_beam_args(torch.tensor([3, 1]), 5)
    >>> check_beam_args(torch.tensor([3, 1]), 2.5)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: beam_size must be a positive integer, got 2.5
    """
    check_text(x)
    check_num_samples(beam_size, "beam_size")


def check_text(x: torch.Tensor) -> None:
    """Refuse a text that is not a 1-d tensor (the model's token ids [T]).

    Parameters
    ----------
    x : torch.Tensor
        The text as token ids.

    Raises
    ------
    ValueError
        When x is not a tensor, or not 1-d.

    Examples
    --------
    >>> check_text(torch.tensor([], dtype=torch.long))
    >>> check_text(torch.zeros(2, 3, dtype=torch.long))
    Traceback (most recent call last):
    ...
    ValueError: x must be a 1-d LongTensor [T], got shape (2, 3)
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a 1-d LongTensor [T], got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"x must be a 1-d LongTensor [T], got shape {tuple(x.shape)}")


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
        True when ``obj.proposal`` exists and ``tokenize`` and ``log_joint`` are callable.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> is_latent_lm(SimpleNamespace(proposal=None, tokenize=str.split, log_joint=max))
    True
    >>> is_latent_lm(SimpleNamespace(tokenize=str.split, log_joint=max))
    False
    """
    return (
        hasattr(obj, "proposal")
        and callable(getattr(obj, "tokenize", None))
        and callable(getattr(obj, "log_joint", None))
    )


def is_prefix_probability(model: Any) -> bool | None:
    """The model's declaration ``prefix_probability``.

    Parameters
    ----------
    model : Any
        A latent LM.

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
        A latent LM.

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
        A latent LM.

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


def prefix_view(model: Any) -> Any | None:
    """The model whose Σ_z p(x, z) is the probability that a text starts with x.

    Parameters
    ----------
    model : Any
        A latent LM.

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
    """Whether the model offers ``log_marginal(x) = log Σ_z p(x, z)`` (a float; an integral for a continuous z).

    Parameters
    ----------
    model : Any
        A latent LM.

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
        A latent LM.

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


def has_unknown_word_penalty(model: Any) -> bool:
    """Whether ``log_joint`` subtracts a penalty for unknown words that the model reports per configuration.

    With ``unknown_word_penalty(x, z) -> float64 [K]`` (nats), perplexity with (UPP) and without it (PPL) come from
    one run.

    Parameters
    ----------
    model : Any
        A latent LM.

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


def has_text_sampler(model: Any) -> bool:
    """Whether the model offers ancestral sampling ``sample_text(prefix_text, max_tokens, generator) -> str``.

    Parameters
    ----------
    model : Any
        A latent LM.

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
        A latent LM.

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
        A latent LM.

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


def require_beam(model: Any) -> None:
    """Refuse ``estimator=beam`` for a model without a beam, in one line naming what to use instead.

    Parameters
    ----------
    model : Any
        A latent LM.

    Raises
    ------
    lm_latent_eval.errors.UnsupportedError
        (a ``TypeError`` and a ``UserError``) unless ``has_beam(model)``: "<Model> has a continuous latent: no beam
        over configurations; use estimator=..." or "<Model>'s proposal has no beam(x, k); use estimator=...",
        listing is and, where the model offers them, smc and exact.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> class Gaussian:
    ...     latent_support = "continuous"
    ...     proposal = SimpleNamespace(sample=print)
    ...     log_marginal = print
    >>> require_beam(Gaussian())
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: Gaussian has a continuous latent: no beam over configurations; use estimator=is or exact
    >>> require_beam(SimpleNamespace(proposal=SimpleNamespace(sample=print, beam=print)))
    """
    if has_beam(model):
        return
    name = type(model).__name__
    alternatives = ["is", *["smc"] * has_stepwise(model), *["exact"] * has_exact_marginal(model)]
    usable = ", ".join(alternatives[:-1]) + " or " * (len(alternatives) > 1) + alternatives[-1]
    if latent_support(model) == "continuous":
        raise UnsupportedError(
            f"{name} has a continuous latent: no beam over configurations; use estimator={usable}"
        )
    raise UnsupportedError(f"{name}'s proposal has no beam(x, k); use estimator={usable}")


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


def num_particles(z: Latents) -> int:
    """K, the leading dimension shared by every tensor in z.

    Parameters
    ----------
    z : Latents
        A tensor, or a nested tuple/list/dict of tensors, of K configurations.

    Returns
    -------
    int
        K.

    Raises
    ------
    TypeError
        When z holds no tensor.
    ValueError
        When its tensors disagree on the leading dimension (or one is 0-d).

    Examples
    --------
    >>> num_particles({"entity": torch.zeros(3, 5), "type": (torch.ones(3),)})
    3
    >>> num_particles(torch.zeros(4, 0))  # 4 configurations of the empty text
    4
    """
    leaves = [t for t in _leaves(z) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise TypeError(f"latent configurations must contain at least one tensor, got {type(z).__name__}")
    sizes = {int(t.shape[0]) if t.dim() else -1 for t in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            f"every tensor in z must share the leading particle dimension K; got sizes {sorted(sizes)}"
        )
    return sizes.pop()


def select_particles(z: Latents, index: slice | torch.Tensor) -> Latents:
    """z restricted to the particles ``index`` along the leading dimension.

    Parameters
    ----------
    z : Latents
        K configurations (a tensor or a nested tuple/list/dict of tensors).
    index : slice or torch.Tensor
        The particles to keep (a slice, or a LongTensor of indices, repeats allowed).

    Returns
    -------
    Latents
        The same nesting as z, every tensor indexed along dimension 0.

    Examples
    --------
    >>> select_particles({"z": torch.tensor([[1, 2], [3, 4], [5, 6]])}, torch.tensor([2, 0]))
    {'z': tensor([[5, 6],
            [1, 2]])}
    """
    if isinstance(z, torch.Tensor):
        return z[index]
    if isinstance(z, dict):
        return {k: select_particles(v, index) for k, v in z.items()}
    if isinstance(z, (tuple, list)):
        return type(z)(select_particles(v, index) for v in z)
    return z


def enumerated_log_marginal(model: LatentLM, x: torch.Tensor, z: Latents, batch_size: int = 4096) -> float:
    """log p(x) = log Σ_z p(x, z) over a listed support, scored ``batch_size`` configurations at a time.

    Parameters
    ----------
    model : LatentLM
        The model whose ``log_joint`` is summed.
    x : torch.Tensor
        The text, LongTensor [T].
    z : Latents
        Every configuration of the support, each once, [M, ...].
    batch_size : int
        Configurations per ``log_joint`` call.

    Returns
    -------
    float
        log p(x) in float64; 0.0 for the empty text.

    Raises
    ------
    ValueError
        When ``log_joint`` returns NaN.

    Examples
    --------
    A coin z ∈ {0, 1} with p(z) = 1/2; each token equals z with probability 0.9:

    >>> class Coin:
    ...     def log_joint(self, x, z):
    ...         same = (x[None, :] == z[:, None]).double()
    ...         return math.log(0.5) + (same * math.log(0.9) + (1 - same) * math.log(0.1)).sum(-1)
    >>> x = torch.tensor([1, 1])
    >>> round(math.exp(enumerated_log_marginal(Coin(), x, torch.tensor([0, 1]))), 12)  # (0.01 + 0.81) / 2
    0.41
    """
    if x.numel() == 0:
        return 0.0
    n = num_particles(z)
    parts = [
        model.log_joint(x, select_particles(z, slice(s, s + batch_size))) for s in range(0, n, batch_size)
    ]
    value = float(torch.logsumexp(torch.cat(parts), 0))
    if math.isnan(value):
        raise ValueError("exact_log_marginal: log_joint returned NaN")
    return value


def _leaves(z: Latents):
    if isinstance(z, dict):
        for v in z.values():
            yield from _leaves(v)
    elif isinstance(z, (tuple, list)):
        for v in z:
            yield from _leaves(v)
    else:
        yield z


# helpers an adapter may use, kept importable from here for a release after they moved: name -> their module
MOVED = {
    "distinct_rows": "lm_latent_eval.tensors",
    "row_keys": "lm_latent_eval.tensors",
    "pad_rows": "lm_latent_eval.tensors",
}


def __getattr__(name: str) -> Any:
    """``from lm_latent_eval.protocol import distinct_rows`` keeps working, with a DeprecationWarning naming the new
    module (``lm_latent_eval.tensors``), for one release after the helper moved."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"lm_latent_eval.protocol.{name} moved to {MOVED[name]}.{name}; import it from there (the old path goes "
        "away in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(MOVED[name]), name)
