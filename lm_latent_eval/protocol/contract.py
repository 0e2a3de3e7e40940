"""The contract's types: text x, hidden structure z, joint p(x, z), proposal q(z | x), and the optional stepwise part.

Shapes: ``x`` is a ``LongTensor[T]`` of the model's own token ids; ``log_joint`` and ``log_q`` are ``[K]``; a latent
configuration ``z`` is a tensor, or a (nested) tuple/list/dict of tensors, whose leading dimension is the particle
dimension ``K`` (``Latents``; ``particles.py`` slices it).
A model declares whether ``log_joint(x, z)`` is the log probability of the *prefix* x_1..x_T together with z (no
end-of-text event; ``prefix_probability = True``): then Σ_z p(x, z) is the probability that a text starts with x and
log p(context ⊕ continuation) − log p(context) is the log probability of the continuation given the context. A model
that scores complete texts (an RNNG scores whole trees, often with an end-of-sentence event) declares False, and
``loglikelihood(context, continuation)`` is refused for it rather than silently wrong, unless it offers
``prefix_model()``: a view of itself whose ``log_joint`` is a prefix probability (the RNNG's stops at the last SHIFT),
from which ``loglikelihood`` is then answered.

The proposal's ``sample`` is required; its ``beam(x, k)`` is not (``BeamProposal``): a model whose latent is discrete
offers a beam over configurations, a model whose latent is continuous (a text VAE's Gaussian z) declares
``latent_support = "continuous"`` and has none. Temperature: ``sample(..., temperature=τ)`` draws from
q_τ(z | x) ∝ q(z | x)^{1/τ} and returns log q_τ; a proposal over a discrete latent tempers by dividing every logit by
τ, a Gaussian N(μ, σ²) by drawing from N(μ, τσ²), and a proposal that cannot temper declares ``tempers = False`` and
refuses τ ≠ 1 (``capabilities.can_temper``, ``capabilities.check_tempering``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

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
