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
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError, UnsupportedError
from ..protocol import missing_stepwise_methods
from ..tensors import inverse_cdf
from .importance import SAMPLE_BLOCK, check_sampling_args
from .seeding import document_generator, stage_block

DEFAULT_RESAMPLE_THRESHOLD = 0.5  # resample when ESS < 0.5 · N
DEFAULT_SMC_RUNS = (
    4  # independent runs per document: their spread is an honest Monte Carlo error (one run has none)
)


def check_smc_args(
    resample_threshold: float, smc_runs: int, num_samples: int | None = None, doc: str = "settings"
):
    """Reject a threshold outside [0, 1], R ≤ 0, or K < R, with an error naming the document."""
    if not (
        isinstance(resample_threshold, (int, float))
        and not isinstance(resample_threshold, bool)
        and 0.0 <= resample_threshold <= 1.0
    ):
        raise InputError(
            f"{doc}: resample_threshold must be a number in [0, 1] (resample when ESS < threshold · particles), "
            f"got {resample_threshold!r}"
        )
    if not isinstance(smc_runs, (int, np.integer)) or isinstance(smc_runs, bool) or smc_runs <= 0:
        raise InputError(f"{doc}: smc_runs must be a positive integer, got {smc_runs!r}")
    if num_samples is not None and isinstance(num_samples, (int, np.integer)) and num_samples < smc_runs:
        raise InputError(
            f"{doc}: num_samples = {num_samples} particles cannot form smc_runs = {smc_runs} runs"
        )


def require_stepwise(model) -> None:
    """A clear error when the model lacks the stepwise part of the contract that SMC needs."""
    missing = missing_stepwise_methods(model)
    if missing:
        raise UnsupportedError(
            f"estimator=smc needs the stepwise part of the contract, but {type(model).__name__} does not define "
            f"{', '.join(missing)} (see lm_latent_eval.protocol.StepwiseLatentLM); use estimator=is, beam or exact"
        )


def run_sizes(num_samples: int, smc_runs: int) -> list[int]:
    """Particles per independent run: R = max(smc_runs, ⌈K / SAMPLE_BLOCK⌉) near-equal sizes summing to K."""
    runs = max(int(smc_runs), -(-int(num_samples) // SAMPLE_BLOCK))
    base, extra = divmod(int(num_samples), runs)
    return [base + (r < extra) for r in range(runs)]


def _runs_log_ess(log_w: torch.Tensor, sizes: list[int]) -> list[float]:
    """log ESS of each run's weights, the runs' particles consecutive in log_w [Σ N_r]; −inf for a run whose every
    weight is 0. Runs of equal size in one batched reduction (the HMM and other cheap models are loop-bound)."""
    if len(set(sizes)) == 1:
        w = log_w.view(len(sizes), sizes[0])
        out = 2.0 * torch.logsumexp(w, 1) - torch.logsumexp(2.0 * w, 1)
        return torch.where(torch.isneginf(w).all(1), -math.inf, out).tolist()
    bounds = np.cumsum([0, *sizes])
    return [
        _log_ess(log_w[a:b]) if not torch.isneginf(log_w[a:b]).all() else -math.inf
        for a, b in itertools.pairwise(bounds)
    ]


def _log_ess(log_w: torch.Tensor) -> float:
    """log of (Σ w)² / Σ w² from log weights (float64)."""
    return float(2.0 * torch.logsumexp(log_w, 0) - torch.logsumexp(2.0 * log_w, 0))


def systematic_resample(log_w: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N ancestors: a_k = min{i : Σ_{j≤i} W_j > (u + k) / N}, one u ~ U[0, 1); E[#children of i] = N W_i. [N] CPU."""
    n = log_w.shape[0]
    device = generator.device if generator is not None else "cpu"
    u = float(torch.rand((), generator=generator, device=device, dtype=torch.float64))
    cdf = torch.cumsum(torch.softmax(log_w.to("cpu", torch.float64), 0), 0)
    cdf[-1] = 1.0  # rounding: the last particle closes the interval
    return inverse_cdf(None, (u + torch.arange(n, dtype=torch.float64)) / n, cumulative=cdf)


def _check_increment(inc: torch.Tensor, n: int, t: int, doc: str) -> torch.Tensor:
    inc = inc.detach().to("cpu", torch.float64)
    if inc.shape != (n,):
        raise ValueError(
            f"{doc}: smc_step returned {tuple(inc.shape)} incremental weights at token {t} for {n} particles"
        )
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
    ``log_likelihood_se`` = √v̂ (delta method). ESS over tokens is summed over runs (effective particles out of K);
    ``resampling_steps`` is per run, mean over runs.
    """

    num_samples: int
    resample_threshold: float
    log_likelihood: float
    smc_runs: int
    run_sizes: list[int]
    run_log_likelihoods: list[float]
    run_relative_variances: list[float]  # Lee-Whiteley Var(p̂_r)/p̂_r² of every run
    relative_variance: float
    lee_whiteley_relative_variance: float
    runs_relative_variance: float
    log_likelihood_se: float
    run_log_likelihood_sd: float  # standard deviation of log p̂_r over the runs (R ≥ 2)
    resampling_steps: float
    ess_min: float
    ess_mean: float
    temperature: float = 1.0  # of the proposal: below 1 it is lighter-tailed than at 1, and v̂ is not trusted

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
    eve = torch.arange(starts[-1])  # Eve index: the first-generation ancestor of every particle
    banked = [0.0] * R  # per run: Σ over finished epochs of log mean_k w_k
    ess, resampled = [[] for _ in runs], [0] * R
    for t in range(T):
        state, inc = model.smc_step(state, t, generator)
        log_w = log_w + _check_increment(inc, starts[-1], t, doc)
        ancestors = None
        for r, (run, log_ess) in enumerate(zip(runs, _runs_log_ess(log_w, sizes))):
            if log_ess == -math.inf:  # every particle of the run has p = 0: its p̂ is 0 from here on
                ess[r].append(0.0)
                continue
            ess[r].append(math.exp(log_ess))
            if t < T - 1 and ess[r][-1] < resample_threshold * sizes[r]:
                banked[r] += float(torch.logsumexp(log_w[run], 0)) - math.log(sizes[r])
                ancestors = torch.arange(starts[-1]) if ancestors is None else ancestors
                ancestors[run] = systematic_resample(log_w[run], generator) + run.start
                log_w[run] = 0.0
                resampled[r] += 1
        if ancestors is not None:
            state = model.smc_reorder(state, ancestors)
            eve = eve[ancestors]
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
    same_eve = float(
        (torch.zeros(n, dtype=torch.float64).index_add_(0, eve, W) ** 2).sum()
    )  # Σ_e (Σ_{E_i=e} W_i)²
    return 1.0 - (n / (n - 1)) ** (num_resampling + 1) * (1.0 - same_eve)


@torch.no_grad()
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
    """K final SMC log weights, float64 [K] (log p̂ = logsumexp − log K), and the run diagnostics of one document.

    The weight of particle k of run r is log p̂_r(earlier epochs) + log w_k(last epoch), so mean_k exp = Σ_r N_r p̂_r / K.
    """
    doc = f"document {document[:60]!r}"
    require_stepwise(model)
    check_sampling_args(num_samples, temperature, doc)
    check_smc_args(resample_threshold, smc_runs, num_samples, doc)
    sizes = run_sizes(num_samples, smc_runs)
    runs = []
    for b, block in enumerate(blocks_of_runs(sizes)):
        runs += smc_block(
            model,
            x,
            block,
            temperature,
            peek,
            resample_threshold,
            document_generator(seed, document, stage_block(b, stage), device=device),
            doc,
        )
        if progress is not None:
            progress.update(sum(block))
    log_weights = np.concatenate([run.log_weights for run in runs])
    if np.isneginf(log_weights).all():
        raise ValueError(
            f"{doc}: all {num_samples} particles have p(x, z) = 0: the proposal misses the support of the model"
        )
    return log_weights, smc_diagnostics(runs, sizes, resample_threshold, temperature)


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
    rel = np.exp(run_ll - log_p)  # p̂_r / p̂
    # p̂ = Σ_r s_r p̂_r, independent runs: Var(p̂)/p̂² ≈ Σ_r s_r² (p̂_r/p̂)² v̂_r (delta method)
    lee_whiteley = float(np.sum(share**2 * rel**2 * np.array([run.relative_variance for run in runs])))
    lee_whiteley = (
        lee_whiteley if lee_whiteley >= 0 else math.nan
    )  # a negative variance estimate says nothing
    if len(runs) > 1:  # the same from the spread of the runs alone
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
        log_likelihood_se=math.sqrt(relative_variance) if relative_variance >= 0 else math.nan,
        run_log_likelihood_sd=spread,
        resampling_steps=float(np.mean([run.resampling_steps for run in runs])),
        ess_min=float(ess.min()) if ess.size else math.nan,
        ess_mean=float(ess.mean()) if ess.size else math.nan,
        temperature=float(temperature),
    )


def empty_document_diagnostics(num_samples: int, smc_runs: int, resample_threshold: float) -> SMCDiagnostics:
    """SMC diagnostics of a 0-token document: every run's p̂ = 1 exactly, nothing resampled, no ESS."""
    sizes = run_sizes(num_samples, smc_runs)
    runs = [SMCRun(np.zeros(n), 0.0, 0, [], 0.0) for n in sizes]
    return smc_diagnostics(runs, sizes, resample_threshold)


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
    joint = np.sum(lls, axis=0)  # [R]: log of Π_n p̂_{n,r}
    top = joint[np.isfinite(joint)].max() if np.isfinite(joint).any() else 0.0
    return float(top + np.log(np.sum(share / share.sum() * np.exp(joint - top))))
