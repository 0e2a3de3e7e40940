"""The lm-eval side of our perplexity tasks (tasks/latent_ppl_tiny and every task that includes it).

``document_items`` is what a task's ``process_results`` returns for one document: every metric's item, all from the
SAME estimate the backend made (``rolling_estimates.lookup``), as JSON-ready dicts (lm-eval writes them to the
samples file, where ``reports`` reads the per-document log weights back). The aggregations below turn the items of
all documents into the corpus figures; the task YAML names them directly
(``aggregation: !function lm_latent_eval.harness.perplexity_task.instance_perplexity``).
"""

from __future__ import annotations

import math

from ..estimators import DocumentEstimate
from ..estimators import corpus as corpus_estimates
from ..estimators.diagnostics import PARETO_K_THRESHOLD, effective_sample_size, pareto_khat
from . import rolling_estimates

PERPLEXITY_METRICS = ("is_instance_perplexity", "is_instance_perplexity_stderr", "is_corpus_perplexity",
                      "is_corpus_perplexity_stderr")
SAMPLES_FIELD = "is_corpus_perplexity"  # the item reports read from the samples file (the whole estimate)


def document_items(text: str, log_likelihood: float, num_words: int) -> dict:
    """Per-document items of every metric of the task (``num_words``: lm-eval's whitespace word count)."""
    est = rolling_estimates.lookup(text, log_likelihood)
    item = _item(est)
    weights = est.importance_weights  # ESS and k̂ only for IS weights of a document with tokens
    ess = None if weights is None else effective_sample_size(weights)
    khat = None if weights is None else pareto_khat(weights)
    items = {"word_perplexity": (log_likelihood, num_words), **dict.fromkeys(PERPLEXITY_METRICS, item),
             "is_ess_mean": ess, "is_ess_min": ess, "is_pareto_k_share": khat, "is_pareto_k_undefined": khat}
    if est.estimator == "smc":  # no item otherwise: lm-eval then reports no smc_* metric
        d = est.diagnostics if est.num_tokens > 0 else None
        items |= {"smc_resampling_steps": None if d is None else d.resampling_steps,
                  "smc_ess_min": None if d is None else d.ess_min, "smc_ess_mean": None if d is None else d.ess_mean}
    plain = est.without_unk_penalty()  # a model with an unknown-word penalty (KGLM): PPL without it, UPP with it
    if plain is not None:
        items |= {"ppl_instance": _item(plain), "ppl_corpus": _item(plain), "upp_instance": item, "upp_corpus": item}
    return items


def _item(est: DocumentEstimate) -> dict:
    record = est.to_json()
    record.pop("document")  # the samples file holds the document already
    return record


def _estimates(items) -> list[DocumentEstimate]:
    return [DocumentEstimate.from_json(item) for item in items]


def instance_perplexity(items) -> float:
    """Instance-level PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n)."""
    return corpus_estimates.instance_perplexity(_estimates(items))


def corpus_perplexity(items) -> float:
    """Corpus-level PPL: sample k (IS) or run r (SMC) of every document forms one corpus sample."""
    return corpus_estimates.corpus_perplexity(_estimates(items))


def instance_perplexity_stderr(items) -> float:
    """Monte Carlo standard error of the instance-level PPL (documents fixed): lm-eval's Stderr column."""
    return corpus_estimates.perplexity_stderr(_estimates(items), "instance")


def corpus_perplexity_stderr(items) -> float:
    """Monte Carlo standard error of the corpus-level PPL (documents fixed)."""
    return corpus_estimates.perplexity_stderr(_estimates(items), "corpus")


def _informative(items) -> list[float]:
    return [float(v) for v in items if v is not None and not math.isnan(v)]


def mean_over_documents(items) -> float:
    """Mean over documents of a per-document diagnostic such as ESS = (Σ_k w_k)² / Σ_k w_k² or SMC's resampling
    steps (NaN when the estimator has none)."""
    values = _informative(items)
    return sum(values) / len(values) if values else math.nan


def min_over_documents(items) -> float:
    """Smallest per-document value of a diagnostic such as ESS (NaN when the estimator has none)."""
    values = _informative(items)
    return min(values) if values else math.nan


def pareto_k_share(items) -> float:
    """Share of documents with Pareto k̂ > 0.7, where PSIS deems the IS estimate unreliable."""
    values = _informative(items)
    return sum(v > PARETO_K_THRESHOLD for v in values) / len(values) if values else math.nan


def pareto_k_undefined_share(items) -> float:
    """Share of IS documents whose k̂ is undefined: their largest weights take too few distinct values."""
    values = [float(v) for v in items if v is not None]
    return sum(math.isnan(v) for v in values) / len(values) if values else math.nan
