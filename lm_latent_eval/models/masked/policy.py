"""Order policies π(i | S) of a masked LM's one-position-per-step sampler: which masked position it reveals next.

S is the set of revealed positions; the sampler reveals one masked position i ∉ S per step. Each policy is one row of
``POLICIES`` (an ``OrderPolicy``): the score it reads at every masked position, whether it is deterministic, and
whether it keeps to blocks. Scores read the network's distribution at S (mask row left out), never the tokens still
masked, so p(x) = Σ_σ p(x, σ) is the probability that the sampler writes x.

- ``uniform``: π(i | S) = 1 / (T − |S|), so p(σ) = 1 / T! (the mixture of all orders; the default).
- ``confidence``: π(i | S) = softmax over the masked positions of c_i / τ_π, c_i = max_v log p_θ(v | S) (LLaDA's and
  Dream's max-probability unmasking at a temperature); τ_π = 0 is ``greedy_confidence``.
- DUEL's deterministic policies (Turok et al. 2026, one position per step): π(i | S) = 1 for the one position they
  pick, so p(x) = p(x | σ*(x)) = Π_t p_θ(x_{σ*_t} | S_{t−1}) along the single order σ*(x) the sampler follows on x: the
  likelihood **of that sampler**, not of the order mixture (``uniform``) and not a bound on it.

  * ``greedy_confidence``: the highest c_i;
  * ``margin``: the highest m_i = log p_θ(v₁ | S) − log p_θ(v₂ | S), the gap between the two most probable tokens
    (DUEL's probability margin, computed on log-probabilities as their code does);
  * ``left_to_right``: the lowest masked position;
  * ``block_greedy_confidence``, ``block_margin``, ``block_left_to_right``: the same within the current block
    [bB, (b + 1)B), b = ⌊|S| / B⌋, B = ``policy_block`` (positions of the text, a conditional view's continuation);
    ``block_left_to_right`` reveals the same order as ``left_to_right``.

Ties (``deterministic_choice``): positions whose score is within ``TIE_ULPS`` units of the network dtype's machine
epsilon (relative to max(1, |best|)) of the best are tied, and the **lowest** of them is revealed. On LLaDA-style
networks every position reads the same all-mask input at the first step, so the first step's confidences are equal
in exact arithmetic and differ only by rounding: the rule makes that step reveal position 0, where ``argmax`` on the
rounded values would pick whichever position rounding favoured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import InputError

# scores within TIE_ULPS machine epsilons of the network dtype (relative to max(1, |best|)) of the best are tied
TIE_ULPS = 64
# B of the block policies unless model_args policy_block is given (LLaDA's and DUEL's block length)
DEFAULT_BLOCK = 32


@dataclass(frozen=True)
class OrderPolicy:
    """One order policy: ``score`` is what it ranks masked positions by (``none``: uniform; ``confidence``: c_i;
    ``margin``: m_i; ``position``: −i), ``deterministic`` whether π puts probability 1 on one position, ``block``
    whether it keeps to the current block, ``sampler`` the figure's label."""

    name: str
    score: str
    deterministic: bool
    block: bool
    sampler: str


POLICIES = {
    p.name: p
    for p in (
        OrderPolicy("uniform", "none", False, False, "the mixture of all orders"),
        OrderPolicy("confidence", "confidence", False, False, "confidence-weighted orders at τ_π"),
        OrderPolicy("greedy_confidence", "confidence", True, False, "DUEL greedy confidence sampler"),
        OrderPolicy("margin", "margin", True, False, "DUEL probability-margin sampler"),
        OrderPolicy("left_to_right", "position", True, False, "DUEL left-to-right sampler"),
        OrderPolicy(
            "block_greedy_confidence", "confidence", True, True, "DUEL block greedy confidence sampler"
        ),
        OrderPolicy("block_margin", "margin", True, True, "DUEL block probability-margin sampler"),
        OrderPolicy("block_left_to_right", "position", True, True, "DUEL block left-to-right sampler"),
    )
}


def is_deterministic(policy: str, temperature: float) -> bool:
    """Whether π puts probability 1 on one position at every step (a DUEL policy, or ``confidence`` at τ_π = 0).

    Examples
    --------
    >>> is_deterministic("margin", 1.0), is_deterministic("confidence", 0.0), is_deterministic("uniform", 0.0)
    (True, True, False)
    """
    row = POLICIES[policy]
    return row.deterministic or (row.name == "confidence" and temperature == 0)


def check_policy(policy: str, temperature: float, block: int = DEFAULT_BLOCK) -> None:
    """Refuse an unknown policy, a policy temperature that is not a finite number ≥ 0, or a block that is not a
    positive integer.

    Raises
    ------
    lm_latent_eval.errors.InputError
        (a ValueError) naming the bad argument (lm-eval's model_args policy, policy_temperature, policy_block).

    Examples
    --------
    >>> check_policy("confidence", 0.0)
    >>> check_policy("random", 1.0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: policy must be one of uniform, confidence, greedy_confidence, margin, left_to_right, block_greedy_confidence, block_margin, block_left_to_right; got 'random'
    """
    if policy not in POLICIES:
        raise InputError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    valid = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not (valid and math.isfinite(temperature) and temperature >= 0):
        raise InputError(
            f"policy_temperature must be a finite number >= 0 (0: deterministic), got {temperature!r}"
        )
    if not (isinstance(block, int) and not isinstance(block, bool) and block >= 1):
        raise InputError(f"policy_block must be a positive integer, got {block!r}")


def position_scores(policy: str, logits: torch.Tensor, log_z: torch.Tensor) -> torch.Tensor:
    """The score the policy ranks positions by, float64 [...], from logits [..., V] (mask row at −inf) and their
    float64 normalizer log_z [...]: c = max_v logit − log_z, m = top-1 − top-2 logit, −position, or 0 (uniform).

    Examples
    --------
    >>> logits = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.2, 0.2]]]))
    >>> position_scores("margin", logits, torch.zeros(1, 2)).exp()
    tensor([[1.6667, 3.0000]], dtype=torch.float64)
    >>> position_scores("left_to_right", logits, torch.zeros(1, 2))
    tensor([[-0., -1.]], dtype=torch.float64)
    """
    kind = POLICIES[policy].score
    if kind == "confidence":
        return logits.amax(-1).double() - log_z
    if kind == "margin":
        top = logits.topk(2, -1).values.double()
        return top[..., 0] - top[..., 1]
    if kind == "position":
        position = torch.arange(logits.shape[-2], device=logits.device, dtype=torch.float64)
        return (-position).expand(logits.shape[:-1])
    return torch.zeros(logits.shape[:-1], dtype=torch.float64, device=logits.device)


def deterministic_choice(score: torch.Tensor, allowed: torch.Tensor, tolerance: float) -> torch.Tensor:
    """The position a deterministic policy reveals in each of N states: LongTensor [N], the lowest allowed position
    whose score is within ``tolerance`` · max(1, |best|) of the best allowed score (ties by position, never by the
    order rounding happens to leave).

    Examples
    --------
    >>> score = torch.tensor([[0.5, 1.0, 1.0 - 1e-9, 1.0]], dtype=torch.float64)
    >>> allowed = torch.tensor([[True, False, True, True]])
    >>> deterministic_choice(score, allowed, 1e-6).tolist(), deterministic_choice(score, allowed, 0.0).tolist()
    ([2], [3])
    """
    masked = score.masked_fill(~allowed, -math.inf)
    best = masked.amax(-1, keepdim=True)
    tied = allowed & (masked >= best - tolerance * best.abs().clamp_min(1.0))
    # the lowest tied position: a unique maximum of (T − i) over the tied positions
    rank = torch.arange(score.shape[-1], 0, -1, device=score.device)
    return (tied * rank).argmax(-1)


def block_positions(revealed: torch.Tensor, block: int) -> torch.Tensor:
    """The positions of the current block [bB, (b + 1)B), b = ⌊|S| / B⌋, of N states: BoolTensor [N, T].

    Examples
    --------
    >>> block_positions(torch.tensor([[True, True, False, False, False]]), 2).int().tolist()
    [[0, 0, 1, 1, 0]]
    """
    current = revealed.sum(-1, keepdim=True) // block
    return torch.arange(revealed.shape[-1], device=revealed.device) // block == current


def order_log_probs(
    policy: str,
    score: torch.Tensor | None,
    revealed: torch.Tensor,
    temperature: float = 1.0,
    block: int = DEFAULT_BLOCK,
    tolerance: float = 0.0,
) -> torch.Tensor:
    """log π(i | S) for every position of N states: float64 [N, T], −inf at the revealed positions.

    Parameters
    ----------
    policy : str
        A name of ``POLICIES``.
    score : torch.Tensor or None
        The policy's score [N, T] (``position_scores``; None for ``uniform``).
    revealed : torch.Tensor
        BoolTensor [N, T]: the positions in S (and any the step may not reveal).
    temperature : float
        τ_π of the confidence policy; 0 makes it ``greedy_confidence``.
    block : int
        B of the block policies.
    tolerance : float
        The tie tolerance of a deterministic policy (``deterministic_choice``).

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
    allowed = ~revealed
    if POLICIES[policy].block:
        in_block = allowed & block_positions(revealed, block)
        # a block with no position the step may reveal (a window boundary inside it): the allowed ones
        allowed = torch.where(in_block.any(-1, keepdim=True), in_block, allowed)
    if is_deterministic(policy, temperature):
        choice = deterministic_choice(score, allowed, tolerance)
        logits = torch.full(revealed.shape, -math.inf, dtype=torch.float64, device=revealed.device)
        logits.scatter_(-1, choice[:, None], 0.0)
        return logits.masked_fill(~allowed, -math.inf)
    if policy == "uniform":
        logits = torch.zeros(revealed.shape, dtype=torch.float64, device=revealed.device)
    else:
        logits = score.to(torch.float64) / temperature
    log_pi = torch.log_softmax(logits.masked_fill(~allowed, -math.inf), -1)
    return log_pi.masked_fill(~allowed, -math.inf)
