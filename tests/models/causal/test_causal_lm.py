"""A plain causal LM through the contract: long texts are scored in lm-eval's rolling windows (every estimator
giving the exact chain-rule log p(x) is a row of the contract table, tests/contract/)."""

import math

import pytest
import torch
from tiny_models import make_tiny_gpt2

from lm_latent_eval.models import load_model


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    path = make_tiny_gpt2(tmp_path_factory.mktemp("gpt2"), n_positions=8)
    model, _ = load_model("causal", str(path))
    return model


@torch.no_grad()
@pytest.mark.parametrize("num_words", [7, 8, 9, 20])
def test_long_text_is_scored_in_lm_evals_rolling_windows(causal, num_words):
    """With context 8, a long text is scored in the windows of lm-eval's hf backend (get_rolling_token_windows)."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    text = "the cat sat on the mat and the dog ran under the log quickly . the a cat dog sat ran"  # 21 words
    x = causal.tokenize(" ".join(text.split()[:num_words]))
    assert x.numel() == num_words  # the word-level tokenizer: one token per word
    expected = 0.0
    for window in get_rolling_token_windows(x.tolist(), causal.prefix_token, max_seq_len=8, context_len=1):
        context, targets = make_disjoint_window(window)
        ids = torch.tensor([context + targets])[:, :-1]  # what HFLM feeds the network
        logp = torch.log_softmax(causal.model(ids).logits[0].double(), -1)[-len(targets) :]
        expected += float(logp.gather(-1, torch.tensor(targets)[:, None]).sum())
    assert len(causal.windows(num_words)) == -(-num_words // 8)
    assert causal.log_marginal(x) == pytest.approx(expected, abs=1e-4)
    assert math.isfinite(expected)
