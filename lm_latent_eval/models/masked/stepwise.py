"""The masked LM's stepwise part for SMC: every particle reveals one position per step.

At step t a particle in state S (its revealed set) draws the next position i from q_τ(i | S, x) ∝ exp(ℓ_i / τ) over
the masked positions:

- peek=True:  ℓ_i = log π(i | S) + log p_θ(x_i | S) + log ψ̃(S ∪ {i}), the posterior's step
  p(σ_t = i | σ_<t, x) ∝ π(i | S) p_θ(x_i | S) V(S ∪ {i}) with V(S ∪ {i}) guessed from the row at S
  (``proposal_logits``): by the model's value head where it has one, ψ̃ = the head at S ∪ {i} with each
  ℓ_j(S ∪ {i}) taken as ℓ_j(S), which leaves ℓ_i = log π(i | S) − g_φ(ℓ_i(S), λ_i, |M| − 1) up to a constant of S
  (no network row more); else ψ̃ = 1, the myopic q(i | S) ∝ π(i | S) p_θ(x_i | S);
- peek=False: ℓ_i = log π(i | S), the order prior itself (uniform orders for the uniform policy: the ELBO's
  proposal), which never reads a masked token.

The increment is log π(i | S) + log p_θ(x_i | S) − log q_τ(i | S, x), plus a telescoping look-ahead term
log ψ(S ∪ {i}) − log ψ(S), ψ(S) a guess of how likely the tokens still masked are (``value.py``: the model's value
head, else the mean field Π_{j ∉ S} p_θ(x_j | S); ψ(∅) taken as 1, ψ of the full set = 1). Over the T steps the
increments sum to log p(x, σ) − log q_τ(σ | x); the weights after step t then target p(x_S, σ_≤t) ψ(S) (twisted
SMC) instead of p(x_S, σ_≤t). ψ(S ∪ {i}) comes from the network row of the new state, which the next step reads
anyway (the value head adds the T rows of the text's pseudo-likelihoods, once). ``proposal.sample``
runs these very draws (``draw_step``), so both draw the same orders from one random stream; ``documents.py`` runs the
same step for the particles of several texts side by side (``protocol.DocumentBatchLM``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...tensors import tempered_draw
from .conditionals import StepScores, step_scores
from .value import head_corrections, log_lookahead, pseudo_log_likelihoods, uses_value_head


@dataclass
class OrderParticles:
    """K particles of one text: the orders drawn so far and the sets they revealed."""

    x: torch.Tensor  # [T] word ids
    order: torch.Tensor  # [K, T] positions; columns t, t+1, ... not drawn yet
    revealed: torch.Tensor  # [K, T] bool
    t: int  # steps done
    temperature: float
    peek: bool
    scores: StepScores | None = None  # the network's scores at the current revealed sets (None: not run yet)
    log_twist: torch.Tensor | None = None  # [K] log ψ(S) of the current sets (None: ψ(∅) = 1)
    pseudo: torch.Tensor | None = None  # [T] the value head's λ (None: the mean field; ``value.py``)


def init_particles(model, x: torch.Tensor, num_particles: int, temperature: float = 1.0, peek: bool = True):
    """K particles with nothing revealed, for the text x [T] (K and τ checked by the caller: ``smc_init``,
    ``proposal.sample``); the value head's λ when the peeking proposal reads it."""
    x = model.check_text(x)
    K, T = num_particles, x.numel()
    order = torch.zeros(K, T, dtype=torch.long, device=x.device)
    revealed = torch.zeros(K, T, dtype=torch.bool, device=x.device)
    pseudo = pseudo_log_likelihoods(model, x) if peek and uses_value_head(model) else None
    return OrderParticles(x, order, revealed, 0, float(temperature), bool(peek), pseudo=pseudo)


def proposal_logits(
    model, scores: StepScores, revealed: torch.Tensor, pseudo: torch.Tensor | None, peek: bool
):
    """ℓ_i of q_τ(i | S, x) ∝ exp(ℓ_i / τ) for N sets ``revealed`` [N, T] from their ``scores`` (module
    docstring): float64 [N, T], −inf at the revealed positions; ``pseudo``: the value head's λ ([T] or [N, T]),
    None where the head is not used."""
    if not peek:
        return scores.log_order
    if pseudo is None:
        return scores.log_joint
    return scores.log_order - head_corrections(model, scores.log_token, revealed, pseudo, shift=-1)


@torch.no_grad()
def draw_step(model, state: OrderParticles, generator, need_tokens: bool = True):
    """Reveal one position per particle: (state, log π(i | S) + log p_θ(x_i | S) [K], log q_τ(i | S, x) [K]), float64.

    ``need_tokens=False`` (the uniform proposal without peeking) skips the network; the first value is then
    meaningless.
    """
    scores = state.scores or step_scores(model, state.x, state.revealed, need_tokens or state.peek)
    state.scores = None
    logits = proposal_logits(model, scores, state.revealed, state.pseudo, state.peek)
    position, log_q = tempered_draw(logits, state.temperature, generator)
    log_p = scores.log_joint.gather(-1, position[:, None]).squeeze(-1)
    state.order[:, state.t] = position
    state.revealed[torch.arange(position.shape[0], device=position.device), position] = True
    state.t += 1
    return state, log_p, log_q


def step_particles(model, state: OrderParticles, t: int, generator) -> tuple[OrderParticles, torch.Tensor]:
    """Reveal position σ_t of every particle; return log π(σ_t | S) + log p_θ(x_σ_t | S) − log q_τ(σ_t | S, x) +
    log ψ(S ∪ {σ_t}) − log ψ(S), float64 [K]."""
    if t != state.t or t >= state.x.numel():
        raise ValueError(f"smc_step: expected step {state.t} of {state.x.numel()}, got t = {t}")
    if state.pseudo is None and uses_value_head(model):
        state.pseudo = pseudo_log_likelihoods(model, state.x)
    state, log_p, log_q = draw_step(model, state, generator)
    before = 0.0 if state.log_twist is None else state.log_twist
    if state.t < state.x.numel():
        # the next step's scores, computed here for the look-ahead
        state.scores = step_scores(model, state.x, state.revealed)
        state.log_twist = log_lookahead(model, state.scores.log_token, state.revealed, state.pseudo)
    else:
        state.log_twist = torch.zeros_like(log_p)
    return state, log_p - log_q + state.log_twist - before


def reorder_particles(state: OrderParticles, ancestors: torch.Tensor) -> OrderParticles:
    """Particle k continues the history of particle ancestors[k]."""
    ancestors = ancestors.to(state.order.device)
    state.order, state.revealed = state.order[ancestors], state.revealed[ancestors]
    if state.scores is not None:
        state.scores = StepScores(state.scores.log_token[ancestors], state.scores.log_order[ancestors])
    if state.log_twist is not None:
        state.log_twist = state.log_twist[ancestors]
    return state


def particle_latents(model, state: OrderParticles) -> torch.Tensor:
    """The positions revealed so far, z [K, t] (``log_joint``'s orders once t = T)."""
    return state.order[:, : state.t]
