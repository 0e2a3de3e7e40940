"""The math of honest statements about S = Σ_n log p(x_n), hence about perplexity, from the documents' estimates.

Every estimate of log p that averages weights is biased low: E[log p̂] ≈ log p − v/2 with v = Var(p̂)/p². Summed over
N documents the bias grows like N while the Monte Carlo error grows like √N, so an interval centred on Σ_n log p̂_n
stops covering as a corpus grows. Here, per document n, v̂_n estimates v_n (IS: s²_w / (K w̄²) from the K weights;
SMC: the larger of the spread of R ≥ 2 independent runs and their Lee-Whiteley estimates; exact: 0), and

    S̃ = Σ_n (log p̂_n + v̂_n / 2),    C = Σ_n v̂_n / 2,    SE = √Σ_n v̂_n,    G = Σ_n v̂_n^{3/2} / SE.

The two-sided interval is S̃ ± (t·SE + C) = [Σ_n log p̂_n − t·SE, Σ_n log p̂_n + 2C + t·SE]: it allows the bias of
Σ_n log p̂_n to be anywhere between 0 and twice its first-order estimate C. The lower end needs no correction at all,
since E[log p̂] ≤ log p (Jensen); the upper end survives a v̂ that is half the true v (v̂ from a few runs or a
heavy-tailed sample is typically too small, and more so once a gate has selected the runs whose v̂ came out small).
G measures, in standard errors, the size of what the first-order correction leaves (terms of order v^{3/2}). The
two-sided interval is printed only when every document's v̂ can be trusted (IS: Pareto k̂ below the sample-size
threshold min(1 − 1/log10 K, 0.7) of Vehtari et al. 2024, or, where tied weights leave k̂ undefined, SMC's run gates
applied to R independent batches of the draws; SMC: at least two runs, none carrying most of p̂): the gates of
``estimators.policy.UncertaintyPolicy``, which decides every statement) and
the remainder R = Σ_n v̂_n^{3/2} small, against SE (G ≤ 0.5) or against the allowance (R ≤ C/2:
``UncertaintyPolicy.remainder_acceptable``); t has the Welch-Satterthwaite degrees of freedom (Σ v̂_n)² / Σ_n v̂_n² / ν_n of a sum of
variance estimates with ν_n degrees of freedom each (IS: K − 1; SMC: R − 1), so a corpus whose error a few noisily
estimated documents dominate gets the wider t it needs. Otherwise no two-sided interval is honest and only the one-sided certified bound is given:
the product of independent unbiased document estimates is unbiased for the corpus probability, so by Markov's
inequality P(S < Σ_n log p̂_n + log δ) ≤ δ for any proposal and any K. Coverage of both, measured against exact
values at 10 to 1,000 documents: ``bench/interval_coverage.py`` (docs/estimators.md).

Where every document's log p is proven (IS draws whose distinct configurations carry all of q's mass, so that
Σ_{z ∈ D} p(x, z) = p(x): ``importance.DistinctDraws``), the statement is the exact S, with the float32 rounding of the
model's log p(x, z) either side (``proven_rounding``); the policy's ``interval`` proves that this all-or-nothing rule
never lowers the coverage. The distinct draws also raise the certified bound to Σ_n log Σ_{z ∈ D_n} p(x_n, z) where that
is larger (a bound that holds with certainty).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .settings import DEFAULT_LEVEL


@dataclass(frozen=True)
class DocumentError:
    """What one document contributes to a corpus statement: log p̂, v̂ = estimated Var(p̂)/p², the degrees of freedom
    of v̂ (K − 1 for IS, R − 1 for R SMC runs or IS batches; inf when exact), whether v̂ can be trusted (``reason``
    if not), and, where the draws prove it, log p itself (``proven``: IS draws that covered the proposal's support,
    ``UncertaintyPolicy.support_covered``; 0 for a document without tokens). A proven value is used only where every
    document of a corpus has one (``UncertaintyPolicy.interval`` says why); otherwise the estimate and its v̂ are."""

    log_likelihood: float
    relative_variance: float
    degrees_of_freedom: float
    reason: str | None = None
    proven: float | None = field(default=None, repr=False)
    # nats either side of ``proven``: the float32 rounding of the model's own log p(x, z) (``proven_rounding``)
    rounding: float = field(default=0.0, repr=False)
    # whether the model states that this document's interval has no measured coverage (``smc_interval_doubt``), a
    # doubt no sample size lifts: the precision target then has nothing to reach (``adaptive``)
    lasting: bool = field(default=False, repr=False)
    # under a precision target whose budget held the document below the size it planned: c / K, the largest relative
    # variance per sample of the stages before at the size drawn, which the interval's gates read beside v̂
    capped_variance: float | None = field(default=None, repr=False)

    @property
    def gate_variance(self) -> float:
        """The relative variance the two-sided interval's gates judge: v̂, or ``capped_variance`` where larger (known
        before the stage was drawn, so a v̂ that came out small by chance does not pass the gates alone)."""
        if self.capped_variance is None or not self.capped_variance > self.relative_variance:
            return self.relative_variance
        return self.capped_variance

    @property
    def exact(self) -> bool:
        """Whether log p is proven (``proven``), not only estimated."""
        return self.proven is not None

    @property
    def trusted(self) -> bool:
        return self.reason is None

    @property
    def corrected(self) -> float:
        """The bias-corrected log p̂ + v̂/2 (E[log p̂] ≈ log p − v/2)."""
        return self.log_likelihood + self.relative_variance / 2


@dataclass(frozen=True)
class Interval:
    """A ``level`` statement about S = Σ_n log p(x_n) (nats): two-sided [lower, upper] = ``centre`` ± (t·SE + C) around
    the bias-corrected ``centre`` with Monte Carlo ``standard_error`` SE (documents fixed) and ``bias_correction`` C
    (see the module docstring), or one-sided [lower, +inf) certified by Markov's inequality, with the ``reason`` no
    two-sided interval is honest."""

    lower: float
    upper: float
    centre: float
    standard_error: float
    bias_correction: float
    remainder: float
    level: float
    reason: str | None = None

    @property
    def two_sided(self) -> bool:
        return math.isfinite(self.upper)

    @property
    def remainder_share(self) -> float:
        """The remainder R = G · SE against the bias correction C (0 where C is 0)."""
        return (
            self.remainder * self.standard_error / self.bias_correction if self.bias_correction > 0 else 0.0
        )

    def perplexity(self, num_tokens: int) -> tuple[float, float]:
        """The same statement about perplexity exp(−S/T): (lower, upper); lower is 0 for a one-sided statement."""
        return (
            math.exp(-self.upper / num_tokens) if self.two_sided else 0.0,
            math.exp(-self.lower / num_tokens),
        )

    def describe(self) -> str:
        """One line: what kind of interval this is and, for a one-sided one, why."""
        if self.two_sided:
            return (
                f"two-sided {self.level:.0%} interval: bias-corrected estimate ± (t·SE + correction), allowing the "
                f"bias anywhere from 0 to twice its estimate (correction {self.bias_correction:.3g} nats, SE "
                f"{self.standard_error:.3g} nats, remainder {self.remainder:.2f} SE or {self.remainder_share:.2f} of the correction)"
            )
        return f"one-sided {self.level:.0%} bound (certified by Markov's inequality): {self.reason}"


FLOAT32_EPSILON = 2.0**-23


def proven_rounding(log_likelihood: float, num_tokens: int) -> float:
    """How far a log p computed in float32 may be from the exact one: T ε₃₂ (1 + |log p|) for a sum over T tokens,
    ε₃₂ = 2⁻²³ (the contract's log_joint does float32 math; each of its T additions rounds at most ε₃₂ of a partial
    sum no larger than |log p| in magnitude, plus each term's own rounding).

    Examples
    --------
    >>> round(proven_rounding(-40.0, 30), 6)
    0.000147
    """
    return FLOAT32_EPSILON * max(int(num_tokens), 1) * (1.0 + abs(log_likelihood))


def certified_lower_bound(
    log_likelihoods: Sequence[float], level: float = DEFAULT_LEVEL, keys: Sequence | None = None
) -> float:
    """L with P(S < L) ≤ 1 − level for S = Σ_n log p(x_n), from independent unbiased estimates log p̂_n.

    Markov's inequality on the product of the p̂_n: L = Σ_n log p̂_n + log δ, δ = 1 − level. Documents that share a
    ``key`` (a repeated text shares one random stream) are not independent: texts are grouped by how often they occur
    (m), each group's product is bounded at δ / (number of groups), and S ≥ Σ_m m (Σ_{n in group m} log p̂_n + log δ_m)
    then holds with probability ≥ 1 − δ by the union bound.

    Parameters
    ----------
    log_likelihoods : sequence of float
        log p̂_n per document.
    level : float
        1 − δ.
    keys : sequence, optional
        One per document, equal for repeated texts.

    Returns
    -------
    float
        L, in nats.

    Examples
    --------
    >>> round(certified_lower_bound([-1.0, -2.0]), 4)  # −3 + log 0.05
    -5.9957
    """
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    delta = 1.0 - level
    if keys is None:
        return float(ll.sum() + math.log(delta))
    counts = Counter(keys)
    first = {}
    for key, value in zip(keys, ll):
        first.setdefault(key, value)
    groups: dict[int, float] = {}
    for key, m in counts.items():
        groups[m] = groups.get(m, 0.0) + first[key]
    share = math.log(delta / len(groups))
    return float(sum(m * (total + share) for m, total in groups.items()))


def satterthwaite_degrees_of_freedom(variances: Sequence[float], dofs: Sequence[float]) -> float:
    """(Σ v_n)² / Σ_n v_n² / ν_n: the degrees of freedom of Σ_n v̂_n when each v̂_n has ν_n (Welch-Satterthwaite);
    documents with v = 0 or ν = ∞ add nothing to the denominator; ∞ when nothing does."""
    v, nu = np.asarray(variances, dtype=np.float64), np.asarray(dofs, dtype=np.float64)
    noisy = (v > 0) & np.isfinite(nu)
    denominator = float(np.sum(v[noisy] ** 2 / nu[noisy]))
    return float(v.sum() ** 2 / denominator) if denominator > 0 else math.inf


def sampling_standard_error(log_likelihoods: Sequence[float], num_tokens: Sequence[int]) -> float:
    """Standard error of the per-token log-likelihood Σ_n ℓ_n / Σ_n T_n over documents drawn at random (the error
    lm-eval's ``hf`` users compare models with; the Monte Carlo error is separate): the ratio estimator's
    √(N/(N−1) Σ_n (ℓ_n − r T_n)²) / Σ_n T_n, r = Σ ℓ / Σ T, over the N documents with tokens (an empty document adds
    no information, only a zero residual). NaN for fewer than two documents with tokens."""
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    t = np.asarray(num_tokens, dtype=np.float64)
    ll, t = ll[t > 0], t[t > 0]
    if ll.size < 2 or t.sum() == 0:
        return math.nan
    r = ll.sum() / t.sum()
    return float(math.sqrt(ll.size / (ll.size - 1) * np.sum((ll - r * t) ** 2)) / t.sum())
