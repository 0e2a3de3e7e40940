"""Several questions' chains side by side: ``draw_chains`` after one prompt per group (padded on the right) against
each group drawn alone, ``QuestionsView`` (the answers to several questions as one latent LM) against each question's
view, its batches cut at ``batch_chains``, and lm-eval's loglikelihood through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reasoning_tiny import TEMPLATE, make_tiny_reasoning, tiny_reasoning

import lm_latent_eval.models.reasoning.proposal as proposal_module
from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import EstimatorSettings, resolve
from lm_latent_eval.harness.conditionals import view_estimates
from lm_latent_eval.models.reasoning.chains import draw_chains, score_answers

ARCHITECTURES = ("gpt2", "llama")
# (question, answer): prompts of 2 to 4 tokens, two answers to "a b", and " b" the answer to two questions
PAIRS = [("a b", " a"), ("a b", " b ;"), ("b", " a a"), ("b a b", " b"), ("a", " b")]
SIZES = [24, 40, 8, 16, 24]


@pytest.fixture
def batches(monkeypatch) -> list[list[int]]:
    """The groups' K of every lockstep batch that ``sample_views`` draws."""
    seen: list[list[int]] = []

    def spy(network, rule, prompt, counts, *args, **kwargs):
        seen.append(list(counts))
        return draw_chains(network, rule, prompt, counts, *args, **kwargs)

    monkeypatch.setattr(proposal_module, "draw_chains", spy)
    return seen


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_groups_after_prompts_of_different_lengths_draw_and_score_as_alone(architecture):
    """One batch after 3 prompts of 2 to 4 tokens (one shared by two groups): each group's chains, log q and log p
    equal those it draws alone with its generator, and an answer scored on the batch's cache equals the score on
    its own draws; a group's draws depend on its own stream only."""
    model = tiny_reasoning(architecture)
    prompts = [model.conditional_model(q).prompt for q in ("a b", "b a b", "a b", "b")]
    counts, seeds = [12, 7, 5, 9], [1, 2, 3, 4]
    together = draw_chains(
        model.network, model.rule, prompts, counts, [torch.Generator().manual_seed(s) for s in seeds]
    )
    assert len(together.prompts) == 3  # "a b" goes through the network once
    other = draw_chains(model.network, model.rule, prompts, counts,
                        [torch.Generator().manual_seed(s) for s in (1, 2, 30, 4)])  # fmt: skip
    answer, start = torch.tensor([2, 3]), 0
    for prompt, k, seed in zip(prompts, counts, seeds):
        alone = draw_chains(model.network, model.rule, prompt, k, torch.Generator().manual_seed(seed))
        rows = torch.arange(start, start + k)
        width = alone.tokens.shape[1]
        assert torch.equal(together.tokens[rows, :width], alone.tokens)
        assert (together.tokens[rows, width:] == -1).all()
        torch.testing.assert_close(together.log_q[rows], alone.log_q, rtol=0, atol=1e-5)
        torch.testing.assert_close(together.log_p[rows], alone.log_p, rtol=0, atol=1e-5)
        torch.testing.assert_close(score_answers(model.network, model.rule, together, rows, answer),
                                   score_answers(model.network, model.rule, alone, torch.arange(k), answer),
                                   rtol=0, atol=1e-5)  # fmt: skip
        assert together.drawn_after(rows, prompt)
        if seed != 3:
            assert torch.equal(together.tokens[rows], other.tokens[rows])
        start += k


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_several_questions_side_by_side_estimate_as_one_at_a_time(architecture, batches):
    """IS (the model's own sampler) on a QuestionsView of 4 questions draws them in one lockstep batch, and every
    answer's log weights equal those of its question's view alone; with batch_chains=40 the batches are cut (an
    answer's own chains never), with the same weights."""
    model = tiny_reasoning(architecture)
    texts = [q + a for q, a in PAIRS]
    settings = EstimatorSettings("is", 24, peek=False, seed=3, target_se=None)
    run = resolve(settings, model)
    alone = [
        run.on(model.conditional_model(q)).estimate_documents([q + a], [k])[0]
        for (q, a), k in zip(PAIRS, SIZES)
    ]
    batches.clear()
    together = run.on(model.conditional_models(PAIRS)).estimate_documents(texts, SIZES)
    assert batches == [SIZES]
    small = tiny_reasoning(architecture, batch_chains=40)
    cut = resolve(settings, small).on(small.conditional_models(PAIRS)).estimate_documents(texts, SIZES)
    assert batches[1:] == [[24], [40], [8, 16], [24]]
    for a, b, c in zip(alone, together, cut):
        np.testing.assert_allclose(b.log_weights, a.log_weights, rtol=0, atol=1e-5)
        np.testing.assert_allclose(c.log_weights, a.log_weights, rtol=0, atol=1e-5)


def test_questions_view_gives_each_view_s_exact_beam_and_peeking_numbers():
    """Every part of the contract on a QuestionsView is the question's view's: the exact marginal, the beam, peeking
    IS (drawn one answer at a time), the random stream's text; ids name their question."""
    model = tiny_reasoning()
    questions = model.conditional_models(PAIRS)
    for question, answer in PAIRS:
        view, text = model.conditional_model(question), question + answer
        x, ids = questions.tokenize(text), view.tokenize(text)
        assert torch.equal(questions.view_of(x)[1], ids) and questions.view_of(x)[0].question == question
        assert questions.log_marginal(x) == pytest.approx(view.log_marginal(ids), abs=1e-12)
        assert torch.equal(questions.proposal.beam(x, 3), view.proposal.beam(ids, 3))
        assert questions.random_stream_text(text) == view.random_stream_text(text)
    for settings in (EstimatorSettings("is", 16, peek=True, seed=2), EstimatorSettings("beam", beam_size=4)):
        run = resolve(settings, model)
        texts = [q + a for q, a in PAIRS]
        together = run.on(questions).estimate_documents(texts)
        for (q, a), got in zip(PAIRS, together):
            assert got.log_likelihood == pytest.approx(
                run.on(model.conditional_model(q)).estimate(q + a).log_likelihood
            )
    with pytest.raises(ValueError, match="answers two questions"):
        model.conditional_models([("a", " b a"), ("a b", " a")])


def test_view_estimates_groups_questions_and_cuts_where_a_text_answers_two():
    """view_estimates hands a model with conditional_models its contexts together, in groups that never hold one text
    twice, and the estimates are each view's."""
    model = tiny_reasoning()
    pairs = [*PAIRS, ("a b", " b"), ("a", " b b")]  # "a b b" is ("a b", " b") and ("a", " b b")
    calls = []

    def estimate(view, texts):
        calls.append(len(view.views))
        run = resolve(EstimatorSettings("exact"), model).on(view)
        return dict(zip(texts, run.estimate_documents(texts)))

    out = view_estimates(model, pairs, estimate)
    assert calls == [3, 1]
    for question, answer in pairs:
        view = model.conditional_model(question)
        assert out[question, answer].log_likelihood == pytest.approx(
            view.log_marginal(view.tokenize(question + answer))
        )


@pytest.mark.filterwarnings("ignore:.*is_greedy")
def test_loglikelihood_draws_a_batch_s_questions_side_by_side(tmp_path, batches):
    """lm-eval's loglikelihood over 4 questions (IS, the model's own sampler) draws their chains in one batch, and each
    answer's value is its question's view's estimate alone; batch_chains below 1 is refused in one line."""
    from lm_eval.api.instance import Instance

    from lm_latent_eval.harness.backends import LatentReasoningEval

    path = make_tiny_reasoning(tmp_path / "lm")
    lm = LatentReasoningEval(
        pretrained=str(path), estimator="is", num_samples=8, seed=4, device="cpu", workers=1, **TEMPLATE
    )
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(PAIRS)]
    values = [value for value, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    assert batches == [[8] * len(PAIRS)]
    run = lm.run
    for (question, answer), value in zip(PAIRS, values):
        alone = run.on(lm.model.conditional_model(question)).estimate(question + answer)
        assert value == pytest.approx(alone.log_likelihood, abs=1e-5)
    with pytest.raises(InputError, match="batch_chains must be a positive integer") as caught:
        LatentReasoningEval(pretrained=str(path), batch_chains=0, device="cpu", **TEMPLATE)
    assert "\n" not in str(caught.value)
