"""DUEL's deterministic unmasking policies (Turok et al. 2026): each one's log p(x) is the log-likelihood along the one
order its sampler follows on x, certified against orders and conditionals computed here straight from the network;
exact ties at the first step (every position reads the same all-mask input) go to the lowest position."""

from __future__ import annotations

import math

import pytest
import torch

from lm_latent_eval.models.masked import tiny_masked_lm
from lm_latent_eval.models.masked.exact import deterministic_orders, dp_log_marginal
from lm_latent_eval.models.masked.model import MaskedOrderLM
from lm_latent_eval.models.masked.policy import TIE_ULPS

TEXTS = ["a c", "d d b", "a b c d", "c a d a b", "b d a c c a", "a a b b c c d d"]


def log_probs(model, x: torch.Tensor, revealed: list[int]) -> torch.Tensor:
    """log p_θ(v | x at ``revealed``, the rest masked) [T, V] in float64, the mask row left out, from the network."""
    ids = torch.full_like(x, model.mask_id)
    ids[revealed] = x[revealed]
    with torch.no_grad():
        logits = model.predict(ids[None])[0].double()
    logits[:, model.mask_id] = -math.inf
    return torch.log_softmax(logits, -1)


def reference(model, x: torch.Tensor, rank, block: int | None = None) -> tuple[list[int], float]:
    """The order a sampler picks (``rank(log_probs row, position)``: larger first; ties to the lower position) and
    Σ_t log p_θ(x_{σ_t} | S_{t−1}) along it, one position at a time, in plain Python."""
    T, order, total = x.numel(), [], 0.0
    for _ in range(T):
        lp = log_probs(model, x, order)
        masked = [i for i in range(T) if i not in order]
        if block is not None:
            current = len(order) // block
            masked = [i for i in masked if i // block == current]
        i = max(masked, key=lambda i: (rank(lp[i], i), -i))
        total += float(lp[i, x[i]])
        order.append(i)
    return order, total


RANKS = {
    "greedy_confidence": lambda row, i: float(row.max()),
    "margin": lambda row, i: float(row.topk(2).values[0] - row.topk(2).values[1]),
    "left_to_right": lambda row, i: -i,
}


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("policy", [*RANKS, *(f"block_{name}" for name in RANKS)])
def test_each_policy_scores_the_one_order_its_sampler_follows(policy, text):
    model = tiny_masked_lm(seed=3, policy=policy)
    model.policy_block = 3
    x = model.tokenize(text)
    block = 3 if policy.startswith("block_") else None
    order, total = reference(model, x, RANKS[policy.removeprefix("block_")], block)
    found, log_p = deterministic_orders(model, x)
    assert found.tolist() == order
    assert log_p == pytest.approx(total, abs=1e-12) == model.log_marginal(x)
    if x.numel() <= 6:  # the dynamic program over revealed sets: the same sum
        assert dp_log_marginal(model, x) == pytest.approx(total, abs=1e-9)


def test_left_to_right_is_the_product_of_the_left_to_right_conditionals():
    model = tiny_masked_lm(seed=4, policy="left_to_right")
    x = model.tokenize("c a d a b b")
    expected = sum(float(log_probs(model, x, list(range(t)))[t, x[t]]) for t in range(x.numel()))
    assert model.log_marginal(x) == pytest.approx(expected, abs=1e-12)
    block = tiny_masked_lm(seed=4, policy="block_left_to_right")
    block.policy_block = 2
    assert block.log_marginal(x) == pytest.approx(expected, abs=1e-12)


def test_the_greedy_order_differs_from_the_mixture_and_auto_reads_it_exactly():
    greedy, uniform = tiny_masked_lm(seed=3, policy="greedy_confidence"), tiny_masked_lm(seed=3)
    x = greedy.tokenize("c a d a b")
    assert greedy.exact_marginal_tractable and not uniform.exact_marginal_tractable
    assert abs(greedy.log_marginal(x) - uniform.log_marginal(x)) > 1e-3


class PositionBlind(torch.nn.Module):
    """Logits at position i from the token at i and the mean embedding of the whole input, no position information:
    on the all-mask input every position's row is the same, so the first step's confidences tie exactly. ``bump`` is
    added to position 3's top logit while every position is masked (what float rounding does to a real network)."""

    def __init__(self, vocab_size: int = 6, bump: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab_size, 8)
        self.out = torch.nn.Linear(16, vocab_size)
        self.bump = bump

    def forward(self, ids):
        h = self.embed(ids)
        logits = self.out(torch.cat([h, h.mean(1, keepdim=True).expand_as(h)], -1))
        bump = torch.zeros_like(logits)
        bump[:, 3, logits[0, 3].argmax()] = self.bump * (ids == 1).all(1)
        return logits + bump


def position_blind(bump: float, policy: str) -> MaskedOrderLM:
    vocab = ["<unk>", "<mask>", "a", "b", "c", "d"]
    return MaskedOrderLM(PositionBlind(bump=bump), 1, vocab, policy=policy).float().eval()


@pytest.mark.parametrize("policy", ["greedy_confidence", "margin", "block_greedy_confidence"])
def test_exact_first_step_ties_go_to_the_lowest_position(policy):
    model = position_blind(0.0, policy)
    x = model.tokenize("b c a d b")
    rows = log_probs(model, x, [])
    assert all(torch.equal(rows[0], rows[i]) for i in range(x.numel()))  # tied exactly, not nearly
    assert deterministic_orders(model, x)[0][0] == 0


def test_rounding_sized_differences_do_not_break_the_rule():
    """Position 3 a few float32 rounding steps above the others: plain argmax would reveal it first; the rule still
    reveals position 0, and a real difference (above the tolerance) is followed."""
    eps = torch.finfo(torch.float32).eps
    x = position_blind(0.0, "greedy_confidence").tokenize("b c a d b")
    rounding = position_blind(4 * eps, "greedy_confidence")
    assert (
        int(log_probs(rounding, x, []).amax(-1).argmax()) == 3
    )  # the test can fail: argmax favours position 3
    assert deterministic_orders(rounding, x)[0][0] == 0
    real = position_blind(10 * TIE_ULPS * eps, "greedy_confidence")
    assert deterministic_orders(real, x)[0][0] == 3


def test_an_unknown_policy_is_refused_in_one_line():
    with pytest.raises(ValueError, match="policy must be one of uniform, confidence, greedy_confidence"):
        tiny_masked_lm(policy="greedy")
