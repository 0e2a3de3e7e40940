"""Everything the ``is_perplexity`` evaluate metric reports, from N documents' raw IS log weights ([N][K_n])."""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import InputError
from .aggregate import as_log_weights, log_mean_exp, perplexity, stack_equal_k, token_counts, total_tokens
from .corpus import corpus_estimate
from .diagnostics import (
    corpus_convergence_curve,
    effective_sample_size,
    pareto_k_shares,
    pareto_k_threshold,
    pareto_khat,
)
from .importance import ISEstimate
from .policy import UncertaintyPolicy
from .settings import DEFAULT_LEVEL

_ZERO = 1e-9  # |log p̂| up to this is 0 (rounding of log weights that are exactly 0)


def weights_report(
    log_weights,
    num_tokens,
    beam_log_likelihoods=None,
    corpus_level: bool = True,
    level: float = DEFAULT_LEVEL,
) -> dict:
    """Instance- and corpus-level PPL (Logan et al. 2020, Eq. 5–6; corpus level needs equal K unless
    ``corpus_level=False``), the perplexity to quote with its honest ``level`` interval (``intervals``: two-sided
    around the bias-corrected estimate where that is honest, else one-sided and certified), the certified upper bounds,
    the Monte Carlo and the document-sampling standard errors, per-document log p̂ with the same kind of interval,
    ESS, Pareto k̂ against its threshold at K, the convergence curve over K and, with beam lower bounds on log p(x),
    the strict bound exp(−Σ beam / Σ T) ≥ true PPL. Documents must be distinct (independent weights)."""
    lws = [as_log_weights(lw, f"document {n}") for n, lw in enumerate(log_weights)]
    if not lws:
        raise ValueError("no documents")
    total = total_tokens(num_tokens, len(lws))
    num_tokens = token_counts(num_tokens, len(lws))
    if corpus_level and len({lw.size for lw in lws}) != 1:
        # the clear error on unequal K
        stack_equal_k(lws)
    estimates = [
        ISEstimate(f"document {n}", t, _log_likelihood(n, lw, t), lw)
        for n, (lw, t) in enumerate(zip(lws, num_tokens))
    ]
    _check_probabilities([e.log_likelihood for e in estimates])
    policy = UncertaintyPolicy(level=level)
    corpus = corpus_estimate(estimates, policy)
    above, undefined, informative = pareto_k_shares(estimates)
    doc_ci = [policy.interval([e.error(policy)]) for e in estimates]
    report = {
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "interval": "two-sided" if corpus.interval.two_sided else "one-sided",
        "interval_note": corpus.interval.describe(),
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "sampling_stderr": corpus.sampling_stderr,
        "instance_perplexity": corpus.instance_perplexity,
        "corpus_perplexity": corpus.corpus_perplexity if corpus_level else None,
        "corpus_perplexity_upper_bound": corpus.corpus_perplexity_upper_bound if corpus_level else None,
        "num_tokens": total,
        "log_likelihoods": [e.log_likelihood for e in estimates],
        "log_likelihood_interval": [[i.lower, i.upper] for i in doc_ci],
        "num_samples": [int(lw.size) for lw in lws],
        "ess": [effective_sample_size(lw) for lw in lws],
        "pareto_k": [pareto_khat(lw) for lw in lws],
        "pareto_k_threshold": [pareto_k_threshold(lw.size) for lw in lws],
        "share_pareto_k_above_threshold": above / informative if informative else float("nan"),
        "num_pareto_k_undefined": undefined,
        "convergence": corpus_convergence_curve(lws, num_tokens),
    }
    if beam_log_likelihoods is not None:
        report |= _beam_report(beam_log_likelihoods, report["log_likelihoods"], num_tokens)
    return report


def _log_likelihood(n: int, log_weights: np.ndarray, num_tokens: int) -> float:
    """log p̂ of document ``n`` from its log weights; an ``InputError`` naming it for an empty document whose log p̂ is
    not 0 (it has p = 1 and adds no tokens, so its log p̂ would shift the corpus's perplexity unseen)."""
    log_p = float(log_mean_exp(log_weights))
    if num_tokens == 0 and abs(log_p) > _ZERO:
        raise InputError(
            f"document {n}: num_tokens is 0 but its log weights give log p̂ = {log_p:.6g}; an empty document has "
            "p = 1 (log p̂ 0): give its token count, or leave it out"
        )
    return log_p


def _check_probabilities(log_likelihoods: list[float]) -> None:
    """p̂ > 1: a corpus whose Σ log p̂ is above 0 (a perplexity below 1) is refused in one line naming its largest
    document; a document alone above 0 is possible (p̂ is unbiased, not bounded by 1: Monte Carlo noise on a text of
    probability near 1), so it gets a warning naming it instead."""
    above = [n for n, v in enumerate(log_likelihoods) if v > _ZERO]
    if not above:
        return
    worst = max(above, key=lambda n: log_likelihoods[n])
    total = sum(log_likelihoods)
    where = f"document {worst}: log p̂ = {log_likelihoods[worst]:.6g}"
    fix = "give log w_k = log p(x, z_k) − log q(z_k | x) with p a probability (not a density), in nats"
    if total > _ZERO:
        raise InputError(
            f"the log weights give Σ log p̂ = {total:.6g} > 0 over {len(log_likelihoods)} documents ({where}), a "
            f"probability above 1 for the corpus and a perplexity below 1: {fix}"
        )
    warnings.warn(
        f"{len(above)} document(s) have log p̂ > 0, a probability estimate above 1 ({where}): possible for a text of "
        f"probability near 1 by Monte Carlo noise, otherwise a sign of wrong log weights ({fix})",
        stacklevel=3,
    )


def _beam_report(beam_log_likelihoods, log_likelihoods, num_tokens) -> dict:
    """The strict bound exp(−Σ beam / Σ T) ≥ true PPL and the share of documents whose log p̂ is below their beam."""
    beam = np.asarray(beam_log_likelihoods, dtype=np.float64)
    if beam.shape != (len(log_likelihoods),):
        raise ValueError(f"got {beam.size} beam bounds for {len(log_likelihoods)} documents")
    return {
        "beam_perplexity": perplexity(beam, num_tokens),
        "beam_log_likelihoods": beam.tolist(),
        "share_below_beam_bound": float((np.asarray(log_likelihoods) < beam).mean()),
    }
