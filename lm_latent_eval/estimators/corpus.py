"""A corpus's perplexity from its documents' estimates (``DocumentEstimate``), whatever estimator made them.

``corpus_estimate`` turns N document estimates into one ``CorpusEstimate``: the paper's instance- and corpus-level
perplexities (Logan et al. 2020, Eq. 5–6; under SMC run r of every document forms one corpus sample, since final
particle weights are neither independent nor exchangeable), the honest 95% statement about the true perplexity
(``intervals``: a bias-corrected estimate with a two-sided interval where one can be honest, else the one-sided
certified bound), the certified upper bounds, and the two uncertainty sources separately: the Monte Carlo error
(documents fixed) and the sampling error over documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .aggregate import total_tokens
from .base import Estimator
from .diagnostics import pareto_k_shares
from .intervals import Interval
from .intervals import sampling_standard_error as _sampling_se
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .registry import estimator_named


@dataclass(frozen=True)
class CorpusEstimate:
    """Everything a run reports about a corpus's perplexity (PPL = exp(−S/T), S = Σ_n log p(x_n), T tokens).

    ``perplexity``: the figure to quote, bias-corrected where ``interval`` is two-sided (else the plain instance-level
    estimate, an upper bound in expectation); ``interval``: the honest ``level`` statement about S;
    ``perplexity_upper_bound``: certified, P(true PPL > it) ≤ 1 − level, for any proposal and K (exact / beam runs:
    the figure itself); ``monte_carlo_stderr``: standard error of ``perplexity`` with the documents fixed (NaN
    where no two-sided interval is honest, except for a bound the estimator reports with its own error, the ELBO's:
    the standard error of that bound, ``Estimator.bound_stderr``, no interval on the true perplexity);
    ``sampling_stderr``: its standard error over documents drawn at random
    (over the documents with tokens; NaN for fewer than two).
    """

    estimator: str
    num_documents: int
    num_tokens: int
    instance_perplexity: float
    corpus_perplexity: float | None
    perplexity: float
    interval: Interval
    perplexity_upper_bound: float
    corpus_perplexity_upper_bound: float | None
    monte_carlo_stderr: float
    sampling_stderr: float

    @property
    def method(self) -> Estimator:
        """The estimator (``estimators.registry``) that made every document's estimate."""
        return estimator_named(self.estimator)

    @property
    def kind(self) -> str:
        """What kind of figure ``instance_perplexity`` is: exact, strict upper bound, or upper bound in expectation."""
        return self.method.kind

    @property
    def perplexity_interval(self) -> tuple[float, float]:
        """(lower, upper) for the true perplexity; lower is 0 where the statement is one-sided."""
        return self.interval.perplexity(self.num_tokens)

    @property
    def bound_with_error(self) -> bool:
        """Whether ``perplexity`` is a bound the estimator reports with its own standard error and no interval on the
        true perplexity (the ELBO, ``Estimator.bound_stderr``): one-sided, with a finite ``monte_carlo_stderr``."""
        return not self.interval.two_sided and not math.isnan(self.monte_carlo_stderr)

    @property
    def reported_stderr(self) -> tuple[float, str | None]:
        """What lm-eval's Stderr column of ``perplexity`` holds, and what kind of figure it is: (``interval_stderr``,
        "interval") where the statement is two-sided, (``monte_carlo_stderr``, "bound") for a bound reported with its
        own error (``bound_with_error``: the ELBO), else (NaN, None): no standard error to show (N/A)."""
        if self.interval.two_sided:
            return self.interval_stderr, "interval"
        if self.bound_with_error:
            return self.monte_carlo_stderr, "bound"
        return math.nan, None

    @property
    def interval_stderr(self) -> float:
        """Half the width of the perplexity interval over the normal quantile (1.96 at 95%): lm-eval's Stderr column,
        so that perplexity ± 1.96 · Stderr spans the printed interval, its t quantile and bias allowance included
        (``monte_carlo_stderr`` is the Monte Carlo standard error alone); NaN where the statement is one-sided."""
        if not self.interval.two_sided:
            return math.nan
        lower, upper = self.perplexity_interval
        return (upper - lower) / 2 / UncertaintyPolicy(level=self.interval.level).normal_quantile


def corpus_estimator(estimates: Sequence[DocumentEstimate]) -> Estimator:
    """The one estimator that made every document's estimate; a clear error for a mixture."""
    names = {e.estimator for e in estimates}
    if len(names) != 1:
        raise ValueError(
            f"the documents' estimates come from different estimators {sorted(names)}; rerun them alike"
        )
    return estimator_named(names.pop())


def certified_log_likelihood(
    estimates: Sequence[DocumentEstimate],
    policy: UncertaintyPolicy = DEFAULT_POLICY,
    keys: Sequence | None = None,
) -> float:
    """L with P(Σ_n log p(x_n) < L) ≤ δ: ``policy.certified_lower_bound`` of the estimates, or under a precision
    target ``policy.staged_certified_bound`` over its stages; where every estimate has a certain lower bound
    (``DocumentEstimate.certain_lower_bound``: IS's Σ_{z ∈ D} p(x, z) over its distinct draws), the larger of that
    and their sum, which holds with certainty (so the maximum fails only when the first does: P ≤ δ)."""
    stages = [e.stage_log_likelihoods for e in estimates]
    if any(s is None for s in stages):
        markov = policy.certified_lower_bound([e.log_likelihood for e in estimates], keys)
    else:
        markov = policy.staged_certified_bound(stages, keys)
    certain = [e.certain_lower_bound for e in estimates]
    return markov if any(c is None for c in certain) else max(markov, float(sum(certain)))


def corpus_estimate(
    estimates: Sequence[DocumentEstimate],
    policy: UncertaintyPolicy = DEFAULT_POLICY,
    keys: Sequence | None = None,
) -> CorpusEstimate:
    """The corpus figures of N document estimates.

    Parameters
    ----------
    estimates : sequence of DocumentEstimate
        One per document, all from one estimator.
    policy : UncertaintyPolicy
        Decides the statement (its level, trust gates and remainder test).
    keys : sequence, optional
        One per document, equal for repeated texts (they share a random stream).

    Returns
    -------
    CorpusEstimate

    Examples
    --------
    >>> from lm_latent_eval.estimators.exact import ExactEstimate
    >>> corpus = corpus_estimate([ExactEstimate("a b", 2, -4.0), ExactEstimate("c", 1, -2.0)])
    >>> round(corpus.perplexity, 4), corpus.interval.two_sided, corpus.monte_carlo_stderr
    (7.3891, True, 0.0)
    """
    if not estimates:
        raise ValueError("no documents")
    method = corpus_estimator(estimates)
    tokens = [e.num_tokens for e in estimates]
    total = total_tokens(tokens, len(estimates))
    ll = _log_likelihoods(estimates)
    instance = math.exp(-ll.sum() / total)
    sampling = _sampling_se(ll, tokens)
    fixed = method.fixed_statement(float(ll.sum()), policy.level)
    if fixed is None:
        corpus_ll = method.corpus_log_likelihood(estimates)
        lower = certified_log_likelihood(estimates, policy, keys)
        interval = policy.interval([e.error(policy) for e in estimates], keys, lower)
    else:
        # a deterministic estimator: its figure is its own bound (exact: a point; beam: a certain lower bound on S)
        corpus_ll, lower, interval = None, fixed.lower, fixed
    perplexity = math.exp(-(interval.centre if interval.two_sided else ll.sum()) / total)
    se = interval.standard_error if interval.two_sided else method.bound_stderr(estimates)  # nats
    return CorpusEstimate(
        estimator=method.name,
        num_documents=len(estimates),
        num_tokens=total,
        instance_perplexity=instance,
        corpus_perplexity=None if corpus_ll is None else math.exp(-corpus_ll / total),
        perplexity=perplexity,
        interval=interval,
        perplexity_upper_bound=math.exp(-lower / total),
        corpus_perplexity_upper_bound=(
            None if corpus_ll is None else math.exp(-(corpus_ll + math.log(policy.delta)) / total)
        ),
        monte_carlo_stderr=perplexity * se / total,
        sampling_stderr=perplexity * sampling,
    )


def _log_likelihoods(estimates: Sequence[DocumentEstimate]) -> np.ndarray:
    """log p̂ of every document, float64 [N]; a clear error naming the first that is not a log probability."""
    ll = np.array([e.log_likelihood for e in estimates], dtype=np.float64)
    if np.isnan(ll).any() or np.isposinf(ll).any():
        bad = int(np.flatnonzero(np.isnan(ll) | np.isposinf(ll))[0])
        raise ValueError(f"document {bad}: log likelihood {ll[bad]} is not a valid log probability")
    return ll


def reliability_warning(
    estimates: Sequence[DocumentEstimate], advice: Sequence[str], policy: UncertaintyPolicy = DEFAULT_POLICY
) -> str | None:
    """Plain words when no two-sided interval of the perplexity is honest for these estimates (``policy`` decides),
    else None."""
    informative = [e for e in estimates if e.num_tokens > 0]
    if not informative or not corpus_estimator(informative).draws_samples:
        return None
    corpus = corpus_estimate(informative, policy)
    if corpus.interval.two_sided:
        return None
    above, undefined, n = pareto_k_shares(informative)
    psis = (
        f" {above} of {n} documents ({above / n:.0%}) have Pareto k̂ at or above the threshold at their K and "
        f"{undefined} ({undefined / n:.0%}) an undefined k̂."
        if n
        else ""
    )
    return (
        f"no two-sided interval of the perplexity is honest for these {len(informative)} documents: "
        f"{corpus.interval.reason}.{psis} The perplexity {corpus.instance_perplexity:.4g} is an upper bound in "
        f"expectation (log p̂ is biased low); with {policy.level:.0%} certainty the true perplexity is at most "
        f"{corpus.perplexity_upper_bound:.4g}. Try " + ", ".join(advice) + "."
    )
