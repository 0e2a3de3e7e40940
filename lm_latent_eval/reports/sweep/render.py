"""A sweep's tables (Logan et al. 2020, Tables 1 and 2, and SMC rows for the same proposals) as Markdown, and its
K-convergence figure."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from ...estimators.diagnostics import pareto_k_threshold
from ..plots import plot_convergence
from .compute import SweepResult


def _statement(r: dict) -> str:
    """``estimate [lower, upper]`` where a two-sided interval is honest, else the one-sided certified bound."""
    lo, hi = r["perplexity_interval"]
    return f"{r['perplexity']:.3f} [{lo:.3f}, {hi:.3f}]" if lo > 0 else f"≤ {hi:.3f} (one-sided)"


def smc_table_markdown(result: SweepResult) -> str:
    """SMC rows for the same proposals as Table 1: the perplexity with its 95% interval (or the one-sided certified
    bound where no two-sided interval is honest), instance and corpus PPL, ESS over tokens, resampling."""
    first = result.smc_rows[0]
    header = (
        f"| Proposal (SMC, K={first['num_samples']}, resample when ESS < {first['resample_threshold']:g}·K, "
        f"{first['smc_runs']} run(s)) | Perplexity (95% interval or bound) | Instance PPL | Corpus PPL (runs) "
        "| mean ESS over tokens | min ESS | resampling steps per document |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for name, r in _proposal_rows(result.smc_rows, "SMC, "):
        lines.append(
            f"| {name} | {_statement(r)} | {r['instance_ppl']:.3f} | {r['corpus_ppl']:.3f} "
            f"| {r['mean_ess']:.1f} | {r['min_ess']:.1f} | {r['mean_resampling_steps']:.2f} |"
        )
    return "\n".join(lines + _exact_row(result, empty_cells=3))


def _exact_row(result: SweepResult, empty_cells: int) -> list[str]:
    """The row of the exact perplexity (where the result has one) under a table of perplexities: its value in the
    first three value columns, then ``empty_cells`` empty cells; [] without an exact perplexity."""
    if result.exact_perplexity is None:
        return []
    e = result.exact_perplexity
    return [f"| Exact ({result.exact_source}) | {e:.3f} | {e:.3f} | {e:.3f} |" + " |" * empty_cells]


def _proposal_rows(rows: list[dict], label: str = ""):
    """(row name, row) per proposal: peeking rows by τ, then no-peeking rows by τ; names start with ``label``."""
    no_peeking = f"{label}no peeking" if label else "No peeking"
    for r in sorted(rows, key=lambda r: (not r["peek"], r["temperature"])):
        yield (
            (f"{label}τ = {r['temperature']:g}" if r["peek"] else f"{no_peeking}, τ = {r['temperature']:g}"),
            r,
        )


def table1_markdown(result: SweepResult) -> str:
    """Table 1 layout: one row per proposal (τ with peeking, then no peeking); corpus- and instance-level PPL."""
    k = result.is_rows[0]["num_samples"]
    lines = [
        (
            f"| Proposal | Corpus PPL | Instance PPL | Perplexity (95% interval or bound) | mean ESS (K={k}) "
            f"| documents with k̂ ≥ {pareto_k_threshold(k):.2f} / with k̂ defined |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, r in _proposal_rows(result.is_rows):
        defined = int(np.sum(~np.isnan(np.array(r["pareto_k"], dtype=float))))
        lines.append(
            f"| {name} | {r['corpus_ppl']:.3f} | {r['instance_ppl']:.3f} | {_statement(r)} "
            f"| {r['mean_ess']:.1f} | {r['num_pareto_k_above_threshold']} / {defined} |"
        )
    return "\n".join(lines + _exact_row(result, empty_cells=2))


def table2_markdown(result: SweepResult) -> str:
    """Table 2 layout: beam marginalization, a perplexity upper bound for each beam size k."""
    lines = ["| Beam size k | PPL upper bound |", "|---|---|"]
    lines += [f"| {r['beam_size']} | {r['ppl_upper_bound']:.3f} |" for r in result.beam_rows]
    return "\n".join(lines)


def _panel_range(curves: list[list[float]], lines: list[float]) -> tuple[float, float, list[int]]:
    """(bottom, top, indices of the curves that end above the top) of one panel. The top sits just above the highest
    final value that is no outlier (≤ median + 5 MAD of the panel's final values), so that curves that blow up do
    not squash the ones being compared; the bottom takes in every curve value and reference line below the top."""
    finals = np.array([c[-1] for c in curves])
    median = np.median(finals)
    typical = finals[finals <= median + 5 * np.median(np.abs(finals - median))]
    low = min(typical.min(), *lines)
    top = typical.max() + 0.05 * ((typical.max() - low) or typical.max())
    shown = [v for c in curves for v in c if v <= top] + [v for v in lines if v <= top]
    return min(shown) - 0.03 * (top - min(shown)), top, [i for i, c in enumerate(curves) if c[-1] > top]


def _off_scale(rows: list[dict], off: list[int]) -> str:
    """Lines naming the curves that end above the panel (curve 2i: row i's instance level, 2i + 1: its corpus level)."""
    by_row: dict[int, list[str]] = {}
    for i in off:
        value = rows[i // 2]["convergence_corpus_ppl" if i % 2 else "convergence_instance_ppl"][-1]
        text = f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"
        by_row.setdefault(i // 2, []).append(f"{'corpus' if i % 2 else 'instance'} {text}")
    parts = [f"τ = {rows[r]['temperature']:g}: {', '.join(v)}" for r, v in by_row.items()]
    return textwrap.fill("above the axis, PPL at the largest K: " + "; ".join(parts), 80)


def _title(result: SweepResult) -> str:
    """Model (checkpoint), corpus, size, K and seed of a sweep."""
    cfg = result.config or {}
    model = cfg.get("model", "model") + (f" ({cfg['pretrained']})" if cfg.get("pretrained") else " (bundled)")
    data = "/".join(Path(str(cfg.get("data", "?"))).parts[-2:])
    return (
        f"IS perplexity of {model} on {data}: {result.num_documents} documents, {result.num_tokens} tokens, "
        f"K = {result.is_rows[0]['num_samples']}, seed {cfg.get('seed', '?')}"
    )


def _legend_handles(result: SweepResult, colors: dict, beam: dict | None) -> list:
    # matplotlib only where a figure is drawn: run_sweep and the tables do not need it
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, label=f"τ = {t:g}") for t, c in colors.items()]
    handles += [
        Line2D([], [], color="gray", marker="o", ms=3, label="instance level"),
        Line2D([], [], color="gray", ls="--", label="corpus level"),
    ]
    if result.exact_perplexity is not None:
        handles.append(Line2D([], [], color="black", label=f"exact ({result.exact_perplexity:.5g})"))
    if beam is not None:
        label = f"beam bound k = {beam['beam_size']} ({beam['ppl_upper_bound']:.5g})"
        handles.append(Line2D([], [], color="gray", ls=":", label=label))
    return handles


def save_convergence_plot(result: SweepResult, path: str | Path) -> None:
    """``convergence_figure`` as a PNG."""
    # matplotlib only where a figure is drawn (convergence_figure chooses the backend first)
    import matplotlib.pyplot as plt

    fig = convergence_figure(result)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def convergence_figure(result: SweepResult):
    """IS perplexity against K, one panel per peeking mode (colour = τ, solid = instance, dashed = corpus level),
    with the exact value and the largest beam's bound as lines; each panel's linear y axis fits the curves being
    compared (``_panel_range``), those that end above it are named below it; title and legend outside the data."""
    # matplotlib only where a figure is drawn; the backend is chosen before pyplot is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["peek"] for r in result.is_rows}, reverse=True)
    temps = sorted({r["temperature"] for r in result.is_rows})
    colors = dict(zip(temps, plt.cm.viridis(np.linspace(0, 0.9, len(temps)))))
    beam = max(result.beam_rows, key=lambda r: r["beam_size"]) if result.beam_rows else None
    lines = [v for v in (result.exact_perplexity, beam and beam["ppl_upper_bound"]) if v is not None]
    fig, axes = plt.subplots(1, len(modes), figsize=(max(8.0, 5.8 * len(modes)), 5.4), squeeze=False)
    for ax, peek in zip(axes[0], modes):
        rows = [r for r in result.is_rows if r["peek"] == peek]
        curves = [c for r in rows for c in (r["convergence_instance_ppl"], r["convergence_corpus_ppl"])]
        bottom, top, off = _panel_range(curves, lines)
        for r in rows:
            curve = {
                "num_samples": r["convergence_k"],
                "instance_perplexity": r["convergence_instance_ppl"],
                "corpus_perplexity": r["convergence_corpus_ppl"],
            }
            plot_convergence(curve, ax=ax, color=colors[r["temperature"]], legend=False)
        if result.exact_perplexity is not None:
            ax.axhline(result.exact_perplexity, color="black", lw=1)
        if beam is not None:
            ax.axhline(beam["ppl_upper_bound"], color="gray", lw=1, ls=":")
        ax.set_ylim(bottom, top)
        ax.set_title("peeking proposal" if peek else "no-peeking proposal", fontsize=10)
        ax.set_ylabel("IS perplexity (upper bound in expectation)")
        # below the x axis: the curves that end above the panel, and where
        if off:
            ax.text(
                0.5, -0.17, _off_scale(rows, off), transform=ax.transAxes, ha="center", va="top", fontsize=7
            )
    handles = _legend_handles(result, colors, beam)
    fig.suptitle(_title(result), fontsize=10)
    fig.legend(
        handles=handles, loc="lower center", ncol=math.ceil(len(handles) / 2), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def tables_markdown(result: SweepResult) -> str:
    """Every table of a sweep, titled, as ``tables.md`` holds it: Table 1 (IS), its SMC rows where SMC ran, Table 2;
    a sweep stopped by Ctrl-C says so first."""
    tables = "Interrupted (Ctrl-C): the rows finished before it only.\n\n" if result.interrupted else ""
    tables += f"Table 1 (IS perplexity)\n\n{table1_markdown(result)}\n\n"
    if result.smc_rows:
        tables += f"Table 1, SMC rows (same proposals)\n\n{smc_table_markdown(result)}\n\n"
    return tables + f"Table 2 (beam marginalization)\n\n{table2_markdown(result)}\n"
