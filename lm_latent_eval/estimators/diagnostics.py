"""Per-document diagnostics of importance weights: ESS, Pareto k̂ (PSIS), bootstrap CI, convergence curve."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from .aggregate import log_mean_exp
from .bootstrap import bootstrap_log_means

PARETO_K_THRESHOLD = 0.7  # above this, PSIS says the IS estimate is unreliable (Vehtari et al. 2024)


def effective_sample_size(log_weights: np.ndarray) -> float:
    """ESS = (Σ_k w_k)² / Σ_k w_k², computed from log weights."""
    lw = np.asarray(log_weights, dtype=np.float64)
    return float(math.exp(2.0 * logsumexp(lw) - logsumexp(2.0 * lw)))


def pareto_khat(log_weights: np.ndarray) -> float:
    """Shape k̂ of the generalized Pareto fitted to the largest weights (PSIS, arviz.psislw).

    0 when all weights are equal (q ∝ p: the estimate is exact); NaN when undefined: fewer than 5 finite weights,
    or the M + 1 largest (M = ⌈min(K/5, 3√K)⌉, the PSIS tail) take fewer than 5 distinct values, as happens when
    the proposal puts its mass on a few configurations; a tail fit to ties would report a meaningless ±inf.
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    finite = lw[np.isfinite(lw)]
    if finite.size < 5:
        return float("nan")
    if np.ptp(finite) == 0.0:
        return 0.0
    tail = math.ceil(min(0.2 * finite.size, 3.0 * math.sqrt(finite.size)))
    if np.unique(np.sort(finite)[-(tail + 1) :]).size < 5:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arviz

        _, khat = arviz.psislw(finite.copy())
    khat = float(khat)
    return khat if math.isfinite(khat) else float("nan")


def bootstrap_ci(log_weights: np.ndarray, level: float = 0.95, num_resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of log p̂ over resamples of the K weights (with replacement)."""
    log_means, _ = bootstrap_log_means(log_weights, num_resamples, np.random.default_rng(seed))
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(log_means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def convergence_sizes(num_samples: int) -> list[int]:
    """K' = 1, 2, 4, …, with K itself always last."""
    sizes = [2**i for i in range(int(math.log2(num_samples)) + 1)]
    return sizes if sizes[-1] == num_samples else sizes + [num_samples]


def convergence_curve(log_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log p̂ using the first K' samples of one run, for K' in ``convergence_sizes(K)``."""
    lw = np.asarray(log_weights, dtype=np.float64)
    running = np.logaddexp.accumulate(lw)
    ks = np.array(convergence_sizes(lw.size))
    return ks, running[ks - 1] - np.log(ks)


@dataclass
class ISDiagnostics:
    """Diagnostics of one document's K importance weights: ESS, Pareto k̂, a 95% percentile bootstrap interval of
    log p̂, and the convergence curve log p̂ from the first K' samples (K' = 1, 2, 4, ..., K)."""

    num_samples: int
    log_likelihood: float
    ess: float
    pareto_k: float
    ci95: list[float]
    convergence_k: list[int]
    convergence_log_likelihood: list[float]


def summarize(log_weights: np.ndarray, seed: int = 0) -> ISDiagnostics:
    """All diagnostics of one document's weights."""
    lw = np.asarray(log_weights, dtype=np.float64)
    lo, hi = bootstrap_ci(lw, seed=seed)
    ks, curve = convergence_curve(lw)
    return ISDiagnostics(int(lw.size), float(log_mean_exp(lw)), effective_sample_size(lw), pareto_khat(lw), [lo, hi],
                         ks.tolist(), curve.tolist())


def share_above(values, threshold: float = PARETO_K_THRESHOLD) -> float:
    """Share of the finite values (e.g. per-document Pareto k̂) strictly above ``threshold``; NaN when none is finite."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float((v > threshold).mean()) if v.size else float("nan")


def reliability_warning(log_weights, advice: str) -> str | None:
    """A plain-words warning when documents' IS estimates have Pareto k̂ > 0.7 (unreliable), else None."""
    lws = [np.asarray(lw, dtype=np.float64) for lw in log_weights]
    if not lws:
        return None
    khat = np.array([pareto_khat(lw) for lw in lws])
    unreliable = int(np.sum(khat > PARETO_K_THRESHOLD))
    if unreliable == 0:
        return None
    ess = np.mean([effective_sample_size(lw) for lw in lws])
    sizes = sorted({lw.size for lw in lws})
    k = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return (
        f"{unreliable} of {len(lws)} documents ({unreliable / len(lws):.0%}) have unreliable importance-sampling "
        f"estimates (Pareto k̂ > {PARETO_K_THRESHOLD}; mean effective sample size {ess:.1f} of K = {k}): their log p̂ "
        f"are likely too low, so the reported perplexity is likely too high. {advice}"
    )


def perplexity_stderr(log_weights, num_tokens, level: str = "instance", num_resamples: int = 1000, seed: int = 0) -> float:
    """Monte Carlo standard error of IS perplexity (documents fixed): std of PPL over bootstrap resamples of the K samples.

    ``level="instance"`` resamples each document's weights independently (Eq. 5); ``"corpus"`` resamples the sample
    index k jointly across documents (Eq. 6). It measures the estimator's randomness, not document-sampling error.
    """
    from .aggregate import as_log_weights, stack_equal_k, total_tokens

    lws = [as_log_weights(lw, f"document {n}") for n, lw in enumerate(log_weights)]
    total = total_tokens(num_tokens, len(lws))
    rng = np.random.default_rng(seed)
    if level == "instance":
        log_liks = np.sum([bootstrap_log_means(lw, num_resamples, rng)[0] for lw in lws], axis=0)
    elif level == "corpus":  # the sample index k resampled jointly: a bootstrap of the joint weights Σ_n log w_nk
        log_liks = bootstrap_log_means(stack_equal_k(lws).sum(axis=0), num_resamples, rng)[0]
    else:
        raise ValueError(f"level must be 'instance' or 'corpus', got {level!r}")
    return float(np.std(np.exp(-log_liks / total), ddof=1))


def corpus_convergence_curve(log_weights, num_tokens) -> dict:
    """Instance- and corpus-level PPL from the first K' samples of every document, K' in ``convergence_sizes(min K)``.

    The corpus-level curve is None when documents have different sample counts.
    """
    from .aggregate import corpus_ppl, instance_ppl

    sizes = convergence_sizes(min(len(lw) for lw in log_weights))
    equal_k = len({len(lw) for lw in log_weights}) == 1
    return {
        "num_samples": sizes,
        "instance_perplexity": [instance_ppl([np.asarray(lw)[:k] for lw in log_weights], num_tokens) for k in sizes],
        "corpus_perplexity": (
            [corpus_ppl([np.asarray(lw)[:k] for lw in log_weights], num_tokens) for k in sizes] if equal_k else None
        ),
    }


def corpus_report(
    log_weights,
    num_tokens,
    beam_log_likelihoods=None,
    corpus_level: bool = True,
    level: float = 0.95,
    num_resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """Everything ``is_perplexity`` reports for N documents' log weights ([N][K_n]) and token counts [N].

    Instance-level PPL (Logan et al. 2020, Eq. 5), corpus-level PPL (Eq. 6; equal K required unless
    ``corpus_level=False``), per-document log p̂, ESS, Pareto k̂ and percentile bootstrap intervals (each document's
    weights resampled independently for Eq. 5; the sample index k resampled jointly across documents for Eq. 6), the
    convergence curve over K, and with beam bounds the strict perplexity bound exp(−Σ beam / Σ T) ≥ true PPL.
    """
    from .aggregate import as_log_weights, corpus_ppl, instance_ppl, stack_equal_k, total_tokens

    lws = [as_log_weights(lw, f"document {n}") for n, lw in enumerate(log_weights)]
    if not lws:
        raise ValueError("no documents")
    total = total_tokens(num_tokens, len(lws))
    if corpus_level:
        stacked = stack_equal_k(lws)  # clear error on unequal K
    rng = np.random.default_rng(seed)
    alpha = (1.0 - level) / 2.0
    boot = np.stack([bootstrap_log_means(lw, num_resamples, rng)[0] for lw in lws])  # [N, B]
    doc_ci = np.quantile(boot, [alpha, 1.0 - alpha], axis=1).T  # [N, 2]
    inst_ci = np.exp(-np.quantile(boot.sum(axis=0), [1.0 - alpha, alpha]) / total)
    khat = np.array([pareto_khat(lw) for lw in lws])
    lls = np.array([float(log_mean_exp(lw)) for lw in lws])
    report = {
        "instance_perplexity": instance_ppl(lws, num_tokens),
        "instance_perplexity_ci": inst_ci.tolist(),
        "corpus_perplexity": None,
        "corpus_perplexity_ci": None,
        "num_tokens": total,
        "log_likelihoods": lls.tolist(),
        "log_likelihood_ci": doc_ci.tolist(),
        "num_samples": [int(lw.size) for lw in lws],
        "ess": [effective_sample_size(lw) for lw in lws],
        "pareto_k": khat.tolist(),
        "pareto_k_threshold": PARETO_K_THRESHOLD,
        "share_pareto_k_above_threshold": share_above(khat),
        "num_pareto_k_undefined": int(np.isnan(khat).sum()),
        "convergence": corpus_convergence_curve(lws, num_tokens),
    }
    if corpus_level:
        corpus_boot = bootstrap_log_means(stacked.sum(axis=0), num_resamples, rng)[0]
        report["corpus_perplexity"] = corpus_ppl(lws, num_tokens)
        report["corpus_perplexity_ci"] = np.exp(-np.quantile(corpus_boot, [1.0 - alpha, alpha]) / total).tolist()
    if beam_log_likelihoods is not None:
        report |= beam_report(beam_log_likelihoods, lls, num_tokens)
    return report


def beam_report(beam_log_likelihoods, log_likelihoods: np.ndarray, num_tokens) -> dict:
    """The strict perplexity bound exp(−Σ beam / Σ T) ≥ true PPL, and the share of documents whose estimate log p̂
    lies under its beam lower bound (an estimate that can be improved)."""
    from .aggregate import perplexity

    beam = np.asarray(beam_log_likelihoods, dtype=np.float64)
    if beam.shape != log_likelihoods.shape:
        raise ValueError(f"got {beam.size} beam bounds for {log_likelihoods.size} documents")
    return {"beam_perplexity": perplexity(beam, num_tokens), "beam_log_likelihoods": beam.tolist(),
            "share_below_beam_bound": float((log_likelihoods < beam).mean())}
