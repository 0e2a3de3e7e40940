"""Deterministic marginals: beam lower bound log Σ_{z ∈ top-k of q} p(x, z), and the exact log Σ_z p(x, z)."""

from __future__ import annotations

import math

import torch

from ..protocol import LatentLM, has_exact_marginal, num_particles


@torch.no_grad()
def beam_log_marginal(model: LatentLM, x: torch.Tensor, beam_size: int, document: str = "") -> float:
    """log Σ_{z ∈ beam_k} p(x, z) ≤ log p(x), equal once the beam covers the support of p(· | x)."""
    doc = f"document {document[:60]!r}"
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size <= 0:
        raise ValueError(f"{doc}: beam_size must be a positive integer, got {beam_size!r}")
    z = model.proposal.beam(x, beam_size)
    k = num_particles(z)
    if not 1 <= k <= beam_size:
        raise ValueError(f"{doc}: beam returned {k} configurations for beam_size {beam_size}")
    log_p = model.log_joint(x, z).detach().to("cpu", torch.float64)
    if torch.isnan(log_p).any() or torch.isposinf(log_p).any():
        raise ValueError(f"{doc}: log_joint returned NaN or +inf on the beam")
    value = float(torch.logsumexp(log_p, 0))
    if value == -math.inf:
        raise ValueError(f"{doc}: every beam configuration has p(x, z) = 0: the proposal misses the support")
    return value


@torch.no_grad()
def exact_log_marginal(model: LatentLM, x: torch.Tensor, document: str = "") -> float:
    """log p(x) from the model's own exact marginalization."""
    if not has_exact_marginal(model):
        raise ValueError(
            f"{type(model).__name__} has no exact log_marginal(x); use estimator=is or estimator=beam"
        )
    value = float(model.log_marginal(x))
    if math.isnan(value) or value == math.inf:
        raise ValueError(f"document {document[:60]!r}: log_marginal returned {value}")
    return value
