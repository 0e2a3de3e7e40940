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
from scipy import stats

from .aggregate import corpus_log_likelihood, total_tokens
from .document import DocumentEstimate
from .intervals import LEVEL, Interval, certified_lower_bound, log_likelihood_interval
from .intervals import sampling_standard_error as _sampling_se
from .smc import runs_corpus_log_likelihood

PERPLEXITY_KINDS = {
    "is": "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)",
    "smc": "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)",
    "beam": "strict upper bound (the beam sum is ≤ p(x) for every document)",
    "exact": "exact",
}


@dataclass(frozen=True)
class CorpusEstimate:
    """Everything a run reports about a corpus's perplexity (PPL = exp(−S/T), S = Σ_n log p(x_n), T tokens).

    ``perplexity``: the figure to quote, bias-corrected where ``interval`` is two-sided (else the plain instance-level
    estimate, an upper bound in expectation); ``interval``: the honest ``level`` statement about S;
    ``perplexity_upper_bound``: certified, P(true PPL > it) ≤ 1 − level, for any proposal and K (exact / beam runs:
    the figure itself); ``monte_carlo_stderr``: standard error of ``perplexity`` with the documents fixed (NaN
    where no two-sided interval is honest); ``sampling_stderr``: its standard error over documents drawn at random.
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
    def kind(self) -> str:
        """What kind of figure ``instance_perplexity`` is: exact, strict upper bound, or upper bound in expectation."""
        return PERPLEXITY_KINDS.get(self.estimator, self.estimator)

    @property
    def perplexity_interval(self) -> tuple[float, float]:
        """(lower, upper) for the true perplexity; lower is 0 where the statement is one-sided."""
        return self.interval.perplexity(self.num_tokens)

    @property
    def interval_stderr(self) -> float:
        """Half the width of the perplexity interval over the normal quantile (1.96 at 95%): lm-eval's Stderr column,
        so that perplexity ± 1.96 · Stderr spans the printed interval, its t quantile and bias allowance included
        (``monte_carlo_stderr`` is the Monte Carlo standard error alone); NaN where the statement is one-sided."""
        if not self.interval.two_sided:
            return math.nan
        lower, upper = self.perplexity_interval
        return (upper - lower) / 2 / float(stats.norm.ppf(0.5 + self.interval.level / 2))


def corpus_estimator(estimates: Sequence[DocumentEstimate]) -> str:
    """The one estimator that made every document's estimate; a clear error for a mixture."""
    names = {e.estimator for e in estimates}
    if len(names) != 1:
        raise ValueError(
            f"the documents' estimates come from different estimators {sorted(names)}; rerun them alike"
        )
    return names.pop()


def corpus_log_likelihood_estimate(estimates: Sequence[DocumentEstimate]) -> float | None:
    """The paper's corpus-level log p̂ (p̂ of the whole corpus, unbiased): IS pairs sample k of every document, SMC
    run r; both need the same samples for every document (None otherwise, e.g. after a precision target)."""
    name = corpus_estimator(estimates)
    if name == "smc" and len({tuple(e.diagnostics.run_sizes) for e in estimates}) == 1:
        return runs_corpus_log_likelihood(
            [e.diagnostics.run_log_likelihoods for e in estimates],
            [e.diagnostics.run_sizes for e in estimates],
        )
    if name == "is" and len({e.log_weights.size for e in estimates}) == 1:
        return corpus_log_likelihood([e.log_weights for e in estimates])
    return (
        None  # exact or beam (their corpus estimate is the instance level), or unequal K (precision target)
    )


def certified_log_likelihood(
    estimates: Sequence[DocumentEstimate], level: float = LEVEL, keys: Sequence | None = None
) -> float:
    """L with P(Σ_n log p(x_n) < L) ≤ 1 − level (``intervals.certified_lower_bound``). Under a precision target every
    stage s estimated every document afresh, so each stage's product of p̂ is unbiased given the stages before; L is
    the best stage's bound at δ / MAX_STAGES, which holds with probability ≥ 1 − δ by the union bound."""
    stages = [e.stage_log_likelihoods for e in estimates]
    if any(s is None for s in stages):
        return certified_lower_bound([e.log_likelihood for e in estimates], level, keys)
    from .adaptive import MAX_STAGES

    stage_level = 1.0 - (1.0 - level) / MAX_STAGES
    return max(
        certified_lower_bound([s[i] for s in stages], stage_level, keys) for i in range(min(map(len, stages)))
    )


def corpus_estimate(
    estimates: Sequence[DocumentEstimate], level: float = LEVEL, keys: Sequence | None = None
) -> CorpusEstimate:
    """The corpus figures of N document estimates (``keys``: one per document, equal for repeated texts)."""
    if not estimates:
        raise ValueError("no documents")
    name = corpus_estimator(estimates)
    tokens = [e.num_tokens for e in estimates]
    total = total_tokens(tokens, len(estimates))
    ll = np.array([e.log_likelihood for e in estimates], dtype=np.float64)
    if np.isnan(ll).any() or np.isposinf(ll).any():
        bad = int(np.flatnonzero(np.isnan(ll) | np.isposinf(ll))[0])
        raise ValueError(f"document {bad}: log likelihood {ll[bad]} is not a valid log probability")
    instance = math.exp(-ll.sum() / total)
    sampling = _sampling_se(ll, tokens)
    if name in ("exact", "beam"):
        return _deterministic(name, len(estimates), total, float(ll.sum()), sampling, level)
    corpus_ll = corpus_log_likelihood_estimate(estimates)
    lower = certified_log_likelihood(estimates, level, keys)
    interval = log_likelihood_interval([e.error() for e in estimates], level, keys, lower)
    perplexity = math.exp(-(interval.centre if interval.two_sided else ll.sum()) / total)
    return CorpusEstimate(
        estimator=name,
        num_documents=len(estimates),
        num_tokens=total,
        instance_perplexity=instance,
        corpus_perplexity=None if corpus_ll is None else math.exp(-corpus_ll / total),
        perplexity=perplexity,
        interval=interval,
        perplexity_upper_bound=math.exp(-lower / total),
        corpus_perplexity_upper_bound=(
            None if corpus_ll is None else math.exp(-(corpus_ll + math.log(1.0 - level)) / total)
        ),
        monte_carlo_stderr=perplexity * interval.standard_error / total if interval.two_sided else math.nan,
        sampling_stderr=perplexity * sampling,
    )


def _deterministic(name: str, documents: int, tokens: int, log_p: float, sampling: float, level: float):
    """Exact or beam estimates: no Monte Carlo error; the figure is its own bound (beam: a certain upper bound)."""
    perplexity = math.exp(-log_p / tokens)
    if name == "exact":
        interval = Interval(log_p, log_p, log_p, 0.0, 0.0, 0.0, level)
    else:
        reason = "a beam sum is a lower bound on S with certainty (the perplexity is at most the beam figure)"
        interval = Interval(log_p, math.inf, math.nan, math.nan, math.nan, math.nan, level, reason)
    return CorpusEstimate(
        name,
        documents,
        tokens,
        perplexity,
        None,
        perplexity,
        interval,
        perplexity,
        None,
        0.0 if name == "exact" else math.nan,
        perplexity * sampling,
    )


def pareto_k_shares(estimates: Sequence[DocumentEstimate]) -> tuple[int, int, int]:
    """(documents whose IS weights have Pareto k̂ at or above the threshold at their K, documents whose k̂ is
    undefined, documents with IS weights and tokens): the counts behind both the table's shares and the warning."""
    from .diagnostics import pareto_k_threshold, pareto_khat

    weights = [e.importance_weights for e in estimates if e.importance_weights is not None]
    khat = [(pareto_khat(lw), pareto_k_threshold(lw.size)) for lw in weights]
    return (
        sum(k >= t for k, t in khat if not math.isnan(k)),
        sum(math.isnan(k) for k, _ in khat),
        len(weights),
    )


def reliability_warning(estimates: Sequence[DocumentEstimate], advice: Sequence[str]) -> str | None:
    """Plain words when no two-sided interval of the perplexity is honest for these estimates, else None."""
    informative = [e for e in estimates if e.num_tokens > 0]
    if not informative or corpus_estimator(informative) not in ("is", "smc"):
        return None
    corpus = corpus_estimate(informative)
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
        f"expectation (log p̂ is biased low); with 95% certainty the true perplexity is at most "
        f"{corpus.perplexity_upper_bound:.4g}. Try " + ", ".join(advice) + "."
    )
