"""Sequential Monte Carlo (a particle filter with adaptive systematic resampling): an unbiased estimator of p(x).

One SMC run with N particles: for t = 0..T-1 every particle draws z_t ~ q_τ(z_t | x, z_<t) and multiplies its weight
by the incremental weight p(x_t, z_t | x_<t, z_<t) / q_τ(z_t | x, z_<t); whenever the effective sample size
(Σ w)² / Σ w² of the current weights falls below ``resample_threshold · N`` (and t < T-1), the run banks
log mean_k w_k, resamples N ancestors systematically in proportion to w and resets every weight to 1. Then
log p̂ = Σ over resampling epochs of log mean_k w_k (float64), and E[p̂] = p(x): the estimate is unbiased for any
threshold; threshold 0 never resamples and is importance sampling with the same proposal.

K particles are split into R = max(``smc_runs``, ⌈K / SAMPLE_BLOCK⌉) independent runs of near-equal size N_r, and
p̂ = Σ_r (N_r / K) p̂_r is again unbiased. Consecutive runs are packed into blocks of at most SAMPLE_BLOCK particles
(bounded memory for any K) that the model advances as one batch; block b draws from the random stream of IS block b
(seeded by (seed, b, document)), and every run resamples only among its own particles. Uncertainty: the spread of
the R runs (an honest estimate of Var(p̂) whenever it is finite) and, from each run's genealogy (Eve indices), the
Lee & Whiteley (2018) estimate.

The particle filter and the estimator live here; the resampling scheme (runs, blocks, ESS, systematic resampling) in
``resampling``, the variance estimators (``SMCRun``, ``SMCDiagnostics``, Lee-Whiteley, the runs' spread) in
``smc_variance``. Their names are importable from here as well.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ..errors import InputError
from ..protocol import has_stepwise, missing_stepwise_methods
from .aggregate import log_mean_exp
from .base import STOCHASTIC_BOUND, DocumentEstimate, Estimator, sample_sizes, sampling_advice
from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .resampling import blocks_of_runs, resample_runs, run_sizes, runs_log_ess, systematic_resample
from .seeding import document_generator, stage_block
from .settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS, EstimatorSettings
from .smc_variance import (
    SMCDiagnostics,
    SMCRun,
    importance_runs,
    lee_whiteley_relative_variance,
    runs_corpus_log_likelihood,
    smc_diagnostics,
)

# the resampling scheme (``resampling``) and the variance estimators (``smc_variance``) by the names they had here
__all__ = [
    "SMC",
    "SMCDiagnostics",
    "SMCEstimate",
    "SMCRun",
    "SequentialMonteCarlo",
    "draw_smc_log_weights",
    "importance_runs",
    "lee_whiteley_relative_variance",
    "run_sizes",
    "runs_corpus_log_likelihood",
    "smc_block",
    "smc_diagnostics",
    "smc_log_weights",
    "systematic_resample",
]


def _check_increment(inc: torch.Tensor, n: int, t: int, doc: str) -> torch.Tensor:
    """The increments as float64 on the CPU (under no_grad: no graph to detach from), checked for shape, NaN, +inf."""
    if inc.dtype != torch.float64 or inc.device.type != "cpu":
        inc = inc.to("cpu", torch.float64)
    if inc.shape != (n,):
        raise ValueError(
            f"{doc}: smc_step returned {tuple(inc.shape)} incremental weights at token {t} for {n} particles"
        )
    # max is NaN with any NaN and +inf with any +inf: one reduction on the usual path
    if float(inc.max()) < math.inf:
        return inc
    bad = torch.isnan(inc) | torch.isposinf(inc)
    if bad.any():
        raise ValueError(
            f"{doc}: smc_step returned {int(bad.sum())} NaN or +inf log incremental weights at token {t} "
            "(log p NaN or log q = -inf for a drawn z_t)"
        )
    return inc


@torch.no_grad()
def smc_block(
    model, x: torch.Tensor, sizes: list[int], settings: EstimatorSettings, generator, doc: str = "document"
) -> list[SMCRun]:
    """R independent SMC runs of N_1..N_R particles over the text x [T], advanced together: one ``smc_init`` of
    Σ_r N_r particles, so the model steps every particle of the block in one batch, and resampling only within a run
    (ancestors of run r come from run r, drawn from the block's one random stream; see the module docstring).

    ``sizes``: N_1..N_R; ``settings``: the proposal's ``temperature`` and ``peek`` and the ``resample_threshold``
    (the sizes, not ``settings.num_samples``, count the particles); ``doc`` names the document in errors."""
    T, R = int(x.shape[0]), len(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    runs = [slice(starts[r], starts[r + 1]) for r in range(R)]
    state = model.smc_init(x, starts[-1], temperature=settings.temperature, peek=settings.peek)
    log_w = torch.zeros(starts[-1], dtype=torch.float64)
    # Eve index: the first-generation ancestor of every particle
    eve = torch.arange(starts[-1])
    # per run: Σ over finished epochs of log mean_k w_k
    banked = [0.0] * R
    ess, resampled = [[] for _ in runs], [0] * R
    for t in range(T):
        state, inc = model.smc_step(state, t, generator)
        log_w = log_w + _check_increment(inc, starts[-1], t, doc)
        chosen = []
        for r, log_ess in enumerate(runs_log_ess(log_w, sizes)):
            # every particle of the run has p = 0: its p̂ is 0 from here on
            if log_ess == -math.inf:
                ess[r].append(0.0)
                continue
            ess[r].append(math.exp(log_ess))
            if t < T - 1 and ess[r][-1] < settings.resample_threshold * sizes[r]:
                banked[r] += float(torch.logsumexp(log_w[runs[r]], 0)) - math.log(sizes[r])
                resampled[r] += 1
                chosen.append(r)
        if chosen:
            ancestors = resample_runs(log_w, starts, sizes, chosen, generator)
            for r in chosen:
                log_w[runs[r]] = 0.0
            state = model.smc_reorder(state, ancestors)
            eve = eve.index_select(0, ancestors)
    return [
        _finished_run(log_w[run], eve[run] - run.start, banked[r], resampled[r], ess[r])
        for r, run in enumerate(runs)
    ]


def _finished_run(log_w: torch.Tensor, eve: torch.Tensor, banked: float, resampled: int, ess: list) -> SMCRun:
    """A run's record from its last-epoch log weights [N], Eve indices [N] (0..N−1) and banked log means."""
    if torch.isneginf(log_w).all():
        return SMCRun(np.full(log_w.shape[0], -np.inf), -math.inf, resampled, ess, 0.0)
    log_likelihood = banked + float(torch.logsumexp(log_w, 0)) - math.log(log_w.shape[0])
    return SMCRun(
        banked + log_w.numpy(),
        log_likelihood,
        resampled,
        ess,
        lee_whiteley_relative_variance(log_w, eve, resampled),
    )


@torch.no_grad()
def draw_smc_log_weights(
    model,
    x: torch.Tensor,
    settings: EstimatorSettings,
    document: str = "",
    device: torch.device | str = "cpu",
    progress=None,
    stage: int = 0,
) -> tuple[np.ndarray, SMCDiagnostics]:
    """K final SMC log weights, float64 [K] (log p̂ = logsumexp − log K), and the run diagnostics of one document.

    The weight of particle k of run r is log p̂_r(earlier epochs) + log w_k(last epoch), so mean_k exp = Σ_r N_r p̂_r / K.
    """
    doc = f"document {document[:60]!r}"
    sizes = run_sizes(settings.num_samples, settings.smc_runs)
    runs = []
    for b, block in enumerate(blocks_of_runs(sizes)):
        generator = document_generator(settings.seed, document, stage_block(b, stage), device=device)
        runs += smc_block(model, x, block, settings, generator, doc)
        if progress is not None:
            progress.update(sum(block))
    log_weights = np.concatenate([run.log_weights for run in runs])
    if np.isneginf(log_weights).all():
        raise ValueError(
            f"{doc}: all {settings.num_samples} particles have p(x, z) = 0: the proposal misses the support of the "
            "model"
        )
    return log_weights, smc_diagnostics(runs, sizes, settings.resample_threshold, settings.temperature)


def smc_log_weights(
    model,
    x: torch.Tensor,
    *,
    num_samples: int,
    temperature: float = 1.0,
    peek: bool = True,
    seed: int = 0,
    document: str = "",
    resample_threshold: float = DEFAULT_RESAMPLE_THRESHOLD,
    smc_runs: int = DEFAULT_SMC_RUNS,
    device: torch.device | str = "cpu",
    progress=None,
    stage: int = 0,
) -> tuple[np.ndarray, SMCDiagnostics]:
    """``draw_smc_log_weights`` with loose arguments, validated as ``EstimatorSettings`` and by the estimator (an
    InputError naming the document) and against the model (``UnsupportedError`` without the stepwise part;
    ``Estimator.settings_for``).

    Parameters
    ----------
    model : StepwiseLatentLM
        A model with the stepwise part of the contract.
    x : torch.Tensor
        The document's tokens, LongTensor [T].
    num_samples, temperature, peek, seed, resample_threshold, smc_runs
        As in ``EstimatorSettings``.
    document : str
        The document's text: with ``seed``, it seeds the random streams.

    Returns
    -------
    tuple of numpy.ndarray and SMCDiagnostics
        The K final log weights, float64 [K], and the runs' diagnostics.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> lw, diag = smc_log_weights(hmm, x, num_samples=64, seed=1, document="the cat sat")
    >>> lw.shape, diag.smc_runs, abs(diag.log_likelihood - float(hmm.log_marginal(x))) < 0.2
    ((64,), 4, True)
    """
    settings = SMC.settings_for(
        model, document, num_samples=num_samples, temperature=temperature, peek=peek, seed=seed,
        resample_threshold=resample_threshold, smc_runs=smc_runs,
    )  # fmt: skip
    return draw_smc_log_weights(model, x, settings, document, device, progress, stage)


@dataclass
class SMCEstimate(DocumentEstimate):
    """An SMC estimate: the K final particle log weights [K] (mean of exp = p̂; neither independent nor
    exchangeable, so no ESS or k̂ of them) and the R runs' ``SMCDiagnostics``."""

    estimator: ClassVar[str] = "smc"
    diagnostics_type: ClassVar[type] = SMCDiagnostics
    log_weights: np.ndarray | None = None
    diagnostics: SMCDiagnostics | None = field(default=None, kw_only=True)

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        """v̂ from the runs (``SMCDiagnostics.relative_variance``) with R − 1 degrees of freedom, trusted where
        ``policy.smc_doubt`` finds nothing; v = 0 for a document without tokens."""
        if self.num_tokens == 0:
            return DocumentError(self.log_likelihood, 0.0, math.inf)
        d = self.diagnostics
        return DocumentError(self.log_likelihood, d.relative_variance, d.smc_runs - 1.0, policy.smc_doubt(d))

    def diagnostic_items(self) -> dict[str, float]:
        """Resampling steps per run and the ESS over tokens (least and mean) of a document with tokens."""
        if self.num_tokens == 0:
            return {}
        d = self.diagnostics
        return {
            "smc_resampling_steps": d.resampling_steps,
            "smc_ess_min": d.ess_min,
            "smc_ess_mean": d.ess_mean,
        }


class SequentialMonteCarlo(Estimator):
    """``estimator=smc``: R independent particle filters per document (module docstring)."""

    name = "smc"
    result = SMCEstimate
    kind = STOCHASTIC_BOUND
    draws_samples = True
    settings_fields = ("num_samples", "temperature", "peek", "seed", "resample_threshold", "smc_runs")

    def missing(self, model) -> str | None:
        missing = missing_stepwise_methods(model)
        if not missing:
            return None
        return (
            f"estimator=smc needs the stepwise part of the contract, but {type(model).__name__} does not define "
            f"{', '.join(missing)} (see lm_latent_eval.protocol.StepwiseLatentLM)"
        )

    def auto_reason(self, model) -> str | None:
        if not has_stepwise(model):
            return None
        return f"auto: SMC, {type(model).__name__} has the stepwise part"

    def check(self, settings: EstimatorSettings) -> None:
        """K particles must form at least ``smc_runs`` runs."""
        if settings.num_samples < settings.smc_runs:
            raise InputError(
                f"num_samples = {settings.num_samples} particles cannot form smc_runs = "
                f"{settings.smc_runs} runs"
            )

    def advice(self, settings, model=None) -> list[str]:
        runs = ["smc_runs=4 (runs give the Monte Carlo error)"] if settings.smc_runs < 2 else []
        return runs + sampling_advice(settings)

    def estimate(
        self, model, x, document, settings, *, device="cpu", progress=None, stage=0, diagnostics=False
    ):
        lw, diag = draw_smc_log_weights(model, x, settings, document, device, progress, stage)
        return SMCEstimate(document, int(x.numel()), float(log_mean_exp(lw)), lw, diagnostics=diag)

    def empty(self, document, settings, model) -> SMCEstimate:
        """Every run's p̂ = 1 exactly, nothing resampled, no ESS."""
        sizes = run_sizes(settings.num_samples, settings.smc_runs)
        runs = [SMCRun(np.zeros(n), 0.0, 0, [], 0.0) for n in sizes]
        diag = smc_diagnostics(runs, sizes, settings.resample_threshold)
        return SMCEstimate(document, 0, 0.0, np.zeros(settings.num_samples), diagnostics=diag)

    def corpus_diagnostics(self, estimates: Sequence[SMCEstimate], progress: bool = False) -> dict:
        """The runs per document, ESS over tokens (min, mean), resampling steps per run, samples per document."""
        d = [e.diagnostics for e in estimates]
        return sample_sizes([x.num_samples for x in d]) | {
            "smc_runs": int(min(x.smc_runs for x in d)),
            "ess_min": float(min(x.ess_min for x in d)),
            "ess_mean": float(np.mean([x.ess_mean for x in d])),
            "resampling_steps": float(np.mean([x.resampling_steps for x in d])),
        }

    def corpus_log_likelihood(self, estimates: Sequence[SMCEstimate]) -> float | None:
        """Run r of every document forms one corpus sample: needs the same runs for every document."""
        if len({tuple(e.diagnostics.run_sizes) for e in estimates}) != 1:
            return None
        return runs_corpus_log_likelihood(
            [e.diagnostics.run_log_likelihoods for e in estimates],
            [e.diagnostics.run_sizes for e in estimates],
        )


SMC = SequentialMonteCarlo()
