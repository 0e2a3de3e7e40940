"""One document's estimate: ``estimate_document(model, text, settings) -> DocumentEstimate``.

log p̂(x) by importance sampling (``is``), sequential Monte Carlo (``smc``), the beam lower bound (``beam``) or the
model's exact marginal (``exact``); under IS and SMC also the K log weights (mean of exp = p̂) and diagnostics.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..protocol import LatentLM, has_unknown_word_penalty
from .aggregate import log_mean_exp
from .diagnostics import ISDiagnostics, importance_error, summarize
from .importance import importance_log_weights
from .intervals import DocumentError
from .marginal import beam_log_marginal, exact_log_marginal
from .settings import EstimatorSettings
from .smc import SMCDiagnostics, empty_document_diagnostics, smc_log_weights

MIN_RUN_SIZE = (
    16  # SMC runs smaller than this give no trusted error (as IS at K ≤ 10, where PSIS's threshold is 0)
)
MAX_RUN_SHARE = (
    0.8  # one SMC run carrying more of p̂ than this: v̂ sits at the runs' ceiling and is not trusted
)


@dataclass
class DocumentEstimate:
    """log p̂(x) of one document with its token count and, for IS / SMC, the K log weights (mean of exp = p̂).

    ``unk_penalty`` [K]: for a model with an unknown-word penalty (``has_unknown_word_penalty``), the nats that
    log_joint subtracted from each sample; the log weights include it (UPP), ``log_weights + unk_penalty`` do not (PPL).
    IS only: SMC resamples on the penalized weights, so it estimates the UPP's p only (``unk_penalty`` None).
    Under SMC the log weights are the final particle weights (see estimators/smc.py) and ``diagnostics`` always holds
    the run diagnostics; under IS it holds ``ISDiagnostics`` when they were asked for. ``stage_log_likelihoods``: under
    a precision target, log p̂ of every stage (each drawn afresh, ``estimators.adaptive``); the last is the estimate.
    """

    document: str
    num_tokens: int
    log_likelihood: float
    estimator: str = "is"
    log_weights: np.ndarray | None = None
    diagnostics: ISDiagnostics | SMCDiagnostics | None = None
    unk_penalty: np.ndarray | None = None
    stage_log_likelihoods: list[float] | None = None

    def log_weights_without_unk_penalty(self) -> np.ndarray | None:
        """log p(x, z_k) − log q(z_k | x) without the unknown-word penalty [K]; None when it was not recorded."""
        if self.log_weights is None or self.unk_penalty is None:
            return None
        return self.log_weights + self.unk_penalty

    def without_unk_penalty(self) -> DocumentEstimate | None:
        """The same samples scored without the unknown-word penalty (PPL rather than UPP); None when not recorded."""
        plain = self.log_weights_without_unk_penalty()
        if plain is None:
            return None
        return DocumentEstimate(
            self.document, self.num_tokens, float(log_mean_exp(plain)), self.estimator, plain
        )

    def to_json(self) -> dict:
        """A JSON-ready record (lists for arrays, the diagnostics as a dict); ``from_json`` reads it back."""
        return {
            "document": self.document,
            "num_tokens": self.num_tokens,
            "log_likelihood": self.log_likelihood,
            "estimator": self.estimator,
            "log_weights": None
            if self.log_weights is None
            else np.asarray(self.log_weights, np.float64).tolist(),
            "diagnostics": None if self.diagnostics is None else dataclasses.asdict(self.diagnostics),
            "unk_penalty": None
            if self.unk_penalty is None
            else np.asarray(self.unk_penalty, np.float64).tolist(),
            "stage_log_likelihoods": self.stage_log_likelihoods,
        }

    @classmethod
    def from_json(cls, record: dict) -> DocumentEstimate:
        """The estimate written by ``to_json`` (arrays back as float64 numpy arrays)."""
        diag = record.get("diagnostics")
        diag_cls = {"is": ISDiagnostics, "smc": SMCDiagnostics}.get(record["estimator"])
        return cls(
            str(record.get("document", "")),
            int(record["num_tokens"]),
            float(record["log_likelihood"]),
            record["estimator"],
            _array(record.get("log_weights")),
            None if diag is None or diag_cls is None else diag_cls(**diag),
            _array(record.get("unk_penalty")),
            record.get("stage_log_likelihoods"),
        )

    def error(self) -> DocumentError:
        """log p̂, v̂ = estimated Var(p̂)/p² and whether v̂ can be trusted (see ``intervals``): exact estimates and
        empty documents have v = 0; IS from the weights (``diagnostics.importance_error``); SMC from its runs (R ≥ 2 of
        at least MIN_RUN_SIZE particles, none carrying more than MAX_RUN_SHARE of p̂, proposal temperature ≥ 1);
        a beam sum is a bound, not an estimate."""
        if self.num_tokens == 0 or self.estimator == "exact":
            return DocumentError(self.log_likelihood, 0.0, math.inf)
        if self.estimator == "beam":
            return DocumentError(
                self.log_likelihood, math.nan, 0.0, "a beam sum is a lower bound, not an estimate"
            )
        if self.estimator == "smc":
            d = self.diagnostics
            reason = None
            if d.smc_runs < 2:
                reason = "one SMC run has no honest error estimate (use smc_runs ≥ 2)"
            elif min(d.run_sizes) < MIN_RUN_SIZE:
                reason = f"SMC runs of fewer than {MIN_RUN_SIZE} particles cannot show the weights' tail"
            elif d.largest_run_share > MAX_RUN_SHARE:
                reason = (
                    f"one SMC run carries over {MAX_RUN_SHARE:.0%} of p̂ (a latent path the other runs missed): "
                    "the runs' spread cannot measure how rarely it is found; more particles per run are needed"
                )
            elif d.temperature < 1.0:
                reason = (
                    f"a sharpened proposal (temperature {d.temperature:g} < 1) is lighter-tailed than the target: "
                    "its runs can agree while all of them miss the same probability mass"
                )
            return DocumentError(self.log_likelihood, d.relative_variance, d.smc_runs - 1.0, reason)
        return importance_error(self.log_weights)

    @property
    def importance_weights(self) -> np.ndarray | None:
        """The K log weights when they are exchangeable IS samples with informative diagnostics (ESS, Pareto k̂):
        an IS estimate of a document with tokens; None otherwise (SMC's final particle weights are not)."""
        return self.log_weights if self.estimator == "is" and self.num_tokens > 0 else None


def _array(values) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=np.float64)


def estimate_document(
    model: LatentLM,
    text: str,
    settings: EstimatorSettings,
    device="cpu",
    diagnostics: bool = False,
    progress=None,
    stage: int = 0,
) -> DocumentEstimate:
    """Tokenize ``text`` and estimate its log probability; an empty text has log p = 0 over 0 tokens. ``stage`` > 0
    draws from fresh random streams (a later stage of the precision target, ``estimators.adaptive``)."""
    settings, _ = settings.resolve(model)
    x = model.tokenize(text)
    name = settings.estimator
    penalized = name == "is" and has_unknown_word_penalty(model)
    if x.numel() == 0:
        return _empty_estimate(text, settings, penalized)
    x, n = x.to(device), int(x.numel())
    if name == "exact":
        return DocumentEstimate(text, n, exact_log_marginal(model, x, text), name)
    if name == "beam":
        return DocumentEstimate(text, n, beam_log_marginal(model, x, settings.beam_size, text), name)
    sampling = {
        "num_samples": settings.num_samples,
        "temperature": settings.temperature,
        "peek": settings.peek,
        "seed": settings.seed,
        "document": text,
        "device": device,
        "progress": progress,
        "stage": stage,
    }
    if name == "smc":
        lw, diag = smc_log_weights(
            model, x, resample_threshold=settings.resample_threshold, smc_runs=settings.smc_runs, **sampling
        )
        return DocumentEstimate(text, n, float(log_mean_exp(lw)), name, lw, diag)
    penalty = np.zeros(settings.num_samples) if penalized else None
    lw = importance_log_weights(model, x, batch_size=settings.batch_size, unknown_penalty=penalty, **sampling)
    diag = summarize(lw) if diagnostics else None
    return DocumentEstimate(text, n, float(log_mean_exp(lw)), name, lw, diag, penalty)


def _empty_estimate(text: str, settings: EstimatorSettings, penalized: bool) -> DocumentEstimate:
    """log p = 0 over 0 tokens; under IS / SMC K zero log weights (every p̂ = 1 exactly)."""
    k = settings.num_samples
    lw = np.zeros(k) if settings.samples else None
    diag = (
        empty_document_diagnostics(k, settings.smc_runs, settings.resample_threshold)
        if settings.estimator == "smc"
        else None
    )
    return DocumentEstimate(text, 0, 0.0, settings.estimator, lw, diag, np.zeros(k) if penalized else None)
