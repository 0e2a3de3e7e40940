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
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import torch

Latents = Any  # tensor or nested tuple/list/dict of tensors with leading dimension K


@runtime_checkable
class Proposal(Protocol):
    """q(z | x): samples latent configurations for a fixed text and scores them."""

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

    def beam(self, x: torch.Tensor, beam_size: int) -> Latents:
        """Return up to ``beam_size`` *distinct* configurations with the highest q(z | x) (peeking, τ = 1)."""
        ...


class CheckedProposal:
    """Base of the bundled proposals: ``sample`` and ``beam`` as the contract states them (``Proposal``), checking
    their arguments (``check_proposal_args``, ``check_beam_args``) and running without autograd, then handing over
    to the subclass's ``_sample`` and ``_beam``, which take the same arguments and return the same values."""

    @torch.no_grad()
    def sample(
        self, x, num_samples, temperature=1.0, peek=True, generator=None
    ) -> tuple[Latents, torch.Tensor]:
        """``Proposal.sample`` (types there): (z [K, ...], log q_τ(z_k | x) [K]) from ``_sample`` once the arguments
        passed ``check_proposal_args``."""
        check_proposal_args(x, num_samples, temperature)
        return self._sample(x, num_samples, temperature, peek, generator)

    @torch.no_grad()
    def beam(self, x, beam_size) -> Latents:
        """``Proposal.beam``: up to ``beam_size`` distinct configurations from ``_beam`` once the arguments passed
        ``check_beam_args``."""
        check_beam_args(x, beam_size)
        return self._beam(x, beam_size)

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[Latents, torch.Tensor]:
        raise NotImplementedError

    def _beam(self, x, beam_size) -> Latents:
        raise NotImplementedError


@runtime_checkable
class LatentLM(Protocol):
    """A language model with hidden structure: p(x) = Σ_z p(x, z)."""

    proposal: Proposal

    def tokenize(self, text: str) -> torch.Tensor:
        """Map any string (empty, unknown words included) to LongTensor[T] of the model's ids; T = 0 is allowed."""
        ...

    def log_joint(self, x: torch.Tensor, z: Latents) -> torch.Tensor:
        """log p(x, z_k) for each of K configurations: float64 [K]; −inf where p(x, z_k) = 0."""
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


def check_num_samples(num_samples: int, name: str = "num_samples") -> None:
    """A ValueError naming ``name`` unless the number of samples or particles is a positive integer."""
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
        raise ValueError(f"{name} must be a positive integer, got {num_samples!r}")


def check_temperature(temperature: float) -> None:
    """A ValueError unless the temperature τ is a finite number > 0."""
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


def check_proposal_args(x: torch.Tensor, num_samples: int, temperature: float) -> None:
    """The arguments of ``Proposal.sample``: x a 1-d LongTensor [T], K a positive integer, τ a finite number > 0
    (a ValueError naming the bad one)."""
    check_text(x)
    check_num_samples(num_samples)
    check_temperature(temperature)


def check_beam_args(x: torch.Tensor, beam_size: int) -> None:
    """The arguments of ``Proposal.beam``: x a 1-d LongTensor [T], ``beam_size`` a positive integer (a ValueError
    naming the bad one)."""
    check_text(x)
    check_num_samples(beam_size, "beam_size")


def check_text(x: torch.Tensor) -> None:
    """A ValueError unless x is a 1-d tensor (the model's token ids [T])."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a 1-d LongTensor [T], got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"x must be a 1-d LongTensor [T], got shape {tuple(x.shape)}")


def is_latent_lm(obj: Any) -> bool:
    """Whether ``obj`` has the contract's ``proposal``, ``tokenize`` and ``log_joint``. Use this, not
    ``isinstance(obj, LatentLM)``: from Python 3.12 that check misses attributes an nn.Module keeps in ``_modules``,
    such as its proposal."""
    return (
        hasattr(obj, "proposal")
        and callable(getattr(obj, "tokenize", None))
        and callable(getattr(obj, "log_joint", None))
    )


def is_prefix_probability(model: Any) -> bool | None:
    """The model's declaration ``prefix_probability``: True when Σ_z p(x, z) is the probability that a text starts
    with x (no end-of-text event), False when it scores complete texts, None when the model does not declare it."""
    value = getattr(model, "prefix_probability", None)
    return None if value is None else bool(value)


def missing_stepwise_methods(model: Any) -> list[str]:
    """Names of the SMC methods (``SMC_METHODS``) that ``model`` does not offer."""
    return [name for name in SMC_METHODS if not callable(getattr(model, name, None))]


def has_stepwise(model: Any) -> bool:
    """True when the model offers the stepwise part (smc_init, smc_step, smc_reorder, smc_latents) that SMC needs."""
    return not missing_stepwise_methods(model)


def prefix_view(model: Any) -> Any | None:
    """The model whose Σ_z p(x, z) is the probability that a text starts with x: the model itself when it declares
    ``prefix_probability = True``, else its ``prefix_model()`` where it offers one (which must declare True), else
    None."""
    if is_prefix_probability(model):
        return model
    view = model.prefix_model() if callable(getattr(model, "prefix_model", None)) else None
    if view is not None and not is_prefix_probability(view):
        raise TypeError(
            f"{type(model).__name__}.prefix_model() returned a model that is not a prefix probability"
        )
    return view


def has_exact_marginal(model: Any) -> bool:
    """True when the model offers ``log_marginal(x) = log Σ_z p(x, z)`` (float)."""
    return callable(getattr(model, "log_marginal", None))


def has_tractable_marginal(model: Any) -> bool:
    """True when ``log_marginal`` is cheap on any text, so ``estimator=auto`` picks it: a model whose exact marginal
    only works on short texts (an enumeration) declares ``exact_marginal_tractable = False``."""
    return has_exact_marginal(model) and bool(getattr(model, "exact_marginal_tractable", True))


def has_unknown_word_penalty(model: Any) -> bool:
    """True when ``log_joint`` subtracts a penalty for unknown words and the model reports it per configuration,
    ``unknown_word_penalty(x, z) -> float64 [K]`` (nats), so perplexity with (UPP) and without it (PPL) come from one run."""
    return callable(getattr(model, "unknown_word_penalty", None))


def has_text_sampler(model: Any) -> bool:
    """True when the model offers ancestral sampling ``sample_text(prefix_text, max_tokens, generator) -> str``."""
    return callable(getattr(model, "sample_text", None))


def num_particles(z: Latents) -> int:
    """K, the leading dimension shared by every tensor in z."""
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
    """z restricted to the particles ``index`` along the leading dimension (same nesting as z)."""
    if isinstance(z, torch.Tensor):
        return z[index]
    if isinstance(z, dict):
        return {k: select_particles(v, index) for k, v in z.items()}
    if isinstance(z, (tuple, list)):
        return type(z)(select_particles(v, index) for v in z)
    return z


def enumerated_log_marginal(model: LatentLM, x: torch.Tensor, z: Latents, batch_size: int = 4096) -> float:
    """log p(x) = log Σ_z p(x, z) over z, every configuration of the support listed once, scored ``batch_size`` at
    a time: float64, 0.0 for the empty text; a ValueError when ``log_joint`` returns NaN."""
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
