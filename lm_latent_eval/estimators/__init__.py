"""Estimators of log p(x) = log Σ_z p(x, z): importance sampling (``is``), sequential Monte Carlo (``smc``), beam lower
bound (``beam``), ``exact``; their aggregation over documents, diagnostics and intervals.

Modules: ``settings`` (EstimatorSettings), ``document`` (estimate_document, DocumentEstimate), ``importance``,
``smc``, ``marginal`` (beam, exact), ``seeding``, ``aggregate`` (perplexities), ``diagnostics`` (ESS, Pareto k̂),
``bootstrap``, ``intervals``.
"""

from __future__ import annotations

from .aggregate import corpus_ppl, instance_ppl, log_mean_exp
from .diagnostics import ISDiagnostics, summarize
from .document import DocumentEstimate, estimate_document
from .importance import importance_log_weights, sample_block
from .marginal import beam_log_marginal, exact_log_marginal
from .settings import ESTIMATORS, SAMPLING_ESTIMATORS, EstimatorSettings
from .smc import SMCDiagnostics, smc_log_weights

__all__ = [
    "ESTIMATORS",
    "SAMPLING_ESTIMATORS",
    "DocumentEstimate",
    "EstimatorSettings",
    "ISDiagnostics",
    "SMCDiagnostics",
    "beam_log_marginal",
    "corpus_ppl",
    "estimate_document",
    "exact_log_marginal",
    "importance_log_weights",
    "instance_ppl",
    "log_mean_exp",
    "sample_block",
    "smc_log_weights",
    "summarize",
]
