"""q(z | x): a tree CRF whose span scores come from a bidirectional LSTM over the whole sentence (as URNNG's
inference network, Kim et al. 2019), and, with ``peek=False``, the generative model's own choice of REDUCEs
before each word (``stepwise.py``).

The encoder reads ``<s> w_1 .. w_T </s>`` (its own embedding); with forward states f_p and backward states b_p at
padded positions p, the span of words i..j (0-based) has features [f_{j+1} − f_i ; b_{i+1} − b_{j+2}] and score
s_ij = MLP(features). q_τ(z | x) ∝ exp(Σ_{(i,j) ∈ z} s_ij / τ) over binary trees (``tree_crf.py``): the temperature
divides every span score, ``sample`` draws exactly from q_τ (top-down, all particles at once) and returns its exact
log q_τ, ``beam`` returns the k best trees under q (τ = 1); the CRF reads the whole sentence.

``peek=False`` is the RNNG's no-peeking proposal, which reads x_≤t when it chooses the REDUCEs before word t: q_τ(r_t)
∝ (p(REDUCE^{r_t} SHIFT, w_t | x_<t, z_<t))^{1/τ}, drawn word by word by the model's stepwise kernel (the SMC
proposal of ``peek=false``, draw for draw). A trailing ``</s>`` in x (sentence end counted) is not part of the tree and
is ignored by the CRF.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from ...protocol import CheckedProposal, check_temperature
from ..encoder_cache import DocumentCache
from ..vocabulary import check_word_ids
from . import stepwise
from .latents import SHIFT, actions_from_spans, check_actions, is_tree, right_branching, spans_from_actions
from .left_to_right import LeftToRightCRF
from .tree_crf import inside, kbest_trees, log_partition, sample_trees, tree_scores

UNBOUND = (
    "peek=false draws from the generative RNNG's own action distribution, but this proposal belongs to no RNNG "
    "(build it through RNNG(...), which binds it)"
)


class TreeCRFProposal(CheckedProposal, nn.Module):
    """q_τ(z | x) = exp(Σ_{(i,j) ∈ z} s_ij / τ − log Z_τ) with s from a BiLSTM span encoder."""

    def __init__(
        self, vocab_size: int, bos_id: int, eos_id: int, dim: int, hidden_size: int, dropout: float = 0.0
    ):
        super().__init__()
        self.vocab_size, self.bos_id, self.eos_id = vocab_size, bos_id, eos_id
        self.embedding = nn.Embedding(vocab_size, dim)
        self.encoder = nn.LSTM(dim, hidden_size, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.span_mlp = nn.Sequential(
            nn.Linear(2 * hidden_size, 2 * hidden_size),
            nn.ReLU(),
            nn.LayerNorm(2 * hidden_size),
            nn.Linear(2 * hidden_size, 1),
        )
        self.hidden_size = hidden_size
        self._doc_cache = DocumentCache()
        self._crf_cache = DocumentCache()
        self._generative = None

    def bind(self, model) -> None:
        """The RNNG whose action distribution ``peek=False`` uses (a weak reference: no module cycle, no state)."""
        self._generative = weakref.ref(model)

    def generative(self):
        """The bound RNNG; a clear error when there is none or it no longer owns this proposal (a copy)."""
        model = self._generative() if self._generative is not None else None
        if model is None or model.proposal is not self:
            raise ValueError(UNBOUND)
        return model

    def train(self, mode: bool = True):
        self._doc_cache.clear()
        self._crf_cache.clear()
        return super().train(mode)

    # --- span scores ---------------------------------------------------------------------------------------------
    def words(self, x: torch.Tensor) -> torch.Tensor:
        """The words of x [T] without a trailing </s>: [T_w]; an error for ids outside the vocabulary or inner </s>."""
        check_word_ids(x, self.vocab_size)
        x = x.to(self.embedding.weight.device)
        if x.numel() and int(x[-1]) == self.eos_id:
            x = x[:-1]
        if (x == self.eos_id).any() or (x == self.bos_id).any():
            raise ValueError("x holds </s> or <s> inside the sentence; use model.tokenize(text)")
        return x

    def span_scores_batch(self, words: torch.Tensor) -> torch.Tensor:
        """s_ij for rows of words [B, T] (T ≥ 1): [B, T, T] (entries below the diagonal are unused)."""
        B, T = words.shape
        padded = torch.cat(
            [words.new_full((B, 1), self.bos_id), words, words.new_full((B, 1), self.eos_id)], 1
        )
        # [B, T + 2, 2H]
        states, _ = self.encoder(self.dropout(self.embedding(padded)))
        fwd, bwd = states[..., : self.hidden_size], states[..., self.hidden_size :]
        # span (i, j): f_{j+1} − f_i and b_{i+1} − b_{j+2}
        # [B, i, j]
        fwd_diff = fwd[:, None, 1 : T + 1] - fwd[:, :T, None]
        bwd_diff = bwd[:, 1 : T + 1, None] - bwd[:, None, 2 : T + 2]
        return self.span_mlp(self.dropout(torch.cat([fwd_diff, bwd_diff], -1))).squeeze(-1)

    def span_scores(self, x: torch.Tensor) -> torch.Tensor:
        """s [T_w, T_w] for one sentence x [T]; computed once per sentence in evaluation (no grad)."""
        w = self.words(x)
        return self._doc_cache.get(self, w, lambda: self.span_scores_batch(w.unsqueeze(0))[0])

    def left_to_right(self, x: torch.Tensor, temperature: float) -> LeftToRightCRF:
        """The CRF's left-to-right factorization at temperature τ (SMC's peeking proposal, ``stepwise.py``); built
        once per sentence and τ in evaluation, for every block of particles."""
        return self._crf_cache.get(
            self,
            self.words(x),
            lambda: LeftToRightCRF.build(self.span_scores(x), temperature),
            (float(temperature),),
        )

    # --- the contract -----------------------------------------------------------------------------------------------
    def log_prob(
        self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True
    ) -> torch.Tensor:
        """log q_τ(z_k | x) for K trees: float64 [K] (−inf for a sequence that is not a tree); differentiable with
        peeking (the CRF)."""
        check_temperature(temperature)
        w = self.words(x)
        T = w.numel()
        z = check_actions(z.to(w.device), T)
        if T == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64, device=w.device)
        if not peek:
            return self._no_peek_log_prob(x, z, temperature)
        s = self.span_scores(x) / temperature
        valid = is_tree(z, T)
        log_q = tree_scores(s, spans_from_actions(z, T)) - log_partition(s.unsqueeze(0))[0]
        return log_q.masked_fill(~valid, float("-inf"))

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """K trees z_k ~ q_τ(z | x): (actions [K, 2T − 1], log q_τ(z_k | x) float64 [K]); with peeking drawn from the
        CRF all at once, without it word by word."""
        w = self.words(x)
        T = w.numel()
        if T == 0:
            return (
                torch.zeros(num_samples, 0, dtype=torch.long, device=w.device),
                torch.zeros(num_samples, dtype=torch.float64, device=w.device),
            )
        if not peek:
            return self._no_peek_sample(x, num_samples, temperature, generator)
        beta = inside((self.span_scores(x) / temperature).unsqueeze(0))[0]
        spans, log_q = sample_trees(beta, num_samples, generator)
        return actions_from_spans(spans), log_q

    @torch.no_grad()
    def _no_peek_sample(self, x, num_samples, temperature, generator):
        """The no-peeking proposal's draws: the stepwise kernel run without resampling (same random stream as SMC)."""
        model = self.generative()
        state = stepwise.plain_particles(model, x, num_samples, temperature, peek=False)
        log_q = torch.zeros(num_samples, dtype=torch.float64, device=x.device)
        for t in range(x.numel()):
            state, _, step_q = stepwise.advance(
                model, state, t, stepwise.uniforms(num_samples, generator, x.device)
            )
            log_q += step_q
        return model.smc_latents(state), log_q

    @torch.no_grad()
    def _no_peek_log_prob(self, x, z, temperature):
        """log q_τ(z | x) of the no-peeking proposal for trees z [K, 2T − 1] (−inf for non-trees): the stepwise
        kernel forced along each tree."""
        model = self.generative()
        T = self.words(x).numel()
        valid = is_tree(z, T)
        trees = torch.where(valid[:, None], z, right_branching(T, 1, z.device))
        # position of each SHIFT
        shifts = (trees == SHIFT).nonzero()[:, 1].view(-1, T)
        # r_t before word t
        reduces = torch.diff(shifts, dim=1, prepend=shifts.new_full((z.shape[0], 1), -1)) - 1
        state = stepwise.plain_particles(model, x, z.shape[0], temperature, peek=False)
        log_q = torch.zeros(z.shape[0], dtype=torch.float64, device=z.device)
        for t in range(x.numel()):
            state, _, step_q = stepwise.advance(model, state, t, None, reduces[:, t] if t < T else None)
            log_q += step_q
        return log_q.masked_fill(~valid, float("-inf"))

    def _beam(self, x: torch.Tensor, beam_size: int) -> torch.Tensor:
        """The min(k, Catalan(T − 1)) most probable trees under q (τ = 1), best first: actions [k', 2T − 1]."""
        w = self.words(x)
        if w.numel() == 0:
            return torch.zeros(1, 0, dtype=torch.long, device=w.device)
        spans, _ = kbest_trees(self.span_scores(x), beam_size)
        return actions_from_spans(spans)
