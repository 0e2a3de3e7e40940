"""Plot of contrastive entropy against the distortion level (matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping

from ..reports.plots import _axes


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
