"""The RNNG's particles of several sentences side by side (``protocol.DocumentBatchLM``): one step advances them all.

Sentence d's K_d particles are the d-th segment of one set of stacks, as wide as the longest sentence's W words (a
stack never holds more elements than words shifted). Step t runs ``stepwise.advance``'s math for every sentence with
t < T_d at once, one row per particle (the accelerator's layout; on the CPU, where ``stepwise.rows_apart`` keeps one
row per distinct history, ``init_documents`` declines and the sentences run one at a time):

- a sentence with t < W_d draws r_t, the REDUCEs before word t, with the uniforms ``torch.rand(K_d)`` of its own
  generator (what ``smc_step`` consumes), applies them and shifts its word t; without ``</s>`` it closes its tree
  after shifting its last word (t = W_d − 1), as ``advance`` does;
- a sentence with t = W_d (``</s>`` counted) draws its uniforms but uses none (as ``smc_step``): it closes its tree
  with its s − 1 REDUCEs and scores ``</s>``;
- a sentence that has ended draws nothing; its rows take no part (their increments are 0).

Nothing in a step reads a device value on the host: the REDUCE chain runs max(t − 1, 0) times (after t shifts a stack
holds at most t elements; ``advance`` asks the device for the particles' largest stack instead), every particle's
chain past its own stack is computed and masked, the REDUCEs and the shift write every row (a row with nothing to
write writes a scratch slot past the stacks' end), and which sentences draw, close or have ended follows from t and
the lengths. ``init_documents`` checks and embeds the sentences' words at once and builds their CRF tables once per
set of sentences of one length (each sentence's span scores from its own encoder pass, as ``proposal.span_scores``).
The numbers are ``advance``'s row by row; only reductions over a row (a sum over the REDUCEs drawn, the
peeking CRF's log-sum-exps over the words) run over the padded width instead of the sentence's own, which may move
their last bit (float64), and a batched product may round a float32 row otherwise on an accelerator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...tensors import inverse_cdf
from ..side_by_side import document_rows, lane_uniforms
from ..vocabulary import check_word_ids
from .left_to_right import _log_matvec
from .stepwise import ReduceChain, Stacks, empty_stacks, reduce_chain, rows_apart
from .tree_crf import inside

NEG_INF = float("-inf")


@dataclass
class StackedCRF:
    """The peeking proposal's ``LeftToRightCRF`` tables of B sentences padded to W words (−inf past a sentence's
    words): S [B, W, W], log β [B, W, W], log (I − M_l)⁻¹ [B, W, W, W], and the first word's log G [B, W]."""

    scores: torch.Tensor
    log_beta: torch.Tensor
    log_green: torch.Tensor
    first: torch.Tensor

    @classmethod
    def build(cls, model, words: list[torch.Tensor], temperature: float, width: int) -> StackedCRF:
        """The tables of the sentences ``words`` (their words [W_d] each) padded to ``width`` words: each sentence's
        span scores as ``proposal.span_scores`` computes them (its own encoder pass), then ``LeftToRightCRF.build``
        and the first word's ``push`` once per set of sentences of one length (``crf_tables``), row by row the
        numbers of each sentence's own."""
        lengths = [w.numel() for w in words]
        out = None
        for n in sorted(set(lengths)):
            docs = [d for d, m in enumerate(lengths) if m == n]
            span = torch.stack([model.proposal.span_scores_batch(words[d].unsqueeze(0))[0] for d in docs])
            tables = crf_tables(span, temperature)
            if out is None:
                like = tables[0]
                out = [like.new_full((len(words), *[width] * (v.dim() - 1)), NEG_INF) for v in tables]
            at = torch.tensor(docs, device=like.device)
            for full, v in zip(out, tables):
                full[(at, *[slice(0, n)] * (v.dim() - 1))] = v
        return cls(*out)

    def push(self, doc: torch.Tensor, t: int, left_below: torch.Tensor, outside_below: torch.Tensor):
        """``LeftToRightCRF.push`` of word t ≥ 1 for rows of the sentences doc [n]: log G [n, W]."""
        cols = torch.arange(self.scores.shape[-1], device=doc.device)
        u = (outside_below + self.scores[doc, left_below]).masked_fill(cols < t, NEG_INF)
        return torch.logsumexp(self.log_green[doc, t] + u.unsqueeze(-2), -1).masked_fill(cols < t, NEG_INF)

    def reduce_logits(self, doc, t: int, left: torch.Tensor, outside: torch.Tensor, size: torch.Tensor):
        """``LeftToRightCRF.reduce_logits`` before word t ≥ 1 for rows of the sentences doc [n]: [n, W]."""
        S = left.shape[1]
        rows = doc[:, None]
        close = torch.logsumexp(
            self.scores[:, :, t:][rows, left] + self.log_beta[doc, t, t:][:, None] + outside[..., t:], -1
        )
        r = torch.arange(S, device=left.device)
        j = (size[:, None] - 1 - r).clamp(min=0)
        reduce_score = self.scores[rows, left, t - 1].gather(1, j)
        cumulative = torch.cumsum(torch.where(r == 0, 0.0, reduce_score), 1)
        return (cumulative + close.gather(1, j)).masked_fill(r >= size[:, None], NEG_INF)


def crf_tables(span_scores: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
    """``LeftToRightCRF.build`` and its first ``push`` for B sentences of T words at once, span scores [B, T, T]:
    (S [B, T, T], log β [B, T, T], log (I − M_l)⁻¹ [B, T, T, T], log G of the first word [B, T]), the same
    operations with a leading batch dimension (every reduction over the same entries)."""
    B, T = span_scores.shape[0], span_scores.shape[-1]
    device = span_scores.device
    upper = torch.ones(T, T, dtype=torch.bool, device=device).triu()
    scores = (span_scores / temperature).double().masked_fill(~upper, NEG_INF)
    log_beta = inside(scores)
    shifted = torch.cat([log_beta[:, 1:], log_beta.new_full((B, 1, T), NEG_INF)], 1)
    idx = torch.arange(T, device=device)
    keep = (idx[:, None, None] <= idx[None, :, None]) & (idx[None, :, None] < idx[None, None, :])
    log_m = (scores[:, :, None, :] + shifted[:, None]).masked_fill(~keep, NEG_INF)
    eye = torch.full((T, T), NEG_INF, dtype=torch.float64, device=device).fill_diagonal_(0.0)
    green = eye.expand(B, T, T, T).clone()
    for c in range(T - 2, -1, -1):
        below = _log_matvec(green[:, :, c + 1 :].transpose(2, 3), log_m[:, :, c, c + 1 :])
        green[:, :, c] = torch.logaddexp(eye[c].expand(B, T, T), below)
    # the first word: the root closes at the last word
    u = torch.full((B, T), NEG_INF, dtype=torch.float64, device=device)
    u[:, T - 1] = 0.0
    return scores, log_beta, green, _log_matvec(green[:, 0], u)


@dataclass
class Group:
    """The rows of some sentences' particles: ``index`` [n] into the batch's rows (``every``: all of them, in
    order), and per row its sentence's first and last word row of the stacked words, its word count and its
    sentence."""

    every: bool
    index: torch.Tensor
    first: torch.Tensor
    last: torch.Tensor
    words: torch.Tensor
    doc: torch.Tensor


@dataclass
class RNNGDocumentBatch:
    """The particles of several sentences side by side: sentence d's K_d particles are the d-th segment of the
    stacks (elements [N, W + 1, D], the stack LSTM's states [N, W + 2, L, H]: the last slot of each is scratch),
    its words the rows ``first``..``last`` of the stacked words."""

    sizes: list[int]
    lengths: list[int]
    num_words: list[int]
    temperature: float
    peek: bool
    word_ids: torch.Tensor  # [Σ W_d]
    emb: torch.Tensor  # [Σ W_d, D]
    stacks: Stacks
    # [N] per particle: its sentence, the first and last rows of its words, its W_d
    doc: torch.Tensor
    first: torch.Tensor
    last: torch.Tensor
    words: torch.Tensor
    # peek: the sentences' CRF tables, and every stack element's left edge [N, W + 1] and log G [N, W + 1, W]
    crf: StackedCRF | None
    left: torch.Tensor | None
    outside: torch.Tensor | None
    t: int = 0
    # the rows of a set of sentences, built once
    groups: dict = field(default_factory=dict, repr=False)

    @property
    def width(self) -> int:
        """W: the stacks' capacity, the longest sentence's words."""
        return max(self.num_words)

    def group(self, docs: tuple[int, ...]) -> Group:
        """The rows of the particles of the sentences ``docs`` (ascending)."""
        if docs not in self.groups:
            device = self.stacks.size.device
            every = len(docs) == len(self.sizes)
            starts = [0, *torch.tensor(self.sizes).cumsum(0).tolist()]
            index = torch.cat([torch.arange(starts[d], starts[d + 1]) for d in docs]).to(device)
            pick = (lambda v: v) if every else (lambda v: v.index_select(0, index))
            self.groups[docs] = Group(
                every, index, pick(self.first), pick(self.last), pick(self.words), pick(self.doc)
            )
        return self.groups[docs]


def sentence_words(model, xs) -> tuple[torch.Tensor, list[int]]:
    """``proposal.words`` of every sentence, checked at once: (their words stacked [Σ W_d], the W_d)."""
    for x in xs:
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype != torch.long:
            check_word_ids(x, model.proposal.vocab_size)
    flat = torch.cat(xs).to(model.device)
    check_word_ids(flat, model.proposal.vocab_size)
    lengths = [x.numel() for x in xs]
    ends = flat.index_select(0, torch.tensor(lengths, device=flat.device).cumsum(0) - 1).tolist()
    num_words = [n - (end == model.eos_id) for n, end in zip(lengths, ends)]
    start = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    positions = [start[d] + i for d, n in enumerate(num_words) for i in range(n)]
    words = flat.index_select(0, torch.tensor(positions, dtype=torch.long, device=flat.device))
    if bool(((words == model.eos_id) | (words == model.bos_id)).any()):
        raise ValueError("x holds </s> or <s> inside the sentence; use model.tokenize(text)")
    return words, num_words


# the side-by-side state's type (``stepwise_module.StepwiseFromModule``)
DocumentBatch = RNNGDocumentBatch


@torch.no_grad()
def init_documents(model, xs, num_particles, temperature: float, peek: bool) -> RNNGDocumentBatch | None:
    """Empty stacks for the particles of every sentence, their words and CRF tables stacked (``plain_particles``'
    numbers, computed once for all of them); None where the particles keep one row per distinct history
    (``rows_apart``: the CPU) or a sentence has no word."""
    xs = [x.to(model.device) for x in xs]
    if rows_apart(model, xs[0]):
        return None
    words, num_words = sentence_words(model, xs)
    if min(num_words) == 0:
        return None
    W, N, device = max(num_words), sum(num_particles), words.device
    # one spare entry: rows with nothing to write write there
    stacks = empty_stacks(model, N, W + 1, device)
    first, last = document_rows(num_particles, num_words, device)
    repeats = torch.tensor(list(num_particles), device=device)
    crf = left = outside = None
    if peek:
        crf = StackedCRF.build(model, list(words.split(num_words)), temperature, W)
        left = torch.zeros(N, W + 1, dtype=torch.long, device=device)
        outside = torch.full((N, W + 1, W), NEG_INF, dtype=torch.float64, device=device)
    return RNNGDocumentBatch(
        list(num_particles), [int(x.numel()) for x in xs], num_words, float(temperature), bool(peek),
        words, model.dropout(model.embedding(words)), stacks,
        torch.arange(len(xs), device=device).repeat_interleave(repeats), first, last,
        torch.tensor(num_words, device=device).repeat_interleave(repeats), crf, left, outside,
    )  # fmt: skip


@torch.no_grad()
def step_documents(
    model, state: RNNGDocumentBatch, t: int, generators
) -> tuple[RNNGDocumentBatch, torch.Tensor]:
    """Step t of every sentence with t < T_d (module docstring): (state, log p − log q_τ float64 [Σ K_d], 0 for the
    particles of sentences that have ended)."""
    if t != state.t:
        raise ValueError(f"smc_step_documents: expected step {state.t}, got t = {t}")
    state.t = t + 1
    device = state.stacks.size.device
    u = lane_uniforms(state.sizes, state.lengths, generators, t, 1, device)[:, 0]
    docs = tuple(d for d, n in enumerate(state.lengths) if t < n)
    g = state.group(docs)
    # some sentences close with </s> at this step
    ending = any(t == state.num_words[d] for d in docs)
    if any(t < state.num_words[d] for d in docs):
        log_p, log_q = _advance(model, state, g, t, u if g.every else u.index_select(0, g.index), ending)
    else:
        # every sentence left closes with </s>
        log_p, log_q = _end(model, state, g, t)
    # without </s>: the tree closes after the last word, in the same step
    closing = tuple(d for d in docs if t == state.num_words[d] - 1 == state.lengths[d] - 1)
    if not closing and g.every:
        return state, log_p - log_q
    N = state.stacks.size.shape[0]
    if not g.every:
        log_p = log_p.new_zeros(N).index_copy_(0, g.index, log_p)
        log_q = log_q.new_zeros(N).index_copy_(0, g.index, log_q)
    if closing:
        log_p = log_p.index_add(0, state.group(closing).index, _close(model, state, state.group(closing), t))
    return state, log_p - log_q


def _advance(model, state: RNNGDocumentBatch, g: Group, t: int, u: torch.Tensor, ending: bool):
    """``advance`` of step t on the rows of g: (log p [n], log q_τ [n]); ``ending``: some rows' sentences close with
    </s> at this step (t = W_d: r = s − 1, nothing drawn, no shift)."""
    st = state.stacks
    size = st.size if g.every else st.size.index_select(0, g.index)
    chain = reduce_chain(model, st, max(t - 1, 0), g.index, size)
    word_row = torch.minimum(g.first + t, g.last)
    target = state.word_ids.index_select(0, word_row)
    drawing = None
    if ending:
        drawing = g.words > t
        target = torch.where(drawing, target, model.eos_id)
    if state.peek and t > 0:
        r, log_p, log_q = _crf_draw(model, state, g, chain, size, target, t, u, drawing)
    else:
        r, log_p, log_q = _model_draw(model, state, chain, size, target, t, u, drawing)
    if chain.reduce_lp.shape[1]:
        _apply(st, g.index, chain, size, r)
    _shift(model, state, g, size - r, word_row, t, drawing)
    return log_p, log_q


def _end(model, state: RNNGDocumentBatch, g: Group, t: int):
    """Step t = W_d of sentences that count </s> (``advance``'s first branch): log p of the s − 1 REDUCEs that close
    the tree and of </s> after them [n], log q_τ = 0 [n]."""
    st = state.stacks
    size = st.size if g.every else st.size.index_select(0, g.index)
    r = size - 1
    chain = reduce_chain(model, st, max(t - 1, 0), g.index, size)
    eos = torch.full_like(size, model.eos_id)
    context = chain.context[torch.arange(r.shape[0], device=r.device), r]
    end = model.word_log_probs(model.dropout(context), torch.ones_like(eos, dtype=torch.bool), eos)
    log_p = _closing(chain, r) + end
    return log_p, torch.zeros_like(log_p)


def _closing(chain: ReduceChain, r: torch.Tensor) -> torch.Tensor:
    """Σ_{i<r} log p(REDUCE | h_i) along the chain, as ``stepwise._close``: float64 [n]."""
    keep = torch.arange(chain.reduce_lp.shape[1], device=r.device)[None] < r[:, None]
    return torch.where(keep, chain.reduce_lp, 0.0).sum(1)


def _model_draw(model, state, chain: ReduceChain, size, target, t: int, u, drawing):
    """Without peeking, and the first word: r ~ q_τ(r) ∝ p(REDUCE^r SHIFT w_t | ·)^{1/τ} (``_candidate_log_p``,
    ``_draw``); rows that close with </s> (``drawing`` false) take r = s − 1 and score the REDUCEs and </s>."""
    n, R1, H = chain.context.shape
    r = torch.arange(R1, device=size.device)
    eos_ok = ((size[:, None] - r) == 1) & (t >= 1)
    words = model.word_log_probs(
        model.dropout(chain.context.reshape(n * R1, H)),
        eos_ok.reshape(-1),
        target[:, None].expand(n, R1).reshape(-1),
    ).view(n, R1)
    reduces = torch.cat([chain.reduce_lp.new_zeros(n, 1), torch.cumsum(chain.reduce_lp, 1)], 1)
    log_p_all = (reduces + chain.shift_lp + words).masked_fill(r[None] >= size[:, None].clamp(min=1), NEG_INF)
    log_q_all = torch.log_softmax(log_p_all / state.temperature, -1)
    drawn = inverse_cdf(log_q_all.exp(), u)
    log_q = log_q_all.gather(1, drawn[:, None]).squeeze(1)
    log_p = log_p_all.gather(1, drawn[:, None]).squeeze(1)
    if drawing is None:
        return drawn, log_p, log_q
    closed = size - 1
    end = _closing(chain, closed) + words.gather(1, closed[:, None]).squeeze(1)
    return (
        torch.where(drawing, drawn, closed),
        torch.where(drawing, log_p, end),
        torch.where(drawing, log_q, 0.0),
    )


def _crf_draw(model, state, g: Group, chain: ReduceChain, size, target, t: int, u, drawing):
    """Peeking after the first word: r ~ the CRF's left-to-right conditional (``reduce_logits``), scored along the
    chain (``_path_log_p``); rows that close with </s> take r = s − 1 and score the REDUCEs and </s>."""
    W = state.width
    left, outside = (v if g.every else v.index_select(0, g.index) for v in (state.left, state.outside))
    logits = state.crf.reduce_logits(g.doc, t, left[:, :W], outside[:, :W], size)
    if drawing is not None:
        # a closing row's logits are all −inf (no word left): any finite row, its draw unused
        logits = torch.where(drawing[:, None], logits, 0.0)
    log_q_all = torch.log_softmax(logits, -1)
    r = inverse_cdf(log_q_all.exp(), u)
    log_q = log_q_all.gather(1, r[:, None]).squeeze(1)
    if drawing is not None:
        r = torch.where(drawing, r, size - 1)
        log_q = torch.where(drawing, log_q, 0.0)
    rows = torch.arange(r.shape[0], device=r.device)
    word = model.word_log_probs(model.dropout(chain.context[rows, r]), (size - r == 1) & (t >= 1), target)
    reduces = _closing(chain, r)
    shifted = reduces + chain.shift_lp[rows, r]
    if drawing is not None:
        shifted = torch.where(drawing, shifted, reduces)
    return r, shifted + word, log_q


def _apply(st: Stacks, index: torch.Tensor, chain: ReduceChain, size: torch.Tensor, r: torch.Tensor) -> None:
    """``stepwise._apply`` on the rows ``index`` without reading r on the host: a row with r = 0 writes the scratch
    slots."""
    W = st.elem_h.shape[1] - 1
    rows = torch.arange(r.shape[0], device=r.device)
    i = (r - 1).clamp(min=0)
    pos = torch.where(r >= 1, size - r - 1, W)
    st.elem_h[index, pos], st.elem_c[index, pos] = chain.elem_h[rows, i], chain.elem_c[rows, i]
    st.state_h[index, pos + 1], st.state_c[index, pos + 1] = chain.state_h[rows, i], chain.state_c[rows, i]


def _shift(model, state: RNNGDocumentBatch, g: Group, pos: torch.Tensor, word_row, t: int, drawing) -> None:
    """``stepwise._shift`` of word t on the rows of g, whose stacks hold ``pos`` [n] elements after the REDUCEs;
    rows that close with </s> (``drawing`` false) write the scratch slots."""
    st, index, W = state.stacks, g.index, state.width
    word = state.emb.index_select(0, word_row)
    h, c = model.stack_lstm(word, st.state_h[index, pos], st.state_c[index, pos])
    at = pos if drawing is None else torch.where(drawing, pos, W)
    st.elem_h[index, at], st.elem_c[index, at] = word, torch.zeros_like(word)
    st.state_h[index, at + 1], st.state_c[index, at + 1] = h, c
    if state.crf is not None:
        if t:
            below = (pos - 1).clamp(min=0)
            pushed = state.crf.push(g.doc, t, state.left[index, below], state.outside[index, below])
        else:
            pushed = state.crf.first.index_select(0, g.doc)
        state.outside[index, at] = pushed
        state.left[index, at] = t
    if g.every:
        st.size = pos + 1
    else:
        st.size = st.size.index_copy(0, index, pos + 1)


def _close(model, state: RNNGDocumentBatch, g: Group, t: int) -> torch.Tensor:
    """``stepwise._close`` after the shift of the last word t of the sentences of g (without </s>): log p of their
    s − 1 REDUCEs [n] (a stack holds at most t + 1 elements; the stacks are not needed after)."""
    st = state.stacks
    size = st.size if g.every else st.size.index_select(0, g.index)
    return _closing(reduce_chain(model, st, t, g.index, size), size - 1)


def reorder_documents(state: RNNGDocumentBatch, ancestors: torch.Tensor) -> RNNGDocumentBatch:
    """Particle k takes the stacks (and, peeking, the left edges and outside vectors) of particle ancestors[k] (each
    within its own sentence's segment)."""
    a = ancestors.to(state.stacks.size.device)
    state.stacks = state.stacks.select(a)
    if state.crf is not None:
        state.left, state.outside = state.left.index_select(0, a), state.outside.index_select(0, a)
    return state
