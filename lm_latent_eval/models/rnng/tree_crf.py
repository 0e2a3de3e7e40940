"""A CRF over unlabeled binary trees: q(z) ∝ exp(Σ_{(i,j) ∈ z} s_ij), with the inside algorithm, exact top-down
sampling and exact k-best trees.

Span scores s [T, T] (only i ≤ j is read). Inside: β_ii = s_ii, β_ij = s_ij + logsumexp_{i ≤ k < j} (β_ik + β_{k+1,j}),
log Z = β_{0,T−1}. Sampling draws the split of each constituent (i, j) with probability
exp(β_ik + β_{k+1,j}) / Σ_k' exp(β_ik' + β_{k'+1,j}), top-down from the root: the product of these is exactly
q(z) = exp(Σ s − log Z). k-best keeps the k best sub-trees of every span (their scores are additive), so the k best
trees of a span are among the pairs of k-best sub-trees of its two children over all splits (Huang & Chiang 2005).
All math in float64.
"""

from __future__ import annotations

import torch


def _inside_columns(scores: torch.Tensor) -> list[torch.Tensor]:
    """cols[w][:, i] = β(i, i + w) for w = 0..T − 1, from span scores [B, T, T] (float64, differentiable)."""
    T = scores.shape[-1]
    scores = scores.double()
    cols = [torch.diagonal(scores, 0, 1, 2)]
    for w in range(1, T):
        n = T - w
        parts = torch.stack([cols[m][:, :n] + cols[w - 1 - m][:, m + 1 : m + 1 + n] for m in range(w)], -1)
        cols.append(torch.diagonal(scores, w, 1, 2) + torch.logsumexp(parts, -1))
    return cols


def inside(scores: torch.Tensor) -> torch.Tensor:
    """β [B, T, T] (−inf below the diagonal) from span scores [B, T, T]; log Z = β[:, 0, T − 1]."""
    T = scores.shape[-1]
    upper = sum(torch.diag_embed(col, offset=w) for w, col in enumerate(_inside_columns(scores)))
    triu = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu()
    return upper.masked_fill(~triu, float("-inf"))


def log_partition(scores: torch.Tensor) -> torch.Tensor:
    """log Z = log Σ_z exp(Σ_{(i,j) ∈ z} s_ij) for span scores [B, T, T]: float64 [B]; differentiable."""
    return _inside_columns(scores)[-1][:, 0]


def tree_scores(scores: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """Σ_{(i,j) ∈ z} s_ij for span indicators [K, T, T] and scores [T, T] or [K, T, T]: float64 [K]."""
    return (
        (scores.double() * spans).sum((-1, -2))
        if spans.numel()
        else scores.new_zeros(spans.shape[0]).double()
    )


@torch.no_grad()
def sample_trees(
    beta: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """K trees drawn top-down from the inside chart β [T, T] of one sentence: (spans [K, T, T], log q [K]).

    Each of the T − 1 steps pops one pending constituent per particle (all particles at once) and draws its split.
    """
    T = beta.shape[-1]
    K, dev = num_samples, beta.device
    spans = torch.zeros(K, T, T, dtype=torch.bool, device=dev)
    idx = torch.arange(T, device=dev)
    spans[:, idx, idx] = True
    log_q = torch.zeros(K, dtype=torch.float64, device=dev)
    if T <= 1:
        return spans, log_q
    rows = torch.arange(K, device=dev)
    stack_i = torch.zeros(K, T, dtype=torch.long, device=dev)
    stack_j = torch.full((K, T), T - 1, dtype=torch.long, device=dev)
    # one pending constituent: the root (0, T − 1)
    top = torch.ones(K, dtype=torch.long, device=dev)
    split_idx = torch.arange(T - 1, device=dev)
    for _ in range(T - 1):
        top = top - 1
        i, j = stack_i[rows, top], stack_j[rows, top]
        spans[rows, i, j] = True
        # β(i, k) + β(k + 1, j)
        logits = beta[i][:, : T - 1] + beta[:, j].t()[:, 1:].reshape(K, T - 1)
        allowed = (split_idx >= i[:, None]) & (split_idx < j[:, None])
        logits = logits.masked_fill(~allowed, float("-inf"))
        logp = logits - torch.logsumexp(logits, 1, keepdim=True)
        # float64 probabilities
        k = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        log_q += logp[rows, k]
        # push the children that still need a split
        for lo, hi in ((k + 1, j), (i, k)):
            push = hi > lo
            stack_i[rows, top.clamp(max=T - 1)] = torch.where(push, lo, stack_i[rows, top.clamp(max=T - 1)])
            stack_j[rows, top.clamp(max=T - 1)] = torch.where(push, hi, stack_j[rows, top.clamp(max=T - 1)])
            top = top + push.long()
    return spans, log_q


@torch.no_grad()
def kbest_trees(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The min(k, Catalan(T − 1)) highest-scoring trees under span scores [T, T]: (spans [k', T, T], scores [k'])."""
    T = scores.shape[-1]
    s = scores.double()
    dev = s.device
    # best[w]: scores [T − w, k] of the k best trees of span (i, i + w); back[w]: (split m, left rank, right rank)
    leaf = torch.full((T, k), float("-inf"), dtype=torch.float64, device=dev)
    leaf[:, 0] = torch.diagonal(s)
    best, back = [leaf], [None]
    for w in range(1, T):
        n = T - w
        # [n, w, k]: span (i, i + m)
        left = torch.stack([best[m][:n] for m in range(w)], 1)
        # span (i + m + 1, i + w)
        right = torch.stack([best[w - 1 - m][m + 1 : m + 1 + n] for m in range(w)], 1)
        # [n, w·k·k]
        cand = (left[..., :, None] + right[..., None, :]).reshape(n, -1)
        top = torch.topk(cand, min(k, cand.shape[1]), 1)
        vals = torch.full((n, k), float("-inf"), dtype=torch.float64, device=dev)
        vals[:, : top.values.shape[1]] = top.values
        best.append(vals + torch.diagonal(s, w)[:, None])
        flat = torch.zeros(n, k, dtype=torch.long, device=dev)
        flat[:, : top.indices.shape[1]] = top.indices
        # [n, k, 3]
        back.append(torch.stack([flat // (k * k), flat // k % k, flat % k], -1))
    root = best[T - 1][0]
    found = int(torch.isfinite(root).sum())
    back_cpu = [None] + [b.tolist() for b in back[1:]]
    spans = torch.zeros(found, T, T, dtype=torch.bool)

    def mark(r: int, i: int, w: int, rank: int) -> None:
        spans[r, i, i + w] = True
        if w:
            m, a, b = back_cpu[w][i][rank]
            mark(r, i, m, a)
            mark(r, i + m + 1, w - 1 - m, b)

    for r in range(found):
        mark(r, 0, T - 1, r)
    return spans.to(dev), root[:found]
