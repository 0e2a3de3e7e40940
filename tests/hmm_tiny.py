"""A tiny HMM (S = 3 states, exact enumeration feasible), its proposal recomputed independently in probability
space, and the HMM seen through the whole-document contract only (HMM, estimator, harness, contract tests)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from lm_latent_eval.models.hmm import HMMLanguageModel


def make_tiny_hmm(num_states: int = 3, words=("a", "b", "c"), seed: int = 0) -> HMMLanguageModel:
    """S = 3 states over {<unk>, a, b, c}: random parameters; the proposal is a noisy (mismatched) copy."""
    model = HMMLanguageModel(vocab=["<unk>", *words], num_states=num_states, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param, own in zip(model.proposal.parameters(), model.hmm.parameters()):
            param.copy_(own + 0.4 * torch.randn(param.shape, generator=gen))
    return model.eval()


def all_paths(S: int, T: int) -> torch.Tensor:
    """Every z in {0..S-1}^T: [S^T, T]."""
    return torch.tensor(list(itertools.product(range(S), repeat=T)), dtype=torch.long).reshape(-1, T)


def probs(params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(π, A, B) as float64 numpy probability tables."""
    return tuple(np.exp(t.detach().numpy()) for t in params.log_probs())


def tempered_log_q(proposal, x: list[int], z: list[int], tau: float, peek: bool) -> float:
    """log q_τ(z | x) recomputed in probability space with numpy, independently of HMMProposal.sample."""
    pi, A, B = probs(proposal)
    T = len(x)

    def tempered(weights: np.ndarray, j: int) -> float:
        w = weights ** (1.0 / tau)
        return math.log(w[j] / w.sum())

    if not peek:
        out = tempered(pi * B[:, x[0]], z[0])
        return out + sum(tempered(A[z[t - 1]] * B[:, x[t]], z[t]) for t in range(1, T))
    alpha = [pi * B[:, x[0]]]
    for t in range(1, T):
        alpha.append((alpha[-1] @ A) * B[:, x[t]])
    out = tempered(alpha[-1], z[-1])
    return out + sum(tempered(alpha[t] * A[:, z[t + 1]], z[t]) for t in range(T - 1))


class WholeDocumentOnly:
    """An HMM seen through the whole-document contract only (no smc_* methods)."""

    def __init__(self, model):
        self.model, self.proposal = model, model.proposal

    def tokenize(self, text):
        return self.model.tokenize(text)

    def log_joint(self, x, z):
        return self.model.log_joint(x, z)
