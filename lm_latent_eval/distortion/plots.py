"""Matplotlib figures of the distortion-error results (the dicts of ``lm_latent_eval.distortion.error_curves``).

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, any backend) and returned to the caller.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

NO_DATA = "0.7"  # grey: a cell of the perturbation grid with too few sequences


def plot_error_curve(
    curve: dict, title: str = "distortion error by rarity", ax=None, label: str | None = None
):
    """Mean error log p_M − log p_L (with its bootstrap CI band) against the bin's mean log p_L."""
    fig = Figure(figsize=(6, 4)) if ax is None else ax.figure
    ax = fig.add_subplot() if ax is None else ax
    x = np.asarray(curve["mean_log_p_ref"], dtype=float)
    ax.plot(x, curve["mean_error"], marker="o", ms=3, label=label)
    ax.fill_between(x, curve["ci_low"], curve["ci_high"], alpha=0.3, lw=0)
    ax.axhline(0.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel("log p_L(x), nats (bin mean)")
    ax.set_ylabel("error log p_M(x) − log p_L(x), nats")
    level = curve.get("confidence_level", 0.95)
    ax.set_title(
        f"{title}\n(band: {level:.0%} bootstrap CI; "
        f"bins with ≤ {curve.get('min_count', 10)} sequences dropped)",
        fontsize=9,
    )
    if label:
        ax.legend()
    fig.tight_layout()
    return fig


def plot_perturbation_grid(grid: dict, title: str = "mean error by rarity × perturbation steps"):
    """Heat map of mean error per (log p_L bin, perturbation steps); grey cells had too few sequences."""
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    mean = np.array([[np.nan if v is None else v for v in row] for row in grid["mean_error"]], dtype=float)
    finite = mean[np.isfinite(mean)]
    bound = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    # zero error is RdBu's white: a cell with no data is grey, so that the two cannot be confused
    cmap = colormaps["RdBu"].with_extremes(bad=NO_DATA)
    image = ax.imshow(
        np.ma.masked_invalid(mean),
        aspect="auto",
        origin="lower",
        cmap=cmap,
        norm=TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound),
    )
    ax.set_xticks(range(len(grid["steps"])), [str(s) for s in grid["steps"]])
    centers = [(a + b) / 2 for a, b in zip(grid["bin_left"], grid["bin_right"])]
    ax.set_yticks(range(len(centers)), [f"{c:.1f}" for c in centers])
    ax.set_xlabel("perturbation steps")
    ax.set_ylabel("log p_L(x), nats (bin centre)")
    ax.set_title(f"{title}\n(grey: too few sequences)" if np.isnan(mean).any() else title, fontsize=9)
    bar = fig.colorbar(image, ax=ax, label="mean error log p_M − log p_L, nats")
    # each tick carries its own scale: the default offset text ("1e−5") is drawn at the title's height
    bar.ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    fig.tight_layout()
    return fig


def plot_length_curve(curve: dict, title: str = "observed vs expected error by length"):
    """Observed mean error per length n (with CI) against the n · ē of a constant per-token error ē."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    n = np.asarray(curve["length"], dtype=float)
    ax.plot(n, curve["mean_error"], marker="o", ms=3, label="observed")
    ax.fill_between(n, curve["ci_low"], curve["ci_high"], alpha=0.3, lw=0)
    ax.plot(
        n,
        curve["expected_error"],
        ls="--",
        label=f"expected n · ē (ē = {curve['mean_per_token_error']:.3g} nats per token)",
    )
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("length n (tokens incl. EOS)")
    ax.set_ylabel("error log p_M(x) − log p_L(x), nats")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` as PNG and return its path."""
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path
