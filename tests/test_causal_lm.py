"""A plain causal LM through the contract: every estimator gives the exact chain-rule log p(x)."""

import math

import pytest
import torch
from tiny_models import make_tiny_gpt2

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models import load_model


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    path = make_tiny_gpt2(tmp_path_factory.mktemp("gpt2"), n_positions=8)
    model, _ = load_model("causal", str(path))
    return model


@torch.no_grad()
def direct_log_prob(model, text):
    """Σ_t log softmax(logits)[x_t] with one forward pass over bos + x (text shorter than the context)."""
    ids = torch.tensor([[model.prefix_token, *model.tokenize(text).tolist()]])
    logp = torch.log_softmax(model.model(ids).logits[0, :-1].double(), -1)
    return float(logp.gather(-1, ids[0, 1:, None]).sum())


@pytest.mark.parametrize("estimator", ["is", "beam", "exact"])
def test_every_estimator_is_exact_for_a_plain_lm(causal, estimator):
    text = "the cat sat on the mat"
    settings = EstimatorSettings(estimator=estimator, num_samples=3, beam_size=2)
    est = estimate_document(causal, text, settings)
    assert est.num_tokens == 6
    assert est.log_likelihood == pytest.approx(direct_log_prob(causal, text), abs=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("num_words", [7, 8, 9, 20])
def test_long_text_is_scored_in_lm_evals_rolling_windows(causal, num_words):
    """With context 8, a long text is scored in the windows of lm-eval's hf backend (get_rolling_token_windows)."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    words = ("the cat sat on the mat and the dog ran under the log quickly . the a cat dog sat ran").split()
    x = causal.tokenize(" ".join(words[:num_words]))
    expected = 0.0
    for window in get_rolling_token_windows(x.tolist(), causal.prefix_token, max_seq_len=8, context_len=1):
        context, targets = make_disjoint_window(window)
        ids = torch.tensor([context + targets])[:, :-1]  # what HFLM feeds the network
        logp = torch.log_softmax(causal.model(ids).logits[0].double(), -1)[-len(targets) :]
        expected += float(logp.gather(-1, torch.tensor(targets)[:, None]).sum())
    assert len(causal.windows(num_words)) == -(-num_words // 8)
    assert causal.log_marginal(x) == pytest.approx(expected, abs=1e-4)
    assert math.isfinite(expected)


def test_empty_text_has_log_probability_zero(causal):
    est = estimate_document(causal, "", EstimatorSettings(estimator="exact"))
    assert (est.num_tokens, est.log_likelihood) == (0, 0.0)
