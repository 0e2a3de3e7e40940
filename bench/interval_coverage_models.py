"""The test models of ``bench/interval_coverage.py`` beside the bundled HMM: a latent LM with a small discrete support
and a near-exact proposal, its corpus, and its exact log p(x).

``SmallSupportLM``: one topic z ∈ {0, …, Z − 1} per document (Z = 4), p(x, z) = π_z Π_t θ_z[x_t] over the words
w0 … w11, so p(x) = Σ_z p(x, z) is a sum of Z terms (``log_marginal``). Its proposal peeks at the whole document and
mixes the exact posterior with the uniform distribution, q(z | x) = (1 − α) p(z | x) + α / Z (α = 0.2): near-exact
(every weight p(x, z)/q(z | x) lies within a factor 1/(1 − α) = 1.25 of p(x) on the likely topics), with every
topic at least α / Z = 5% likely, so K = 100 draws see the whole support with probability above 99.5%. Without
peeking the posterior is replaced by the prior π. No stepwise part and no declared tractable marginal: ``auto`` picks
IS, as for a user's model whose only door is importance sampling. The tests use it too (tests/estimators).
"""

from __future__ import annotations

import math

import torch

from lm_latent_eval.protocol import CheckedProposal

NUM_TOPICS = 4
VOCAB = tuple(f"w{i}" for i in range(12))
MIXING = 0.2  # α: the weight of the uniform distribution in q
CORPUS_LENGTHS = (5, 30)  # tokens per document of ``small_support_corpus``, uniform


class SmallSupportProposal(CheckedProposal):
    """q_τ(z | x) ∝ q(z | x)^{1/τ}, q = (1 − α) p(z | x) + α / Z (peek) or (1 − α) π + α / Z (no peek)."""

    def __init__(self, lm: SmallSupportLM):
        self.lm = lm

    def log_probs(self, x: torch.Tensor, temperature: float = 1.0, peek: bool = True) -> torch.Tensor:
        """log q_τ(z | x) for every topic, float64 [Z]."""
        log_post = self.lm.log_joint_all(x) if peek else self.lm.log_prior.clone()
        log_post = log_post - torch.logsumexp(log_post, 0)
        mix = torch.logaddexp(
            log_post + math.log1p(-MIXING), torch.full_like(log_post, math.log(MIXING / NUM_TOPICS))
        )
        return torch.log_softmax(mix / temperature, 0)

    def _sample(self, x, num_samples, temperature, peek, generator):
        log_q = self.log_probs(x, temperature, peek)
        z = torch.multinomial(log_q.exp(), num_samples, replacement=True, generator=generator)
        return z, log_q[z]

    def _beam(self, x, beam_size):
        return self.log_probs(x).argsort(descending=True)[:beam_size]


class SmallSupportLM:
    """A document-level topic mixture with Z = 4 topics (module docstring); float64 throughout."""

    prefix_probability = True

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.log_prior = torch.log_softmax(torch.randn(NUM_TOPICS, generator=g, dtype=torch.float64), 0)
        self.log_emission = torch.log_softmax(
            1.5 * torch.randn(NUM_TOPICS, len(VOCAB), generator=g, dtype=torch.float64), -1
        )
        self.index = {w: i for i, w in enumerate(VOCAB)}
        self.proposal = SmallSupportProposal(self)

    def tokenize(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index.get(w, 0) for w in text.split()], dtype=torch.long)

    def log_joint_all(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x, z) for every topic z, float64 [Z]."""
        return self.log_prior + self.log_emission[:, x].sum(-1)

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, z_k) for K topics z [K], float64 [K]."""
        return self.log_joint_all(x)[z]

    def log_marginal(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x) = log Σ_z p(x, z), exact."""
        return torch.logsumexp(self.log_joint_all(x), 0)

    def sample_text(self, length: int, generator: torch.Generator) -> str:
        """A document of ``length`` words drawn from the model (z ~ π, then the words given z)."""
        z = int(torch.multinomial(self.log_prior.exp(), 1, generator=generator))
        words = torch.multinomial(self.log_emission[z].exp(), length, replacement=True, generator=generator)
        return " ".join(VOCAB[int(w)] for w in words)


def small_support_corpus(num_documents: int, seed: int = 0) -> list[str]:
    """``num_documents`` texts drawn from ``SmallSupportLM()`` with lengths uniform in ``CORPUS_LENGTHS`` (seeded)."""
    model, gen = SmallSupportLM(), torch.Generator().manual_seed(seed)
    low, high = CORPUS_LENGTHS
    lengths = torch.randint(low, high + 1, (num_documents,), generator=gen).tolist()
    return [model.sample_text(n, gen) for n in lengths]
