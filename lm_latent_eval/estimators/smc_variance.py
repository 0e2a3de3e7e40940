"""What SMC's runs say about an estimate's variance: the runs' records (``SMCRun``), the Lee & Whiteley (2018)
estimate of Var(p̂)/p² from one run's genealogy, the spread of R independent runs (``smc_diagnostics``,
``SMCDiagnostics``), the corpus-level estimate that pairs run r of every document, and importance samples read as runs
that never resample (``importance_runs``: IS is judged exactly as SMC is).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from .resampling import RunLayout, run_sizes
from .settings import DEFAULT_SMC_RUNS


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
    # the model's reason that no interval of measured coverage exists for these runs (``smc_interval_doubt``)
    model_doubt: str | None = None

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


def lee_whiteley_relative_variance(log_w: torch.Tensor, eve: torch.Tensor, num_resampling: int) -> float:
    """Var(p̂)/p² estimated from one run: 1 − (N/(N−1))^{n+1} Σ_{i,j: E_i ≠ E_j} W_i W_j (Lee & Whiteley 2018).

    W: normalized final weights, E: Eve indices (0..N−1), n: resampling steps. Derived for multinomial resampling
    (adaptive resampling: Du & Guyader 2021); with n = 0 it is the usual IS estimate of var(w) / (N p²). NaN when
    N = 1. ``lee_whiteley_runs`` of the one run.
    """
    return lee_whiteley_runs(log_w, eve, RunLayout([log_w.shape[0]]), [num_resampling])[0]


def lee_whiteley_runs(
    log_w: torch.Tensor, eve: torch.Tensor, layout: RunLayout, resampling_steps: list[int]
) -> list[float]:
    """``lee_whiteley_relative_variance`` of every run of ``layout`` at once: log_w [Σ N_r] float64, Eve indices
    [Σ N_r] (global: each run's within its own particles), n_r resampling steps each; 0.0 for a run whose weights
    are all 0, NaN for a run of one particle. One pass for all runs: W normalised run by run, Σ_e (Σ_{E_i=e} W_i)²
    summed run by run.

    Examples
    --------
    >>> lw = torch.log(torch.tensor([1.0, 3.0, 2.0, 2.0], dtype=torch.float64))
    >>> [round(v, 6) for v in lee_whiteley_runs(lw, torch.arange(4), RunLayout([2, 2]), [0, 0])]
    [0.25, 0.0]
    """
    W = torch.zeros_like(log_w)
    for n, runs, index, whole in layout.groups:
        rows = log_w.view(len(runs), n) if whole else log_w[index]
        W[index.reshape(-1)] = torch.softmax(rows, 1).nan_to_num(0.0).reshape(-1)
    run_of = torch.repeat_interleave(torch.arange(len(layout.sizes)), torch.tensor(layout.sizes))
    same_eve = torch.zeros(len(layout.sizes), dtype=torch.float64).index_add_(
        0, run_of, torch.zeros_like(W).index_add_(0, eve, W) ** 2
    )
    return [
        math.nan if n < 2 else (0.0 if s == 0 else 1.0 - (n / (n - 1)) ** (m + 1) * (1.0 - s))
        for n, m, s in zip(layout.sizes, resampling_steps, same_eve.tolist())
    ]


def smc_diagnostics(
    runs: list[SMCRun],
    sizes: list[int],
    resample_threshold: float,
    temperature: float = 1.0,
    model_doubt: str | None = None,
) -> SMCDiagnostics:
    """Resampling count, ESS over tokens (summed over runs: effective particles out of K), run spread and v̂;
    ``model_doubt`` as the model stated it (``protocol.smc_interval_doubt``)."""
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
        model_doubt=model_doubt,
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
