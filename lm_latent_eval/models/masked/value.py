"""The look-ahead ψ(S) of the masked LM's SMC: a guess of V(S), how likely the masked tokens are given those revealed.

SMC over orders weighs a particle that revealed the set S by p(x_S, σ_≤t) ψ(S). The ideal ψ is the value

    V(S) = p(x_M | x_S) = Σ_{i ∈ M} π(i | S) p_θ(x_i | S) V(S ∪ {i}),   V(all positions) = 1,   M = the masked set,

(the Bellman identity of the order latent; ``exact.exact_log_values`` computes it for every S of a short text): with
ψ = V every particle's weight after step t has the same expectation, and the orders that carry p(x) are not resampled
away. Two guesses from the network's rows:

- the mean field, log ψ(S) = Σ_{j ∈ M} ℓ_j(S) with ℓ_j(S) = log p_θ(x_j | S): each masked token as if revealed
  next; it ignores that later tokens are read in more context, so it prefers orders that revealed easy tokens first;
- a value head (``ValueHead``), log ψ(S) = Σ_{j ∈ M} [ℓ_j(S) + g_φ(ℓ_j(S), λ_j, |M| / T, log |M|)], λ_j =
  log p_θ(x_j | x_−j) the token's pseudo-likelihood (its conditional given every other token: T network rows per
  text, once), g_φ a small network fitted to exact log V(S) of short texts (``fit_value_head``): how far each masked
  token's share moves from its conditional now toward its conditional in full context, given how much is masked.

The model's ``value_head`` (None: the mean field) decides; any ψ leaves SMC unbiased (it telescopes to ψ(∅) = 1 and
ψ(all) = 1), so a poor ψ costs variance, never the expectation. A text the network reads in windows keeps the mean
field.
"""

from __future__ import annotations

import torch
from torch import nn

from .conditionals import step_scores

# the head's inputs per masked position: ℓ_j(S), |M| / T, log |M|, λ_j, λ_j − ℓ_j(S)
FEATURES = 5


class ValueHead(nn.Module):
    """g_φ of the module docstring: an MLP from each masked position's ``FEATURES`` numbers to its correction.

    Parameters
    ----------
    width : int
        Hidden units of its two hidden layers.

    Examples
    --------
    >>> head, inf = ValueHead(width=8), float("inf")
    >>> log_token = torch.tensor([[-1.0, -2.0, -inf], [-1.5, -inf, -inf]], dtype=torch.float64)
    >>> revealed = torch.tensor([[False, False, True], [False, True, True]])
    >>> head(log_token, torch.tensor([-0.5, -1.0, -0.2], dtype=torch.float64), revealed).shape
    torch.Size([2])
    """

    def __init__(self, width: int = 64):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(FEATURES, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1)
        )

    def forward(self, log_token: torch.Tensor, pseudo: torch.Tensor, revealed: torch.Tensor) -> torch.Tensor:
        """log ψ(S) [N], float64, for the rows ``log_token`` [N, T] (ℓ_j(S), −inf at revealed j), the pseudo
        log-likelihoods ``pseudo`` [T] (or [N, T]) and the sets ``revealed`` [N, T]."""
        masked = ~revealed
        own = log_token.masked_fill(revealed, 0.0)
        count = masked.sum(1, keepdim=True).to(own.dtype).expand_as(own)
        pseudo = pseudo.expand_as(own)
        features = torch.stack(
            [own, count / own.shape[1], count.clamp(min=1).log(), pseudo, pseudo - own], -1
        )
        weight = self.mlp[0].weight
        g = self.mlp(features.to(weight.dtype)).squeeze(-1).to(own.dtype)
        return ((own + g) * masked).sum(-1)


def pseudo_log_likelihoods(model, x: torch.Tensor) -> torch.Tensor:
    """λ_j = log p_θ(x_j | x_−j) of every position j [T], float64: T network rows, each revealing all but one token.

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model = tiny_masked_lm(seed=0)
    >>> pseudo_log_likelihoods(model, torch.tensor([2, 3, 4])).shape
    torch.Size([3])
    """
    others = ~torch.eye(x.numel(), dtype=torch.bool, device=x.device)
    return step_scores(model, x, others).log_token.diagonal().clone()


def uses_value_head(model, length: int) -> bool:
    """Whether ψ is the model's value head for a text of ``length`` tokens (one the network reads whole)."""
    from .windows import window_size

    return getattr(model, "value_head", None) is not None and window_size(model, length) is None


def log_lookahead(model, log_token: torch.Tensor, revealed: torch.Tensor, pseudo: torch.Tensor | None):
    """log ψ(S) [N] of the sets ``revealed`` [N, T] from their rows ``log_token`` [N, T]: the value head where
    ``pseudo`` (λ [T] or [N, T], from ``pseudo_log_likelihoods``) is given, else the mean field. The head runs in
    blocks of ``block_tokens // T`` rows, as the network does, so that a row's ψ does not depend on how many rows
    share its call (texts side by side equal each text alone, bit for bit)."""
    if pseudo is None:
        return log_token.masked_fill(revealed, 0.0).sum(-1)
    N, T = revealed.shape
    pseudo = pseudo.expand(N, T)
    step = max(1, model.block_tokens // max(T, 1))
    with torch.no_grad():
        return torch.cat(
            [
                model.value_head(log_token[s : s + step], pseudo[s : s + step], revealed[s : s + step])
                for s in range(0, N, step)
            ]
        )


def sampled_sets(member: torch.Tensor, size: int, count: int, generator) -> torch.Tensor:
    """Indices of ``count`` sets (with replacement) among the rows of ``member`` [2^n, n] with ``size`` members."""
    candidates = torch.nonzero(member.sum(1) == size).squeeze(1)
    return candidates[torch.randint(candidates.numel(), (count,), generator=generator)]


def fit_value_head(
    model, texts: list[torch.Tensor], steps: int = 2000, seed: int = 0, progress=None
) -> list[float]:
    """Fit ``model.value_head`` to the exact log V(S) of ``texts`` (each short enough for 2^n sets).

    Each step draws 8 groups, each one text and one size |S| = s with 32 sets of that size, and minimises the
    squared error of log ψ(S) − log V(S) less its mean over the group: particles of one step hold sets of one size,
    and a constant per size leaves the weights' ratios, hence SMC, unchanged. Adam, learning rate 1e-3.

    Returns
    -------
    list of float
        The loss of every step.
    """
    from .exact import exact_log_values

    head = model.value_head
    tables = [(x, pseudo_log_likelihoods(model, x), *exact_log_values(model, x)) for x in texts]
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-3)
    losses = []
    head.train()
    for _ in range(steps):
        loss = 0.0
        for _ in range(8):
            x, pseudo, log_v, member = tables[int(torch.randint(len(tables), (1,), generator=generator))]
            sets = sampled_sets(
                member, int(torch.randint(x.numel(), (1,), generator=generator)), 32, generator
            )
            revealed = member[sets]
            residual = head(step_scores(model, x, revealed).log_token, pseudo, revealed) - log_v[sets]
            loss = loss + ((residual - residual.mean()) ** 2).mean() / 8
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress.update(1)
    head.eval()
    return losses


__all__ = ["ValueHead", "fit_value_head", "log_lookahead", "pseudo_log_likelihoods", "uses_value_head"]
