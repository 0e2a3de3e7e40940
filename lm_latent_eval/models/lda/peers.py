"""What LDA libraries report as held-out perplexity for a given Φ and α, computed by the libraries themselves, and
MALLET's left-to-right evaluator (``evaluate-topics``) re-implemented: the figures ``reports/lda_peers`` sets beside
the exact value and our estimators'.

- scikit-learn ``LatentDirichletAllocation.perplexity(X)`` = exp(−ELBO(X) / N_X). The ELBO is a lower bound, and it
  includes the global term E_q[log p(β | η) − log q(β | λ)] of the topics (a sum over K × V entries, a property of
  the training corpus), divided by the test token count N_X (scikit-learn#20032, open).
- gensim ``LdaModel.log_perplexity(corpus)`` returns that same bound per token (the same flaw with its default
  ``total_docs``); gensim's log line then prints 2^(−bound) as "perplexity estimate", a natural-log bound in base 2.
- tomotopy ``LDAModel.infer(doc)`` returns, as the document's log-likelihood, a score of the one topic assignment its
  Gibbs chain ends in (a joint of one sample, within a few nats of log p(x, z) of that z), not log p(x)
  (tomotopy#149).
- MALLET ``evaluate-topics`` (``MarginalProbEstimator``, default: no resampling): R particles each draw z_t from
  p(z_t | x_t, z_<t) left to right; log p̂ = Σ_t log (1/R) Σ_r p(x_t | x_<t, z_<t^r). The particles are never weighted
  or resampled, so they drift away from p(z_<t | x_<t): biased, and more particles converge to a wrong value.

The library calls need scikit-learn, gensim or tomotopy (``pip install 'lm-latent-eval[lda]'``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.special import digamma, gammaln

from ...tensors import tempered_draw as draw
from .stepwise import document_stream
from .tokenizer import LDATokenizer


@dataclass(frozen=True)
class LibraryFigure:
    """One tool's held-out perplexity of the same documents: the call, the value, what it is and why it differs."""

    tool: str
    call: str
    perplexity: float
    reports: str
    cause: str
    # the figure's decomposition, where one helps
    parts: dict = field(default_factory=dict)


def _variational_topics(model) -> tuple[np.ndarray, float]:
    """(λ [K, V], η): the topic-word Dirichlet parameters and prior that scikit-learn's and gensim's bounds need."""
    lam = model.pseudocounts.detach().to("cpu", torch.float64).numpy()
    eta = float(model.eta)
    if lam.shape[0] == 0 or not math.isfinite(eta):
        raise ValueError(
            f"this LDA ({model.source}) has no topic-word pseudo-counts λ and prior η, which scikit-learn's and "
            "gensim's perplexity need; only models trained here or read from scikit-learn, gensim, tomotopy or "
            "MALLET (with its state file) have them"
        )
    return lam, eta


def symmetric_alpha(model) -> float:
    alpha = model.alpha.detach().to("cpu", torch.float64)
    if not torch.allclose(alpha, alpha[0].expand_as(alpha)):
        raise ValueError("scikit-learn's LDA has one doc_topic_prior: it cannot represent an asymmetric α")
    return float(alpha[0])


def document_term_matrix(tokenizer: LDATokenizer, texts: list[str]):
    """Counts of each vocabulary word in each text: scipy CSR [D, V] (what CountVectorizer would give)."""
    rows, cols = [], []
    for d, text in enumerate(texts):
        ids = tokenizer.encode(text).tolist()
        rows += [d] * len(ids)
        cols += ids
    return csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(tokenizer.vocab)))


def sklearn_lda(model, seed: int = 0):
    """A fitted-looking scikit-learn LatentDirichletAllocation with λ = the model's pseudo-counts, α, η."""
    # the errors first: they hold without scikit-learn too
    lam, eta = _variational_topics(model)
    alpha = symmetric_alpha(model)
    # optional dependency (the lda extra)
    from sklearn.decomposition import LatentDirichletAllocation

    lda = LatentDirichletAllocation(
        n_components=lam.shape[0], doc_topic_prior=alpha, topic_word_prior=eta, random_state=seed
    )
    lda.components_ = lam.copy()
    lda.exp_dirichlet_component_ = np.exp(digamma(lam) - digamma(lam.sum(1, keepdims=True)))
    lda.doc_topic_prior_, lda.topic_word_prior_ = alpha, eta
    lda.n_features_in_, lda.n_batch_iter_, lda.n_iter_ = lam.shape[1], 1, 1
    lda.random_state_ = np.random.RandomState(seed)
    return lda


def topic_kl_term(lam: np.ndarray, eta: float) -> float:
    """E_q[log p(β | η) − log q(β | λ)] summed over topics (the global term of the ELBO, ≤ 0)."""
    e_log_beta = digamma(lam) - digamma(lam.sum(1, keepdims=True))
    V = lam.shape[1]
    per_entry = ((eta - lam) * e_log_beta + gammaln(lam) - gammaln(eta)).sum()
    return float(per_entry + (gammaln(V * eta) - gammaln(lam.sum(1))).sum())


def sklearn_perplexity(model, texts: list[str]) -> LibraryFigure:
    """scikit-learn's own ``LatentDirichletAllocation.perplexity`` of the texts, and its global term's share."""
    lda = sklearn_lda(model)
    X = document_term_matrix(model.tokenizer, texts)
    value = float(lda.perplexity(X))
    n = float(X.sum())
    global_term = topic_kl_term(*_variational_topics(model))
    # exp(−(ELBO − global) / N)
    without = math.exp(math.log(value) + global_term / n)
    return LibraryFigure(
        "scikit-learn", "LatentDirichletAllocation.perplexity(X)", value,
        "exp(−ELBO / N): a variational bound, with the topics' global KL term",
        f"its global KL term ({global_term:,.0f} nats over all K × V topic-word entries) is divided by the "
        f"{n:.0f} test tokens (scikit-learn#20032); without it the bound gives {without:,.1f}",
        {"global_term_nats": global_term, "test_tokens": n, "without_global_term": without},
    )  # fmt: skip


def gensim_lda(model, seed: int = 0):
    """A gensim LdaModel with λ = the model's pseudo-counts, α and η."""
    # optional dependency (the lda extra)
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    lam, eta = _variational_topics(model)
    dictionary = Dictionary([model.vocab])
    dictionary.token2id = {w: i for i, w in enumerate(model.vocab)}
    dictionary.id2token = {}
    alpha = model.alpha.detach().to("cpu", torch.float64).numpy()
    lda = LdaModel(id2word=dictionary, num_topics=lam.shape[0], alpha=alpha, eta=eta, random_state=seed)
    lda.state.sstats[...] = lam - eta
    lda.sync_state()
    return lda


def gensim_perplexity(model, texts: list[str]) -> LibraryFigure:
    """gensim's own ``log_perplexity`` of the texts (the per-token bound), as exp(−bound) and as gensim logs it."""
    lda = gensim_lda(model)
    corpus = [sorted(_bag(model.tokenizer.encode(t).tolist()).items()) for t in texts]
    bound = float(lda.log_perplexity(corpus))
    return LibraryFigure(
        "gensim", "LdaModel.log_perplexity(corpus)", math.exp(-bound),
        "exp(−bound), the same ELBO per token as scikit-learn",
        "the same variational bound and global term as scikit-learn (default total_docs); gensim's own log line "
        f"prints 2^(−bound) = {2.0**-bound:,.1f} as its 'perplexity estimate'",
        {"per_word_bound": bound, "logged_perplexity": 2.0**-bound},
    )  # fmt: skip


def _bag(ids: list[int]) -> dict[int, int]:
    bag: dict[int, int] = {}
    for i in ids:
        bag[i] = bag.get(i, 0) + 1
    return bag


def train_tomotopy(texts: list[str], tokenizer: LDATokenizer, num_topics: int, alpha: float, eta: float,
                   iterations: int = 1000, seed: int = 0):  # fmt: skip
    """A tomotopy LDAModel trained on the texts' vocabulary words (collapsed Gibbs, ``iterations`` sweeps)."""
    # optional dependency (the lda extra)
    import tomotopy as tp

    mdl = tp.LDAModel(k=num_topics, alpha=alpha, eta=eta, seed=seed)
    for text in texts:
        words = [tokenizer.vocab[i] for i in tokenizer.encode(text).tolist()]
        if words:
            mdl.add_doc(words)
    mdl.train(iterations, workers=1)
    return mdl


def tomotopy_perplexity(
    mdl, tokenizer: LDATokenizer, texts: list[str], iterations: int = 100
) -> LibraryFigure:
    """exp(−Σ ll / N) from tomotopy's own ``infer`` of each text (its log-likelihood ll per document)."""
    docs = [mdl.make_doc([tokenizer.vocab[i] for i in tokenizer.encode(t).tolist()]) for t in texts]
    _, ll = mdl.infer(docs, iterations=iterations, workers=1, together=False)
    n = sum(len(d.words) for d in docs)
    return LibraryFigure(
        "tomotopy", f"LDAModel.infer(docs, iterations={iterations})", math.exp(-float(np.sum(ll)) / n),
        "exp(−Σ ll / N), ll = infer's 'log-likelihood' of each document",
        "ll scores the one topic assignment z that infer's Gibbs chain ends in (a joint of one sample), not "
        "log p(x) = log Σ_z p(x, z) (tomotopy#149)",
        {"test_tokens": n},
    )  # fmt: skip


@torch.no_grad()
def left_to_right(
    model, x: torch.Tensor, num_particles: int = 10, generator: torch.Generator | None = None
) -> float:
    """MALLET's ``evaluate-topics`` estimate of log p(x) (``MarginalProbEstimator.evaluateLeftToRight``, no
    resampling): R particles draw z_t ∝ (n_k + α_k) Φ[k, x_t] left to right, and log p̂ = Σ_t log mean_r
    p(x_t | x_<t, z_<t^r) with p(x_t | ·) = Σ_k (n_k + α_k) Φ[k, x_t] / (t + Σα); no weights, no resampling."""
    alpha = model.alpha.to(torch.float64)
    # [T, K]
    log_phi = model.log_phi_columns(model.check_x(x))
    counts = torch.zeros(num_particles, alpha.shape[0], dtype=torch.float64, device=log_phi.device)
    total = 0.0
    for t in range(log_phi.shape[0]):
        # [R, K]
        logits = torch.log(counts + alpha) + log_phi[t]
        # log p(x_t | x_<t, z_<t^r)
        predictive = torch.logsumexp(logits, 1) - math.log(t + float(alpha.sum()))
        total += float(torch.logsumexp(predictive, 0)) - math.log(num_particles)
        topic, _ = draw(logits, 1.0, generator)
        counts[torch.arange(num_particles, device=counts.device), topic] += 1.0
    return total


def mallet_perplexity(model, texts: list[str], num_particles: int = 10, seed: int = 0) -> LibraryFigure:
    """exp(−Σ_d log p̂_d / N) from ``left_to_right`` with ``num_particles`` particles (seeded per document)."""
    total, n = 0.0, 0
    for text in texts:
        x = model.tokenize(text)
        total += left_to_right(model, x, num_particles, document_stream(seed, text))
        n += int(x.numel())
    return LibraryFigure(
        "MALLET-style left-to-right", f"evaluate-topics, {num_particles} particles, no resampling",
        math.exp(-total / n), "exp(−Σ_t log mean over particles of p(x_t | ·) / N)",
        "particles are never weighted or resampled, so they drift from p(z_<t | x_<t): biased, and more particles "
        "converge to a wrong value",
        {"particles": num_particles},
    )  # fmt: skip
