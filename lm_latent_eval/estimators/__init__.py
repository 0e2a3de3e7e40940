"""Estimators of log p(x) = log Σ_z p(x, z): importance sampling (``is``), sequential Monte Carlo (``smc``), beam lower
bound (``beam``), ``exact``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from ..protocol import LatentLM, has_unknown_word_penalty
from .aggregate import corpus_ppl, instance_ppl, log_mean_exp
from .diagnostics import summarize
from .importance import check_sampling_args, importance_log_weights, sample_block
from .marginal import beam_log_marginal, exact_log_marginal
from .smc import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS, check_smc_args, smc_log_weights

ESTIMATORS = ("is", "smc", "beam", "exact")
SAMPLING_ESTIMATORS = ("is", "smc")  # the ones that draw K samples and return K log weights


@dataclass(frozen=True)
class EstimatorSettings:
    """Every choice that changes an estimate; recorded with each result."""

    estimator: str = "is"
    num_samples: int = 100
    temperature: float = 1.0
    peek: bool = True
    beam_size: int = 10
    seed: int = 1234
    batch_size: int | None = None  # particles per log_joint call, None: one sample block (memory only; never a number)
    resample_threshold: float = DEFAULT_RESAMPLE_THRESHOLD  # smc: resample when ESS < threshold · particles of a run
    smc_runs: int = DEFAULT_SMC_RUNS  # smc: independent runs per document (their spread is the standard error)

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.estimator in SAMPLING_ESTIMATORS:
            check_sampling_args(self.num_samples, self.temperature, "settings")
        if self.estimator == "smc":
            check_smc_args(self.resample_threshold, self.smc_runs, self.num_samples)
        if self.estimator == "beam" and (not isinstance(self.beam_size, int) or self.beam_size <= 0):
            raise ValueError(f"beam_size must be a positive integer, got {self.beam_size!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size <= 0):
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")

    def as_dict(self, device: torch.device | str = "cpu") -> dict:
        """The settings that matter for this estimator on ``device`` (batch_size excluded: it never changes a number)."""
        d = dataclasses.asdict(self)
        d.pop("batch_size")
        if self.estimator not in SAMPLING_ESTIMATORS:
            for key in ("num_samples", "temperature", "peek", "seed"):
                d.pop(key)
        if self.estimator != "smc":
            d.pop("resample_threshold")
            d.pop("smc_runs")
        if self.estimator != "beam":
            d.pop("beam_size")
        d["sample_block"] = sample_block(device) if self.estimator in SAMPLING_ESTIMATORS else None
        return {k: v for k, v in d.items() if v is not None}


@dataclass
class DocumentEstimate:
    """log p̂(x) of one document with its token count and, for IS / SMC, the K log weights (mean of exp = p̂).

    ``unk_penalty`` [K]: for a model with an unknown-word penalty (``has_unknown_word_penalty``), the nats that
    log_joint subtracted from each sample; the log weights include it (UPP), ``log_weights + unk_penalty`` do not (PPL).
    IS only: SMC resamples on the penalized weights, so it estimates the UPP's p only (``unk_penalty`` None).
    Under SMC the log weights are the final particle weights (see estimators/smc.py) and ``diagnostics`` always holds
    the run diagnostics (``estimator: smc``, resampling steps, ESS over tokens, run log-likelihoods, standard error).
    """

    document: str
    num_tokens: int
    log_likelihood: float
    log_weights: np.ndarray | None = None
    diagnostics: dict = field(default_factory=dict)
    unk_penalty: np.ndarray | None = None

    def log_weights_without_unk_penalty(self) -> np.ndarray | None:
        """log p(x, z_k) − log q(z_k | x) without the unknown-word penalty [K]; None when it was not recorded."""
        if self.log_weights is None or self.unk_penalty is None:
            return None
        return self.log_weights + self.unk_penalty


def estimate_document(
    model: LatentLM, text: str, settings: EstimatorSettings, device="cpu", diagnostics: bool = False, progress=None
) -> DocumentEstimate:
    """Tokenize ``text`` and estimate its log probability; an empty text has log p = 0 over 0 tokens."""
    x = model.tokenize(text)
    penalized = settings.estimator == "is" and has_unknown_word_penalty(model)
    if x.numel() == 0:
        lw = np.zeros(settings.num_samples) if settings.estimator in SAMPLING_ESTIMATORS else None
        return DocumentEstimate(text, 0, 0.0, lw, _empty_smc_diagnostics(settings),
                                np.zeros(settings.num_samples) if penalized else None)
    x = x.to(device)
    if settings.estimator == "exact":
        return DocumentEstimate(text, int(x.numel()), exact_log_marginal(model, x, text))
    if settings.estimator == "beam":
        return DocumentEstimate(text, int(x.numel()), beam_log_marginal(model, x, settings.beam_size, text))
    if settings.estimator == "smc":
        lw, diag = smc_log_weights(
            model, x, settings.num_samples, settings.temperature, settings.peek, settings.seed, text,
            settings.resample_threshold, settings.smc_runs, device, progress,
        )
        return DocumentEstimate(text, int(x.numel()), float(log_mean_exp(lw)), lw, diag)
    penalty = np.zeros(settings.num_samples) if penalized else None
    lw = importance_log_weights(
        model, x, settings.num_samples, settings.temperature, settings.peek, settings.seed, text,
        settings.batch_size, device, progress, unknown_penalty=penalty,
    )
    diag = summarize(lw, seed=settings.seed) if diagnostics else {}
    return DocumentEstimate(text, int(x.numel()), float(log_mean_exp(lw)), lw, diag, penalty)


def _empty_smc_diagnostics(settings: EstimatorSettings) -> dict:
    """SMC diagnostics of a 0-token document: every run's p̂ = 1 exactly, nothing resampled, no ESS."""
    if settings.estimator != "smc":
        return {}
    from .smc import run_sizes, smc_diagnostics

    sizes = run_sizes(settings.num_samples, settings.smc_runs)
    runs = [{"log_likelihood": 0.0, "resampling_steps": 0, "ess": [], "relative_variance": 0.0} for _ in sizes]
    return smc_diagnostics(runs, sizes, settings.resample_threshold)


__all__ = [
    "ESTIMATORS",
    "SAMPLING_ESTIMATORS",
    "DocumentEstimate",
    "EstimatorSettings",
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
