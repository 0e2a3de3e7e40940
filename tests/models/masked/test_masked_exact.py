"""The masked LM's exact log p(x): the dynamic program over revealed sets against brute force over all T! orders, the
hand-written sums of T ≤ 2, normalization over every text of a length, and the deterministic limit of the
confidence policy."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.masked import tiny_masked_lm
from lm_latent_eval.models.masked.exact import brute_force_log_marginal, dp_log_marginal
from lm_latent_eval.models.masked.orders import all_orders

POLICIES = [("uniform", 1.0), ("confidence", 1.0), ("confidence", 0.3), ("confidence", 0.0), ("greedy_confidence", 1.0),
            ("margin", 1.0), ("left_to_right", 1.0), ("block_greedy_confidence", 1.0), ("block_margin", 1.0)]  # fmt: skip
TEXTS = ["b", "a c", "d d b", "a b c d", "c a d a b", "b d a c c a"]  # T = 1..6


def conditional(model, ids: list[int], token: int, position: int) -> float:
    """p_θ(token at position | ids), the mask's logit left out, straight from the network."""
    with torch.no_grad():
        logits = model.predict(torch.tensor([ids]))[0, position].double()
    logits[model.mask_id] = -math.inf
    return float(torch.softmax(logits, -1)[token])


@pytest.mark.parametrize("policy,temperature", POLICIES)
@pytest.mark.parametrize("text", TEXTS)
def test_the_dynamic_program_equals_brute_force_over_all_orders(policy, temperature, text):
    """log Σ_σ p(x, σ) over the 2^T revealed sets = over the T! orders listed, to 1e-9 (a float64 network); a
    deterministic policy's ``log_marginal`` walks its one order (T rows), the same sum to float64 rounding."""
    model = tiny_masked_lm(seed=1, policy=policy, policy_temperature=temperature)
    model.policy_block = 2  # blocks shorter than the texts
    x = model.tokenize(text)
    dp = dp_log_marginal(model, x)
    assert dp == pytest.approx(brute_force_log_marginal(model, x), abs=1e-9)
    assert model.log_marginal(x) == pytest.approx(dp, abs=1e-12) and dp < 0


def test_one_token_is_the_network_conditional_with_everything_masked():
    model = tiny_masked_lm(seed=2)
    x = model.tokenize("c")
    assert model.log_marginal(x) == pytest.approx(math.log(conditional(model, [1], 4, 0)), abs=1e-12)


def test_two_tokens_under_the_uniform_policy_average_the_two_orders():
    """p(a b) = ½ p(a | ∅) p(b | a revealed) + ½ p(b | ∅) p(a | b revealed), from the network by hand."""
    model = tiny_masked_lm(seed=2)
    a, b, mask = 2, 3, model.mask_id
    left = conditional(model, [mask, mask], a, 0) * conditional(model, [a, mask], b, 1)
    right = conditional(model, [mask, mask], b, 1) * conditional(model, [mask, b], a, 0)
    x = torch.tensor([a, b])
    assert model.log_marginal(x) == pytest.approx(math.log(0.5 * left + 0.5 * right), abs=1e-12)
    expected = [math.log(0.5 * left), math.log(0.5 * right)]
    assert model.log_joint(x, torch.tensor([[0, 1], [1, 0]])).tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("policy,temperature", POLICIES)
@pytest.mark.parametrize("length", [1, 2, 3])
def test_the_texts_of_one_length_sum_to_one(policy, temperature, length):
    """Σ_x p(x) = 1 over the 5^T texts of length T (ids other than the mask): p is a distribution per length."""
    model = tiny_masked_lm(seed=3, policy=policy, policy_temperature=temperature)
    ids = [i for i in range(len(model.vocab)) if i != model.mask_id]
    texts = [torch.tensor(t) for t in itertools.product(ids, repeat=length)]
    total = torch.logsumexp(torch.tensor([dp_log_marginal(model, x) for x in texts], dtype=torch.float64), 0)
    assert float(total) == pytest.approx(0.0, abs=1e-9)


def test_the_confidence_policy_at_temperature_zero_is_one_order():
    """τ_π = 0: one order has p(x, σ) > 0, the model's own max-confidence order (the beam's first, what the prior
    proposal draws with log q = 0), and log p(x) = log p(x, that order); as τ_π → 0 the marginal tends to it."""
    model = tiny_masked_lm(seed=4, policy="confidence", policy_temperature=0.0)
    x = model.tokenize("a c b d")
    log_p = model.log_joint(x, all_orders(4))
    assert int(torch.isfinite(log_p).sum()) == 1
    greedy = model.proposal.beam(x, 5)
    z, log_q = model.proposal.sample(x, 3, peek=False, generator=torch.Generator().manual_seed(0))
    assert greedy.shape == (1, 4) and torch.equal(z, greedy.expand(3, 4)) and log_q.tolist() == [0.0] * 3
    exact = model.log_marginal(x)
    assert exact == float(log_p.max()) == float(model.log_joint(x, greedy)[0])
    gaps = []
    for temperature in (0.1, 0.01, 0.001):
        model.policy_temperature = temperature
        gaps.append(abs(model.log_marginal(x) - exact))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6


def test_the_exact_marginal_refuses_long_texts_in_one_line():
    """The model says why; the exact estimator adds what to use instead."""
    model = tiny_masked_lm(seed=0)
    model.max_exact_tokens = 4
    with pytest.raises(UnsupportedError, match=r"max_exact_tokens=4 tokens, got T = 5$"):
        model.log_marginal(model.tokenize("a b c d a"))
    with pytest.raises(
        UnsupportedError, match=r"got T = 5; use estimator=auto, which samples such a document$"
    ):
        estimate_document(model, "a b c d a", EstimatorSettings("exact"))
    assert model.log_marginal(model.tokenize("")) == 0.0
