"""Shared fixtures: a tiny HMM (exact enumeration feasible), the bundled HMM and its test corpus."""

from __future__ import annotations

import json

import pytest
import torch

from lm_latent_eval.models import default_checkpoint
from lm_latent_eval.models.hmm import HMMLanguageModel
from lm_latent_eval.paths import DATA_DIR


def make_tiny_hmm(num_states: int = 3, words=("a", "b", "c"), seed: int = 0) -> HMMLanguageModel:
    """S = 3 states over {<unk>, a, b, c}: random parameters; the proposal is a noisy (mismatched) copy."""
    model = HMMLanguageModel(vocab=["<unk>", *words], num_states=num_states, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param, own in zip(model.proposal.parameters(), model.hmm.parameters()):
            param.copy_(own + 0.4 * torch.randn(param.shape, generator=gen))
    return model.eval()


@pytest.fixture
def tiny_hmm() -> HMMLanguageModel:
    return make_tiny_hmm()


@pytest.fixture(scope="session")
def bundled_hmm() -> HMMLanguageModel:
    path = default_checkpoint("hmm")
    assert path is not None, "the bundled HMM checkpoint lm_latent_eval/data/hmm is missing"
    return HMMLanguageModel.from_pretrained(str(path)).eval()


@pytest.fixture(scope="session")
def bundled_test_texts() -> list[str]:
    with open(DATA_DIR / "corpus" / "tiny_test.jsonl", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]
