"""The RNNG's stepwise part beyond the contract table (tests/contract/): the tree CRF's left-to-right factorization is
the CRF on every tree, the steps are word-synchronous, SMC is unbiased against enumeration of all trees on sentences
of 1 to 8 words (slow), and ancestral sampling of text for generate_until."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from is_checks import assert_unbiased
from rnng_tiny import tiny_rnng

from lm_latent_eval.estimators import log_mean_exp, smc_log_weights
from lm_latent_eval.models.rnng import stepwise
from lm_latent_eval.models.rnng.enumerate import enumerate_trees, exact_log_marginal
from lm_latent_eval.models.rnng.latents import SHIFT, spans_from_actions
from lm_latent_eval.models.rnng.left_to_right import LeftToRightCRF
from lm_latent_eval.models.rnng.tree_crf import log_partition, tree_scores

SENTENCES = ["dog", "the dog", "a cat saw", "the dog saw a cat", "the dog saw a cat with a cat"]


@pytest.fixture(scope="module")
def model():
    return tiny_rnng(count_eos=True)


def reduces_before_each_word(z: torch.Tensor, num_words: int) -> torch.Tensor:
    """r_t: the REDUCEs between the shifts of words t − 1 and t, [K, T]."""
    shifts = (z == SHIFT).nonzero()[:, 1].view(-1, num_words)
    return torch.diff(shifts, dim=1, prepend=shifts.new_full((z.shape[0], 1), -1)) - 1


@pytest.mark.parametrize("num_words", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_left_to_right_conditionals_multiply_to_the_crf(num_words, temperature):
    """Π_t q_τ(r_t | x, z_<t) from the outside vectors = exp(Σ_{spans} s/τ − log Z_τ) on every tree (float64)."""
    torch.manual_seed(num_words)
    s = torch.randn(num_words, num_words, dtype=torch.float64)
    crf = LeftToRightCRF.build(s, temperature)
    z = enumerate_trees(num_words)
    K, W = z.shape[0], num_words
    reduces = reduces_before_each_word(z, W)
    left = torch.zeros(K, W, dtype=torch.long)
    outside = torch.full((K, W, W), float("-inf"), dtype=torch.float64)
    size = torch.zeros(K, dtype=torch.long)
    rows = torch.arange(K)
    log_q = torch.zeros(K, dtype=torch.float64)
    for t in range(W):
        if t:
            log_q += torch.log_softmax(crf.reduce_logits(t, left, outside, size), -1)[rows, reduces[:, t]]
            size = size - reduces[:, t]
        below = (size - 1).clamp(min=0)
        outside[rows, size] = (
            crf.push(t, left[rows, below], outside[rows, below]) if t else crf.push(0, None, None)
        )
        left[rows, size] = t
        size = size + 1
    scores = s / temperature
    expected = tree_scores(scores, spans_from_actions(z, W)) - log_partition(scores.unsqueeze(0))[0]
    torch.testing.assert_close(log_q, expected, rtol=0, atol=1e-12)


def test_each_step_shifts_one_word(model):
    """After step t every particle has shifted words 0..t (the comparison SMC resamples on); the last step closes
    the tree (one element left) and the actions are trees over the words."""
    x = model.tokenize("the dog saw a cat with a cat")
    for peek in (True, False):
        state = model.smc_init(x, 32, 1.0, peek)
        gen = torch.Generator().manual_seed(0)
        for t in range(x.numel()):
            state, _ = model.smc_step(state, t, gen)
            drawn = torch.arange(state.actions.shape[1]) < state.num_actions[:, None]
            shifted = ((state.actions == SHIFT) & drawn).sum(1)
            assert (shifted == min(t + 1, x.numel() - 1)).all()
        assert (state.stacks.size == 1).all() and (state.num_actions == state.actions.shape[1]).all()


def test_no_peek_increment_is_the_predictive_word_probability(model):
    """At τ = 1 the no-peeking proposal is locally optimal: every particle's increment at step t is
    log Σ_r p(REDUCE^r SHIFT w_t | its tree), whatever r it drew; two particles with one history agree."""
    x = model.tokenize("the dog saw a cat")
    state = model.smc_init(x, 64, 1.0, peek=False)
    gen = torch.Generator().manual_seed(1)
    for t in range(3):
        state, increment = model.smc_step(state, t, gen)
    before = state.actions.clone()
    state, increment = model.smc_step(state, 3, gen)
    groups = {}
    for k, row in enumerate(before.tolist()):
        groups.setdefault(tuple(row), []).append(float(increment[k]))
    assert any(len(v) > 1 for v in groups.values())
    for values in groups.values():
        assert max(values) - min(values) < 1e-12


def test_stepwise_peek_false_is_proposal_sample(model):
    """proposal.sample(peek=False) is the stepwise kernel without resampling: same trees for the same seed, and
    its log q is log_prob's."""
    x = model.tokenize("the dog saw a cat with")
    z, log_q = model.proposal.sample(x, 50, 0.8, False, torch.Generator().manual_seed(2))
    state = model.smc_init(x, 50, 0.8, peek=False)
    gen = torch.Generator().manual_seed(2)
    for t in range(x.numel()):
        state, _ = model.smc_step(state, t, gen)
    assert torch.equal(model.smc_latents(state), z)
    torch.testing.assert_close(log_q, model.proposal.log_prob(x, z, 0.8, peek=False), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- unbiasedness against every tree


def smc_estimates(model, text: str, peek: bool, threshold: float, runs: int = 300) -> np.ndarray:
    x = model.tokenize(text)
    return np.array([log_mean_exp(smc_log_weights(model, x, num_samples=4, peek=peek, seed=s, document=text,
                                                  resample_threshold=threshold, smc_runs=1)[0])
                     for s in range(runs)])  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("count_eos", [True, False])
@pytest.mark.parametrize("peek", [True, False])
@pytest.mark.parametrize("text", SENTENCES)
def test_smc_is_unbiased_against_every_tree(text, peek, count_eos):
    """Resampling after every word (threshold 1), K = 4: over 300 seeds mean p̂/p = 1 within 3 standard errors,
    p from the sum over all Catalan(T − 1) trees (1 to 429)."""
    model = tiny_rnng(count_eos=count_eos)
    log_p = exact_log_marginal(model, model.tokenize(text))
    estimates = smc_estimates(model, text, peek, threshold=1.0)
    if len(text.split()) <= 2:  # one tree: every estimate is exact
        np.testing.assert_allclose(estimates, log_p, atol=1e-6)
        return
    assert_unbiased(estimates, log_p)
    assert np.exp(estimates - log_p).std() > 1e-3


def test_cells_in_bfloat16_keep_the_stacks_dtype(model):
    """Under CUDA's autocast the LSTM cells return bfloat16 (lstm_cell is on its lower-precision list, not on the
    CPU's): the stacks stay float32, and SMC and log_joint run (they raised a dtype mismatch on the GPU), within
    bfloat16's rounding of the float32 numbers."""
    text = "the dog saw a cat"
    x = model.tokenize(text)
    z = model.proposal.sample(x, 4, 1.0, True, torch.Generator().manual_seed(0))[0]

    def run():
        smc = smc_log_weights(
            model, x, num_samples=4, seed=0, document=text, resample_threshold=1.0, smc_runs=1
        )
        return torch.as_tensor(smc[0]), model.log_joint(x, z)

    full = run()
    # autocast's cell: inputs of any float dtype, outputs in bfloat16
    hooks = [hook for cell in model.stack_lstm.cells for hook in (
        cell.register_forward_pre_hook(lambda _m, i: (i[0].float(), tuple(s.float() for s in i[1]))),
        cell.register_forward_hook(lambda _m, _i, out: tuple(o.bfloat16() for o in out)))]  # fmt: skip
    try:
        zeros = torch.zeros(2, model.num_layers, model.hidden_size)
        assert model.stack_lstm(torch.zeros(2, model.dim), zeros, zeros)[0].dtype == torch.float32
        rounded = run()
    finally:
        for hook in hooks:
            hook.remove()
    for a, b in zip(full, rounded):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b.double(), a.double(), atol=0.5, rtol=0)


# ---------------------------------------------------------------- text


def test_sample_text_is_seeded_stops_and_keeps_its_budget(model):
    for prefix in ("", "the dog", "the zebra saw"):
        first = model.sample_text(prefix, 12, torch.Generator().manual_seed(3))
        assert first == model.sample_text(prefix, 12, torch.Generator().manual_seed(3))
        words = first.split()
        assert len(words) <= 12 and all(w in model.vocab for w in words)
        assert first == "" or first.startswith(" ") == bool(prefix)
    assert model.sample_text("the dog", 0, torch.Generator().manual_seed(0)) == ""
    samples = [
        model.sample_text("the", 30, torch.Generator().manual_seed(s), stop=["cat"]) for s in range(20)
    ]
    assert all("cat" not in s for s in samples)
    assert len(set(samples)) > 5


def test_sample_text_follows_the_model_on_the_first_word(model):
    """With an empty prefix the first word is drawn from p(w | <s>) (SHIFT is certain): frequencies over 2,000
    seeds match the model's word distribution."""
    from is_checks import assert_frequencies_match

    h0 = stepwise.init_particles(model, model.tokenize("the"), 1, 1.0, False).stacks.state_h[0, 0, -1]
    logits = model.word_head(h0).float().detach()
    logits[[model.bos_id, model.eos_id]] = -math.inf
    counts = np.zeros(len(model.vocab))
    for s in range(2000):
        text = model.sample_text("", 1, torch.Generator().manual_seed(s))
        counts[model.word_to_id[text]] += 1
    probs = torch.softmax(logits.double(), 0).numpy()
    assert counts[probs == 0].sum() == 0  # never <s> or </s> first
    assert_frequencies_match(counts[probs > 0], probs[probs > 0])
