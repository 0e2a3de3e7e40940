"""Sequential Monte Carlo (a particle filter with adaptive systematic resampling): an unbiased estimator of p(x).

One SMC run with N particles: for t = 0..T-1 every particle draws z_t ~ q_τ(z_t | x, z_<t) and multiplies its weight
by the incremental weight p(x_t, z_t | x_<t, z_<t) / q_τ(z_t | x, z_<t); whenever the effective sample size
(Σ w)² / Σ w² of the current weights falls below ``resample_threshold · N`` (and t < T-1), the run banks
log mean_k w_k, resamples N ancestors systematically in proportion to w and resets every weight to 1. Then
log p̂ = Σ over resampling epochs of log mean_k w_k (float64), and E[p̂] = p(x): the estimate is unbiased for any
threshold; threshold 0 never resamples and is importance sampling with the same proposal.

K particles are split into R = max(``smc_runs``, ⌈K / SAMPLE_BLOCK⌉) independent runs of near-equal size N_r
(bounded memory for any K); run r draws from the random stream of IS block r (seeded by (seed, r, document)), and
p̂ = Σ_r (N_r / K) p̂_r is again unbiased. Uncertainty without a bootstrap: the Lee & Whiteley (2018) estimate of
Var(p̂)/p² from each run's genealogy (Eve indices), and with R ≥ 2 runs also the spread of the p̂_r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..protocol import missing_stepwise_methods
from ..tensors import inverse_cdf
from .importance import SAMPLE_BLOCK, check_sampling_args
from .seeding import document_generator

DEFAULT_RESAMPLE_THRESHOLD = 0.5  # resample when ESS < 0.5 · N
DEFAULT_SMC_RUNS = 1  # independent runs per document (more runs of fewer particles: a spread, but more variance)


def check_smc_args(resample_threshold: float, smc_runs: int, num_samples: int | None = None, doc: str = "settings"):
    """Reject a threshold outside [0, 1], R ≤ 0, or K < R, with an error naming the document."""
    if not (isinstance(resample_threshold, (int, float)) and not isinstance(resample_threshold, bool)
            and 0.0 <= resample_threshold <= 1.0):
        raise ValueError(
            f"{doc}: resample_threshold must be a number in [0, 1] (resample when ESS < threshold · particles), "
            f"got {resample_threshold!r}"
        )
    if not isinstance(smc_runs, (int, np.integer)) or isinstance(smc_runs, bool) or smc_runs <= 0:
        raise ValueError(f"{doc}: smc_runs must be a positive integer, got {smc_runs!r}")
    if num_samples is not None and isinstance(num_samples, (int, np.integer)) and num_samples < smc_runs:
        raise ValueError(f"{doc}: num_samples = {num_samples} particles cannot form smc_runs = {smc_runs} runs")


def require_stepwise(model) -> None:
    """A clear error when the model lacks the stepwise part of the contract that SMC needs."""
    missing = missing_stepwise_methods(model)
    if missing:
        raise TypeError(
            f"estimator=smc needs the stepwise part of the contract, but {type(model).__name__} does not define "
            f"{', '.join(missing)} (see lm_latent_eval.protocol.StepwiseLatentLM); use estimator=is, beam or exact"
        )


def run_sizes(num_samples: int, smc_runs: int) -> list[int]:
    """Particles per independent run: R = max(smc_runs, ⌈K / SAMPLE_BLOCK⌉) near-equal sizes summing to K."""
    runs = max(int(smc_runs), -(-int(num_samples) // SAMPLE_BLOCK))
    base, extra = divmod(int(num_samples), runs)
    return [base + (r < extra) for r in range(runs)]


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
        raise ValueError(f"{doc}: smc_step returned {tuple(inc.shape)} incremental weights at token {t} for {n} particles")
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

    ``log_likelihood_se``: standard error of log p̂ by the delta method from every run's Lee-Whiteley variance;
    ``log_likelihood_se_runs`` the same from the spread of the R ≥ 2 runs (NaN for one run); ESS over tokens is
    summed over runs (effective particles out of K); ``resampling_steps`` is per run, mean over runs.
    """

    num_samples: int
    resample_threshold: float
    log_likelihood: float
    smc_runs: int
    run_sizes: list[int]
    run_log_likelihoods: list[float]
    run_relative_variances: list[float]  # Lee-Whiteley Var(p̂_r)/p̂_r² of every run
    log_likelihood_se: float
    log_likelihood_se_runs: float
    run_log_likelihood_sd: float  # standard deviation of log p̂_r over the runs (R ≥ 2)
    resampling_steps: float
    ess_min: float
    ess_mean: float


@torch.no_grad()
def smc_run(model, x, num_particles, temperature, peek, resample_threshold, generator, doc="document") -> SMCRun:
    """One SMC run of N particles over the text x [T] (see the module docstring)."""
    T = int(x.shape[0])
    state = model.smc_init(x, num_particles, temperature=temperature, peek=peek)
    log_w = torch.zeros(num_particles, dtype=torch.float64)
    eve = torch.arange(num_particles)  # Eve index: the first-generation ancestor of every particle
    banked = 0.0  # Σ over finished epochs of log mean_k w_k
    ess, resampled = [], 0
    for t in range(T):
        state, inc = model.smc_step(state, t, generator)
        log_w = log_w + _check_increment(inc, num_particles, t, doc)
        if torch.isneginf(log_w).all():  # every particle has p = 0: this run's p̂ is 0, nothing left to propagate
            return SMCRun(np.full(num_particles, -np.inf), -math.inf, resampled, ess + [0.0] * (T - t), 0.0)
        ess.append(math.exp(_log_ess(log_w)))
        if t < T - 1 and ess[-1] < resample_threshold * num_particles:
            banked += float(torch.logsumexp(log_w, 0)) - math.log(num_particles)
            ancestors = systematic_resample(log_w, generator)
            state = model.smc_reorder(state, ancestors)
            eve = eve[ancestors]
            log_w = torch.zeros_like(log_w)
            resampled += 1
    log_likelihood = banked + float(torch.logsumexp(log_w, 0)) - math.log(num_particles)
    return SMCRun(banked + log_w.numpy(), log_likelihood, resampled, ess,
                  lee_whiteley_relative_variance(log_w, eve, resampled))


def lee_whiteley_relative_variance(log_w: torch.Tensor, eve: torch.Tensor, num_resampling: int) -> float:
    """Var(p̂)/p² estimated from one run: 1 − (N/(N−1))^{n+1} Σ_{i,j: E_i ≠ E_j} W_i W_j (Lee & Whiteley 2018).

    W: normalized final weights, E: Eve indices, n: resampling steps. Derived for multinomial resampling (adaptive
    resampling: Du & Guyader 2021); with n = 0 it is the usual IS estimate of var(w) / (N p²). NaN when N = 1.
    """
    n = log_w.shape[0]
    if n < 2:
        return math.nan
    W = torch.softmax(log_w, 0)
    same_eve = float((torch.zeros(n, dtype=torch.float64).index_add_(0, eve, W) ** 2).sum())  # Σ_e (Σ_{E_i=e} W_i)²
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
    for r, n in enumerate(sizes):
        runs.append(smc_run(model, x, n, temperature, peek, resample_threshold,
                            document_generator(seed, document, r, device=device), doc))
        if progress is not None:
            progress.update(n)
    log_weights = np.concatenate([run.log_weights for run in runs])
    if np.isneginf(log_weights).all():
        raise ValueError(
            f"{doc}: all {num_samples} particles have p(x, z) = 0: the proposal misses the support of the model"
        )
    return log_weights, smc_diagnostics(runs, sizes, resample_threshold)


def smc_diagnostics(runs: list[SMCRun], sizes: list[int], resample_threshold: float) -> SMCDiagnostics:
    """Resampling count, ESS over tokens (summed over runs: effective particles out of K), run spread and its SE."""
    sizes_arr = np.asarray(sizes, dtype=np.float64)
    run_ll = np.array([run.log_likelihood for run in runs], dtype=np.float64)
    share = sizes_arr / sizes_arr.sum()
    finite = run_ll[np.isfinite(run_ll)]
    log_p = float(np.log(np.sum(share * np.exp(run_ll - finite.max())))) + float(finite.max())
    ess = np.sum([run.ess for run in runs], axis=0) if runs[0].ess else np.zeros(0)
    rel = np.exp(run_ll - log_p)  # p̂_r / p̂
    # p̂ = Σ_r s_r p̂_r, independent runs: Var(p̂)/p̂² ≈ Σ_r s_r² (p̂_r/p̂)² v̂_r; SE(log p̂) ≈ √ of it (delta method)
    rel_var = float(np.sum(share**2 * rel**2 * np.array([run.relative_variance for run in runs])))
    if len(runs) > 1:  # the same from the spread of the runs alone
        runs_se = float(math.sqrt(np.sum(share**2) * np.var(rel, ddof=1)))
        spread = float(np.std(run_ll, ddof=1)) if np.isfinite(run_ll).all() else math.inf
    else:
        runs_se, spread = math.nan, math.nan
    return SMCDiagnostics(
        num_samples=int(sizes_arr.sum()),
        resample_threshold=float(resample_threshold),
        log_likelihood=log_p,
        smc_runs=len(runs),
        run_sizes=[int(n) for n in sizes],
        run_log_likelihoods=run_ll.tolist(),
        run_relative_variances=[float(run.relative_variance) for run in runs],
        log_likelihood_se=math.sqrt(rel_var) if rel_var >= 0 else 0.0 if math.isfinite(rel_var) else math.nan,
        log_likelihood_se_runs=runs_se,
        run_log_likelihood_sd=spread,
        resampling_steps=float(np.mean([run.resampling_steps for run in runs])),
        ess_min=float(ess.min()) if ess.size else math.nan,
        ess_mean=float(ess.mean()) if ess.size else math.nan,
    )


def empty_document_diagnostics(num_samples: int, smc_runs: int, resample_threshold: float) -> SMCDiagnostics:
    """SMC diagnostics of a 0-token document: every run's p̂ = 1 exactly, nothing resampled, no ESS."""
    sizes = run_sizes(num_samples, smc_runs)
    runs = [SMCRun(np.zeros(n), 0.0, 0, [], 0.0) for n in sizes]
    return smc_diagnostics(runs, sizes, resample_threshold)


def runs_corpus_relative_variance(run_log_likelihoods, run_sizes_per_doc, run_relative_variances) -> float:
    """Var(p̂_corpus)/p̂_corpus² ≈ Σ_r s_r² (P_r/P̂)² Σ_n v_{n,r} (delta method, as at instance level), P_r = Π_n p̂_{n,r}.

    v_{n,r}: the Lee-Whiteley Var(p̂_{n,r})/p̂_{n,r}²; with one run it is Σ_n v_n, the instance-level value.
    """
    log_p = runs_corpus_log_likelihood(run_log_likelihoods, run_sizes_per_doc)
    share = np.asarray(run_sizes_per_doc[0], dtype=np.float64)
    share = share / share.sum()
    joint = np.sum(np.asarray(run_log_likelihoods, dtype=np.float64), axis=0)  # [R]
    per_run = np.sum(np.maximum(np.asarray(run_relative_variances, dtype=np.float64), 0.0), axis=0)  # [R]
    return float(np.sum(share**2 * np.exp(2 * (joint - log_p)) * per_run))


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
