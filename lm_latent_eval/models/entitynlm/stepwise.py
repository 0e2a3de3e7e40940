"""EntityNLM one token at a time, for sequential Monte Carlo: K particles advance together and are reordered.

Token t of particle k draws z_t ~ q_τ(z_t | x, z_<t) (the proposal's ``draw_step``: a mention's type, entity and
length are drawn at its first token; its later tokens are forced, q = 1) and scores it under p with the numbers
``log_joint`` gives each row (``score_step`` and ``word_step``; ``log_joint`` scores each distinct z once, at
another row, which moves log p within float32 rounding), so that the increment

    log w_t = log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t)

is a proper conditional and Σ_t log w_t = log p(x, z) − log q_τ(z | x) for the drawn z. The same generator gives
the same z as ``proposal.sample`` (which runs the same ``draw_step`` token by token); encoders run once per
document (cached), and nothing in a step synchronises with the host. On the CPU, p's ``score_step`` reuses what
q's draw found (``draw_step``'s ``DrawnStep``: decisions, the particles starting a mention, the memory write, which
p's and q's memories share), and the per-token inputs are views taken once (``TokenInputs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .latents import LATENT_KEYS, EntityMemory, draw_step, mention_context, score_step


class TokenInputs(NamedTuple):
    """What step t reads besides the particles, views of the document's tensors taken once in ``init_particles``."""

    q_type: torch.Tensor  # [1, 2] log q_τ(R_t | ·)
    # [1, D] the proposal's labelling state (g_t peeking, g_{t−1} not)
    q_label: torch.Tensor
    q_update: torch.Tensor  # [1, D] g_t
    p_type: torch.Tensor  # [1, 2] log p(R_t | h_{t−1})
    # [1, D] h_{t−1}: p labels z_t and generates x_t from it
    p_label: torch.Tensor
    p_update: torch.Tensor  # [1, D] h_t
    x: torch.Tensor  # [1] x_t


@dataclass
class EntityNLMParticles:
    """K particles after tokens 0..t−1 of one document x [T] (per-particle tensors lead with K)."""

    x: torch.Tensor  # [T]
    temperature: float
    peek: bool
    # per token
    inputs: list[TokenInputs]
    p_memory: EntityMemory  # [K, ...]
    q_memory: EntityMemory  # [K, ...]
    # [K, D] entity embedding the previous token was generated with
    context: torch.Tensor
    # per drawn token t: z_t = (R_t, E_t, L_t) [3, K] of the particles as they were after step t, and the ancestors
    # [K] of a resampling after it (None: none); ``particle_latents`` follows them back (resampling copies no history)
    drawn: tuple[torch.Tensor, ...] = ()
    ancestors: tuple[torch.Tensor | None, ...] = ()
    # next token
    t: int = 0


@torch.inference_mode()
def init_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> EntityNLMParticles:
    """K empty particles for document x [T] (encoders run here, once, without grad as in ``proposal.sample``)."""
    K = int(num_particles)
    # [1, T + 1, D]
    states_p = model.encode(x).unsqueeze(0)
    heads_q, q_label, q_update = model.proposal.views(model.proposal.encode(x).unsqueeze(0), peek)
    device = x.device
    per_token = (
        # [T, 2] -> [1, 2] each
        heads_q.type_log_probs(q_label[0], float(temperature)).split(1),
        q_label.unbind(1),
        q_update.unbind(1),
        # [1, T, 2] -> [1, 2] each
        model.heads.type_log_probs(states_p[:, :-1]).unbind(1),
        states_p[:, :-1].unbind(1),
        states_p[:, 1:].unbind(1),
        x.split(1),
    )
    return EntityNLMParticles(
        x=x,
        temperature=float(temperature),
        peek=bool(peek),
        inputs=[TokenInputs(*parts) for parts in zip(*per_token)],
        p_memory=model.heads.initial_memory(K, device),
        q_memory=heads_q.initial_memory(K, device),
        context=states_p.new_zeros(K, states_p.shape[-1]),
    )


def step_particles(
    model, state: EntityNLMParticles, t: int, generator: torch.Generator | None
) -> tuple[EntityNLMParticles, torch.Tensor]:
    """Draw z_t for every particle and score it: (state after token t, log w_t float64 [K]).

    The state passed in is consumed (its memories are updated in place, under inference mode)."""
    with torch.inference_mode():
        state, log_w = _step(model, state, t, generator)
    return state, log_w.clone()


def _step(model, state: EntityNLMParticles, t: int, generator) -> tuple[EntityNLMParticles, torch.Tensor]:
    if t != state.t or not 0 <= t < state.x.numel():
        raise ValueError(
            f"smc_step: expected token t = {state.t} of a {state.x.numel()}-token document, got t = {t}"
        )
    heads_q = model.proposal.heads if state.peek else model.proposal.nopeek_heads
    now = state.inputs[t]
    q_memory, (r, e, ell), log_q, drawn = draw_step(
        heads_q, state.q_memory, now.q_type, now.q_label, now.q_update, t, state.temperature, generator
    )
    # z_t from q is on p's support
    p_memory, log_p, entity_emb = score_step(
        model.heads, state.p_memory, now.p_type, now.p_label, now.p_update, t, r, e, ell, drawn=drawn
    )
    context = mention_context(state.context, entity_emb, r)
    log_p = log_p + model.word_step(now.p_label, context, now.x)
    state = EntityNLMParticles(
        **{
            **state.__dict__,
            "p_memory": p_memory,
            "q_memory": q_memory,
            "context": context,
            "drawn": (*state.drawn, torch.stack([r, e, ell])),
            "ancestors": (*state.ancestors, None),
            "t": t + 1,
        }
    )
    return state, log_p - log_q


def reorder_particles(state: EntityNLMParticles, ancestors: torch.Tensor) -> EntityNLMParticles:
    """Particle k takes the whole history of particle ancestors[k] (after resampling)."""
    a = ancestors.to(state.context.device)
    return EntityNLMParticles(
        **{
            **state.__dict__,
            "p_memory": state.p_memory.select(a),
            "q_memory": state.q_memory.select(a),
            "context": state.context.index_select(0, a),
            "ancestors": _after_resampling(state.ancestors, a),
        }
    )


def _after_resampling(ancestors: tuple, a: torch.Tensor) -> tuple:
    """The ancestors after the last drawn token once particle k takes the history of particle a[k] (composed with a
    resampling there already: particle k then descends from that one's ancestor a[k])."""
    if not ancestors:
        return ancestors
    last = ancestors[-1]
    return (*ancestors[:-1], a if last is None else last.index_select(0, a))


def particle_latents(state: EntityNLMParticles) -> dict:
    """The configurations drawn so far, as ``log_joint`` and ``proposal.sample`` take them: dict of [K, t]."""
    K = state.context.shape[0]
    # particle k's index among the particles after step t, from the last token back
    index, columns = None, []
    for z_t, ancestors in zip(reversed(state.drawn), reversed(state.ancestors)):
        if ancestors is not None:
            index = ancestors if index is None else ancestors.index_select(0, index)
        columns.append(z_t if index is None else z_t.index_select(1, index))
    latents = (
        torch.stack(columns[::-1], 2)
        if columns
        else torch.zeros(len(LATENT_KEYS), K, 0, dtype=torch.long, device=state.context.device)
    )
    return {k: latents[i].clone() for i, k in enumerate(LATENT_KEYS)}
