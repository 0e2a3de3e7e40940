"""A plain causal LM through the contract: every estimator gives the exact chain-rule log p(x)."""

import math

import pytest
import torch

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models import load_model
from tiny_models import make_tiny_gpt2


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
def test_long_text_is_scored_in_disjoint_windows(causal):
    """With context 8, a 20-token text is scored window by window; each window conditions on its first token."""
    words = ("the cat sat on the mat and the dog ran under the log quickly . the a cat dog sat ran").split()
    x = causal.tokenize(" ".join(words))
    ids = [causal.prefix_token, *x.tolist()]
    expected, start = 0.0, 0
    while start < len(words):
        end = min(len(words), start + 7)
        ctx = max(0, end - 7)
        window = torch.tensor([ids[ctx : end + 1]])
        logp = torch.log_softmax(causal.model(window).logits[0, :-1].double(), -1)
        expected += float(logp.gather(-1, window[0, 1:, None])[start - ctx :].sum())
        start = end
    assert causal.log_marginal(x) == pytest.approx(expected, abs=1e-4)
    assert math.isfinite(expected)


def test_empty_text_has_log_probability_zero(causal):
    est = estimate_document(causal, "", EstimatorSettings(estimator="exact"))
    assert (est.num_tokens, est.log_likelihood) == (0, 0.0)
