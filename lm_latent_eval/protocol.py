"""The one contract every latent LM implements: text x, hidden structure z, joint p(x, z), proposal q(z | x).

Latent configurations ``z`` are opaque to the estimators except for one rule: ``z`` is a tensor, or a (nested)
tuple/list/dict of tensors, whose leading dimension is the particle dimension ``K``. The estimators slice it
along that dimension (``select_particles``) and never look inside.

Shapes: ``x`` is a ``LongTensor[T]`` of the model's own token ids; ``log_joint`` and ``log_q`` are ``[K]``.
``log_joint(x, z)`` is the log probability of the *prefix* x_1..x_T together with z (no end-of-text event), so
that Σ_z p(x, z) is the probability that a text starts with x and log p(context ⊕ continuation) − log p(context)
is the log probability of the continuation given the context.
"""

from __future__ import annotations

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


def has_exact_marginal(model: Any) -> bool:
    """True when the model offers ``log_marginal(x) = log Σ_z p(x, z)`` (float)."""
    return callable(getattr(model, "log_marginal", None))


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
        raise ValueError(f"every tensor in z must share the leading particle dimension K; got sizes {sorted(sizes)}")
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


def _leaves(z: Latents):
    if isinstance(z, dict):
        for v in z.values():
            yield from _leaves(v)
    elif isinstance(z, (tuple, list)):
        for v in z:
            yield from _leaves(v)
    else:
        yield z
