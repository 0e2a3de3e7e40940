"""The answer to a multiple-choice question under Monte Carlo error: how likely the choice with the largest estimate
is not the choice with the largest true log-likelihood.

Choice i's value is a signed sum of document estimates, s_i = Σ_j A_ij log p̂_j (log p̂(context ⊕ continuation) −
log p̂(context), or one estimate of a conditional view). To first order log p̂_j ≈ log p_j − v_j/2 + √v_j ε_j with
v_j = Var(p̂_j)/p_j² (``DocumentError.relative_variance``) and ε_j standard normals, independent where each document
has its own random stream, else correlated as their paired draws say (``weight_correlation``); read the other way,
log p_j ≈ log p̂_j + v̂_j/2 + √v̂_j t_j, with t_j Student's t at v̂_j's degrees of freedom (v̂ is itself estimated: from 4 SMC runs, 3 degrees of freedom; normal where v̂ is exact; the
predictive of a mean whose variance was estimated from the same draws). The flip probability is the chance
that argmax_i Σ_j A_ij log p_j under these draws differs from the chosen argmax_i s_i: a document shared by every
choice (the context) moves all of them alike and changes nothing. It is 0 where every v̂ is 0 (exact estimates)
and undefined (NaN) where some v̂ cannot be trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .intervals import DocumentError

# draws per question: resolve a flip probability of 1e-3 to about ±2e-4 (one standard error)
FLIP_DRAWS = 1 << 15


def moving_documents(signs: np.ndarray) -> np.ndarray:
    """The columns of ``signs`` [m, d] that move the choices apart: not the same for every choice (a shared context
    shifts them all alike).

    Examples
    --------
    >>> moving_documents(np.array([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]]))
    array([0, 2])
    """
    return np.flatnonzero(np.ptp(signs, axis=0) > 0) if len(signs) > 1 else np.array([], dtype=int)


def weight_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """The correlation of two estimates' relative errors p̂/p − 1 where they average weights of the same K draws
    (common random numbers): the sample correlation of the paired weights exp(a_k), exp(b_k); 0 where either is
    constant (its error is 0).

    Examples
    --------
    >>> round(weight_correlation(np.log([1.0, 2.0, 3.0]), np.log([3.0, 2.0, 1.0])), 6)
    -1.0
    >>> weight_correlation(np.log([1.0, 2.0]), np.zeros(2))
    0.0
    """
    wa, wb = np.exp(a - np.max(a)), np.exp(b - np.max(b))
    if np.ptp(wa) == 0 or np.ptp(wb) == 0:
        return 0.0
    return float(np.clip(np.corrcoef(wa, wb)[0, 1], -1.0, 1.0))


def flip_probability(
    signs: np.ndarray, errors: Sequence[DocumentError], correlation: np.ndarray | None = None
) -> float:
    """P(the chosen answer is not the argmax of the true values) under the first-order reading above (Student's t at
    each v̂'s degrees of freedom).

    Parameters
    ----------
    signs : np.ndarray
        [m, d]: choice i's value is Σ_j signs[i, j] log p̂_j over the d documents.
    errors : sequence of DocumentError
        The d documents' estimates and errors.
    correlation : np.ndarray, optional
        [d, d] correlations of the documents' errors (documents on common draws: ``weight_correlation``); None:
        independent. The t tails are kept: a correlated normal draw, each coordinate scaled by its own χ² draw.

    Returns
    -------
    float
        In [0, 1], resolved to about ±2e-4 at 1e-3 (``FLIP_DRAWS`` draws of a fixed stream: the same every call);
        NaN where a document whose sign differs between choices has an untrusted or infinite v̂.

    Examples
    --------
    >>> two = np.array([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]])  # (context ⊕ a) − context, (context ⊕ b) − context
    >>> docs = [DocumentError(-10.0, 0.01, 99), DocumentError(-4.0, 1.0, 99), DocumentError(-10.1, 0.01, 99)]
    >>> round(flip_probability(two, docs), 2)  # about Φ(−0.1 / √0.02): the context's large v̂ cancels
    0.24
    >>> flip_probability(two, [DocumentError(-10.0, 0.0, math.inf)] * 2 + [DocumentError(-10.1, 0.0, math.inf)])
    0.0
    >>> same = [DocumentError(e, v, math.inf) for e, v in ((-10.0, 0.01), (-4.0, 1.0), (-10.1, 0.01))]
    >>> flip_probability(two, same, np.array([[1.0, 0, 1], [0, 1, 0], [1, 0, 1]]))  # the same error in both answers
    0.0
    """
    signs = np.asarray(signs, dtype=np.float64)
    values = signs @ np.array([e.log_likelihood for e in errors])
    chosen = int(np.argmax(values))
    moving = moving_documents(signs)
    v = np.array([errors[j].relative_variance for j in moving])
    if any(not errors[j].trusted for j in moving) or not np.isfinite(v).all():
        return math.nan
    if not v.any():
        return 0.0
    centre = np.array([errors[j].corrected for j in moving])
    dof = np.array([errors[j].degrees_of_freedom for j in moving], dtype=np.float64)
    correlation = None if correlation is None else np.asarray(correlation, np.float64)[np.ix_(moving, moving)]
    draws = centre + np.sqrt(v) * _noise(dof, correlation)
    return float((np.argmax(draws @ signs[:, moving].T, axis=1) != chosen).mean())


def _noise(dof: np.ndarray, correlation: np.ndarray | None) -> np.ndarray:
    """``FLIP_DRAWS`` draws [FLIP_DRAWS, d] of the documents' standardized errors from a fixed stream: Student's t at
    each finite degrees of freedom, else normal; independent, or with ``correlation`` [d, d] (a correlated normal
    draw, each t coordinate then scaled by its own χ² draw)."""
    rng, finite = np.random.default_rng(0), np.isfinite(dof) & (dof > 0)
    if correlation is None:
        noise = rng.standard_normal((FLIP_DRAWS, len(dof)))
        if finite.any():
            noise[:, finite] = rng.standard_t(dof[finite], size=(FLIP_DRAWS, int(finite.sum())))
        return noise
    # a square root of the correlation (eigenvalues clipped at 0: a sample correlation may be singular)
    values, vectors = np.linalg.eigh(correlation)
    noise = rng.standard_normal((FLIP_DRAWS, len(dof))) @ (vectors * np.sqrt(values.clip(0))).T
    if finite.any():
        noise[:, finite] *= np.sqrt(dof[finite] / rng.chisquare(dof[finite], (FLIP_DRAWS, int(finite.sum()))))
    return noise
