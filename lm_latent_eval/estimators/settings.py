"""Every choice that changes an estimate, as one frozen record: ``EstimatorSettings``.

Each field carries a one-line ``help`` in its metadata; the lm-eval backends derive their accepted ``model_args``,
their parsing and their error messages from these fields (harness/model_args.py), so a setting is declared once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from ..errors import InputError
from ..protocol import has_stepwise, has_tractable_marginal
from .importance import check_sampling_args, sample_block
from .smc import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS, check_smc_args

ESTIMATORS = ("auto", "is", "smc", "beam", "exact")
SAMPLING_ESTIMATORS = ("is", "smc")  # the ones that draw K samples and return K log weights
AUTO_TARGET_SE = 0.002  # estimator=auto's precision target (nats per token) unless target_se is given
MAX_SAMPLES_FACTOR = 256  # the precision target's default budget per document: 256 × num_samples


def _help(text: str) -> dict:
    return {"help": text}


@dataclass(frozen=True)
class EstimatorSettings:
    """Every choice that changes an estimate; recorded with each result."""

    estimator: str = field(
        default="auto",
        metadata=_help(
            "auto (exact where the model has a tractable marginal, else smc where it is stepwise, else is), is, smc, "
            "beam or exact"
        ),
    )
    num_samples: int = field(default=100, metadata=_help("K, samples (IS) or particles (SMC) per document"))
    temperature: float = field(default=1.0, metadata=_help("τ, divides every proposal logit"))
    peek: bool = field(default=True, metadata=_help("whether the proposal reads the token it labels"))
    beam_size: int = field(default=10, metadata=_help("k of the beam bound"))
    seed: int = field(default=1234, metadata=_help("with the document text, seeds every random stream"))
    batch_size: int | None = field(  # memory only; never changes a number
        default=None, metadata=_help("particles per log_joint call (memory only; None: one sample block)")
    )
    resample_threshold: float = field(
        default=DEFAULT_RESAMPLE_THRESHOLD,
        metadata=_help("SMC resamples when ESS < threshold · particles of a run; in [0, 1], 0 = never"),
    )
    smc_runs: int = field(
        default=DEFAULT_SMC_RUNS,
        metadata=_help(
            "independent SMC runs per document (their spread is the Monte Carlo error; at least 2 for an interval)"
        ),
    )
    target_se: float | None = field(
        default=None,
        metadata=_help(
            "precision target: more samples for the documents that need them until the Monte Carlo standard error of "
            f"log perplexity (nats per token) is at most this and a two-sided interval is honest (auto: "
            f"{AUTO_TARGET_SE}; 0: fixed num_samples)"
        ),
    )
    max_samples: int | None = field(
        default=None,
        metadata=_help(
            f"the precision target's budget per document (default {MAX_SAMPLES_FACTOR} × num_samples)"
        ),
    )

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise InputError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.estimator in (*SAMPLING_ESTIMATORS, "auto"):  # auto may pick a sampling estimator
            check_sampling_args(self.num_samples, self.temperature, "settings")
        if self.estimator == "smc":
            check_smc_args(self.resample_threshold, self.smc_runs, self.num_samples)
        if self.estimator == "beam" and (not isinstance(self.beam_size, int) or self.beam_size <= 0):
            raise InputError(f"beam_size must be a positive integer, got {self.beam_size!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size <= 0):
            raise InputError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if self.target_se is not None and not (
            isinstance(self.target_se, (int, float)) and self.target_se >= 0
        ):
            raise InputError(
                f"target_se must be a number ≥ 0 (nats per token; 0: no target), got {self.target_se!r}"
            )
        if self.max_samples is not None and (not isinstance(self.max_samples, int) or self.max_samples <= 0):
            raise InputError(f"max_samples must be a positive integer, got {self.max_samples!r}")

    def resolve(self, model) -> tuple[EstimatorSettings, str]:
        """The settings with ``auto`` replaced by the estimator it picks for ``model``, and why: exact where the model
        has a tractable marginal, SMC (with the precision target) where it has the stepwise part, IS otherwise."""
        if self.estimator != "auto":
            return self, f"estimator={self.estimator} as requested"
        name = type(model).__name__
        if has_tractable_marginal(model):
            return dataclasses.replace(
                self, estimator="exact"
            ), f"auto: exact, {name} has a tractable log_marginal"
        target = AUTO_TARGET_SE if self.target_se is None else self.target_se
        if has_stepwise(model):
            return (
                dataclasses.replace(self, estimator="smc", target_se=target),
                f"auto: SMC, {name} has the stepwise part (precision target {target} nats per token)",
            )
        return (
            dataclasses.replace(self, estimator="is", target_se=target),
            f"auto: IS, {name} has neither a tractable marginal nor the stepwise part (precision target {target})",
        )

    @property
    def adaptive(self) -> bool:
        """Whether the precision target draws more samples for the documents that need them."""
        return self.samples and bool(self.target_se)

    @property
    def sample_budget(self) -> int:
        """Samples per document the precision target may reach."""
        return self.max_samples or MAX_SAMPLES_FACTOR * self.num_samples

    @property
    def samples(self) -> bool:
        """Whether this estimator draws K samples (IS, SMC) and so has log weights and a random stream."""
        return self.estimator in SAMPLING_ESTIMATORS

    def as_dict(self, device: torch.device | str = "cpu") -> dict:
        """The settings that matter for this estimator on ``device`` (batch_size excluded: it never changes a number)."""
        d = dataclasses.asdict(self)
        d.pop("batch_size")
        if not self.samples:
            for key in ("num_samples", "temperature", "peek", "seed"):
                d.pop(key)
        if self.estimator != "smc":
            d.pop("resample_threshold")
            d.pop("smc_runs")
        if self.estimator != "beam":
            d.pop("beam_size")
        if not self.adaptive:
            d.pop("target_se")
            d.pop("max_samples")
        else:
            d["max_samples"] = self.sample_budget
        d["sample_block"] = sample_block(device) if self.samples else None
        return {k: v for k, v in d.items() if v is not None}
