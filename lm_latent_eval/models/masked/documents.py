"""The masked LM's particles of several texts side by side (``protocol.DocumentBatchLM``): one step reveals one
position in every particle of every text, and the network rows all texts of one length need at that step go
through shared forward calls.

The texts are grouped by their length T (a group's states are rows of width T; texts of different lengths would
share a call only through padding, whose meaning the network need not have). Within a group, step t does for all its
particles at once what ``stepwise.step_particles`` does for one text's K_d: the draw

    σ_t ~ q_τ(i | S, x) ∝ exp(ℓ_i / τ),   ℓ_i of ``stepwise.proposal_logits`` (log π(i | S) without peeking),

by the inverse CDF of the row with text d's own uniforms (``side_by_side.lane_uniforms``: the K_d numbers
``torch.rand(K_d)`` of its generator, as ``tensors.tempered_draw`` draws them), and the increment

    log π(σ_t | S) + log p_θ(x_σ_t | S) − log q_τ(σ_t | S, x) + log ψ(S ∪ {σ_t}) − log ψ(S)

with ψ the look-ahead of ``value.py`` (ψ of the full set 1), every operation row by row, so a particle's numbers are
those of its text alone. The new sets' rows (for ψ and the next step) are the distinct (text, S) pairs of the group:
each text's are looked up in the model's ``row_cache``
under that text's own key (a row read back is the row the network gave), and the missing ones of every text of the
group are stacked and run in blocks of ``block_tokens // T`` rows (``conditionals.scored_rows``), then stored under
their text's key. A group's forward calls per step are thus ⌈rows / (block_tokens // T)⌉ instead of one or more per
text, and the bookkeeping (distinct sets, the draw, the policy, ψ) runs once per group instead of once per text.
Bit for bit with each text alone wherever the network's row does not depend on the other rows of its batch (the
bundled network on the CPU: ``tests/estimators/test_side_by_side.py``), else to its float32 rounding.

A text longer than the network reads (windows, ``windows.py``) is not batched: ``init_documents`` declines (None) and
the estimator runs the texts one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...tensors import distinct_rows, inverse_cdf
from ..side_by_side import lane_uniforms
from .conditionals import StepScores, scored_rows, scores_of_rows
from .stepwise import proposal_logits, reorder_particles
from .value import log_lookahead, pseudo_log_likelihoods, uses_value_head
from .windows import window_size


@dataclass
class LengthGroup:
    """The particles of the texts of one length T: text d's K_d particles consecutive, in the batch's order."""

    documents: list[int]  # the texts' positions in the batch
    sizes: list[int]  # K_d of each
    index: torch.Tensor  # [N] the particles' positions in the batch (N = Σ K_d over the group)
    x: torch.Tensor  # [D, T] the texts
    text_of: torch.Tensor  # [N] each particle's text among the group's, 0 .. D − 1
    text_keys: list  # each text's ``row_cache`` key (None: rows not kept)
    order: torch.Tensor  # [N, T] positions; columns t, t+1, ... not drawn yet
    revealed: torch.Tensor  # [N, T] bool
    scores: StepScores | None = None  # the network's scores at the current sets (None: not run yet)
    log_twist: torch.Tensor | None = None  # [N] log ψ(S) of the current sets (None: ψ(∅) = 1)
    # [N, T] the λ of each particle's text, for the value head (None: the mean field; ``value.py``)
    pseudo: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.x.shape[1]


@dataclass
class MaskedDocumentBatch:
    """The particles of several texts (``DocumentBatchLM``), one ``LengthGroup`` per length; ``local[k]`` is
    particle k's row in its group."""

    groups: list[LengthGroup]
    local: torch.Tensor  # [Σ K_d]
    t: int
    temperature: float
    peek: bool


# the side-by-side state's type (``stepwise_module.StepwiseFromModule``)
DocumentBatch = MaskedDocumentBatch


def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> MaskedDocumentBatch | None:
    """Empty particles for the texts xs (LongTensor [T_d] each, checked by ``check_text``) with K_d particles each,
    grouped by length; None where a text is read in windows (longer than the network reads)."""
    xs = [model.check_text(x) for x in xs]
    if any(window_size(model, x.numel()) is not None for x in xs):
        return None
    device = xs[0].device
    starts = np.cumsum([0, *num_particles]).tolist()
    local = torch.empty(starts[-1], dtype=torch.long, device=device)
    cache = getattr(model, "row_cache", None)
    groups = []
    for length in dict.fromkeys(x.numel() for x in xs):
        docs = [d for d, x in enumerate(xs) if x.numel() == length]
        sizes = [int(num_particles[d]) for d in docs]
        index = torch.cat([torch.arange(starts[d], starts[d + 1], device=device) for d in docs])
        local[index] = torch.arange(index.numel(), device=device)
        N = index.numel()
        groups.append(
            LengthGroup(
                docs, sizes, index, torch.stack([xs[d] for d in docs]),
                torch.arange(len(docs), device=device).repeat_interleave(torch.tensor(sizes, device=device)),
                [None if cache is None else cache.key(model, xs[d], False) for d in docs],
                torch.zeros(N, length, dtype=torch.long, device=device),
                torch.zeros(N, length, dtype=torch.bool, device=device),
            )
        )  # fmt: skip
    return MaskedDocumentBatch(groups, local, 0, float(temperature), bool(peek))


@torch.no_grad()
def step_documents(
    model, state: MaskedDocumentBatch, t: int, generators
) -> tuple[MaskedDocumentBatch, torch.Tensor]:
    """Step t of every text with t < T_d, each drawing its K_d uniforms from its own generator (a text that has
    ended draws nothing and adds 0): (state, increments float64 [Σ K_d])."""
    if t != state.t:
        raise ValueError(f"smc_step_documents: expected step {state.t}, got t = {t}")
    inc = torch.zeros(state.local.numel(), dtype=torch.float64, device=state.local.device)
    for group in state.groups:
        if t < group.length:
            streams = [generators[d] for d in group.documents]
            inc.index_copy_(
                0, group.index, step_group(model, group, t, streams, state.temperature, state.peek)
            )
    state.t = t + 1
    return state, inc


def step_group(model, group: LengthGroup, t: int, generators, temperature: float, peek: bool) -> torch.Tensor:
    """Reveal σ_t in every particle of one length group: the increments [N] (module docstring)."""
    if t == 0 and uses_value_head(model):
        group.pseudo = torch.stack([pseudo_log_likelihoods(model, x) for x in group.x])[group.text_of]
    scores = group.scores or group_scores(model, group)
    group.scores = None
    logits = proposal_logits(model, scores, group.revealed, group.pseudo, peek)
    # tensors.tempered_draw, row by row, with each text's own uniforms
    log_q_all = torch.log_softmax(logits / temperature, -1)
    u = lane_uniforms(group.sizes, [group.length] * len(group.sizes), generators, t, 1, logits.device)[:, 0]
    position = inverse_cdf(log_q_all.exp(), u)
    log_q = log_q_all.gather(-1, position[:, None]).squeeze(-1)
    log_p = scores.log_joint.gather(-1, position[:, None]).squeeze(-1)
    group.order[:, t] = position
    group.revealed[torch.arange(position.shape[0], device=position.device), position] = True
    before = 0.0 if group.log_twist is None else group.log_twist
    if t + 1 < group.length:
        # the next step's scores, computed here for the look-ahead
        group.scores = group_scores(model, group)
        group.log_twist = log_lookahead(model, group.scores.log_token, group.revealed, group.pseudo)
    else:
        group.log_twist = torch.zeros_like(log_p)
    return log_p - log_q + group.log_twist - before


def group_scores(model, group: LengthGroup) -> StepScores:
    """``conditionals.step_scores`` of every particle of the group at its current set: each distinct (text, S) once,
    read back from the row cache or run with the other texts' missing rows in shared calls."""
    rows = torch.cat([group.text_of[:, None], group.revealed.long()], 1)
    distinct, index = distinct_rows(rows)
    text, states = distinct[:, 0], distinct[:, 1:].bool()
    if any(key is None for key in group.text_keys):
        token, conf = scored_rows(model, group.x[text], states)
    else:
        token, conf = cached_rows(model, group, text, states)
    return scores_of_rows(model, group.revealed, group.revealed, token[index], conf[index])


def cached_rows(model, group: LengthGroup, text: torch.Tensor, states: torch.Tensor):
    """``token_log_probs``' two float64 [U, T] for U distinct (text, S): each text's states looked up under its own
    key (``row_cache.RowCache``), the missing ones of all texts run together, each (text key, S) once (two sample
    blocks of one document are two texts of the group with one key), then kept under their text's key."""
    cache = model.row_cache
    token = torch.empty(states.shape, dtype=torch.float64, device=states.device)
    conf = torch.empty_like(token)
    on_host = text.cpu().numpy(), states.cpu()
    found_at, found_rows, twins_at, twins_of = [], [], [], []
    # text key -> {state key: its first row among the U}, in the order the rows will run
    new: dict[tuple, dict[bytes, int]] = {}
    for d, text_key in enumerate(group.text_keys):
        mine = np.flatnonzero(on_host[0] == d)
        if mine.size == 0:
            continue
        keys = cache.state_keys(on_host[1][torch.from_numpy(mine)])
        found, where, missing = cache.lookup(text_key, keys)
        if found:
            found_at += mine[found].tolist()
            found_rows.append(cache.table(text_key)[torch.tensor(where, device=states.device)])
        pending = new.setdefault(text_key, {})
        for n in missing:
            first = pending.setdefault(keys[n], int(mine[n]))
            if first != mine[n]:
                twins_at.append(int(mine[n]))
                twins_of.append(first)
    if found_at:
        rows, at = torch.cat(found_rows), torch.tensor(found_at, device=states.device)
        token[at], conf[at] = rows[:, 0], rows[:, 1]
    missing_at = [u for pending in new.values() for u in pending.values()]
    if missing_at:
        at = torch.tensor(missing_at, device=states.device)
        new_token, new_conf = scored_rows(model, group.x[text[at]], states[at])
        token[at], conf[at] = new_token, new_conf
        start = 0
        for text_key, pending in new.items():
            if pending:
                end = start + len(pending)
                cache.store(text_key, list(pending), new_token[start:end], new_conf[start:end])
                start = end
    if twins_at:
        at, of = torch.tensor(twins_at, device=states.device), torch.tensor(twins_of, device=states.device)
        token[at], conf[at] = token[of], conf[of]
    return token, conf


def reorder_documents(state: MaskedDocumentBatch, ancestors: torch.Tensor) -> MaskedDocumentBatch:
    """Particle k continues the history of particle ancestors[k] (global indices, each within its text's
    segment, so within its length group)."""
    ancestors = ancestors.to(state.local.device)
    for group in state.groups:
        # a group holds the fields ``reorder_particles`` reorders (order, revealed, scores, log ψ)
        reorder_particles(group, state.local[ancestors[group.index]])
    return state
