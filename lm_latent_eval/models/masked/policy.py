"""Order policies π(i | S) of a masked LM's one-position-per-step sampler: which masked position it reveals next.

S is the set of revealed positions; the sampler reveals one masked position i ∉ S per step.

- ``uniform``: π(i | S) = 1 / (T − |S|), so p(σ) = 1 / T! (the mixture of all orders; the default).
- ``confidence``: π(i | S) = softmax over the masked positions of c_i / τ_π, with c_i = max_v log p_θ(v | S) at
  position i (LLaDA's and Dream's max-probability unmasking at a temperature). It depends on S (and the tokens
  revealed there), never on the tokens still masked. τ_π = 0 is the deterministic limit: the first masked position of
  highest confidence, with probability 1 (DUEL's case).
"""

from __future__ import annotations

import math

import torch

POLICIES = ("uniform", "confidence")


def check_policy(policy: str, temperature: float) -> None:
    """Refuse an unknown policy or a policy temperature that is not a finite number ≥ 0.

    Parameters
    ----------
    policy : str
        One of ``POLICIES``.
    temperature : float
        τ_π of the confidence policy (0: deterministic).

    Raises
    ------
    ValueError
        Naming the bad argument.

    Examples
    --------
    >>> check_policy("confidence", 0.0)
    >>> check_policy("random", 1.0)
    Traceback (most recent call last):
    ...
    ValueError: policy must be one of ('uniform', 'confidence'), got 'random'
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    valid = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not (valid and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"policy_temperature must be a finite number >= 0, got {temperature!r}")


def order_log_probs(
    policy: str, confidence: torch.Tensor, revealed: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log π(i | S) for every position of N states: float64 [N, T], −inf at the revealed positions.

    Parameters
    ----------
    policy : str
        ``uniform`` or ``confidence``.
    confidence : torch.Tensor or None
        c_i = max_v log p_θ(v | S) [N, T] (read by the confidence policy only; None for ``uniform``).
    revealed : torch.Tensor
        BoolTensor [N, T]: the positions in S.
    temperature : float
        τ_π of the confidence policy; 0 puts probability 1 on the first masked position of highest confidence.

    Returns
    -------
    torch.Tensor
        float64 [N, T]; a row whose positions are all revealed (no step left) is −inf everywhere.

    Examples
    --------
    >>> revealed = torch.tensor([[False, True, False, False]])
    >>> order_log_probs("uniform", None, revealed).exp()
    tensor([[0.3333, 0.0000, 0.3333, 0.3333]], dtype=torch.float64)
    >>> c = torch.tensor([[-1.0, -0.1, -0.5, -0.5]], dtype=torch.float64)
    >>> order_log_probs("confidence", c, revealed, 0.0).exp()
    tensor([[0., 0., 1., 0.]], dtype=torch.float64)
    >>> order_log_probs("confidence", c, revealed, 1.0).exp().sum().item()
    1.0
    """
    if policy == "uniform":
        logits = torch.zeros(revealed.shape, dtype=torch.float64, device=revealed.device)
    elif temperature == 0:
        masked_conf = confidence.to(torch.float64).masked_fill(revealed, -math.inf)
        best = masked_conf.argmax(-1, keepdim=True)
        logits = torch.full_like(masked_conf, -math.inf).scatter_(-1, best, 0.0)
    else:
        logits = confidence.to(torch.float64) / temperature
    log_pi = torch.log_softmax(logits.masked_fill(revealed, -math.inf), -1)
    return log_pi.masked_fill(revealed, -math.inf)
