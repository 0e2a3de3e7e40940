"""An estimate card (``compute.build_card``'s dict) as Markdown, and its convergence plot as a PNG."""

from __future__ import annotations

import math
from pathlib import Path

from ..plots import plot_convergence


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return "∞" if x == math.inf else f"{x:.4g}"
    return str(x)


def _fmt_like(x, value) -> str:
    """An interval end with the decimals of a 4-significant-digit ``value`` ([11.55, 11.60], not [11.55, 11.6])."""
    if not isinstance(x, float) or not math.isfinite(x) or not isinstance(value, float) or value == 0:
        return _fmt(x)
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{x:.{decimals}f}"


def _k_text(d: dict) -> str:
    """K = 100, or K = 100 to 25,600 (mean 3,462) where the precision target drew more for some documents."""
    if d["num_samples"] == d.get("num_samples_max", d["num_samples"]):
        return f"K = {d['num_samples']:,}"
    return f"K = {d['num_samples']:,} to {d['num_samples_max']:,} (mean {d['num_samples_mean']:,.0f})"


def _reliability_lines(d: dict) -> list[str]:
    """The IS or SMC diagnostics as Markdown bullets, after how many documents were computed exactly instead."""
    exact, lines = d.get("computed_exactly", 0), []
    if exact:
        rest = "; the lines below describe the others" if exact < d["num_documents"] else ""
        lines.append(f"- {exact} of {d['num_documents']} documents computed exactly (their exact program costs no "
                     f"more than their samples: exact_where_cheaper){rest}")  # fmt: skip
        if not rest:
            return lines
    if "pareto_k_max" in d:
        return lines + [
            (
                f"- effective sample size over documents: min {_fmt(d['ess_min'])}, median {_fmt(d['ess_median'])}, "
                f"mean {_fmt(d['ess_mean'])} (of {_k_text(d)})"
            ),
            (
                f"- Pareto k̂: max {_fmt(d['pareto_k_max'])}; {d['num_pareto_k_above_threshold']} of "
                f"{d['num_documents']} documents at or above min(1 − 1/log10 K, 0.7), {d['num_pareto_k_undefined']} "
                "undefined (too few distinct weights in the tail)"
            ),
        ]
    return lines + [
        (
            f"- {d['smc_runs']} independent runs of {_k_text(d)} particles in all per document; ESS over "
            f"tokens: min {_fmt(d['ess_min'])}, mean {_fmt(d['ess_mean'])}; resampling steps per run "
            f"{_fmt(d['resampling_steps'])}"
        )
    ]


def _stderr_line(u: dict) -> str:
    """What lm-eval's Stderr of ``latent_perplexity`` held (``harness.perplexity_task.perplexity_stderr``): the interval's
    half-width over the normal quantile of its level (1.96 at 95%), the Monte Carlo error of a bound reported with its
    own error (``estimator=elbo``), or nothing."""
    mc, kind = u["monte_carlo_stderr"], u["stderr_kind"]
    if kind == "interval":
        return (f"- Monte Carlo standard error (documents fixed): {_fmt(mc)}; the {u['level']:.0%} interval's half-width "
                f"/ {u['normal_quantile']:.4g}, its t quantile and bias allowance included (lm-eval's Stderr): "
                f"{_fmt(u['interval_stderr'])}")  # fmt: skip
    if kind == "bound":
        return (f"- Monte Carlo standard error of the bound (documents fixed; lm-eval's Stderr): {_fmt(mc)}: how far "
                "another run's bound may fall, not an interval on the true perplexity")  # fmt: skip
    return "- Monte Carlo standard error: – (no two-sided interval is honest here; lm-eval's Stderr is N/A)"


def card_markdown(card: dict, plot_file: str | None = None) -> str:
    """The card as Markdown."""
    m, s = card["model"], card["settings"]
    lines = [
        f"# Estimate card: {m['name']} on {card['task']}",
        "",
        f"{card['corpus']['num_documents']} documents, {card['corpus']['num_tokens']} model tokens.",
        "",
        f"| figure | value | {s['level']:.0%} interval | what it is |",
        "|---|---|---|---|",
    ]
    for f in card["figures"]:
        ci = (
            "–"
            if f["interval"] is None
            else f"[{_fmt_like(f['interval'][0], f['value'])}, {_fmt_like(f['interval'][1], f['value'])}]"
        )
        lines.append(f"| {f['name']} | {_fmt(f['value'])} | {ci} | {f['kind']} |")
    notes = sorted({f["interval_note"] for f in card["figures"] if f.get("interval_note")})
    lines += [""] + [f"- {n}" for n in notes]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in s.items()]
    lines += ["", "## Model", "", "| | |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in m.items()]
    u = card["uncertainty"]
    lines += [
        "",
        "## Uncertainty",
        "",
        _stderr_line(u),
        f"- sampling standard error over documents (another sample of documents): {_fmt(u['sampling_stderr'])}",
    ]
    d = card["diagnostics"]
    if d is not None:
        lines += ["", "## Reliability", ""] + _reliability_lines(d) + ["", f"**Verdict.** {d['verdict']}"]
        if d["what_to_try"]:
            lines += ["", "What to try:"] + [f"- {t}" for t in d["what_to_try"]]
    if plot_file:
        lines += ["", "## Convergence", "", f"![perplexity against K]({plot_file})"]
    lines += [
        "",
        "## Reproduce",
        "",
        "```bash",
        card["reproduce"],
        "```",
        "",
        *([card["reproduce_note"], ""] if card.get("reproduce_note") else []),
        f"Source: `{card['sources']['results']}`, `{card['sources']['samples']}`.",
        "",
    ]
    return "\n".join(lines)


def save_plot(card: dict, path: Path) -> bool:
    """Convergence PNG (PPL against K; beam and exact lines when known); False when the run is not IS."""
    if card["convergence"] is None:
        return False
    # matplotlib only where a figure is drawn; the backend is chosen before pyplot is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    plot_convergence(
        card["convergence"],
        ax=ax,
        true_perplexity=card["exact_perplexity"],
        beam_perplexity=card["beam_perplexity"],
    )
    s, c = card["settings"], card["corpus"]
    ax.set_ylabel("IS perplexity (upper bound in expectation)")
    ax.set_title(
        f"{Path(card['model']['name']).name} on {card['task']}: {c['num_documents']} documents, {c['num_tokens']} "
        f"tokens\nIS, K = {s.get('num_samples')}, τ = {s.get('temperature')}, "
        f"{'peeking' if s.get('peek') else 'no peeking'}, seed {s.get('seed')}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
