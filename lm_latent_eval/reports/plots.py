"""Plots of IS evaluations (matplotlib): each helper draws on ``ax`` (new figure if None) and returns it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _axes(ax):
    if ax is None:
        # pyplot only when the caller passes no axes of its own
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5, 3.5))
    return ax


def plot_convergence(
    convergence: Mapping,
    ax=None,
    true_perplexity: float | None = None,
    beam_perplexity: float | None = None,
    color=None,
    legend: bool = True,
):
    """Perplexity against the number of samples K' (log₂ x axis): instance level solid, corpus level dashed.

    ``convergence`` is the dict of ``is_perplexity`` (``num_samples``, ``instance_perplexity``, ``corpus_perplexity``).
    """
    ax = _axes(ax)
    ks = np.asarray(convergence["num_samples"])
    ax.plot(
        ks, convergence["instance_perplexity"], color=color, marker="o", ms=3, label="instance-level (Eq. 5)"
    )
    if convergence.get("corpus_perplexity") is not None:
        ax.plot(ks, convergence["corpus_perplexity"], color=color, ls="--", label="corpus-level (Eq. 6)")
    if beam_perplexity is not None:
        ax.axhline(beam_perplexity, color="gray", linestyle="--", label="beam bound (≥ true)")
    if true_perplexity is not None:
        ax.axhline(true_perplexity, color="black", lw=1, label="exact")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of samples K")
    ax.set_ylabel("perplexity")
    if legend:
        ax.legend()
    return ax


def plot_estimate_density(
    estimates: Sequence[float] | Mapping[str, Sequence[float]],
    ax=None,
    true_value: float | None = None,
    bound: float | None = None,
    xlabel: str = "estimate",
    bins: int = 30,
):
    """Histogram density of repeated estimates (one array, or {label: array}), with the exact value and a bound."""
    ax = _axes(ax)
    groups = estimates if isinstance(estimates, Mapping) else {"estimates": estimates}
    for label, values in groups.items():
        ax.hist(np.asarray(values, dtype=np.float64), bins=bins, density=True, alpha=0.5, label=label)
    if true_value is not None:
        ax.axvline(true_value, color="black", linestyle=":", label="exact")
    if bound is not None:
        ax.axvline(bound, color="gray", linestyle="--", label="bound")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend()
    return ax
