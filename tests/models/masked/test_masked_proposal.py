"""The masked LM's proposals, ELBO and stepwise part: exact values of q on short texts, the ELBO as importance sampling
with K = 1 below the exact log p(x), the beam's bound, reordering, bad inputs and a save/load round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.estimators import beam_log_marginal, importance_log_weights
from lm_latent_eval.models.masked import MaskedDiffusionLM, tiny_masked_lm
from lm_latent_eval.models.masked.conditionals import step_scores
from lm_latent_eval.models.masked.orders import all_orders

TEXTS = ["a b", "c a d", "b b a c", "d a c b a"]


def exact_elbo(model, x) -> float:
    """E_{σ ~ uniform} log p(x | σ) = mean over the T! orders of log p(x, σ) + log T! (uniform policy)."""
    log_p = model.log_joint(x, all_orders(x.numel()))
    return float(log_p.mean()) + math.lgamma(x.numel() + 1)


@pytest.mark.parametrize("text", TEXTS)
def test_the_elbo_is_below_the_exact_log_likelihood(text):
    model = tiny_masked_lm(seed=5)
    x = model.tokenize(text)
    assert exact_elbo(model, x) < model.log_marginal(x) - 1e-4


def test_importance_sampling_with_one_uniform_order_is_the_elbo():
    """K = 1 without peeking: log w = log p(x | σ), σ uniform; 2,000 seeds average to the exact ELBO (4 SE)."""
    model = tiny_masked_lm(seed=5)
    text = TEXTS[-1]
    x = model.tokenize(text)
    draws = np.array([importance_log_weights(model, x, num_samples=1, peek=False, seed=s, document=text)[0]
                      for s in range(2000)])  # fmt: skip
    elbo = exact_elbo(model, x)
    assert abs(draws.mean() - elbo) < 4 * draws.std(ddof=1) / math.sqrt(draws.size)
    assert draws.std() > 0.01


def test_uniform_orders_have_log_q_minus_log_t_factorial_at_any_temperature():
    model = tiny_masked_lm(seed=5)
    x = model.tokenize("a b c d")
    for temperature in (0.5, 1.0, 3.0):
        _, log_q = model.proposal.sample(x, 6, temperature, False, torch.Generator().manual_seed(0))
        assert log_q.tolist() == pytest.approx([-math.log(24)] * 6, abs=1e-12)
        assert model.proposal.log_prob(x, all_orders(4), temperature, False).tolist() == pytest.approx(
            [-math.log(24)] * 24, abs=1e-12
        )


def test_the_peeking_proposal_of_two_tokens_by_hand():
    """q_τ(first = i) ∝ p_θ(x_i | ∅)^{1/τ}; the second step has one position left (q = 1)."""
    model = tiny_masked_lm(seed=6)
    x = torch.tensor([2, 4])
    with torch.no_grad():
        logits = model.predict(torch.tensor([[1, 1]]))[0].double()
    logits[:, 1] = -math.inf
    p0, p1 = torch.softmax(logits, -1)[[0, 1], [2, 4]].tolist()
    for temperature in (0.5, 2.0):
        first = p0 ** (1 / temperature) / (p0 ** (1 / temperature) + p1 ** (1 / temperature))
        log_q = model.proposal.log_prob(x, torch.tensor([[0, 1], [1, 0]]), temperature, True)
        assert log_q.tolist() == pytest.approx([math.log(first), math.log(1 - first)], abs=1e-12)


def test_the_beam_is_a_strict_lower_bound_until_it_holds_every_order():
    model = tiny_masked_lm(seed=5)
    text = TEXTS[-1]
    x = model.tokenize(text)
    exact = model.log_marginal(x)
    bounds = [beam_log_marginal(model, x, k, text) for k in (1, 4, 30, 120)]
    assert all(b < exact - 1e-4 for b in bounds[:-1]) and bounds == sorted(bounds)
    assert bounds[-1] == pytest.approx(exact, abs=1e-12)
    best = model.log_joint(x, all_orders(5)).max()
    assert bounds[0] <= float(best)


def test_reordered_particles_carry_their_orders_and_revealed_sets():
    model = tiny_masked_lm(seed=5)
    x = model.tokenize("a b c d")
    state = model.smc_init(x, 3, 1.0, True)
    generator = torch.Generator().manual_seed(0)
    for t in range(2):
        state, _ = model.smc_step(state, t, generator)
    before = model.smc_latents(state).clone()
    state = model.smc_reorder(state, torch.tensor([2, 2, 0]))
    assert torch.equal(model.smc_latents(state), before[[2, 2, 0]])
    revealed = torch.zeros(3, 4, dtype=torch.bool).scatter_(1, before[[2, 2, 0]], True)
    assert torch.equal(state.revealed, revealed)
    with pytest.raises(ValueError, match="expected step 2 of 4, got t = 3"):
        model.smc_step(state, 3, generator)


def test_bad_inputs_are_refused_and_non_permutations_score_minus_inf():
    model = tiny_masked_lm(seed=0)
    x = model.tokenize("a b c")
    assert model.tokenize("<mask> a").tolist() == [0, 0, 0, 2]  # "<", "mask", ">" are unknown words
    with pytest.raises(ValueError, match="mask id 1"):
        model.log_joint(torch.tensor([2, 1]), torch.tensor([[0, 1]]))
    # 9 tokens on a network of 8 positions: read in windows of 4 (test_masked_windows.py)
    assert math.isfinite(model.log_joint(model.tokenize("a " * 9), torch.arange(9)[None]))
    with pytest.raises(UnsupportedError, match="the context leaves 1 positions"):
        model.conditional_model("a " * 7).log_joint(model.tokenize("a a"), torch.arange(2)[None])
    with pytest.raises(ValueError, match=r"z must be a LongTensor \[K, T=3\]"):
        model.log_joint(x, torch.tensor([[0, 1]]))
    log_p = model.log_joint(x, torch.tensor([[0, 0, 1], [2, 1, 0]]))
    assert math.isinf(log_p[0]) and log_p[0] < 0 and math.isfinite(log_p[1])
    with pytest.raises(ValueError, match="policy must be one of"):
        tiny_masked_lm(policy="left-to-right")


def test_save_and_load_keep_every_number_and_take_the_policy_as_an_option(tmp_path):
    model = tiny_masked_lm(seed=7, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    loaded = MaskedDiffusionLM.from_pretrained(str(tmp_path)).eval()
    x = model.tokenize("d c b a")
    orders = all_orders(4)
    assert torch.equal(loaded.log_joint(x, orders), model.log_joint(x, orders))
    confident = MaskedDiffusionLM.from_pretrained(str(tmp_path), policy="confidence", policy_temperature=0.0)
    assert (confident.policy, confident.policy_temperature) == ("confidence", 0.0)
    assert int(torch.isfinite(confident.log_joint(x, orders)).sum()) == 1


@pytest.mark.parametrize("peek", [True, False])
def test_the_look_ahead_twist_is_exact_at_the_last_step(peek):
    """ψ(S) = Π_{j ∉ S} p_θ(x_j | S) is the exact remaining likelihood when one position is left, so the last step's
    increment is 0; the first step's is log π + log p_θ(x_i | ∅) − log q + log ψ({i}) (ψ(∅) = 1), by hand."""
    model = tiny_masked_lm(seed=5)
    x = model.tokenize("a b c d")
    state = model.smc_init(x, 8, 1.0, peek)
    generator = torch.Generator().manual_seed(1)
    state, first = model.smc_step(state, 0, generator)
    position = state.order[:, 0]
    empty = torch.zeros(1, 4, dtype=torch.bool)
    with torch.no_grad():
        at_empty = step_scores(model, x, empty)
        after = step_scores(model, x, state.revealed)
    q_logits = at_empty.log_joint[0] if peek else at_empty.log_order[0]
    log_q = torch.log_softmax(q_logits, -1)[position]
    twist = after.log_token.masked_fill(state.revealed, 0.0).sum(-1)
    expected = at_empty.log_joint[0, position] - log_q + twist
    torch.testing.assert_close(first, expected, rtol=0, atol=1e-12)
    for t in (1, 2):
        state, _ = model.smc_step(state, t, generator)
    state, last = model.smc_step(state, 3, generator)
    torch.testing.assert_close(last, torch.zeros(8, dtype=torch.float64), rtol=0, atol=1e-12)
