"""Distributional distortion of a model p_M against a reference language p_L (LeBrun et al., ICLR 2022).

error(x) = log p_M(x) − log p_L(x) per sequence x; negative: the model underestimates x. Everything here
works on numbers (float64 numpy arrays) and returns JSON-ready dicts of lists; ``distortion_report`` gives
them all.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

# bootstrap resamples per bin
NUM_RESAMPLES = 10_000
CONFIDENCE_LEVEL = 0.95
# a bin is kept only with MORE than this many sequences
MIN_COUNT = 10
NUM_EQUAL_WIDTH_BINS = 20
NUM_EQUAL_SIZE_BINS = 50
NUM_RARITY_BINS = 10


def _as_finite(values, name: str, n: int | None = None) -> np.ndarray:
    """Validate a per-sequence float vector: float64 [N], finite, of length ``n`` when given."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected one number per sequence (a 1-d list), got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ValueError(f"{name}: got {arr.size} values for {n} sequences")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name}: sequence {i} has value {arr[i]} ({bad.size} non-finite in all); a NaN or infinite log "
            "probability makes the error undefined (a sequence of model probability 0 has error -inf)"
        )
    return arr


def _as_counts(values, name: str, n: int) -> np.ndarray:
    """Validate a per-sequence vector of non-negative integers: int64 [N]."""
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size != n:
        raise ValueError(f"{name}: expected {n} values (one per sequence), got shape {arr.shape}")
    as_float = arr.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(as_float) | (as_float < 0) | (as_float != np.round(as_float)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}: sequence {i} has {arr[i].item()!r}; expected a non-negative integer")
    return as_float.astype(np.int64)


def sequence_errors(model_log_probs, reference_log_probs) -> np.ndarray:
    """error_n = log p_M(x_n) − log p_L(x_n): float64 [N]."""
    model = _as_finite(model_log_probs, "model log probabilities (predictions)")
    reference = _as_finite(reference_log_probs, "reference log probabilities (references)")
    if model.size != reference.size:
        raise ValueError(
            f"got {model.size} model log probabilities but {reference.size} reference log probabilities"
        )
    if model.size == 0:
        raise ValueError("the distortion error needs at least one sequence")
    return model - reference


def summary(errors, tolerance: float = 0.0) -> dict:
    """Mean error (1/N) Σ_n e_n; share underestimated #{e_n < −tol} / N, overestimated #{e_n > tol} / N."""
    e = np.asarray(errors, dtype=np.float64)
    if not (np.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"tolerance must be a non-negative number of nats, got {tolerance!r}")
    return {
        "num_sequences": int(e.size),
        "mean_error": float(e.mean()),
        "share_underestimated": float((e < -tolerance).mean()),
        "share_overestimated": float((e > tolerance).mean()),
        "tolerance": float(tolerance),
    }


def bootstrap_mean_ci(
    values,
    num_resamples: int = NUM_RESAMPLES,
    level: float = CONFIDENCE_LEVEL,
    rng: np.random.Generator | None = None,
    chunk: int = 2**22,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` [m]; resamples: one [B, m] index array (chunked)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"bootstrap needs a non-empty 1-d array, got shape {v.shape}")
    if not (0.0 < level < 1.0):
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if not isinstance(num_resamples, (int, np.integer)) or num_resamples < 1:
        raise ValueError(f"num_resamples must be a positive integer, got {num_resamples!r}")
    rng = np.random.default_rng() if rng is None else rng
    m = v.size
    rows = max(1, chunk // m)
    means = np.empty(num_resamples)
    for start in range(0, num_resamples, rows):
        stop = min(num_resamples, start + rows)
        means[start:stop] = v[rng.integers(0, m, size=(stop - start, m))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _curve_from_groups(
    groups: list[np.ndarray],
    errors: np.ndarray,
    reference: np.ndarray,
    extra: dict[str, list],
    min_count: int,
    num_resamples: int,
    level: float,
    rng: np.random.Generator | None,
) -> dict:
    """Mean error with bootstrap CI per group of sequence indices; keeps groups with > min_count sequences (rng None:
    a generator seeded with 0)."""
    rng = np.random.default_rng(0) if rng is None else rng
    curve = {key: [] for key in extra}
    curve.update(count=[], mean_log_p_ref=[], mean_error=[], ci_low=[], ci_high=[])
    dropped_bins = dropped_sequences = 0
    for g, idx in enumerate(groups):
        if idx.size <= min_count:
            dropped_bins += int(idx.size > 0)
            dropped_sequences += int(idx.size)
            continue
        e = errors[idx]
        lo, hi = bootstrap_mean_ci(e, num_resamples, level, rng)
        for key, values in extra.items():
            curve[key].append(values[g])
        curve["count"].append(int(idx.size))
        curve["mean_log_p_ref"].append(float(reference[idx].mean()))
        curve["mean_error"].append(float(e.mean()))
        curve["ci_low"].append(lo)
        curve["ci_high"].append(hi)
    curve["dropped_bins"] = dropped_bins
    curve["dropped_sequences"] = dropped_sequences
    curve["min_count"] = int(min_count)
    curve["confidence_level"] = float(level)
    curve["num_resamples"] = int(num_resamples)
    return curve


def _check_num_bins(num_bins: int) -> None:
    if not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")


def equal_width_edges(reference_log_probs, num_bins: int) -> np.ndarray:
    """num_bins + 1 equal-width edges from min to max log p_L: float64 [B + 1] (one bin if all are equal)."""
    ref = np.asarray(reference_log_probs, dtype=np.float64)
    _check_num_bins(num_bins)
    lo, hi = float(ref.min()), float(ref.max())
    if lo == hi:
        return np.array([lo, hi])
    return np.linspace(lo, hi, num_bins + 1)


def bin_index(values, edges: np.ndarray) -> np.ndarray:
    """Bin b of each value with edges[b] ≤ v < edges[b+1] (the last bin closed on the right): int64 [N]."""
    v = np.asarray(values, dtype=np.float64)
    return np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)


def equal_width_curve(
    reference_log_probs,
    errors,
    num_bins: int = NUM_EQUAL_WIDTH_BINS,
    min_count: int = MIN_COUNT,
    num_resamples: int = NUM_RESAMPLES,
    level: float = CONFIDENCE_LEVEL,
    rng: np.random.Generator | None = None,
) -> dict:
    """Mean error per equal-width bin of log p_L with bootstrap CIs; bins of ≤ min_count sequences dropped."""
    ref = np.asarray(reference_log_probs, dtype=np.float64)
    e = np.asarray(errors, dtype=np.float64)
    edges = equal_width_edges(ref, num_bins)
    b = bin_index(ref, edges)
    groups = [np.flatnonzero(b == k) for k in range(len(edges) - 1)]
    extra = {"bin_left": edges[:-1].tolist(), "bin_right": edges[1:].tolist()}
    return _curve_from_groups(groups, e, ref, extra, min_count, num_resamples, level, rng)


def equal_size_curve(
    reference_log_probs,
    errors,
    num_bins: int = NUM_EQUAL_SIZE_BINS,
    min_count: int = MIN_COUNT,
    num_resamples: int = NUM_RESAMPLES,
    level: float = CONFIDENCE_LEVEL,
    rng: np.random.Generator | None = None,
) -> dict:
    """Mean error per bin of sequences sorted by log p_L, split into num_bins groups of (near) equal size."""
    ref = np.asarray(reference_log_probs, dtype=np.float64)
    e = np.asarray(errors, dtype=np.float64)
    _check_num_bins(num_bins)
    if ref.size < num_bins:
        raise ValueError(f"{num_bins} equal-size bins need at least {num_bins} sequences, got {ref.size}")
    groups = np.array_split(np.argsort(ref, kind="stable"), num_bins)
    extra = {
        "bin_left": [float(ref[g].min()) for g in groups],
        "bin_right": [float(ref[g].max()) for g in groups],
    }
    return _curve_from_groups(groups, e, ref, extra, min_count, num_resamples, level, rng)


def perturbation_grid(
    reference_log_probs,
    errors,
    num_perturbations,
    num_bins: int = NUM_RARITY_BINS,
    min_count: int = MIN_COUNT,
    tolerance: float = 0.0,
) -> dict:
    """Mean error per (equal-width log p_L bin, perturbation steps) cell: [R, S], None where ≤ min_count."""
    ref = np.asarray(reference_log_probs, dtype=np.float64)
    e = np.asarray(errors, dtype=np.float64)
    steps = _as_counts(num_perturbations, "num_perturbations", e.size)
    edges = equal_width_edges(ref, num_bins)
    b = bin_index(ref, edges)
    step_values = np.unique(steps)
    mean = np.full((len(edges) - 1, step_values.size), np.nan)
    count = np.zeros((len(edges) - 1, step_values.size), dtype=np.int64)
    for j, s in enumerate(step_values):
        for r in range(len(edges) - 1):
            cell = (steps == s) & (b == r)
            count[r, j] = int(cell.sum())
            if count[r, j] > min_count:
                mean[r, j] = e[cell].mean()
    by_steps = [e[steps == s] for s in step_values]
    return {
        "steps": step_values.tolist(),
        "bin_left": edges[:-1].tolist(),
        "bin_right": edges[1:].tolist(),
        "mean_error": [[None if np.isnan(x) else float(x) for x in row] for row in mean],
        "count": count.tolist(),
        "mean_error_by_steps": [float(x.mean()) for x in by_steps],
        "share_underestimated_by_steps": [float((x < -tolerance).mean()) for x in by_steps],
        "count_by_steps": [int(x.size) for x in by_steps],
        "min_count": int(min_count),
    }


def _lengths_from_token_errors(token_errors, errors: np.ndarray, lengths) -> np.ndarray:
    """n_i from per-token errors [n_i]; checks Σ_t e_it = error_i (and n_i = lengths_i if given)."""
    if len(token_errors) != errors.size:
        raise ValueError(f"token_errors: got {len(token_errors)} sequences for {errors.size} sequence errors")
    n = np.empty(errors.size, dtype=np.int64)
    for i, te in enumerate(token_errors):
        t = np.asarray(te, dtype=np.float64)
        if t.ndim != 1 or not np.isfinite(t).all():
            raise ValueError(f"token_errors: sequence {i} must be a 1-d list of finite per-token errors")
        if not np.isclose(t.sum(), errors[i], rtol=1e-6, atol=1e-4):
            raise ValueError(
                f"token_errors: sequence {i} per-token errors sum to {t.sum():.6g} but its sequence error "
                f"log p_M − log p_L is {errors[i]:.6g}; they must describe the same tokens (EOS included)"
            )
        n[i] = t.size
    if lengths is not None:
        given = _as_counts(lengths, "lengths", errors.size)
        mismatch = np.flatnonzero(given != n)
        if mismatch.size:
            i = int(mismatch[0])
            raise ValueError(f"lengths: sequence {i} has length {given[i]} but {n[i]} per-token errors")
    return n


def length_curve(
    errors,
    lengths=None,
    token_errors: Sequence | None = None,
    min_count: int = MIN_COUNT,
    num_resamples: int = NUM_RESAMPLES,
    level: float = CONFIDENCE_LEVEL,
    rng: np.random.Generator | None = None,
) -> dict:
    """Observed mean error by length n against the expected n · ē, ē = Σ_i error_i / Σ_i n_i per token."""
    e = np.asarray(errors, dtype=np.float64)
    if token_errors is not None:
        n = _lengths_from_token_errors(token_errors, e, lengths)
    elif lengths is not None:
        n = _as_counts(lengths, "lengths", e.size)
    else:
        raise ValueError("the length curve needs lengths or per-token errors")
    if n.sum() == 0:
        raise ValueError("lengths: every sequence has length 0, the mean per-token error is undefined")
    per_token = float(e.sum() / n.sum())
    values = np.unique(n)
    groups = [np.flatnonzero(n == v) for v in values]
    extra = {"length": values.tolist(), "expected_error": (values * per_token).tolist()}
    curve = _curve_from_groups(groups, e, np.zeros_like(e), extra, min_count, num_resamples, level, rng)
    del curve["mean_log_p_ref"]
    curve["mean_per_token_error"] = per_token
    return curve


def distortion_report(
    model_log_probs,
    reference_log_probs,
    num_perturbations=None,
    lengths=None,
    token_errors: Sequence | None = None,
    num_bins: int = NUM_EQUAL_WIDTH_BINS,
    num_equal_size_bins: int = NUM_EQUAL_SIZE_BINS,
    num_rarity_bins: int = NUM_RARITY_BINS,
    min_count: int = MIN_COUNT,
    num_resamples: int = NUM_RESAMPLES,
    confidence_level: float = CONFIDENCE_LEVEL,
    tolerance: float = 0.0,
    seed: int = 0,
) -> dict:
    """Every distortion-error result for N sequences: summary, curves, perturbation grid and length curve."""
    errors = sequence_errors(model_log_probs, reference_log_probs)
    reference = np.asarray(reference_log_probs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = {"min_count": min_count, "num_resamples": num_resamples, "level": confidence_level, "rng": rng}
    report = summary(errors, tolerance)
    report["equal_width_curve"] = equal_width_curve(reference, errors, num_bins, **boot)
    if errors.size >= num_equal_size_bins:
        report["equal_size_curve"] = equal_size_curve(reference, errors, num_equal_size_bins, **boot)
    else:
        warnings.warn(
            f"equal-size curve skipped: {errors.size} sequences are fewer than its "
            f"{num_equal_size_bins} bins",
            stacklevel=2,
        )
        report["equal_size_curve"] = None
    report["perturbation_grid"] = (
        None
        if num_perturbations is None
        else perturbation_grid(reference, errors, num_perturbations, num_rarity_bins, min_count, tolerance)
    )
    report["length_curve"] = (
        None
        if lengths is None and token_errors is None
        else length_curve(errors, lengths, token_errors, **boot)
    )
    return report
