"""latent_tokenization byte-synchronously, for SMC: step t extends every particle's segmentation until it has spelled
the bytes of the first t + 1 canonical tokens.

x holds the canonical token ids [T]; b_t is the number of bytes x_0..x_t spell. At step t every particle that has
spelled fewer than b_t bytes draws tokens from the proposal q_τ (the lattice-restricted, tempered, canonical-mixed
next-token distribution of ``proposal.py``, computed the same way) until it has spelled at least b_t; its last token
may end past b_t (inside x), and a particle that already covers b_{t+1} draws nothing at step t + 1. The increment is

    log w_t = Σ_{tokens z_j drawn at step t} [log p(z_j | block context) − log q_τ(z_j | ·)]

(+ at the last step, for a segmentation longer than the context L, log p of its last block in lm-eval's last window
minus the same in its block context), so the increments of a particle sum to log p(x, z) − log q_τ(z | x). The
estimator therefore compares and resamples particles that have all spelled the same prefix of x: after step t the
weights target p(z_1..z_m) over the token sequences whose last token covers byte b_t of x (its sum over them is the
probability that the model's token stream spells x up to b_t and on, consistently with x, to the end of that token).

Random numbers: step 0 draws the [K, n] uniforms that ``proposal.sample`` draws (n bytes); slot k's j-th token ever
uses uniform (k, j). A slot's count does not restart when resampling gives it another history, so no uniform is used
twice, and without resampling the slots draw exactly the segmentations of ``proposal.sample`` for the same seed. A
step draws at most b_t − b_{t−1} tokens per slot, so n uniforms suffice.

Particles with the same history share one node: its next-token logits and key/value cache are computed once, when
it is first reached (``SegmentationProposal._extend_caches``, the beam's cache of one entry per history).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...tensors import inverse_cdf
from .lattice import SegmentationLattice


@dataclass
class TokenizationParticles:
    """K particles of one text after its first t steps (node ids index the tables below)."""

    x: torch.Tensor  # canonical ids [T]
    lattice: SegmentationLattice
    # b_t, bytes spelled by x_0..x_t
    boundaries: list[int]
    temperature: float
    node: torch.Tensor  # [K] node of each particle
    draws: torch.Tensor  # [K] uniforms slot k has used
    # [K] Σ log p(z_j | block context), float64
    log_p: torch.Tensor
    # [K] the same over the tokens before the particle's current block
    block_log_p: torch.Tensor
    uniforms: torch.Tensor | None = None  # [K, n], drawn at step 0
    # node -> its tokens
    histories: dict[int, tuple] = field(default_factory=dict)
    # node -> bytes spelled
    positions: dict[int, int] = field(default_factory=dict)
    # node -> next-token logits [V] (before the end)
    logits: dict[int, torch.Tensor] = field(default_factory=dict)
    # history -> (position, per-layer key/value) of _extend_caches
    caches: dict = field(default_factory=dict)
    next_node: int = 1
    t: int = 0


@torch.no_grad()
def init_particles(
    lm, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> TokenizationParticles:
    """K particles at the root (no token) for the text spelled by x [T]; the root's logits are computed here."""
    if not peek:
        raise ValueError(
            "the segmentation proposal must read the text it spells: peek=false is not available"
        )
    lattice = lm.lattice(x)
    if not lattice.spellable:
        raise ValueError(f"text {lattice.data[:60]!r} cannot be spelled with the vocabulary")
    K, device = int(num_particles), lm.device
    boundaries = torch.tensor([len(lm.vocab[t]) for t in x.tolist()], dtype=torch.long).cumsum(0).tolist()
    zeros = torch.zeros(K, dtype=torch.float64, device=device)
    state = TokenizationParticles(
        x, lattice, boundaries, float(temperature), torch.zeros(K, dtype=torch.long, device=device),
        torch.zeros(K, dtype=torch.long, device=device), zeros, zeros.clone(),
    )  # fmt: skip
    state.histories[0], state.positions[0] = (), 0
    if lattice.n:
        state.logits[0] = lm.proposal._extend_caches([()], 0, state.caches)[0]
    return state


@torch.no_grad()
def step_particles(
    lm, state: TokenizationParticles, t: int, generator
) -> tuple[TokenizationParticles, torch.Tensor]:
    """smc_step: extend every particle until it covers b_t bytes; (state, log p − log q_τ of its new tokens [K])."""
    if t != state.t or not 0 <= t < state.x.numel():
        raise ValueError(f"smc_step: expected step {state.t} of {state.x.numel()}, got t = {t}")
    K, device = state.node.shape[0], state.node.device
    if t == 0:
        where = generator.device if generator is not None else torch.device("cpu")
        state.uniforms = torch.rand((K, max(state.lattice.n, 1)), generator=generator, device=where,
                                    dtype=torch.float64).to(device)  # fmt: skip
    increment = torch.zeros(K, dtype=torch.float64, device=device)
    while True:
        spelled = torch.tensor([state.positions[i] for i in state.node.tolist()], device=device)
        need = (spelled < state.boundaries[t]).nonzero().squeeze(1)
        if need.numel() == 0:
            break
        increment.index_add_(0, need, _draw_tokens(lm, state, need))
    if t == state.x.numel() - 1:
        increment += _last_window_correction(lm, state)
    _forget_unreached(state)
    state.t = t + 1
    return state, increment


def _draw_tokens(lm, state: TokenizationParticles, need: torch.Tensor) -> torch.Tensor:
    """One token for each particle in ``need`` [N] from its node's q_τ (as ``proposal._sample_chunk``): the particles
    move to the child nodes, whose logits are computed; returns log p − log q_τ of the tokens [N] (float64)."""
    proposal, device = lm.proposal, state.node.device
    nodes, inverse = torch.unique(state.node[need], return_inverse=True)
    nodes = nodes.tolist()
    positions = [state.positions[i] for i in nodes]
    # [M, V]
    logits = torch.stack([state.logits[i] for i in nodes])
    ids, ends, valid = proposal._edges(state.lattice, positions, device)
    scores = logits.gather(1, ids).double() / state.temperature
    node_log_q = torch.log_softmax(scores.masked_fill(~valid, float("-inf")), -1)
    node_log_q = proposal._mix_canonical(node_log_q, ids, positions, state.x)
    node_log_p = torch.log_softmax(logits, -1).gather(1, ids).double()
    u = state.uniforms[need, state.draws[need]]
    choice = inverse_cdf(None, u, cumulative=node_log_q.exp().cumsum(-1)[inverse])
    log_p, log_q = node_log_p[inverse, choice], node_log_q[inverse, choice]
    lengths = torch.tensor([len(state.histories[i]) for i in state.node[need].tolist()], device=device)
    # the token opens a new block of the windows
    starts_block = (lengths > 0) & (lengths % lm.max_length == 0)
    state.block_log_p[need] = torch.where(starts_block, state.log_p[need], state.block_log_p[need])
    state.log_p[need] += log_p
    state.draws[need] += 1
    state.node[need] = _children(lm, state, inverse, nodes, ids[inverse, choice], ends[inverse, choice])
    return log_p - log_q


def _children(lm, state: TokenizationParticles, inverse, nodes, tokens, ends) -> torch.Tensor:
    """Node ids of the histories parent ⊕ token [N] (new nodes created; logits for those before the end)."""
    found, new_hyps = {}, []
    out = []
    for parent, token, end in zip(inverse.tolist(), tokens.tolist(), ends.tolist()):
        key = (nodes[parent], token)
        if key not in found:
            child, state.next_node = state.next_node, state.next_node + 1
            state.histories[child] = (*state.histories[nodes[parent]], token)
            state.positions[child] = end
            found[key] = child
            if end < state.lattice.n:
                new_hyps.append(child)
        out.append(found[key])
    if new_hyps:
        hyps = [state.histories[c] for c in new_hyps]
        for c, row in zip(new_hyps, lm.proposal._extend_caches(hyps, 0, state.caches)):
            state.logits[c] = row
    return torch.tensor(out, dtype=torch.long, device=state.node.device)


def _last_window_correction(lm, state: TokenizationParticles) -> torch.Tensor:
    """For segmentations longer than L: log p of the last block in lm-eval's last window (up to L tokens of left
    context) minus its log p in the block context the steps used; 0 otherwise. float64 [K], added to log_p."""
    K = state.node.shape[0]
    correction = torch.zeros(K, dtype=torch.float64, device=state.node.device)
    rows = [k for k, i in enumerate(state.node.tolist()) if len(state.histories[i]) > lm.max_length]
    if rows:
        last = lm.score([list(state.histories[int(state.node[k])]) for k in rows], last_window_only=True)
        index = torch.tensor(rows, device=correction.device)
        correction[index] = last.to(correction.device) - (state.log_p[index] - state.block_log_p[index])
        state.log_p += correction
    return correction


def _forget_unreached(state: TokenizationParticles) -> None:
    """Drop the nodes (and key/value caches) that no particle holds any more."""
    live = set(state.node.tolist())
    for i in [i for i in state.histories if i not in live]:
        state.caches.pop(state.histories[i], None)
        state.logits.pop(i, None)
        del state.histories[i], state.positions[i]


def reorder_particles(state: TokenizationParticles, ancestors: torch.Tensor) -> TokenizationParticles:
    """Particle k takes the history (node and log p sums) of particle ancestors[k]; slot k keeps its uniforms."""
    a = ancestors.to(state.node.device)
    state.node, state.log_p = state.node.index_select(0, a), state.log_p.index_select(0, a)
    state.block_log_p = state.block_log_p.index_select(0, a)
    _forget_unreached(state)
    return state


def particle_latents(state: TokenizationParticles) -> torch.Tensor:
    """The tokens drawn so far, [K, max(n, 1)] padded with −1 (``proposal.sample``'s format; n bytes bound the
    tokens, so the width does not depend on which particles survive)."""
    z = torch.full((state.node.shape[0], max(state.lattice.n, 1)), -1, dtype=torch.long)
    for k, i in enumerate(state.node.tolist()):
        z[k, : len(state.histories[i])] = torch.tensor(state.histories[i], dtype=torch.long)
    return z
