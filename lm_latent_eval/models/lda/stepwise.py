"""LDA's particles, advanced one token at a time; shared by ``LDAProposal.sample`` and the SMC methods.

At token t (counts n^{<t} of the particle's own draws) the proposal draws z_t from q_τ(z_t = k) ∝ exp(ℓ_k / τ) with
  peek=True:   ℓ_k = log(n_k + α_k) + log Φ[k, x_t]   (the urn times the token's likelihood: p(z_t | x_≤t, z_<t) at τ = 1)
  peek=False:  ℓ_k = log(n_k + α_k)                    (the urn prior alone)
and the model's factor is p(x_t, z_t | z_<t) = (n_{z_t} + α_{z_t}) / (t + Σα) · Φ[z_t, x_t]. At τ = 1 with peeking the
incremental weight is p(x_t | x_<t, z_<t) = Σ_k (n_k + α_k) Φ[k, x_t] / (t + Σα), whatever z_t was drawn: SMC is then
Wallach et al.'s (2009) left-to-right particle method, with the weights and resampling that make it unbiased.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from ...tensors import tempered_draw as draw


@dataclass
class LDAParticles:
    """K particles of one text: topics drawn so far z [K, T] (columns < t filled) and their topic counts."""

    x: torch.Tensor  # [T] word ids
    log_phi: torch.Tensor  # [T, topics] log Φ[k, x_t], float64
    alpha: torch.Tensor  # [topics] float64
    # Σα (kept on the host: no device sync per token)
    alpha_sum: float
    z: torch.Tensor  # [K, T]
    counts: torch.Tensor  # [K, topics] float64: n_k of z_<t
    t: int
    temperature: float
    peek: bool


def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> LDAParticles:
    """K particles with empty histories over x [T] (the model's Φ columns of x gathered once)."""
    alpha = model.alpha.to(torch.float64)
    # [T, topics]
    log_phi = model.log_phi_columns(x)
    z = torch.zeros(num_particles, x.shape[0], dtype=torch.long, device=x.device)
    counts = torch.zeros(num_particles, alpha.shape[0], dtype=torch.float64, device=x.device)
    return LDAParticles(x, log_phi, alpha, float(alpha.sum()), z, counts, 0, float(temperature), bool(peek))


def step(state: LDAParticles, t: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw z_t for every particle: returns (log p(x_t, z_t | z_<t) [K], log q_τ(z_t | x, z_<t) [K]), float64."""
    if t != state.t or t >= state.x.shape[0]:
        raise ValueError(f"LDA particles: expected token {state.t} of {state.x.shape[0]}, got t = {t}")
    # [K, topics]
    log_urn = torch.log(state.counts + state.alpha)
    # [topics]
    log_phi = state.log_phi[t]
    zt, log_q = draw(log_urn + log_phi if state.peek else log_urn, state.temperature, generator)
    log_p = log_urn.gather(1, zt[:, None]).squeeze(1) - math.log(t + state.alpha_sum) + log_phi[zt]
    state.z[:, t] = zt
    state.counts[torch.arange(zt.shape[0], device=zt.device), zt] += 1.0
    state.t = t + 1
    return log_p, log_q


def reorder(state: LDAParticles, ancestors: torch.Tensor) -> LDAParticles:
    """Particle k takes the history (topics and counts) of particle ancestors[k]."""
    ancestors = ancestors.to(state.z.device)
    state.z, state.counts = state.z[ancestors], state.counts[ancestors]
    return state


def document_stream(seed: int, text: str) -> torch.Generator:
    """A CPU generator seeded by sha256(seed, text): per-document random streams for the peer evaluators."""
    digest = hashlib.sha256(f"{int(seed)}\x00{text}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
