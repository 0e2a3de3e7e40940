"""Perplexity of a corpus from its documents' estimates (``DocumentEstimate``), whatever estimator made them.

Instance level: PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n) for every estimator. Corpus level: under IS sample k of every
document forms one corpus sample (Logan et al. 2020, Eq. 6); under SMC run r of every document does (final particle
weights are neither independent nor exchangeable, so neither the pairing of samples nor a bootstrap over them
applies); exact and beam estimates are deterministic and the corpus estimate is their product. The standard errors
are Monte Carlo errors with the documents fixed: a bootstrap over each document's K samples under IS, the delta
method over the runs' Lee-Whiteley variances under SMC, 0 for deterministic estimates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .aggregate import corpus_ppl, perplexity, total_tokens
from .diagnostics import perplexity_stderr as is_perplexity_stderr
from .document import DocumentEstimate
from .smc import runs_corpus_log_likelihood, runs_corpus_relative_variance

LEVELS = ("instance", "corpus")


def corpus_estimator(estimates: Sequence[DocumentEstimate]) -> str:
    """The one estimator that made every document's estimate; a clear error for a mixture."""
    names = {e.estimator for e in estimates}
    if len(names) != 1:
        raise ValueError(f"the documents' estimates come from different estimators {sorted(names)}; rerun them alike")
    return names.pop()


def instance_perplexity(estimates: Sequence[DocumentEstimate]) -> float:
    """Instance-level PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n)."""
    return perplexity([e.log_likelihood for e in estimates], [e.num_tokens for e in estimates])


def corpus_perplexity(estimates: Sequence[DocumentEstimate]) -> float:
    """Corpus-level PPL: IS exp(−(logsumexp_k Σ_n log w_nk − log K) / Σ_n T_n); SMC pairs run r of every document;
    exact and beam: the instance level."""
    name = corpus_estimator(estimates)
    tokens = [e.num_tokens for e in estimates]
    if name == "smc":
        log_p = runs_corpus_log_likelihood([e.diagnostics.run_log_likelihoods for e in estimates],
                                           [e.diagnostics.run_sizes for e in estimates])
        return math.exp(-log_p / total_tokens(tokens, len(estimates)))
    if name == "is":
        return corpus_ppl([e.log_weights for e in estimates], tokens)
    return instance_perplexity(estimates)


def perplexity_stderr(estimates: Sequence[DocumentEstimate], level: str) -> float:
    """Monte Carlo standard error of the ``level`` (instance or corpus) perplexity, documents fixed.

    IS: standard deviation of the perplexity over bootstrap resamples of the K samples. SMC (delta method,
    Lee-Whiteley variances): instance level PPL·√(Σ_n se_n²)/Σ_n T_n; corpus level PPL·√(Var(p̂)/p̂²)/Σ_n T_n over
    the paired runs. Exact and beam: 0.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    name = corpus_estimator(estimates)
    tokens = [e.num_tokens for e in estimates]
    if name == "is":
        return is_perplexity_stderr([e.log_weights for e in estimates], tokens, level=level)
    if name != "smc":
        return 0.0
    total = total_tokens(tokens, len(estimates))
    if level == "instance":
        se = math.sqrt(sum(e.diagnostics.log_likelihood_se ** 2 for e in estimates))
        return instance_perplexity(estimates) * se / total
    rel_var = runs_corpus_relative_variance([e.diagnostics.run_log_likelihoods for e in estimates],
                                            [e.diagnostics.run_sizes for e in estimates],
                                            [e.diagnostics.run_relative_variances for e in estimates])
    return corpus_perplexity(estimates) * math.sqrt(rel_var) / total
