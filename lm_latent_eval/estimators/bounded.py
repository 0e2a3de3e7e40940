"""Confidence intervals for p from importance weights that are bounded, w_k ∈ [0, B]: they hold at every K.

With the model's own sampler as the proposal of a chain-of-thought latent, w_k = p(y | x, z_k) ∈ [0, 1] and
p(y | x) = E[w]. A mean of bounded i.i.d. variables has non-asymptotic intervals, valid whatever K and whatever the
weights' tail (there is none): no normal approximation, no Pareto k̂ gate. Two are offered; the policy
(``UncertaintyPolicy.bounded_interval``) states the betting interval.

* **Betting** (Waudby-Smith & Ramdas 2024, hedged capital): for each candidate mean m the capital
  K_t(m) = ½ Π_{i ≤ t} (1 + λ⁺_i (X_i − m)) + ½ Π_{i ≤ t} (1 − λ⁻_i (X_i − m)) is a nonnegative martingale when m is
  the true mean, so by Ville's inequality P(sup_t K_t(m) ≥ 1/α) ≤ α; the interval is {m : K_n(m) < 1/α} over a grid
  (each end widened to the neighbouring grid point, so the grid never narrows it). The bets λ_i are predictable
  (from X_<i): λ_i = √(2 log(2/α) / (σ̂²_{i−1} i log(1 + i))), truncated to ½/m (λ⁺) and ½/(1 − m) (λ⁻).
* **Empirical Bernstein** (Maurer & Pontil 2009, Theorem 4), each side at α/2:
  |E X − X̄| ≤ √(2 V_n log(4/α) / n) + 7 log(4/α) / (3 (n − 1)), V_n the sample variance.

For several documents at once, each interval at α / N (Bonferroni): every p_n is in its interval with probability at
least 1 − α, so Σ_n log p_n is between the sums of the ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# candidate means of the betting interval: log-spaced near 0 (answers of small probability), linear above
GRID = np.unique(np.concatenate([np.geomspace(1e-30, 1.0, 3000), np.linspace(0.0, 1.0, 2001)]))


def betting_interval(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """[lower, upper] ∋ E X with probability ≥ 1 − α, for X_1..X_n i.i.d. in [0, 1] (module docstring).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> lo, hi = betting_interval(rng.uniform(0.2, 0.4, 64), 0.05)
    >>> bool(lo < 0.3 < hi), bool(hi - lo < 0.2)
    (True, True)
    """
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    n = x.size
    i = np.arange(1, n + 1)
    mean = (0.5 + np.cumsum(x)) / (i + 1)
    var = (0.25 + np.cumsum((x - mean) ** 2)) / (i + 1)
    prior_var = np.concatenate([[0.25], var[:-1]])
    lam = np.sqrt(2 * math.log(2 / alpha) / (prior_var * i * np.log1p(i)))
    m = GRID[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.minimum(lam[None], 0.5 / m)
        down = np.minimum(lam[None], 0.5 / (1 - m))
        log_up = np.log1p(up * (x[None] - m)).sum(1)
        log_down = np.log1p(-down * (x[None] - m)).sum(1)
    log_capital = np.logaddexp(log_up, log_down) - math.log(2)
    accepted = np.flatnonzero(log_capital < math.log(1 / alpha))
    if accepted.size == 0:  # cannot happen for a true mean in the grid's range; stay valid anyway
        return 0.0, 1.0
    first, last = accepted[0], accepted[-1]
    lower = GRID[first - 1] if first > 0 else 0.0
    upper = GRID[last + 1] if last + 1 < GRID.size else 1.0
    return float(lower), float(upper)


def bernstein_interval(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """Maurer & Pontil's empirical-Bernstein interval for E X, X_i i.i.d. in [0, 1], each side at α/2 (n ≥ 2).

    Examples
    --------
    >>> lo, hi = bernstein_interval(np.full(1000, 0.5), 0.05)
    >>> round(lo, 3), round(hi, 3)
    (0.49, 0.51)
    """
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    n = x.size
    if n < 2:
        return 0.0, 1.0
    log_term = math.log(4 / alpha)
    half = math.sqrt(2 * x.var(ddof=1) * log_term / n) + 7 * log_term / (3 * (n - 1))
    return max(0.0, float(x.mean()) - half), min(1.0, float(x.mean()) + half)


@dataclass(frozen=True)
class BoundedInterval:
    """A statement about S = Σ_n log p(x_n) from bounded weights: [lower, upper] with probability ≥ ``level``, at
    any K (``lower`` is −inf where a document's interval reaches p = 0), and per document its own interval of
    log p_n at level 1 − (1 − level) / N."""

    lower: float
    upper: float
    level: float
    documents: tuple[tuple[float, float], ...]

    def describe(self) -> str:
        return (
            f"{self.level:.0%} interval from weights bounded by the model (betting confidence interval per document, "
            f"Bonferroni over {len(self.documents)}): holds at any number of samples"
        )


def bounded_interval(
    weights: Sequence[np.ndarray], bound: float, level: float, method=betting_interval
) -> BoundedInterval:
    """``BoundedInterval`` of S from each document's importance weights w_k ∈ [0, ``bound``] (not their logs).

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> statement = bounded_interval([rng.uniform(0, 1, 200), rng.uniform(0.4, 0.6, 200)], 1.0, 0.95)
    >>> bool(statement.lower < math.log(0.5) + math.log(0.5) < statement.upper)
    True
    """
    alpha = (1.0 - level) / max(len(weights), 1)
    ends = []
    for w in weights:
        lo, hi = method(np.asarray(w, dtype=np.float64) / bound, alpha)
        with np.errstate(divide="ignore"):
            ends.append((float(np.log(lo * bound)), float(np.log(hi * bound))))
    return BoundedInterval(sum(e[0] for e in ends), sum(e[1] for e in ends), level, tuple(ends))
