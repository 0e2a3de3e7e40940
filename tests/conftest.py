"""Shared fixtures: a tiny HMM (exact enumeration feasible), the bundled HMM, its test corpus and the coverage
benchmark's corpora.

The helpers at the root of tests/ (is_checks, pins, hmm_tiny, kglm_tiny, ...) are importable from every test
folder: this folder is put on sys.path here. Test modules have unique basenames (pytest's default import mode
needs them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hmm_tiny import make_tiny_hmm

from lm_latent_eval.models import default_checkpoint
from lm_latent_eval.models.hmm import HMMLanguageModel
from lm_latent_eval.paths import DATA_DIR

# One intra-op thread for the whole session, whatever order the folders run in: the tiny models' small tensor
# ops are 10-30 times slower on a pool of 2 threads sharing 2 busy cores (SMC over 300 seeds: 14-32 s against
# 1 s), and the pinned tests need it for bit-exact float32 rounding (models/entitynlm/test_entitynlm_pinned.py
# used to set it, for every test collected after it).
torch.set_num_threads(1)


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


@pytest.fixture(scope="session")
def coverage_corpus(bundled_hmm):
    """bench/interval_coverage.py's corpus of N documents and its exact Σ_n log p(x_n) (forward algorithm), by N."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from interval_coverage import benchmark_corpus

    def corpus(num_documents: int) -> tuple[list[str], float]:
        docs = benchmark_corpus(num_documents)
        return docs, sum(float(bundled_hmm.log_marginal(bundled_hmm.tokenize(d))) for d in docs)

    return corpus
