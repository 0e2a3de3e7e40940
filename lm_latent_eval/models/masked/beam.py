"""Beam search over reveal orders: the k partial orders of highest log p(x_{σ_≤t}, σ_≤t) after every step.

A partial order's score is Σ_{s ≤ t} log π(σ_s | S_{s−1}) + log p_θ(x_{σ_s} | S_{s−1}); each step extends every kept
prefix by every masked position and keeps the best k. Σ_{σ in the beam} p(x, σ) ≤ p(x) (a strict lower bound,
``estimator=beam``), equal once k ≥ T! (every prefix kept). Prefixes that reveal the same set share one network row.
"""

from __future__ import annotations

import torch

from .conditionals import step_scores


@torch.no_grad()
def beam_orders(model, x: torch.Tensor, beam_size: int) -> torch.Tensor:
    """Up to ``beam_size`` distinct complete orders [k', T], best (highest log p(x, σ)) first; [1, 0] for T = 0.

    Parameters
    ----------
    model : MaskedOrderLM
        The masked LM.
    x : torch.Tensor
        The text, LongTensor [T] (checked by the caller).
    beam_size : int
        k, the prefixes kept after every step.

    Returns
    -------
    torch.Tensor
        LongTensor [k', T], k' = min(k, the orders with p(x, σ) > 0).

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model = tiny_masked_lm(seed=0)
    >>> x = torch.tensor([2, 3, 4])
    >>> beam = beam_orders(model, x, 3)
    >>> beam.shape, bool((model.log_joint(x, beam).diff() <= 0).all())
    (torch.Size([3, 3]), True)
    """
    T = x.numel()
    order = torch.zeros(1, 0, dtype=torch.long, device=x.device)
    revealed = torch.zeros(1, T, dtype=torch.bool, device=x.device)
    score = torch.zeros(1, dtype=torch.float64, device=x.device)
    for _ in range(T):
        candidates = (score[:, None] + step_scores(model, x, revealed).log_joint).reshape(-1)
        keep = min(beam_size, int(torch.isfinite(candidates).sum()))
        score, flat = candidates.topk(keep)
        parent, position = flat // T, flat % T
        order = torch.cat([order[parent], position[:, None]], 1)
        revealed = revealed[parent].clone()
        revealed[torch.arange(keep, device=x.device), position] = True
    return order
