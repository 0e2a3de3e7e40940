"""``latent_masked``'s three request types, on the bundled model and on a random-weight BERT built here (offline):
loglikelihood from the context's view (its positions revealed, the continuation's marginalized over orders),
normalized over the vocabulary; loglikelihood_rolling; generate_until by the model's own unmasking sampler."""

from __future__ import annotations

import math

import pytest
import torch
from lm_eval.api.instance import Instance
from tiny_models import make_tiny_bert

from lm_latent_eval.harness.backends import LatentMaskedEval
from lm_latent_eval.models.masked.exact import brute_force_log_marginal
from lm_latent_eval.models.masked.hf import HFMaskedLM


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory, monkeypatch_module):
    return make_tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield mp


def loglikelihood(lm, pairs):
    return [
        v
        for v, _ in lm.loglikelihood([Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)], True)
    ]


def one_token_words(model) -> list[str]:
    """The vocabulary's entries that tokenize back to their own single id."""
    words = [model.detokenize([i]) for i in range(model.vocab_size) if i != model.mask_id]
    return [
        w for i, w in enumerate(words) if model.tokenize(" " + w).tolist() == [model.tokenize(" " + w)[0]]
    ]


def one_token_total(view, model) -> float:
    """log Σ_v p(v | the view's context) over the vocabulary without the mask, in float64."""
    every = [view.log_marginal(torch.tensor([v])) for v in range(model.vocab_size) if v != model.mask_id]
    return float(torch.logsumexp(torch.tensor(every, dtype=torch.float64), 0))


def test_the_bert_checkpoint_loads_with_its_tokenizer_mask_and_special_tokens(bert_dir):
    lm = LatentMaskedEval(pretrained=str(bert_dir), estimator="exact", device="cpu")
    model = lm.model
    assert isinstance(model, HFMaskedLM)
    assert model.mask_id == model.tokenizer.mask_token_id == 4
    # [CLS] before the text, [SEP] after it; the text's own ids only are revealed
    assert model.special_before.tolist() == [2] and model.special_after.tolist() == [3]
    assert model.tokenize("The cat sat.").tolist() == [5, 7, 9, 18]
    assert model.max_length == 22


@torch.no_grad()
def test_the_bert_log_joint_is_the_product_of_its_masked_conditionals(bert_dir):
    """log p(x, σ) by hand: [CLS] x [SEP] with the unrevealed positions set to [MASK], softmax without [MASK]."""
    model = LatentMaskedEval(pretrained=str(bert_dir), device="cpu").model
    x, order = model.tokenize("the cat sat"), torch.tensor([2, 0, 1])
    ids, total = torch.tensor([2, 4, 4, 4, 3]), -math.log(6)
    for position in order.tolist():
        logits = model.predictor(input_ids=ids[None]).logits[0, 1 + position].double()
        logits[4] = -math.inf
        total += float(torch.log_softmax(logits, -1)[x[position]])
        ids[1 + position] = x[position]
    assert float(model.log_joint(x, order[None])) == pytest.approx(total, abs=1e-5)
    assert model.log_marginal(x) == pytest.approx(brute_force_log_marginal(model, x), abs=1e-12)


@pytest.mark.parametrize("which", ["bundled", "bert"])
def test_a_one_token_conditional_sums_to_one_over_the_vocabulary(which, bert_dir):
    args = {"pretrained": str(bert_dir)} if which == "bert" else {}
    lm = LatentMaskedEval(estimator="exact", device="cpu", **args)
    # the normalizer in float64 (tensors.log_normalizer): 1 to float64 rounding; a float32 normalizer is off by
    # ~1e-7 (its rounding of log Z ≈ 3 to 10)
    for context in ["the cat", "anna saw the", "a"]:
        assert abs(one_token_total(lm.model.conditional_model(context), lm.model)) < 1e-12, context
    view = lm.model.conditional_model("the cat")
    words = one_token_words(lm.model)
    assert len(words) > 10
    values = loglikelihood(lm, [("the cat", " " + w) for w in words])
    by_id = {int(lm.model.tokenize(" " + w)[0]): v for w, v in zip(words, values)}
    assert all(
        by_id[v] == pytest.approx(float(view.log_marginal(torch.tensor([v]))), abs=1e-12) for v in by_id
    )


def test_loglikelihood_marginalizes_the_continuation_over_its_orders_given_the_context_revealed():
    """exact: the dynamic program over the continuation's revealed sets equals brute force over its 3! orders; is
    with uniform orders lands near it; the answer is the conditional, not a difference of two joints."""
    lm = LatentMaskedEval(estimator="exact", device="cpu")
    [value] = loglikelihood(lm, [("anna saw", " the dog.")])
    view = lm.model.conditional_model("anna saw")
    x = view.tokenize("anna saw the dog.")
    assert x.tolist() == lm.model.tokenize("the dog.").tolist()
    assert value == pytest.approx(brute_force_log_marginal(view, x), abs=1e-12)
    assert lm.exchange.continuation_tokens("anna saw", " the dog.", value) == 3
    sampled = LatentMaskedEval(estimator="is", num_samples=400, peek=False, device="cpu", seed=0)
    assert loglikelihood(sampled, [("anna saw", " the dog.")])[0] == pytest.approx(value, abs=0.05)


def test_loglikelihood_rolling_is_the_document_estimate(bert_dir):
    lm = LatentMaskedEval(pretrained=str(bert_dir), estimator="exact", device="cpu")
    [value] = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, ("the cat sat on the mat.",), 0)], True
    )
    assert value == pytest.approx(
        lm.model.log_marginal(lm.model.tokenize("the cat sat on the mat.")), abs=1e-12
    )


@pytest.mark.parametrize("which", ["bundled", "bert"])
def test_generate_until_unmasks_a_continuation_seeded_by_the_context(which, bert_dir):
    args = {"pretrained": str(bert_dir)} if which == "bert" else {}
    lm = LatentMaskedEval(device="cpu", seed=5, **args)
    request = Instance(
        "generate_until", {}, ("the cat", {"until": ["\n"], "max_gen_toks": 5, "do_sample": True}), 0
    )
    [text] = lm.generate_until([request], True)
    [again] = lm.generate_until([request], True)
    assert text == again and text.startswith(" ")
    assert len(lm.model.tokenize(text)) == 5


def test_the_defaults_follow_the_value_head_unless_model_args_name_them(bert_dir):
    """MaskedOrderLM.default_settings: with a value head (the bundled checkpoint's) SMC resampling at ESS < K/2,
    peeking through it; without one (a Hugging Face masked LM given no value_head) uniform orders, never
    resampling; each unless model_args name it, with why."""
    lm = LatentMaskedEval(device="cpu")
    assert lm.model.value_head is not None
    assert lm.settings.peek is True and lm.get_model_info()["estimator_settings"]["peek"] is True
    assert lm.settings.resample_threshold == 0.5
    assert lm.estimator_choice.endswith("; peek=True, resample_threshold=0.5 by the model's default_settings")
    given = LatentMaskedEval(device="cpu", peek=False)
    assert given.settings.peek is False and "peek=True" not in given.estimator_choice
    assert given.estimator_choice.endswith("; resample_threshold=0.5 by the model's default_settings")
    both = LatentMaskedEval(device="cpu", peek=False, resample_threshold=0.0)
    assert both.settings.resample_threshold == 0.0 and "default_settings" not in both.estimator_choice
    headless = LatentMaskedEval(device="cpu", pretrained=str(bert_dir))
    assert headless.model.value_head is None
    assert headless.estimator_choice.endswith(
        "; peek=False, resample_threshold=0.0 by the model's default_settings"
    )


def test_greedy_generate_until_ranks_the_candidates_by_their_conditional_given_the_context():
    """do_sample: false picks the seeded sample of highest log p(continuation | context revealed), as loglikelihood
    scores it; it ranked them by log p(context ⊕ continuation), which for a masked LM (no prefix probability) is
    another order: on this context the two disagree."""
    from lm_latent_eval.estimators.seeding import document_generator
    from lm_latent_eval.harness.generation import GENERATION_STREAM, GREEDY_CANDIDATES

    lm = LatentMaskedEval(estimator="exact", seed=3, device="cpu")
    model, context, gen_kwargs = lm.model, "anna", {"until": ["\n"], "max_gen_toks": 4}
    candidates = [
        model.sample_text(
            context, 4, generator=document_generator(3, context, GENERATION_STREAM - i), stop=["\n"]
        )
        for i in range(GREEDY_CANDIDATES)
    ]
    view = model.conditional_model(context)
    conditional = {c: view.log_marginal(view.tokenize(context + c)) for c in candidates}
    whole = {c: model.log_marginal(model.tokenize(context + c)) for c in candidates}
    best = max(candidates, key=conditional.get)
    assert best != max(candidates, key=whole.get)
    for greedy in [{"do_sample": False}, {"temperature": 0.0}]:
        request = Instance("generate_until", {}, (context, gen_kwargs | greedy), 0)
        assert lm.generate_until([request], True) == [best]
    assert loglikelihood(lm, [(context, best)]) == [pytest.approx(conditional[best], abs=1e-12)]
