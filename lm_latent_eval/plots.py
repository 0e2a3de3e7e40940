"""Plots of IS evaluations and contrastive entropy (matplotlib): each helper draws on ``ax`` (new figure if None), returns it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5, 3.5))
    return ax


def plot_convergence(convergence: Mapping, ax=None, true_perplexity: float | None = None, beam_perplexity: float | None = None):
    """Perplexity against the number of samples K' (log x axis): the ``convergence`` dict of ``is_perplexity``."""
    ax = _axes(ax)
    ks = np.asarray(convergence["num_samples"])
    ax.plot(ks, convergence["instance_perplexity"], marker="o", label="instance-level (Eq. 5)")
    if convergence.get("corpus_perplexity") is not None:
        ax.plot(ks, convergence["corpus_perplexity"], marker="s", label="corpus-level (Eq. 6)")
    if beam_perplexity is not None:
        ax.axhline(beam_perplexity, color="gray", linestyle="--", label="beam bound (≥ true)")
    if true_perplexity is not None:
        ax.axhline(true_perplexity, color="black", linestyle=":", label="exact")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of samples K")
    ax.set_ylabel("perplexity")
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


def plot_contrastive_entropy(report: Mapping, ax=None, label: str | None = None):
    """H_C(d) against the distortion level d with ±1 std bars over the distortions (a ``contrastive_entropy`` report)."""
    ax = _axes(ax)
    levels = list(report["levels"])
    mean = [report["contrastive_entropy"][d] for d in levels]
    std = [report["contrastive_entropy_std"][d] for d in levels]
    ax.errorbar(levels, mean, yerr=std, marker="o", capsize=3, label=label)
    ax.set_xlabel("distortion level d")
    ax.set_ylabel(f"contrastive entropy H_C (nats per {report.get('unit', 'word')})")
    if label is not None:
        ax.legend()
    return ax
