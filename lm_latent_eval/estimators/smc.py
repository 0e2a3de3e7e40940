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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ..errors import InputError
from ..protocol import has_stepwise, missing_stepwise_methods
from ..tensors import inverse_cdf
from .aggregate import log_mean_exp
from .base import STOCHASTIC_BOUND, DocumentEstimate, Estimator, sample_sizes, sampling_advice
from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .seeding import SAMPLE_BLOCK, document_generator, stage_block
from .settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS, EstimatorSettings, checked_settings


def run_sizes(num_samples: int, smc_runs: int) -> list[int]:
    """Particles per independent run: R = max(smc_runs, ⌈K / SAMPLE_BLOCK⌉) near-equal sizes summing to K."""
    runs = max(int(smc_runs), -(-int(num_samples) // SAMPLE_BLOCK))
    base, extra = divmod(int(num_samples), runs)
    return [base + (r < extra) for r in range(runs)]


def _runs_log_ess(log_w: torch.Tensor, sizes: list[int]) -> list[float]:
    """log ESS of each run's weights, the runs' particles consecutive in log_w [Σ N_r]; −inf for a run whose every
    weight is 0. Runs of equal size in one batched reduction (the HMM and other cheap models are loop-bound)."""
    if len(set(sizes)) == 1:
        normalised = torch.softmax(log_w.view(len(sizes), sizes[0]), 1)
        out = -torch.log(torch.linalg.vecdot(normalised, normalised))
        # NaN (softmax of −inf only) exactly where every weight is 0: log_w holds no NaN or +inf (_check_increment)
        return [-math.inf if math.isnan(v) else v for v in out.tolist()]
    bounds = np.cumsum([0, *sizes])
    return [
        _log_ess(log_w[a:b]) if not torch.isneginf(log_w[a:b]).all() else -math.inf
        for a, b in itertools.pairwise(bounds)
    ]


def _log_ess(log_w: torch.Tensor) -> float:
    """log of (Σ w)² / Σ w² = −log Σ W² (W = w / Σ w) from log weights (float64)."""
    normalised = torch.softmax(log_w, 0)
    return float(-torch.log(torch.dot(normalised, normalised)))


def systematic_resample(log_w: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N ancestors: a_k = min{i : Σ_{j≤i} W_j > (u + k) / N}, one u ~ U[0, 1); E[#children of i] = N W_i. [N] CPU.

    log_w [..., N]: each row resampled on its own (row by row the numbers of resampling it alone), its u drawn from
    the generator in row order: [..., N]."""
    n = log_w.shape[-1]
    device = generator.device if generator is not None else "cpu"
    u = torch.tensor(
        [
            float(torch.rand((), generator=generator, device=device, dtype=torch.float64))
            for _ in range(log_w.shape[:-1].numel())
        ],
        dtype=torch.float64,
    ).view(*log_w.shape[:-1], 1)
    cdf = torch.cumsum(torch.softmax(log_w.to("cpu", torch.float64), -1), -1)
    # rounding: the last particle closes the interval
    cdf[..., -1] = 1.0
    return inverse_cdf(None, (u + torch.arange(n, dtype=torch.float64)) / n, cumulative=cdf, per_row=True)


def _resample_runs(
    log_w: torch.Tensor, starts: list[int], sizes: list[int], chosen: list[int], generator
) -> torch.Tensor:
    """Ancestors of every particle of the block [Σ N_r]: runs ``chosen`` resampled systematically among their own
    particles (in run order, one u each), the others their own ancestors; runs of equal size in one batch."""
    ancestors = torch.arange(starts[-1])
    if len(set(sizes)) == 1:
        rows = torch.tensor(chosen)
        picked = systematic_resample(log_w.view(len(sizes), sizes[0]).index_select(0, rows), generator)
        ancestors.view(len(sizes), sizes[0])[rows] = picked + (rows * sizes[0]).unsqueeze(1)
        return ancestors
    for r in chosen:
        run = slice(starts[r], starts[r + 1])
        ancestors[run] = systematic_resample(log_w[run], generator) + run.start
    return ancestors


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


@dataclass
class SMCRun:
    """One SMC run of N particles: final log weights [N] (mean of exp = p̂), log p̂, resampling count, ESS per token
    and the Lee-Whiteley estimate of Var(p̂)/p²."""

    log_weights: np.ndarray
    log_likelihood: float
    resampling_steps: int
    ess: list[float]
    relative_variance: float


@dataclass
class SMCDiagnostics:
    """What the R independent SMC runs of one document say about its estimate log p̂ (float64 throughout).

    ``relative_variance`` is v̂, the estimate of Var(p̂)/p² that intervals use: with R ≥ 2 runs the larger of the
    spread of the runs (``runs_relative_variance``: unbiased for Var(p̂) given finite variance) and the runs' pooled
    Lee-Whiteley estimates (``lee_whiteley_relative_variance``: from each run's genealogy, too small when weights are
    heavy-tailed, NaN when the estimator goes negative); with one run the Lee-Whiteley estimate alone.
    ``log_likelihood_stderr`` = √v̂ (delta method). ESS over tokens is summed over runs (effective particles out of K);
    ``resampling_steps`` is per run, mean over runs.
    """

    num_samples: int
    resample_threshold: float
    log_likelihood: float
    smc_runs: int
    run_sizes: list[int]
    run_log_likelihoods: list[float]
    # Lee-Whiteley Var(p̂_r)/p̂_r² of every run
    run_relative_variances: list[float]
    relative_variance: float
    lee_whiteley_relative_variance: float
    runs_relative_variance: float
    log_likelihood_stderr: float
    # standard deviation of log p̂_r over the runs (R ≥ 2)
    run_log_likelihood_sd: float
    resampling_steps: float
    ess_min: float
    ess_mean: float
    # of the proposal: below 1 it is lighter-tailed than at 1, and v̂ is not trusted
    temperature: float = 1.0

    @property
    def largest_run_share(self) -> float:
        """max_r s_r p̂_r / p̂: the share of p̂ that the largest run carries (s_r = its share of the particles).

        Near 1 one run found a latent path the others missed, and the runs' spread sits at its ceiling (for R equal
        runs v̂ ≤ 1 whatever Var(p̂)/p² is): v̂ then measures how rarely that path is found only from below."""
        run_ll = np.asarray(self.run_log_likelihoods, dtype=np.float64)
        share = np.asarray(self.run_sizes, dtype=np.float64) / float(np.sum(self.run_sizes))
        if not np.isfinite(self.log_likelihood):
            return math.nan
        return float(np.max(share * np.exp(run_ll - self.log_likelihood)))


@torch.no_grad()
def smc_block(
    model, x, sizes, temperature, peek, resample_threshold, generator, doc="document"
) -> list[SMCRun]:
    """R independent SMC runs of N_1..N_R particles over the text x [T], advanced together: one ``smc_init`` of
    Σ_r N_r particles, so the model steps every particle of the block in one batch, and resampling only within a run
    (ancestors of run r come from run r, drawn from the block's one random stream; see the module docstring)."""
    T, R = int(x.shape[0]), len(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    runs = [slice(starts[r], starts[r + 1]) for r in range(R)]
    state = model.smc_init(x, starts[-1], temperature=temperature, peek=peek)
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
        for r, log_ess in enumerate(_runs_log_ess(log_w, sizes)):
            # every particle of the run has p = 0: its p̂ is 0 from here on
            if log_ess == -math.inf:
                ess[r].append(0.0)
                continue
            ess[r].append(math.exp(log_ess))
            if t < T - 1 and ess[r][-1] < resample_threshold * sizes[r]:
                banked[r] += float(torch.logsumexp(log_w[runs[r]], 0)) - math.log(sizes[r])
                resampled[r] += 1
                chosen.append(r)
        if chosen:
            ancestors = _resample_runs(log_w, starts, sizes, chosen, generator)
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


def blocks_of_runs(sizes: list[int], block: int = SAMPLE_BLOCK) -> list[list[int]]:
    """Consecutive runs packed into blocks of at most ``block`` particles (a run larger than a block is alone)."""
    blocks, current = [], []
    for n in sizes:
        if current and sum(current) + n > block:
            blocks.append(current)
            current = []
        current.append(n)
    return blocks + [current]


def lee_whiteley_relative_variance(log_w: torch.Tensor, eve: torch.Tensor, num_resampling: int) -> float:
    """Var(p̂)/p² estimated from one run: 1 − (N/(N−1))^{n+1} Σ_{i,j: E_i ≠ E_j} W_i W_j (Lee & Whiteley 2018).

    W: normalized final weights, E: Eve indices, n: resampling steps. Derived for multinomial resampling (adaptive
    resampling: Du & Guyader 2021); with n = 0 it is the usual IS estimate of var(w) / (N p²). NaN when N = 1.
    """
    n = log_w.shape[0]
    if n < 2:
        return math.nan
    W = torch.softmax(log_w, 0)
    # Σ_e (Σ_{E_i=e} W_i)²
    same_eve = float((torch.zeros(n, dtype=torch.float64).index_add_(0, eve, W) ** 2).sum())
    return 1.0 - (n / (n - 1)) ** (num_resampling + 1) * (1.0 - same_eve)


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
        runs += smc_block(
            model, x, block, settings.temperature, settings.peek, settings.resample_threshold, generator, doc
        )
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
    """``draw_smc_log_weights`` with loose arguments, validated as ``EstimatorSettings`` (an InputError naming the
    document) and against the model (``UnsupportedError`` without the stepwise part).

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
    settings = checked_settings(
        document, estimator="smc", num_samples=num_samples, temperature=temperature, peek=peek, seed=seed,
        resample_threshold=resample_threshold, smc_runs=smc_runs,
    )  # fmt: skip
    SMC.require(model)
    SMC.check(settings, document)
    return draw_smc_log_weights(model, x, settings, document, device, progress, stage)


def smc_diagnostics(
    runs: list[SMCRun], sizes: list[int], resample_threshold: float, temperature: float = 1.0
) -> SMCDiagnostics:
    """Resampling count, ESS over tokens (summed over runs: effective particles out of K), run spread and v̂."""
    sizes_arr = np.asarray(sizes, dtype=np.float64)
    run_ll = np.array([run.log_likelihood for run in runs], dtype=np.float64)
    share = sizes_arr / sizes_arr.sum()
    finite = run_ll[np.isfinite(run_ll)]
    log_p = float(np.log(np.sum(share * np.exp(run_ll - finite.max())))) + float(finite.max())
    ess = np.sum([run.ess for run in runs], axis=0) if runs[0].ess else np.zeros(0)
    # p̂_r / p̂
    rel = np.exp(run_ll - log_p)
    # p̂ = Σ_r s_r p̂_r, independent runs: Var(p̂)/p̂² ≈ Σ_r s_r² (p̂_r/p̂)² v̂_r (delta method)
    lee_whiteley = float(np.sum(share**2 * rel**2 * np.array([run.relative_variance for run in runs])))
    # a negative variance estimate says nothing
    lee_whiteley = lee_whiteley if lee_whiteley >= 0 else math.nan
    # the same from the spread of the runs alone
    if len(runs) > 1:
        runs_var = float(np.sum(share**2) * np.var(rel, ddof=1))
        spread = float(np.std(run_ll, ddof=1)) if np.isfinite(run_ll).all() else math.inf
        relative_variance = float(np.nanmax([runs_var, lee_whiteley]))
    else:
        runs_var, spread, relative_variance = math.nan, math.nan, lee_whiteley
    return SMCDiagnostics(
        num_samples=int(sizes_arr.sum()),
        resample_threshold=float(resample_threshold),
        log_likelihood=log_p,
        smc_runs=len(runs),
        run_sizes=[int(n) for n in sizes],
        run_log_likelihoods=run_ll.tolist(),
        run_relative_variances=[float(run.relative_variance) for run in runs],
        relative_variance=relative_variance,
        lee_whiteley_relative_variance=lee_whiteley,
        runs_relative_variance=runs_var,
        log_likelihood_stderr=math.sqrt(relative_variance) if relative_variance >= 0 else math.nan,
        run_log_likelihood_sd=spread,
        resampling_steps=float(np.mean([run.resampling_steps for run in runs])),
        ess_min=float(ess.min()) if ess.size else math.nan,
        ess_mean=float(ess.mean()) if ess.size else math.nan,
        temperature=float(temperature),
    )


def importance_runs(log_weights: np.ndarray, temperature: float = 1.0) -> SMCDiagnostics:
    """K independent importance weights [K] read as R independent runs: consecutive batches of
    ``run_sizes(K, DEFAULT_SMC_RUNS)`` draws, each an SMC run that never resamples (threshold 0).

    IS draws are independent, so the batches are independent, and batch r's p̂_r = mean of its weights is unbiased;
    p̂ = Σ_r (N_r / K) p̂_r is IS's own estimate. A run without resampling has Lee-Whiteley estimate
    (N Σ W² − 1)/(N − 1) = s²_w / (N w̄²), the batch's IS v̂ (``diagnostics.relative_variance``). So this is, draw
    for draw, SMC with ``resample_threshold=0``, and ``smc_diagnostics`` gives the same v̂ (the larger of the batches'
    spread and their pooled IS v̂, R − 1 degrees of freedom) that ``UncertaintyPolicy.smc_doubt`` judges for SMC.
    Consecutive batches, never interleaved: a proposal that returned its draws in some order (sorted by weight, say)
    makes them differ more, not less, so their spread errs large.

    Examples
    --------
    >>> d = importance_runs(np.log(np.tile([1.0, 3.0], 50)))
    >>> d.smc_runs, d.run_sizes, round(d.log_likelihood, 6) == round(math.log(2.0), 6), round(d.largest_run_share, 3)
    (4, [25, 25, 25, 25], True, 0.255)
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    sizes = run_sizes(lw.size, DEFAULT_SMC_RUNS)
    bounds = np.cumsum([0, *sizes])
    runs = []
    for a, b in itertools.pairwise(bounds):
        w = torch.from_numpy(lw[a:b])
        if b == a or torch.isneginf(w).all():
            runs.append(SMCRun(lw[a:b], -math.inf, 0, [], 0.0))
            continue
        ll = float(torch.logsumexp(w, 0)) - math.log(b - a)
        runs.append(SMCRun(lw[a:b], ll, 0, [], lee_whiteley_relative_variance(w, torch.arange(b - a), 0)))
    return smc_diagnostics(runs, sizes, 0.0, temperature)


def runs_corpus_log_likelihood(run_log_likelihoods, run_sizes_per_doc) -> float:
    """Corpus-level SMC: log Σ_r s_r Π_n p̂_{n,r}, run r of every document forming one corpus sample (unbiased)."""
    lls = [np.asarray(r, dtype=np.float64) for r in run_log_likelihoods]
    sizes = {tuple(int(n) for n in s) for s in run_sizes_per_doc}
    if len(sizes) != 1:
        raise ValueError(
            "corpus-level SMC pairs run r of every document, so every document needs the same runs "
            f"(same num_samples and smc_runs); got run sizes {sorted(sizes)}"
        )
    share = np.asarray(sizes.pop(), dtype=np.float64)
    # [R]: log of Π_n p̂_{n,r}
    joint = np.sum(lls, axis=0)
    top = joint[np.isfinite(joint)].max() if np.isfinite(joint).any() else 0.0
    return float(top + np.log(np.sum(share / share.sum() * np.exp(joint - top))))


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

    def check(self, settings: EstimatorSettings, document: str | None = None) -> None:
        """K particles must form at least ``smc_runs`` runs."""
        if settings.num_samples < settings.smc_runs:
            where = "settings" if document is None else f"document {document[:60]!r}"
            raise InputError(
                f"{where}: num_samples = {settings.num_samples} particles cannot form smc_runs = "
                f"{settings.smc_runs} runs"
            )

    def advice(self, settings, model) -> list[str]:
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
