"""Statistical checks of importance-sampling estimates against an exact log p(x), shared by the model tests."""

from __future__ import annotations

import math

import numpy as np
import torch


def assert_unbiased(log_p_hat, log_p: float, num_se: float = 3.0, sd: float | None = None) -> None:
    """Independent runs: mean of p̂/p is 1 within ``num_se`` standard errors, and mean log p̂ ≤ log p (Jensen).
    ``sd``: the exact standard deviation of one run's p̂/p where it is known (``exact_is_standard_error``); the
    runs' sample SD underestimates it where rare draws carry much of p, and the check would then fail an unbiased
    estimator."""
    log_p_hat = np.asarray(log_p_hat, dtype=np.float64)
    ratio = np.exp(log_p_hat - log_p)
    spread = ratio.std(ddof=1) if sd is None else sd
    assert abs(ratio.mean() - 1.0) < num_se * spread / math.sqrt(ratio.size)
    assert log_p_hat.mean() < log_p + num_se * log_p_hat.std(ddof=1) / math.sqrt(log_p_hat.size)


def exact_is_standard_error(log_joint, log_q, log_p: float, k: int) -> float:
    """Standard error of p̂/p with K samples from log p(x, z) and log q(z | x) over the whole support [M]:
    √((Σ_z p(x,z)² / (q(z) p²) − 1) / K)."""
    return math.sqrt(max(0.0, math.expm1(float(torch.logsumexp(2 * log_joint - log_q, 0)) - 2 * log_p)) / k)


def assert_is_unbiased_on(
    model, text: str, log_p: float, k: int = 4, runs: int = 300, peek: bool = False
) -> None:
    """``runs`` independent IS estimates with K = ``k`` of ``text`` (seeds 0..runs-1) pass ``assert_unbiased``."""
    from lm_latent_eval.estimators import importance_log_weights, log_mean_exp

    x = model.tokenize(text)
    assert_unbiased(
        [
            log_mean_exp(
                importance_log_weights(
                    model, x, num_samples=k, temperature=1.0, peek=peek, seed=s, document=text
                )
            )
            for s in range(runs)
        ],
        log_p,
    )


@torch.no_grad()
def randomize_weights(model, std: float, proposal_noise: float = 0.3):
    """Weights ~ N(0, std²) so that every factor matters; q = p's shared parts plus N(0, noise²): a different q."""
    for p in model.parameters():
        p.normal_(0, std)
    model.proposal.copy_from_generative(model)
    for p in model.proposal.parameters():
        p.add_(proposal_noise * torch.randn_like(p))
    return model.eval()


def assert_frequencies_match(counts, probs, min_expected: float = 5.0, min_pvalue: float = 1e-4) -> None:
    """Chi-square goodness of fit of sample counts [N] to probabilities [N]; cells expecting < ``min_expected``
    draws are pooled into one, and the expected counts are rescaled to the observed total (float rounding of q)."""
    from scipy.stats import chisquare

    counts, probs = np.asarray(counts, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    expected = probs * counts.sum()
    big = expected >= min_expected
    observed, expected = counts[big], expected[big]
    if (~big).any():
        observed, expected = (
            np.append(observed, counts[~big].sum()),
            np.append(expected, probs[~big].sum() * counts.sum()),
        )
    expected *= observed.sum() / expected.sum()
    assert chisquare(observed, expected).pvalue > min_pvalue


def default_statement_coverage(model, texts: list[str], truth: float, seeds: int = 100) -> tuple[int, object]:
    """(the seeds 0..seeds−1 whose corpus statement is two-sided and holds ``truth`` = Σ log p(x), the last seed's
    resolved run), the statement being the default one: the model's ``default_settings``, then ``auto``, as the
    lm-eval backends resolve them, ``estimate_corpus`` then ``corpus_estimate``."""
    from lm_latent_eval.estimators import EstimatorSettings, resolve
    from lm_latent_eval.estimators.adaptive import estimate_corpus
    from lm_latent_eval.estimators.corpus import corpus_estimate
    from lm_latent_eval.estimators.registry import with_model_defaults

    settings, _ = with_model_defaults(EstimatorSettings(), model)
    covered = 0
    for seed in range(seeds):
        run = resolve(settings.replace(seed=seed), model)
        estimates = estimate_corpus(run, texts, progress=False)
        interval = corpus_estimate([estimates[t] for t in texts]).interval
        covered += interval.two_sided and interval.lower <= truth <= interval.upper
    return covered, run
