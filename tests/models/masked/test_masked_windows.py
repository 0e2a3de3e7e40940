"""Texts longer than the network reads: windows of ⌊R/2⌋ positions, each revealed after the one before it
(``models/masked/windows.py``), checked against every order on a tiny masked LM that reads 4 positions."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.harness.backends import LatentMaskedEval
from lm_latent_eval.models.masked import MaskedDiffusionLM
from lm_latent_eval.models.masked.exact import brute_force_log_marginal
from lm_latent_eval.models.masked.orders import all_orders

VOCAB = ["<unk>", "<mask>", "a", "b", "c", "d"]


def short_reader(policy: str = "uniform") -> MaskedDiffusionLM:
    """A random-weight masked LM reading 4 positions (windows of 2 beyond), float64."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = MaskedDiffusionLM(VOCAB, d_model=16, num_layers=1, num_heads=2, max_length=4, policy=policy)
        torch.nn.init.normal_(model.predictor.output.weight, std=0.25)
    return model.double().eval()


@pytest.mark.parametrize("policy", ["uniform", "confidence"])
@pytest.mark.parametrize("text", ["a b c d a", "a b c d a b", "d c b a d c b"])
def test_the_windowed_dynamic_program_is_the_sum_over_every_order(policy, text):
    model = short_reader(policy)
    x = model.tokenize(text)
    assert model.log_marginal(x) == pytest.approx(brute_force_log_marginal(model, x), abs=1e-12)


def test_only_orders_that_finish_each_window_first_have_probability():
    """T = 7 in windows [0, 2), [2, 4), [4, 6), [6, 7): 2! · 2! · 2! · 1! orders of the 7! have p(x, σ) > 0, and
    the proposal's q sums to 1 over them (peeking or not)."""
    model = short_reader()
    x, orders = model.tokenize("a b c d a b c"), all_orders(7)
    finite = torch.isfinite(model.log_joint(x, orders))
    windows_kept = [(o[:2].max() < 2) & (o[2:4].max() < 4) & (o[4:6].max() < 6) for o in orders]
    assert int(finite.sum()) == 8 and torch.equal(finite, torch.stack(windows_kept))
    for peek in (True, False):
        log_q = model.proposal.log_prob(x, orders, peek=peek)
        assert float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=1e-12)
        assert torch.equal(torch.isfinite(log_q), finite)


def test_importance_sampling_and_smc_land_on_the_windowed_exact_value():
    model = short_reader()
    text = "a b c d a b c"
    exact = model.log_marginal(model.tokenize(text))
    est = estimate_document(model, text, EstimatorSettings("is", num_samples=4000, peek=False, seed=2))
    assert est.log_likelihood == pytest.approx(exact, abs=0.05)
    smc = estimate_document(model, text, EstimatorSettings("smc", num_samples=4000, peek=True, seed=2))
    assert smc.log_likelihood == pytest.approx(exact, abs=0.05)


@pytest.mark.parametrize("peek", [True, False])
def test_the_stepwise_increments_sum_to_log_joint_minus_log_q_across_windows(peek):
    model = short_reader()
    x = model.tokenize("a b c d a b c")
    state, total = model.smc_init(x, 16, 1.0, peek), torch.zeros(16, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    for t in range(x.numel()):
        state, increment = model.smc_step(state, t, gen)
        total += increment
    z = model.smc_latents(state)
    expected = model.log_joint(x, z) - model.proposal.log_prob(x, z, peek=peek)
    assert torch.allclose(total, expected, atol=1e-10, rtol=0)


def test_loglikelihood_rolling_reads_a_long_document_in_windows(tmp_path):
    """11 tokens, windows of 2: log p(a b) + Σ_j log p(window j | window j − 1 revealed), each factor from the
    conditional view of the window before it."""
    short_reader().save_pretrained(tmp_path)
    lm = LatentMaskedEval(pretrained=str(tmp_path), estimator="exact", device="cpu")
    model = lm.model
    [value] = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, ("a b c d a b c d a b c",), 0)], True
    )
    pairs = [("a b", "c d"), ("c d", "a b"), ("a b", "c d"), ("c d", "a b"), ("a b", "c")]
    factors = [model.conditional_model(ctx).log_marginal(model.tokenize(cont)) for ctx, cont in pairs]
    assert value == pytest.approx(model.log_marginal(model.tokenize("a b")) + sum(factors), abs=1e-12)


def test_the_elbo_refuses_a_text_longer_than_the_network_in_one_line(tmp_path):
    """``estimator=elbo`` is written for one window (docs/estimators.md): a longer text, or a continuation longer than
    what the network reads after its context, is refused in one line naming the estimator that reads it in
    windows, before any notice that it would be read in windows; a text that fits is estimated."""
    import warnings

    from lm_latent_eval.errors import UnsupportedError

    short_reader().save_pretrained(tmp_path)
    lm = LatentMaskedEval(pretrained=str(tmp_path), estimator="elbo", num_samples=8, device="cpu")
    requests = [
        ("loglikelihood_rolling", ("a b c d a b c d a b c",), "a text of 11 tokens, longer than the network reads \\(4\\)"),
        ("loglikelihood", ("a b", " c d a b"), "a text of 4 tokens, longer than the network reads \\(2\\)"),
    ]  # fmt: skip
    for kind, args, match in requests:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no "read in windows" notice before the refusal
            warnings.filterwarnings("ignore", message=".*is_greedy")
            with pytest.raises(UnsupportedError, match=match) as caught:
                getattr(lm, kind)([Instance(kind, {}, args, 0)], True)
        message = str(caught.value)
        assert "\n" not in message and message.endswith(
            "the ELBO is written for one window; use estimator=auto, which reads such a text in windows"
        )
    [value] = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("a b c d",), 0)], True)
    assert value < 0
