"""``lm-latent-eval compare A B``: two runs over the same documents side by side, with a paired bootstrap test.

The statistic is the one the runs report: Δ = log PPL_A − log PPL_B = Σ_n ℓ^B_n / Σ_n T_n − Σ_n ℓ^A_n / Σ_n T_n
(ℓ = per-document log p̂, T = tokens; instance level). Its 95% interval and two-sided p-value come from a *paired
bootstrap over documents*: documents are the independent units, each resample draws N documents with replacement
and keeps both runs' estimates of each drawn document together, so document difficulty cancels, no normality is
assumed (per-document IS estimates are skewed), and the token weighting of perplexity is respected, which a paired
t-test on per-document means would not do.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings
from pathlib import Path

import numpy as np

from ..cli import positive_int
from ..errors import InputError
from ..estimators.corpus import CorpusEstimate, corpus_estimate, pareto_k_shares
from ..estimators.diagnostics import effective_sample_size
from .json_files import write_json
from .lm_eval_output import TaskRun, read_runs


class DocumentMismatch(InputError):
    """The two runs did not score the same documents; a paired comparison is meaningless."""


def _same_run(a: TaskRun, b: TaskRun) -> bool:
    """Two results files of one run configuration (a rerun, e.g. resumed from results_dir): same task, model, estimator
    settings and documents."""
    return (
        a.task == b.task
        and a.settings == b.settings
        and a.config.get("checkpoint_sha256") == b.config.get("checkpoint_sha256")
        and [d.document for d in a.documents] == [d.document for d in b.documents]
    )


def select_run(path: str | Path, task: str | None = None) -> TaskRun:
    """The one (results file, task) under ``path``; ``task`` picks among several. Reruns of one configuration (lm-eval
    writes a results file per run into the model's folder) count once: the newest, with a warning naming it."""
    runs = [r for r in read_runs(path) if task is None or r.task == task]
    if len(runs) > 1 and all(_same_run(runs[0], r) for r in runs[1:]):
        # results_<ISO date>.json: the name sorts by time
        newest = max(runs, key=lambda r: r.results_file.name)
        warnings.warn(
            f"{path} holds {len(runs)} runs of {newest.task} with the same model, settings and documents (reruns); "
            f"comparing the newest, {newest.results_file.name} (pass a results_*.json file to choose another)",
            stacklevel=2,
        )
        runs = [newest]
    if len(runs) != 1:
        found = ", ".join(f"{r.task} ({r.results_file})" for r in runs) or "none"
        raise InputError(
            f"{path}: need exactly one run{f' of task {task!r}' if task else ''}, found {found}; "
            "pass one results_*.json file or --task"
        )
    return runs[0]


def align(a: TaskRun, b: TaskRun) -> list[tuple]:
    """Pairs (document of A, document of B) by text; DocumentMismatch when the document sets differ."""
    by_text_b = {}
    for d in b.documents:
        by_text_b.setdefault(d.document, d)
    texts_a = {d.document for d in a.documents}
    only_a, only_b = texts_a - by_text_b.keys(), by_text_b.keys() - texts_a
    if only_a or only_b or len(a.documents) != len(b.documents):
        example = next(iter(only_a or only_b), "")
        raise DocumentMismatch(
            f"refusing to compare: the runs scored different documents: A has {len(a.documents)} ({a.task}, {a.samples_file}), B has "
            f"{len(b.documents)} ({b.task}, {b.samples_file}); {len(only_a)} only in A, {len(only_b)} only in B"
            + (f", e.g. {example[:60]!r}" if example else "")
            + ". Rerun both on the same task, split and --limit."
        )
    return [(d, by_text_b[d.document]) for d in a.documents]


def _summary(run: TaskRun, docs, corpus: CorpusEstimate) -> dict:
    """Model, settings, the perplexity with its honest 95% statement (the cards' method), the certified bound, the two
    standard errors and the IS diagnostics of one side."""
    out = {
        "label": run.label,
        "model": run.model_name,
        "checkpoint_sha256": run.config.get("checkpoint_sha256"),
        "task": run.task,
        "settings": run.settings,
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "interval": corpus.interval.describe(),
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "instance_perplexity": corpus.instance_perplexity,
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "sampling_stderr": corpus.sampling_stderr,
    }
    informative = [d.importance_weights for d in docs if d.importance_weights is not None]
    if informative:
        above, _, _ = pareto_k_shares(docs)
        out["ess_mean"] = float(np.mean([effective_sample_size(lw) for lw in informative]))
        out["num_pareto_k_above_threshold"] = above
    return out


def _corrected(run_docs: list, correct: bool) -> np.ndarray:
    """Per-document log p̂ + v̂/2 (the bias correction of the cards) when ``correct``, else log p̂: one rule for both
    runs, so that equal estimates compare equal."""
    return np.array(
        [d.log_likelihood + (d.error().relative_variance / 2 if correct else 0.0) for d in run_docs]
    )


def _per_word(docs: list) -> list:
    """The same estimates counted per whitespace word instead of per model token."""
    return [dataclasses.replace(d, num_tokens=len(d.document.split())) for d in docs]


def paired_comparison(
    a: TaskRun, b: TaskRun, level: float = 0.95, num_resamples: int = 10000, seed: int = 0
) -> dict:
    """Side-by-side summaries, per-document log p̂ per unit and the paired bootstrap of Δ = log PPL_A − log PPL_B.

    The unit is the model token when both runs count the same tokens per document; otherwise (different tokenizers)
    every figure, both sides' summaries included, is per whitespace word, the one unit both runs share."""
    pairs = align(a, b)
    sides = [[p[i] for p in pairs] for i in (0, 1)]
    unit = "model token"
    if [d.num_tokens for d in sides[0]] != [d.num_tokens for d in sides[1]]:
        warnings.warn(
            "the two runs tokenize the documents differently: every figure is per whitespace word",
            stacklevel=2,
        )
        unit, sides = "word", [_per_word(docs) for docs in sides]
    corpora = [corpus_estimate(docs) for docs in sides]
    # corrected only where both runs' intervals are two-sided: v̂ is estimable for every document of both
    corrected = all(c.interval.two_sided for c in corpora)
    # [N, 2]
    ll = np.stack([_corrected(docs, corrected) for docs in sides], axis=1)
    identical = all(da.log_likelihood == db.log_likelihood for da, db in zip(*sides))
    tokens = np.array([[da.num_tokens, db.num_tokens] for da, db in zip(*sides)], dtype=np.float64)
    keep = tokens[:, 0] > 0
    ll, tokens = ll[keep], tokens[keep]
    n = ll.shape[0]
    if n < 2:
        raise InputError("a paired test needs at least two non-empty documents")

    def delta(idx):
        # [..., 2]: Σℓ / ΣT of A and B
        per_unit = ll[idx].sum(axis=-2) / tokens[idx].sum(axis=-2)
        # log PPL_A − log PPL_B
        return per_unit[..., 1] - per_unit[..., 0]

    rng = np.random.default_rng(seed)
    boot = np.concatenate(
        [
            delta(rng.integers(0, n, size=(min(1000, num_resamples - s), n)))
            for s in range(0, num_resamples, 1000)
        ]
    )
    alpha = (1.0 - level) / 2.0
    observed = float(delta(np.arange(n)))
    p_value = min(1.0, 2.0 * min((boot <= 0).mean(), (boot >= 0).mean()))
    # [N, 2] log p̂ per unit
    per_doc = ll / tokens
    return {
        "a": _summary(a, sides[0], corpora[0]),
        "b": _summary(b, sides[1], corpora[1]),
        "bias_corrected": corrected,
        "identical": identical,
        "same_run": a.results_file.resolve() == b.results_file.resolve() and a.task == b.task,
        "num_documents": int(n),
        "unit": unit,
        "test": "paired bootstrap over documents of Δ = log PPL_A − log PPL_B (instance level)",
        "delta_log_ppl": observed,
        "ppl_ratio_a_over_b": math.exp(observed),
        "ci": [float(np.quantile(boot, alpha)), float(np.quantile(boot, 1.0 - alpha))],
        "level": level,
        "p_value": max(p_value, 1.0 / num_resamples),
        "num_resamples": num_resamples,
        "a_better_documents": int((per_doc[:, 0] > per_doc[:, 1]).sum()),
        "b_better_documents": int((per_doc[:, 1] > per_doc[:, 0]).sum()),
        "per_document_log_p_per_unit": per_doc.tolist(),
        "bootstrap_delta": boot,
    }


def _fmt(x, spec: str) -> str:
    """``x`` formatted with ``spec``; N/A where it is undefined (None or NaN), as in lm-eval's table and the cards."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "N/A"
    return format(x, spec)


def _statement(side: dict) -> str:
    lo, hi = side["perplexity_interval"]
    return f"[{_fmt(lo, '.4f')}, {_fmt(hi, '.4f')}]" if lo > 0 else f"≤ {_fmt(hi, '.4f')} (one-sided)"


def comparison_markdown(c: dict) -> str:
    """The comparison as Markdown."""
    a, b = c["a"], c["b"]
    rows = [
        ("model", a["model"], b["model"]),
        ("checkpoint sha256", str(a["checkpoint_sha256"])[:16], str(b["checkpoint_sha256"])[:16]),
    ]
    for key in sorted(set(a["settings"]) | set(b["settings"])):
        rows.append((key, a["settings"].get(key, "–"), b["settings"].get(key, "–")))
    # the unit of every figure below and of the test
    per = f"per {c['unit']}"
    rows += [
        (f"perplexity {per}", _fmt(a["perplexity"], ".4f"), _fmt(b["perplexity"], ".4f")),
        ("95% statement", _statement(a), _statement(b)),
        (
            "certified upper bound",
            _fmt(a["perplexity_upper_bound"], ".4f"),
            _fmt(b["perplexity_upper_bound"], ".4f"),
        ),
        ("Monte Carlo stderr", _fmt(a["monte_carlo_stderr"], ".4g"), _fmt(b["monte_carlo_stderr"], ".4g")),
        (
            "sampling stderr (documents)",
            _fmt(a["sampling_stderr"], ".4g"),
            _fmt(b["sampling_stderr"], ".4g"),
        ),
        (
            f"instance-level perplexity {per} (Eq. 5)",
            _fmt(a["instance_perplexity"], ".4f"),
            _fmt(b["instance_perplexity"], ".4f"),
        ),
    ]
    for key, spec in (("ess_mean", ".1f"), ("num_pareto_k_above_threshold", "d")):
        if key in a or key in b:
            rows.append((key, *(_fmt(side[key], spec) if key in side else "–" for side in (a, b))))
    lo, hi = c["ci"]
    better = "A" if c["delta_log_ppl"] < 0 else "B"
    notes = []
    if c["unit"] == "word":
        notes += [
            "",
            "The runs tokenize differently: every perplexity here is per whitespace word, the unit of the test.",
        ]
    if c["identical"]:
        which = "A and B are the same run" if c["same_run"] else "the two runs drew the same estimates"
        notes += [
            "",
            (
                f"**Every document's estimate is equal in A and B** ({which}): Δ = 0 by construction, and the "
                "test below says nothing about the models or their estimators."
            ),
        ]
    lines = [
        f"# {a['label']} (A) vs {b['label']} (B) on {a['task']}",
        *notes,
        "",
        "| | A | B |",
        "|---|---|---|",
    ] + [f"| {k} | {va} | {vb} |" for k, va, vb in rows]
    lines += [
        "",
        (
            f"**Paired test** ({c['num_documents']} documents, log p̂ per {c['unit']}): {c['test']}, "
            f"{c['num_resamples']} resamples."
        ),
        "",
        (
            f"- Δ = log PPL_A − log PPL_B = {c['delta_log_ppl']:.4f} (PPL ratio A/B {c['ppl_ratio_a_over_b']:.4f}), "
            f"{100 * c['level']:.0f}% interval [{lo:.4f}, {hi:.4f}], two-sided p = {c['p_value']:.4g}"
        ),
        (
            f"- {better} has the lower perplexity; A is better on {c['a_better_documents']} documents, B on "
            f"{c['b_better_documents']}"
        ),
        (
            "- Why this test: documents are the independent units; resampling them in pairs cancels document "
            "difficulty, needs no normality (per-document IS estimates are skewed) and keeps perplexity's token "
            "weighting, which a paired t-test on per-document means would not."
        ),
        (
            (
                "- Both runs' estimates are bias-corrected per document (log p̂ + v̂/2, as on the cards), and each "
                "document's Monte Carlo noise is in the resampled spread."
            )
            if c["bias_corrected"]
            else (
                "- Caveat: at least one run has no honest two-sided interval, so the test compares uncorrected "
                "estimates, upper bounds in expectation: a difference between two biased estimates, e.g. of one "
                "model with and without peeking, is a difference of estimators, not of models."
            )
        ),
        "",
    ]
    return "\n".join(lines)


def comparison_figure(c: dict):
    """Left: per-document log p̂ per unit, B against A, with the diagonal; right: bootstrap distribution of Δ. The
    title names A and B (model and settings), the task and the unit."""
    # matplotlib only where a figure is drawn: paired_comparison and the Markdown do not need it
    from matplotlib.figure import Figure

    per_doc = np.asarray(c["per_document_log_p_per_unit"])
    a, b, unit = c["a"], c["b"], c["unit"]
    # constrained layout sizes the panels around their labels, so nothing runs past the figure's edge as drawn
    fig = Figure(figsize=(10, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.scatter(per_doc[:, 0], per_doc[:, 1], s=10)
    lim = [per_doc.min(), per_doc.max()]
    left.plot(lim, lim, color="black", lw=1, label="A = B")
    left.set(
        xlabel=f"A: log p̂ per {unit} (nats)",
        ylabel=f"B: log p̂ per {unit} (nats)",
        title=f"per document ({c['num_documents']} documents)\nabove the line: B higher",
    )
    left.legend(loc="upper left", fontsize=8)
    right.hist(c["bootstrap_delta"], bins=50, density=True, alpha=0.7, label="bootstrap Δ")
    for x in c["ci"]:
        right.axvline(x, color="gray", ls="--")
    right.axvline(0.0, color="black", lw=1)
    right.axvline(c["delta_log_ppl"], color="C3", label="observed Δ")
    right.plot([], [], color="gray", ls="--", label=f"{100 * c['level']:.0f}% interval")
    right.set(
        xlabel=f"Δ = log PPL_A − log PPL_B\n(nats per {unit}; < 0: A better)",
        ylabel="density",
        title=f"paired bootstrap, p = {c['p_value']:.3g}",
    )
    right.legend(fontsize=8)
    fig.suptitle(f"A = {a['label']}\nB = {b['label']}\non {a['task']}", fontsize=9)
    return fig


def save_plot(c: dict, path: Path) -> None:
    comparison_figure(c).savefig(path, dpi=120)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "a", help="lm-eval output folder or results_*.json of run A (made with --log_samples)"
    )
    parser.add_argument("b", help="the same for run B")
    parser.add_argument("--task", default=None, help="the task to compare when a folder holds several")
    parser.add_argument("--output", default="compare_out")
    parser.add_argument("--resamples", type=positive_int, default=10000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    a, b = select_run(args.a, args.task), select_run(args.b, args.task)
    c = paired_comparison(a, b, num_resamples=args.resamples, seed=args.seed)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    text = comparison_markdown(c) + "\n![comparison](comparison.png)\n"
    (out / "comparison.md").write_text(text)
    save_plot(c, out / "comparison.png")
    write_json(out / "comparison.json", {k: v for k, v in c.items() if k != "bootstrap_delta"})
    print(text)
    print(f"wrote {out / 'comparison.md'}, comparison.json, comparison.png")
    return 0
