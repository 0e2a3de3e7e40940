"""The reasoning model against chain-by-chain forward passes on a tiny random causal LM (3 symbols, chains of up to 4
tokens): the chains its rule lists, Σ_z p(z | x) = 1, the exact p(y | x), the cached sampler against teacher forcing,
and importance sampling (unbiased, its intervals covering, the certified bound holding) against the exact values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from is_checks import assert_unbiased
from reasoning_tiny import tiny_reasoning

from lm_latent_eval.errors import InputError, UnsupportedError
from lm_latent_eval.estimators import UncertaintyPolicy, importance_log_weights, log_mean_exp
from lm_latent_eval.estimators.importance import importance_error
from lm_latent_eval.estimators.seeding import stream_text
from lm_latent_eval.models.reasoning.template import ReasoningTemplate

ARCHITECTURES = ("gpt2", "llama")
# (question, answer): lm-eval's context and continuation
PAIRS = [("a b", " a"), ("a b", " b ;"), ("b", " a a")]
EOS, MARKER = 1, 4  # <|endoftext|> and ";" in the tiny vocabulary (<unk>, <|endoftext|>, a, b, ;)


def listed_chains(vocab: int = 5, length: int = 4) -> list[tuple[int, ...]]:
    """Every chain, listed without the model's rule: it ends at its first EOS or ";", or after ``length`` tokens."""
    out = []
    for n in range(1, length + 1):
        for chain in itertools.product(range(vocab), repeat=n):
            ends = [i for i, t in enumerate(chain) if t in (EOS, MARKER)]
            if (ends and ends[0] == n - 1) or (not ends and n == length):
                out.append(chain)
    return out


@torch.no_grad()
def sequence_log_prob(network, ids: list[int], start: int) -> float:
    """Σ_{j ≥ start} log p(ids[j] | ids[<j]) by one forward pass over ``ids`` alone (no batch, no padding)."""
    logp = torch.log_softmax(network(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    return float(sum(logp[j - 1, ids[j]] for j in range(start, len(ids))))


def chain_by_chain(model, question: str, answer: str) -> tuple[float, float]:
    """(log Σ_z p(z | x), log p(y | x)), each chain scored on its own: the stop token dropped and ";" appended where
    the chain did not write it."""
    prompt = [EOS, *model.tokenizer(question, add_special_tokens=False)["input_ids"]]
    y = model.tokenizer(answer, add_special_tokens=False)["input_ids"]
    log_z, log_joint = [], []
    for chain in listed_chains():
        log_z.append(sequence_log_prob(model.network, prompt + list(chain), len(prompt)))
        kept = list(chain[:-1]) if chain[-1] == EOS else list(chain)
        context = prompt + kept + ([] if chain[-1] == MARKER else [MARKER])
        log_joint.append(log_z[-1] + sequence_log_prob(model.network, context + y, len(context)))
    return float(np.logaddexp.reduce(log_z)), float(np.logaddexp.reduce(log_joint))


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_rule_lists_every_chain_and_their_probabilities_sum_to_one(architecture):
    """enumerate_chains is the chains listed without the rule (161 of them), cut chains among them; Σ_z p(z | x) = 1
    by chain-by-chain forward passes."""
    model = tiny_reasoning(architecture)
    assert sorted(map(tuple, model.enumerate_chains())) == sorted(listed_chains())
    cut = [c for c in listed_chains() if c[-1] not in (EOS, MARKER)]
    assert len(cut) == 81 and all(len(c) == 4 for c in cut)  # 3^4: never ended, closed by the forced ";"
    for question, _ in PAIRS:
        log_total, _ = chain_by_chain(model, question, " a")
        assert log_total == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_exact_marginal_is_the_sum_over_chains_scored_one_by_one(architecture):
    """log_marginal of the question's view = log Σ_z p(z | x) p(y | x, z) from chain-by-chain forward passes."""
    model = tiny_reasoning(architecture)
    for question, answer in PAIRS:
        view = model.conditional_model(question)
        exact = view.log_marginal(view.tokenize(question + answer))
        assert exact == pytest.approx(chain_by_chain(model, question, answer)[1], abs=1e-5)
        assert exact < 0


def test_the_answers_to_a_question_sum_to_one():
    """Σ_y p(y | x) = 1 over the one-token answers (a prefix probability: no end-of-answer event)."""
    view = tiny_reasoning().conditional_model("a b")
    answers = [view.log_marginal(torch.tensor([v])) for v in range(5)]
    assert float(np.logaddexp.reduce(answers)) == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_cached_sampler_scores_as_teacher_forcing(architecture):
    """log q and log p(x, z) of the lockstep sampler's cache (holes for ended chains and stop tokens) = teacher
    forcing of each chain, tempered and not."""
    view = tiny_reasoning(architecture).conditional_model("b a")
    x = view.tokenize("b a a b")
    for temperature in (0.7, 1.0):
        z, log_q = view.proposal.sample(x, 200, temperature, False, torch.Generator().manual_seed(1))
        cached = view.log_joint(x, z)
        view._memo = None
        torch.testing.assert_close(view.log_joint(x, z), cached, rtol=0, atol=1e-5)
        torch.testing.assert_close(view.proposal.log_prob(x, z, temperature, False), log_q, rtol=0, atol=1e-5)


def test_choices_share_the_question_s_chains_and_score_as_apart():
    """share_chains=true: the answers to one question draw from one stream (the question's), and the second
    answer's weights, scored on the first one's cached chains, equal those of a fresh view drawing for it alone; by
    default each answer draws from its own stream."""
    first, second = "a b a", "a b b"
    plain = tiny_reasoning().conditional_model("a b")
    assert stream_text(plain, first) != stream_text(plain, second)
    model = tiny_reasoning(share_chains=True)
    view = model.conditional_model("a b")
    assert stream_text(view, first) == stream_text(view, second) == "a b"
    assert stream_text(model, first) != stream_text(
        model, second
    )  # the model itself: one stream per document
    kwargs = {"num_samples": 64, "temperature": 1.0, "peek": False, "seed": 5}
    importance_log_weights(view, view.tokenize(first), document=first, **kwargs)
    shared = importance_log_weights(view, view.tokenize(second), document=second, **kwargs)
    fresh = model.conditional_model("a b")
    apart = importance_log_weights(fresh, fresh.tokenize(second), document=second, **kwargs)
    np.testing.assert_allclose(shared, apart, rtol=0, atol=1e-6)
    assert np.all(shared <= 1e-7)  # the model's own sampler: w = p(y | x, z) ≤ 1


def test_shared_chains_state_the_paired_difference_s_spread():
    """With shared chains the answers' errors are dependent (bench/reasoning: the paired difference spreads more than
    independent chains'): the variance a run states for log p̂(a) − log p̂(b), v_a + v_b − 2ρ√(v_a v_b) with ρ the
    correlation of the paired weights (what the flip probability reads), matches the spread over 300 seeds, and the
    independent reading v_a + v_b would understate it."""
    from lm_latent_eval.estimators.decisions import weight_correlation

    model = tiny_reasoning(share_chains=True)
    texts = ("a b a", "a b b")
    gaps, stated, independent = [], [], []
    for seed in range(300):
        view = model.conditional_model("a b")
        lw = [
            importance_log_weights(view, view.tokenize(t), document=t, num_samples=16, temperature=1.0, peek=False,
                                   seed=seed)
            for t in texts
        ]  # fmt: skip
        w = [np.exp(a - log_mean_exp(a)) for a in lw]  # w_k / p̂
        v = [float(np.var(x, ddof=1)) / x.size for x in w]
        rho = weight_correlation(*lw)
        gaps.append(log_mean_exp(lw[0]) - log_mean_exp(lw[1]))
        stated.append(v[0] + v[1] - 2 * rho * math.sqrt(v[0] * v[1]))
        independent.append(v[0] + v[1])
    spread = float(np.var(gaps, ddof=1))
    assert 0.7 < spread / float(np.mean(stated)) < 1.4
    assert spread / float(np.mean(independent)) > 1.5


def is_runs(view, text: str, runs: int, **kwargs) -> np.ndarray:
    """log p̂ of ``runs`` seeds."""
    x = view.tokenize(text)
    return np.array(
        [log_mean_exp(importance_log_weights(view, x, document=text, seed=s, **kwargs)) for s in range(runs)]
    )


@pytest.mark.parametrize(
    "proposal",
    [
        {"temperature": 1.0, "peek": False},
        {"temperature": 1.0, "peek": True},
        pytest.param({"temperature": 0.7, "peek": False}, marks=pytest.mark.slow),
        pytest.param({"temperature": 1.5, "peek": True}, marks=pytest.mark.slow),
    ],
    ids=lambda p: f"tau{p['temperature']:g}-{'peek' if p['peek'] else 'no-peek'}",
)
def test_importance_sampling_is_unbiased(proposal):
    """E[p̂] = p over 300 seeds at K = 4 (mean p̂/p within 3 standard errors), for the model's own sampler, the
    peeking proposal (a hint that states the answer) and tempered ones."""
    question, answer = PAIRS[1]
    view = tiny_reasoning().conditional_model(question)
    exact = view.log_marginal(view.tokenize(question + answer))
    log_p_hat = is_runs(view, question + answer, 300, num_samples=4, **proposal)
    assert_unbiased(log_p_hat, exact)
    assert np.exp(log_p_hat - exact).std() > 1e-3  # the estimates vary: the check has power


def test_nucleus_proposal_is_unbiased_and_sums_to_one():
    """top_p < 1: q mixes the nucleus with the tempered sampler, so it sums to 1 over every chain, stays > 0 on
    each, and IS stays unbiased."""
    base = tiny_reasoning(top_p=0.6, top_p_mix=0.2)
    view = base.conditional_model("a b")
    chains = torch.tensor([list(c) + [-1] * (4 - len(c)) for c in listed_chains()])
    x = view.tokenize("a b a")
    log_q = view.proposal.log_prob(x, chains, 1.0, False)
    assert torch.isfinite(log_q).all() and float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=1e-6)
    log_p = view.proposal.log_prob(x, chains, 1.0, False)
    assert base.importance_weight_bound(1.0, False) is None  # q ≠ p: weights unbounded
    exact = view.log_marginal(x)
    assert_unbiased(is_runs(view, "a b a", 300, num_samples=4, temperature=1.0, peek=False), exact)
    assert log_p.shape == (len(listed_chains()),)


@pytest.mark.slow
def test_intervals_cover_and_the_certified_bound_holds_over_seeds():
    """Over 400 seeds of K = 16 on three answers of different questions: the bounded-weights interval (betting, at
    any K) covers S = Σ log p(y | x) in at least 94% of seeds, as does the package's usual statement (two-sided
    where honest, else the certified bound), and the certified bound fails in at most its 5% (with binomial
    slack)."""
    model = tiny_reasoning()
    views = [(model.conditional_model(q), q + a) for q, a in PAIRS]
    exact = sum(v.log_marginal(v.tokenize(t)) for v, t in views)
    policy = UncertaintyPolicy()
    covered = {"bounded": 0, "usual": 0}
    bound_failed = 0
    seeds = 400
    for seed in range(seeds):
        lws = [
            importance_log_weights(v, v.tokenize(t), num_samples=16, peek=False, seed=seed, document=t)
            for v, t in views
        ]
        bounded = policy.bounded_interval([np.exp(lw) for lw in lws], 1.0)
        covered["bounded"] += bounded.lower <= exact <= bounded.upper
        usual = policy.interval([importance_error(lw, policy) for lw in lws])
        covered["usual"] += usual.lower <= exact <= usual.upper
        bound_failed += exact < policy.certified_lower_bound([float(log_mean_exp(lw)) for lw in lws])
    assert covered["bounded"] >= 0.94 * seeds and covered["usual"] >= 0.94 * seeds
    assert bound_failed <= 0.05 * seeds + 3 * math.sqrt(0.05 * 0.95 * seeds)


def test_template_refuses_what_would_be_wrong_in_one_line():
    """An empty end marker (a cut chain could not be closed), a hint without {answer}, a bare nucleus (chains with
    p > 0 undrawable: biased low), chat_template=true without a chat template: InputError naming the fix."""
    with pytest.raises(InputError, match="end_marker"):
        ReasoningTemplate(end_marker="")
    with pytest.raises(InputError, match="answer"):
        ReasoningTemplate(hint="a hint")
    with pytest.raises(InputError, match="top_p_mix"):
        tiny_reasoning(top_p=0.5, top_p_mix=0.0)
    with pytest.raises(InputError, match="no chat template"):
        tiny_reasoning(chat_template="true")
    with pytest.raises(UnsupportedError, match="enumerate"):
        tiny_reasoning(max_exact_chains=100).conditional_model("a").log_marginal(torch.tensor([2]))


def test_chat_template_puts_the_question_in_the_user_turn():
    """chat_template=true: the prompt is the tokenizer's chat template over the question, its generation prompt,
    then the trigger (the chat default "Let's think step by step." unless given)."""
    model = tiny_reasoning()
    chat = type(model)(
        model.network, model.tokenizer, ReasoningTemplate(trigger=" b", end_marker=";", chat=True)
    )
    model.tokenizer.chat_template = "{% for m in messages %}<|endoftext|>{{ m['content'] }}{% endfor %} a"
    try:
        view = chat.conditional_model("b b")
        assert view.prompt.tolist() == [EOS, 3, 3, 2, 3]
    finally:
        model.tokenizer.chat_template = None


def test_a_question_s_answers_draw_their_chains_side_by_side_as_alone():
    """IS on a question's view draws its answers' chains in one lockstep batch (``sample_documents``), each answer
    from its own stream: every answer's log weights equal those it gets alone (to float32 rounding of the batched
    forward passes)."""
    from lm_latent_eval.estimators import EstimatorSettings, resolve
    from lm_latent_eval.protocol import has

    view = tiny_reasoning().conditional_model("a b")
    texts, sizes = ["a b a", "a b b", "a b a b"], [24, 40, 8]
    run = resolve(EstimatorSettings("is", 24, peek=False, seed=3, target_se=None), view)
    assert has(view, "document_sampler") and run.estimator.batches_documents(view)
    together = run.estimate_documents(texts, sizes)
    for text, k, got in zip(texts, sizes, together):
        alone = run.estimate_documents([text], [k])[0]
        np.testing.assert_allclose(got.log_weights, alone.log_weights, rtol=0, atol=1e-5)
        assert got.num_samples == k
    shared = tiny_reasoning(share_chains=True).conditional_model("a b")
    assert shared.proposal.sample_documents([shared.tokenize(t) for t in texts[:2]], [4, 4], 1.0, False,
                                            [None, None]) is None  # fmt: skip
