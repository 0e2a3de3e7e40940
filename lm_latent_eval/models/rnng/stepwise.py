"""The RNNG word by word, for SMC: a word-synchronous particle filter (Stern et al. 2017, Crabbé et al. 2019).

Step t < T_w (word t) draws r_t ∈ {0..s−1}, the REDUCEs between the shift of word t − 1 and that of word t (s: the
particle's stack size; r_0 = 0), applies them and shifts w_t. Its increment is

    log w_t = Σ_{i<r} log p(REDUCE | h_i) + log p(SHIFT | h_r) + log p(w_t | h_r) − log q_τ(r_t | ·),

h_i the stack LSTM's summary after i of the REDUCEs. So every particle has shifted the same words when the estimator
compares and resamples them, and after step t the weights target p(x_≤t, z_≤t), whose sum over trees is the prefix
probability of w_1..w_t. The sentence's end is part of the last step: with ``</s>`` counted, step T_w applies the
s − 1 REDUCEs that close the tree (p charges each) and scores p(</s> | h); without it, step T_w − 1 closes the tree
after shifting the last word. The increments of a particle sum to log p(x, z) − log q_τ(z | x) (float32 network math
as ``log_joint``, summed in float64). Two proposals:

- ``peek=False``: the generative model's own choice given the next word, q_τ(r) ∝ (p(REDUCE^r SHIFT | ·) p(w_t | h_r))^{1/τ}:
  it reads x_≤t and the particle's tree. At τ = 1 it is the locally optimal proposal and the increment
  log Σ_r p(REDUCE^r SHIFT, w_t | ·) = log p(w_t | x_<t, tree so far) does not depend on the draw. It is also
  ``proposal.sample(peek=False)`` (IS), draw for draw.
- ``peek=True``: the tree CRF's exact left-to-right conditional q_τ(r | x, z_<t) (``left_to_right.py``): it reads all of
  x (BiLSTM span scores, inside scores of the unread words). The trees it draws follow the CRF's q_τ(z | x), the
  distribution ``proposal.sample`` draws from top down (other draws for the same seed).

Each step consumes one uniform per particle from the generator (inverse CDF). Several sentences' particles side by
side, one step for all of them: ``documents.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...tensors import first_of_each, inverse_cdf, selects_rows
from .latents import REDUCE, SHIFT, num_actions
from .left_to_right import LeftToRightCRF


@dataclass
class Stacks:
    """The generative model's stacks of K particles: elements (tree-LSTM h, c) [K, W, D], the stack LSTM's states
    [K, W + 1, L, H] (index n: after <s> and n elements) and the sizes [K]."""

    elem_h: torch.Tensor
    elem_c: torch.Tensor
    state_h: torch.Tensor
    state_c: torch.Tensor
    size: torch.Tensor

    def select(self, index: torch.Tensor) -> Stacks:
        # index_select: a gather of whole rows, several times faster on the CPU than advanced indexing
        fields = (self.elem_h, self.elem_c, self.state_h, self.state_c, self.size)
        return Stacks(*(v.index_select(0, index) for v in fields))


@dataclass
class ReduceChain:
    """Up to R REDUCEs applied in turn to every particle's stack (entries past a stack's s − 1 are unused): the
    contexts h_0..h_R [K, R + 1, H] (top layer), the constituents built [K, R, D] (h, c), the stack LSTM's states after
    each [K, R, L, H] (h, c), log p(REDUCE | h_i) [K, R] and log p(SHIFT | h_i) [K, R + 1] (float64)."""

    context: torch.Tensor
    elem_h: torch.Tensor
    elem_c: torch.Tensor
    state_h: torch.Tensor
    state_c: torch.Tensor
    reduce_lp: torch.Tensor
    shift_lp: torch.Tensor


@dataclass
class RNNGParticles:
    """K particles of one sentence x [T] after its first t steps."""

    x: torch.Tensor
    words: torch.Tensor  # [W] without </s>
    with_eos: bool
    temperature: float
    peek: bool
    emb: torch.Tensor  # [W, D] word embeddings
    stacks: Stacks
    # [K, W + 1]: column t < W the REDUCEs drawn before word t, column W those that close the tree (0 until drawn)
    reduces: torch.Tensor
    # peek: the CRF's tables
    crf: LeftToRightCRF | None
    # peek: [K, W] left edge of every stack element
    left: torch.Tensor | None
    # peek: [K, W, W] log G of every stack element
    outside: torch.Tensor | None
    t: int = 0

    @property
    def num_actions(self) -> torch.Tensor:
        """The actions drawn so far, per particle: [K]."""
        return self.reduces.sum(1) + min(self.t, self.words.numel())

    @property
    def actions(self) -> torch.Tensor:
        """The actions drawn so far as a tree's [K, 2W − 1] (SHIFT past ``num_actions``): r_0 REDUCEs, SHIFT,
        r_1 REDUCEs, SHIFT, ..., then the closing REDUCEs."""
        shifted = min(self.t, self.words.numel())
        out = self.reduces.new_zeros(self.reduces.shape[0], num_actions(self.words.numel()))
        cols = torch.arange(out.shape[1], device=out.device)
        out.masked_fill_(cols < self.num_actions[:, None], REDUCE)
        # word s is shifted after the s words and Σ_{u ≤ s} r_u REDUCEs before it
        at = torch.cumsum(self.reduces[:, :shifted], 1) + cols[:shifted]
        return out.scatter_(1, at, SHIFT)


@torch.no_grad()
def init_particles(model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
    """smc_init: K particles with empty stacks for the sentence x [T]; on the CPU (``rows_apart``) stored as
    ``DistinctHistories`` of one history, else ``plain_particles``."""
    if not rows_apart(model, x):
        return plain_particles(model, x, num_particles, temperature, peek)
    one = plain_particles(model, x, 1, temperature, peek)
    return DistinctHistories(one, torch.zeros(int(num_particles), dtype=torch.long, device=x.device))


@torch.no_grad()
def plain_particles(
    model, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> RNNGParticles:
    """K particles with empty stacks (the stack LSTM has read <s>) for the sentence x [T], one row each."""
    words = model.proposal.words(x)
    K, W, dev = int(num_particles), words.numel(), words.device
    stacks = empty_stacks(model, K, W, dev)
    crf = left = outside = None
    if peek and W:
        crf = model.proposal.left_to_right(x, temperature)
        left = torch.zeros(K, W, dtype=torch.long, device=dev)
        outside = torch.full((K, W, W), float("-inf"), dtype=torch.float64, device=dev)
    return RNNGParticles(
        x, words, words.numel() < x.numel(), float(temperature), bool(peek), model.dropout(model.embedding(words)),
        stacks, torch.zeros(K, W + 1, dtype=torch.long, device=dev), crf, left, outside,
    )  # fmt: skip


def empty_stacks(model, rows: int, width: int, device) -> Stacks:
    """The stacks of ``rows`` particles that have read <s> only: room for ``width`` entries (the stack LSTM's states
    one more), in the network's dtype (bfloat16 included)."""
    D, H, L = model.dim, model.hidden_size, model.num_layers
    net = {"device": device, "dtype": model.embedding.weight.dtype}
    zeros = torch.zeros(1, L, H, **net)
    h0, c0 = model.stack_lstm(model.dropout(model.embedding.weight[model.bos_id]).unsqueeze(0), zeros, zeros)
    state_h = torch.zeros(rows, width + 1, L, H, **net)
    state_c = torch.zeros(rows, width + 1, L, H, **net)
    state_h[:, 0], state_c[:, 0] = h0, c0
    return Stacks(
        torch.zeros(rows, width, D, **net), torch.zeros(rows, width, D, **net), state_h, state_c,
        torch.zeros(rows, dtype=torch.long, device=device),
    )  # fmt: skip


def reduce_chain(
    model, stacks: Stacks, steps: int, rows: torch.Tensor | None = None, size: torch.Tensor | None = None
) -> ReduceChain:
    """Apply REDUCE ``steps`` times to every stack (as ``RNNG.score_batch`` does: compose the top two elements, push
    the constituent on the state below them) and score the action at every context on the way; ``rows`` [K]: only
    these stacks, whose sizes are ``size`` [K] (documents side by side, ``documents.py``)."""
    size = stacks.size if size is None else size
    K = size.shape[0]
    L = model.num_layers
    rows = torch.arange(K, device=size.device) if rows is None else rows
    # [K, L, H]
    top = stacks.state_h[rows, size]
    contexts, built_h, built_c, after_h, after_c = [top[:, L - 1]], [], [], [], []
    if steps:
        # the top element: the first REDUCE's right child
        last = (size - 1).clamp(min=0)
        right_h, right_c = stacks.elem_h[rows, last], stacks.elem_c[rows, last]
    for i in range(1, steps + 1):
        # the left child, where the constituent goes
        pos = (size - 1 - i).clamp(min=0)
        right_h, right_c = model.compose(stacks.elem_h[rows, pos], stacks.elem_c[rows, pos], right_h, right_c)
        h, c = model.stack_lstm(right_h, stacks.state_h[rows, pos], stacks.state_c[rows, pos])
        built_h.append(right_h)
        built_c.append(right_c)
        after_h.append(h)
        after_c.append(c)
        contexts.append(h[:, L - 1])
    # [K, R + 1, H]
    context = torch.stack(contexts, 1)
    size_after = size[:, None] - torch.arange(steps + 1, device=rows.device)
    impossible = torch.stack([torch.zeros_like(size_after, dtype=torch.bool), size_after < 2], -1)
    action_lp = (
        model.action_head(model.dropout(context))
        .float()
        .masked_fill(impossible, float("-inf"))
        .log_softmax(-1)
    ).double()
    if steps:
        built_h, built_c, after_h, after_c = (torch.stack(v, 1) for v in (built_h, built_c, after_h, after_c))
    else:
        built_h = built_c = context.new_zeros(K, 0, model.dim)
        after_h = after_c = context.new_zeros(K, 0, L, model.hidden_size)
    return ReduceChain(
        context, built_h, built_c, after_h, after_c, action_lp[:, :steps, REDUCE], action_lp[:, :, SHIFT]
    )


def _word_log_probs(model, state: RNNGParticles, context: torch.Tensor, size_before: torch.Tensor, t: int):
    """log p(w_t | h) for contexts [N, H] whose stacks hold ``size_before`` [N] elements (</s> allowed on one
    element after the first word, as ``score_batch``): float64 [N]."""
    target = state.words[t].expand(context.shape[0])
    return model.word_log_probs(model.dropout(context), (size_before == 1) & (t >= 1), target)


def _apply(state: RNNGParticles, chain: ReduceChain, r: torch.Tensor) -> None:
    """Make the r [K] REDUCEs of the chain part of every particle's stack (in place; the caller records r in ``reduces``)."""
    st, has = state.stacks, r >= 1
    if has.any():
        k, i = torch.arange(r.shape[0], device=r.device)[has], r[has] - 1
        # the left child's slot holds the constituent
        pos = st.size[has] - r[has] - 1
        st.elem_h[k, pos], st.elem_c[k, pos] = chain.elem_h[k, i], chain.elem_c[k, i]
        st.state_h[k, pos + 1], st.state_c[k, pos + 1] = chain.state_h[k, i], chain.state_c[k, i]
        st.size = st.size - r


def _shift(model, state: RNNGParticles, t: int) -> None:
    """Push word t on every stack (in place); with peeking also its outside vector G."""
    st = state.stacks
    K = st.size.shape[0]
    rows = torch.arange(K, device=st.size.device)
    pos = st.size
    word = state.emb[t].expand(K, -1)
    h, c = model.stack_lstm(word, st.state_h[rows, pos], st.state_c[rows, pos])
    st.elem_h[rows, pos], st.elem_c[rows, pos] = word, torch.zeros_like(word)
    st.state_h[rows, pos + 1], st.state_c[rows, pos + 1] = h, c
    if state.crf is not None:
        below = (pos - 1).clamp(min=0)
        state.outside[rows, pos] = (
            state.crf.push(t, state.left[rows, below], state.outside[rows, below])
            if t
            else state.crf.push(0, None, None).expand(K, -1)
        )
        state.left[rows, pos] = t
    st.size = pos + 1


def _close(model, state: RNNGParticles) -> tuple[torch.Tensor, torch.Tensor]:
    """The s − 1 REDUCEs that finish every tree (p charges each): log p [K] float64 and the contexts after them
    [K, H]."""
    r = state.stacks.size - 1
    chain = reduce_chain(model, state.stacks, int(r.max()))
    keep = torch.arange(chain.reduce_lp.shape[1], device=r.device)[None] < r[:, None]
    log_p = torch.where(keep, chain.reduce_lp, 0.0).sum(1)
    context = chain.context[torch.arange(r.shape[0], device=r.device), r]
    _apply(state, chain, r)
    state.reduces[:, -1] = r
    return log_p, context


def _draw(logits: torch.Tensor, u: torch.Tensor | None, forced: torch.Tensor | None):
    """r ~ softmax(logits) [K, R] by inverse CDF from u [K] (or the given r), and its log probability [K]."""
    log_q = torch.log_softmax(logits, -1)
    r = forced if forced is not None else inverse_cdf(log_q.exp(), u)
    return r, log_q.gather(1, r[:, None]).squeeze(1)


@torch.no_grad()
def advance(
    model,
    state: RNNGParticles,
    t: int,
    u: torch.Tensor | None,
    forced: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
):
    """Step t for every particle: (state, log p [K], log q_τ [K]) of what it drew (r from the uniforms u [K], or the
    ``forced`` r [K]); the state is updated in place. ``logits``: ``proposal_logits`` of these particles when the
    caller has them (the peeking branch then does not compute them again)."""
    W = state.words.numel()
    if t != state.t or not 0 <= t < state.x.numel():
        raise ValueError(f"smc_step: expected step {state.t} of {state.x.numel()}, got t = {t}")
    state.t = t + 1
    st = state.stacks
    # </s>: close the tree, then the end of the sentence on its one element
    if t == W:
        log_p, context = _close(model, state)
        eos = torch.full_like(st.size, model.eos_id)
        end = model.word_log_probs(model.dropout(context), torch.ones_like(eos, dtype=torch.bool), eos)
        return state, log_p + end, torch.zeros_like(log_p)
    size_before = st.size.clone()
    if state.peek and t > 0:
        if logits is None:
            logits = state.crf.reduce_logits(t, state.left, state.outside, st.size)
        r, log_q = _draw(logits, u, forced)
        chain = reduce_chain(model, st, int(r.max()))
        log_p = _path_log_p(model, state, chain, r, size_before, t)
    else:
        # no peeking, and the first word (nothing to reduce)
        chain = reduce_chain(model, st, max(int(st.size.max()) - 1, 0))
        # [K, R + 1]
        log_p_all = _candidate_log_p(model, state, chain, size_before, t)
        r, log_q = _draw(log_p_all / state.temperature, u, forced)
        log_p = log_p_all.gather(1, r[:, None]).squeeze(1)
    _apply(state, chain, r)
    _shift(model, state, t)
    state.reduces[:, t] = r
    # the last word: close the tree in the same step
    if t == W - 1 and not state.with_eos:
        log_p = log_p + _close(model, state)[0]
    return state, log_p, log_q


def _path_log_p(model, state, chain: ReduceChain, r: torch.Tensor, size_before: torch.Tensor, t: int):
    """log p of r REDUCEs, SHIFT and w_t along the chain: float64 [K]."""
    rows = torch.arange(r.shape[0], device=r.device)
    word = _word_log_probs(model, state, chain.context[rows, r], size_before - r, t)
    if not chain.reduce_lp.shape[1]:
        # no REDUCE drawn (their sum would be 0 + ...)
        return chain.shift_lp[:, 0] + word
    keep = torch.arange(chain.reduce_lp.shape[1], device=r.device)[None] < r[:, None]
    return torch.where(keep, chain.reduce_lp, 0.0).sum(1) + chain.shift_lp[rows, r] + word


def _candidate_log_p(model, state, chain: ReduceChain, size_before: torch.Tensor, t: int) -> torch.Tensor:
    """log p(REDUCE^r SHIFT w_t | ·) for every r = 0..R: float64 [K, R + 1] (−inf for r ≥ s)."""
    K, R1, H = chain.context.shape
    r = torch.arange(R1, device=size_before.device)
    words = _word_log_probs(
        model, state, chain.context.reshape(K * R1, H), (size_before[:, None] - r).reshape(-1), t
    )
    reduces = torch.cat([chain.reduce_lp.new_zeros(K, 1), torch.cumsum(chain.reduce_lp, 1)], 1)
    log_p = reduces + chain.shift_lp + words.view(K, R1)
    return log_p.masked_fill(r[None] >= size_before[:, None].clamp(min=1), float("-inf"))


def uniforms(num_particles: int, generator: torch.Generator | None, device) -> torch.Tensor:
    """The one uniform per particle that a step consumes: float64 [K] on ``device``, drawn on the generator's device."""
    where = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(num_particles, generator=generator, device=where, dtype=torch.float64).to(device)


def step_particles(model, state, t: int, generator) -> tuple[RNNGParticles | DistinctHistories, torch.Tensor]:
    """smc_step: draw step t for every particle from one uniform each; (state, log p − log q_τ float64 [K]).

    On the CPU (``rows_apart``) the particles are kept as ``DistinctHistories``: the network runs once per distinct
    history, with the same numbers as ``advance`` on every particle."""
    K = state.rows.shape[0] if isinstance(state, DistinctHistories) else state.stacks.size.shape[0]
    u = uniforms(K, generator, state.x.device)
    if isinstance(state, DistinctHistories) or rows_apart(model, state.x):
        state, log_p, log_q = distinct_advance(model, DistinctHistories.of(state), t, u)
    else:
        state, log_p, log_q = advance(model, state, t, u)
    return state, log_p - log_q


# the fewest rows a matrix product runs on in distinct_advance (BLAS rounds a row of a 1-3-row product by position)
MIN_ROWS = 4


def rows_apart(model, x: torch.Tensor) -> bool:
    """Whether a product over some particles' rows gives each row the numbers of the all-particles product: float32
    rows of a multiple of 16 values in batches of ≥ ``MIN_ROWS`` on the CPU (measured on its BLAS, as the EntityNLM's
    ``latents.rows_apart``; tests/estimators/test_smc_fast_paths.py compares both paths). Only where the device
    ``selects_rows`` (the CPU), so that ``tensors.SELECT_ROWS_ON = ()`` runs an accelerator's layout there."""
    return (
        selects_rows(x.device)
        and model.embedding.weight.dtype == torch.float32
        and model.dim % 16 == 0
        and model.hidden_size % 16 == 0
    )


@dataclass
class DistinctHistories:
    """K particles stored once per distinct history: particle k's stacks, actions and outside vectors are row
    ``rows[k]`` of ``state`` (H ≤ K rows, H distinct action sequences, as the IS scorer keeps only distinct trees).

    Resampling only rewrites ``rows`` (O(K), no copy of the stacks). Reading a per-particle field (``actions``,
    ``num_actions``, ``left``, ``outside``, ``stacks``) gives it for the K particles; every other field is
    ``state``'s."""

    state: RNNGParticles
    rows: torch.Tensor  # [K] into state's rows
    # rows uses every row 0..H−1 of state, and state's rows past H are copies of row 0 (``_padded``): state is its own
    # table of distinct histories (what distinct_advance returns; resampling can leave rows unused)
    compact: bool = False

    _PER_PARTICLE: ClassVar[tuple[str, ...]] = ("reduces", "actions", "num_actions", "left", "outside")

    @classmethod
    def of(cls, state: RNNGParticles | DistinctHistories) -> DistinctHistories:
        """The particles of ``state`` stored once per distinct history (itself when it already is)."""
        if isinstance(state, DistinctHistories):
            return state
        if state.t == 0:
            # nothing drawn yet: one history
            zeros = torch.zeros_like(state.stacks.size)
            return cls(reorder_particles(state, zeros[:1]), zeros)
        _, inverse = torch.unique(state.reduces, dim=0, return_inverse=True)
        return cls(reorder_particles(state, first_of_each(inverse, int(inverse.max()) + 1)), inverse)

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("state", "rows", "compact"):
            # copy and pickle look for hooks before the fields exist
            raise AttributeError(name)
        value = getattr(self.state, name)
        if name == "stacks":
            return value.select(self.rows)
        if name in self._PER_PARTICLE and value is not None:
            return value.index_select(0, self.rows)
        return value


def _padded(index: torch.Tensor) -> torch.Tensor:
    """index [n] followed by copies of its first entry up to ``MIN_ROWS`` entries."""
    n = index.shape[0]
    return index if n >= MIN_ROWS else index.index_select(0, _PADDING[n].to(index.device))


# the positions of an n-entry index (1 ≤ n < MIN_ROWS) that ``_padded`` returns
_PADDING = {n: torch.tensor([*range(n), *[0] * (MIN_ROWS - n)]) for n in range(1, MIN_ROWS)}


@torch.no_grad()
def distinct_advance(model, particles: DistinctHistories, t: int, u: torch.Tensor):
    """``advance`` computed once per distinct history: q_τ(r_t | ·) for each of the H histories the particles hold,
    r_t ~ its history's row with each particle's own uniform u [K], then the REDUCEs, SHIFT and scores once per
    distinct (history, r_t) pair, which become the new histories. The same numbers as ``advance(model, state, t, u)``
    on the K particles (products run on ≥ ``MIN_ROWS`` rows; log_softmax and the cumulative sum work row by row; the
    exponentials of q_τ are taken on H rows, not K, and a vectorised exp may round the last entries of a batch
    differently, which would move a draw only for a u within that last bit of a boundary); returns
    (DistinctHistories, log p [K], log q_τ [K])."""
    state = particles.state
    if t == state.words.numel():
        # nothing drawn: the end of the sentence
        used, inverse = torch.unique(particles.rows, return_inverse=True)
        sub, log_p, log_q = advance(model, reorder_particles(state, _padded(used)), t, None)
        return DistinctHistories(sub, inverse), log_p.index_select(0, inverse), log_q.index_select(0, inverse)
    if particles.compact:
        # state's rows are the histories already
        inverse, histories = particles.rows, None
    else:
        used, inverse = torch.unique(particles.rows, return_inverse=True)
        histories = _padded(used)
    logits = proposal_logits(model, state, t, histories)
    # q_τ once per history; each particle draws from its history's cumulative row with its own uniform
    log_q_rows = torch.log_softmax(logits, -1)
    r = inverse_cdf(None, u, cumulative=log_q_rows.exp().cumsum(-1).index_select(0, inverse))
    # the distinct (history, r) pairs: the particles' histories after step t
    code = inverse * logits.shape[1] + r
    log_q = log_q_rows.view(-1).index_select(0, code)
    _, pair = torch.unique(code, return_inverse=True)
    first = _padded(first_of_each(pair, int(pair.max()) + 1))
    sub = reorder_particles(state, particles.rows.index_select(0, first))
    known = logits.index_select(0, inverse.index_select(0, first)) if state.peek and t > 0 else None
    sub, log_p, _ = advance(model, sub, t, None, forced=r.index_select(0, first), logits=known)
    return DistinctHistories(sub, pair, compact=True), log_p.index_select(0, pair), log_q


def proposal_logits(model, state: RNNGParticles, t: int, rows: torch.Tensor | None) -> torch.Tensor:
    """The logits that step t < T_w draws r_t from for the particles ``rows`` [n] of state (None: all), [n, R]
    (``advance``: the CRF's left-to-right conditional when peeking after the first word, which reads only their stack
    sizes, left edges and outside vectors; else log p(REDUCE^r SHIFT w_t | ·) / τ)."""
    if state.peek and t > 0:
        left, outside, size = (
            v if rows is None else v.index_select(0, rows)
            for v in (state.left, state.outside, state.stacks.size)
        )
        return state.crf.reduce_logits(t, left, outside, size)
    sub = state if rows is None else reorder_particles(state, rows)
    chain = reduce_chain(model, sub.stacks, max(int(sub.stacks.size.max()) - 1, 0))
    return _candidate_log_p(model, sub, chain, sub.stacks.size.clone(), t) / state.temperature


def reorder_particles(state: RNNGParticles | DistinctHistories, ancestors: torch.Tensor):
    """Particle k takes the stacks, actions and outside vectors of particle ancestors[k] (of ``DistinctHistories``:
    its row index only)."""
    a = ancestors.to(state.x.device)
    if isinstance(state, DistinctHistories):
        return DistinctHistories(state.state, state.rows.index_select(0, a))
    pick = lambda v: None if v is None else v.index_select(0, a)
    return RNNGParticles(
        state.x, state.words, state.with_eos, state.temperature, state.peek, state.emb, state.stacks.select(a),
        pick(state.reduces), state.crf, pick(state.left), pick(state.outside), state.t,
    )  # fmt: skip


def particle_latents(model, state: RNNGParticles | DistinctHistories) -> torch.Tensor:
    """The actions drawn so far, [K, 2W − 1] (not yet drawn: SHIFT); ``log_joint``'s trees once every step is done."""
    return state.actions
