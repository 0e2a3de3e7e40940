"""Estimators of log p(x) = log Σ_z p(x, z), one module each, registered by name in one table; their aggregation over
documents, diagnostics and the uncertainty policy that decides every statement.

Floors of the import graph (each imports only the ones above it):

0. ``settings`` (EstimatorSettings: every choice, validated once), ``seeding`` (random streams), ``aggregate``
   (log mean exp, the paper's perplexities)
1. ``intervals`` (the math of an honest statement), ``diagnostics`` (ESS, Pareto k̂, convergence curves),
   ``resampling`` (SMC's runs, blocks, ESS and systematic resampling); ``decisions`` (a multiple-choice answer's
   flip probability) above ``intervals``
2. ``policy`` (UncertaintyPolicy: level, trust gates, remainder test, certified bound), ``smc_variance`` (SMC's runs
   and their variance estimators; IS's tied weights read as runs, ``importance_runs``)
3. ``base`` (the Estimator base class, the DocumentEstimate record, ResolvedEstimator: an estimator bound to its
   settings and model)
4. ``beam``, ``exact``, ``importance`` (``is``), ``smc`` (the particle filter), ``elbo``; ``workers`` (a stage's
   documents estimated side by side in forked CPU processes: the same numbers)
5. ``canonical`` (a beam of the one canonical configuration)
6. ``registry`` (ESTIMATORS, ``auto``'s choice, ``resolve``, the settings each estimator records)
7. ``document`` (estimate_document; importance_log_weights, smc_log_weights, beam_log_marginal of tokens),
   ``corpus`` (a corpus's figures and statement), ``adaptive`` (the precision target: a strategy over the sampling
   estimators)
8. ``report`` (the is_perplexity metric's report from raw weights)
"""

from __future__ import annotations

from .aggregate import corpus_ppl, instance_ppl, log_mean_exp
from .base import Estimator
from .beam import BeamEstimate
from .document import beam_log_marginal, estimate_document, importance_log_weights, smc_log_weights
from .exact import ExactEstimate, exact_log_marginal
from .importance import ISDiagnostics, ISEstimate, summarize
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .registry import ESTIMATORS, estimator_named, recorded_settings, resolve
from .run import ResolvedEstimator
from .seeding import sample_block
from .settings import EstimatorSettings
from .smc import SMCDiagnostics, SMCEstimate

__all__ = [
    "DEFAULT_POLICY",
    "ESTIMATORS",
    "BeamEstimate",
    "DocumentEstimate",
    "Estimator",
    "EstimatorSettings",
    "ExactEstimate",
    "ISDiagnostics",
    "ISEstimate",
    "ResolvedEstimator",
    "SMCDiagnostics",
    "SMCEstimate",
    "UncertaintyPolicy",
    "beam_log_marginal",
    "corpus_ppl",
    "estimate_document",
    "estimator_named",
    "exact_log_marginal",
    "importance_log_weights",
    "instance_ppl",
    "log_mean_exp",
    "recorded_settings",
    "resolve",
    "sample_block",
    "smc_log_weights",
    "summarize",
]
