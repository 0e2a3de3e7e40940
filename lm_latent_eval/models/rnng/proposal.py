"""q(z | x): a tree CRF whose span scores come from a bidirectional LSTM over the whole sentence (as URNNG's
inference network, Kim et al. 2019).

The encoder reads ``<s> w_1 .. w_T </s>`` (its own embedding); with forward states f_p and backward states b_p at
padded positions p, the span of words i..j (0-based) has features [f_{j+1} − f_i ; b_{i+1} − b_{j+2}] and score
s_ij = MLP(features). q_τ(z | x) ∝ exp(Σ_{(i,j) ∈ z} s_ij / τ) over binary trees (``tree_crf.py``): the temperature
divides every span score, ``sample`` draws exactly from q_τ (top-down, all particles at once) and returns its exact
log q_τ, ``beam`` returns the k best trees under q (τ = 1). q always reads the whole sentence: it has no
no-peeking variant, and ``peek=False`` is an error. A trailing ``</s>`` in x (sentence end counted) is not part of
the tree and is ignored by q.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..encoder_cache import DocumentCache
from .latents import actions_from_spans, check_actions, is_tree, spans_from_actions
from .tree_crf import inside, kbest_trees, log_partition, sample_trees, tree_scores

NO_PEEKING = (
    "the RNNG proposal (a tree CRF over the whole sentence) always reads all of x: it has no "
    "no-peeking variant; use peek=true"
)


class TreeCRFProposal(nn.Module):
    """q_τ(z | x) = exp(Σ_{(i,j) ∈ z} s_ij / τ − log Z_τ) with s from a BiLSTM span encoder."""

    always_peeks = True  # no no-peeking variant: sweeps report peeking rows only

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

    def train(self, mode: bool = True):
        self._doc_cache.clear()
        return super().train(mode)

    # --- span scores ---------------------------------------------------------------------------------------------
    def words(self, x: torch.Tensor) -> torch.Tensor:
        """The words of x [T] without a trailing </s>: [T_w]; an error for ids outside the vocabulary or inner </s>."""
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype != torch.long:
            raise ValueError(f"x must be a LongTensor [T], got {getattr(x, 'shape', type(x))}")
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.vocab_size):
            raise ValueError(f"x holds ids outside [0, {self.vocab_size}); use model.tokenize(text)")
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
        states, _ = self.encoder(self.dropout(self.embedding(padded)))  # [B, T + 2, 2H]
        fwd, bwd = states[..., : self.hidden_size], states[..., self.hidden_size :]
        # span (i, j): f_{j+1} − f_i and b_{i+1} − b_{j+2}
        fwd_diff = fwd[:, None, 1 : T + 1] - fwd[:, :T, None]  # [B, i, j]
        bwd_diff = bwd[:, 1 : T + 1, None] - bwd[:, None, 2 : T + 2]
        return self.span_mlp(self.dropout(torch.cat([fwd_diff, bwd_diff], -1))).squeeze(-1)

    def span_scores(self, x: torch.Tensor) -> torch.Tensor:
        """s [T_w, T_w] for one sentence x [T]; computed once per sentence in evaluation (no grad)."""
        w = self.words(x)
        return self._doc_cache.get(self, w, lambda: self.span_scores_batch(w.unsqueeze(0))[0])

    @staticmethod
    def _check(temperature: float, peek: bool) -> None:
        if not peek:
            raise ValueError(NO_PEEKING)
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")

    # --- the contract -----------------------------------------------------------------------------------------------
    def log_prob(
        self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True
    ) -> torch.Tensor:
        """log q_τ(z_k | x) for K trees: float64 [K] (−inf for a sequence that is not a tree); differentiable."""
        self._check(temperature, peek)
        w = self.words(x)
        T = w.numel()
        z = check_actions(z.to(w.device), T)
        if T == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64, device=w.device)
        s = self.span_scores(x) / temperature
        valid = is_tree(z, T)
        log_q = tree_scores(s, spans_from_actions(z, T)) - log_partition(s.unsqueeze(0))[0]
        return log_q.masked_fill(~valid, float("-inf"))

    @torch.no_grad()
    def sample(
        self,
        x: torch.Tensor,
        num_samples: int,
        temperature: float = 1.0,
        peek: bool = True,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K trees z_k ~ q_τ(z | x), drawn all at once: (actions [K, 2T − 1], log q_τ(z_k | x) float64 [K])."""
        self._check(temperature, peek)
        w = self.words(x)
        T = w.numel()
        if T == 0:
            return (
                torch.zeros(num_samples, 0, dtype=torch.long, device=w.device),
                torch.zeros(num_samples, dtype=torch.float64, device=w.device),
            )
        beta = inside((self.span_scores(x) / temperature).unsqueeze(0))[0]
        spans, log_q = sample_trees(beta, num_samples, generator)
        return actions_from_spans(spans), log_q

    @torch.no_grad()
    def beam(self, x: torch.Tensor, beam_size: int) -> torch.Tensor:
        """The min(k, Catalan(T − 1)) most probable trees under q (τ = 1), best first: actions [k', 2T − 1]."""
        if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size <= 0:
            raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
        w = self.words(x)
        if w.numel() == 0:
            return torch.zeros(1, 0, dtype=torch.long, device=w.device)
        spans, _ = kbest_trees(self.span_scores(x), beam_size)
        return actions_from_spans(spans)
