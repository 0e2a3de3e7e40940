"""``lm-latent-eval sweep``: IS perplexity over τ × {peek, no peek} × {corpus, instance} (Logan et al. 2020, Table 1),
SMC rows for the same proposal settings (models with the stepwise part), beam bounds for several k (Table 2), and the
K-convergence plot, all from one run per proposal setting."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_num_samples
from ..documents import read_texts
from ..errors import InputError, MissingFileError
from ..estimators import EstimatorSettings, estimate_document
from ..estimators.corpus import corpus_estimate, pareto_k_shares
from ..estimators.diagnostics import corpus_convergence_curve, pareto_k_threshold
from ..estimators.registry import resolve
from ..estimators.settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS
from ..estimators.workers import DocumentWorkers
from ..harness.provenance import package_path
from ..harness.threads import choose_workers
from ..models import load_model
from ..models.rnng.treebank import read_sentences
from ..paths import DATA_DIR
from ..protocol import has_exact_marginal, has_stepwise, has_tractable_marginal
from .json_files import write_json
from .plots import plot_convergence

DEFAULT_TEMPERATURES = (0.5, 0.9, 1.0, 1.1, 2.0, 5.0)
DEFAULT_BEAM_SIZES = (1, 10, 100)
# bundled evaluation data of a model whose corpus is not the default tiny test set (paths under lm_latent_eval/data)
DEFAULT_DATA = {"rnng": "ptb_tiny/test.txt"}


def read_documents(path: str | Path) -> list[str]:
    """Documents of a ``.jsonl`` file (field ``text``, or Linked WikiText-2 ``tokens``), a ``.txt`` file (one per line),
    or a file of PTB-style bracketed trees (one sentence per tree); errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    # PTB-style trees
    if path.suffix != ".jsonl" and path.read_text(encoding="utf-8").lstrip().startswith("("):
        docs = read_sentences(path)
        if not docs:
            raise InputError(f"{path}: no documents")
        return docs
    return read_texts(path, tokens_field=True)


def exact_estimates(model, documents: list[str], device) -> list | None:
    """The exact row where the model gives it: a tractable marginal, or an enumeration (short texts only: the RNNG's
    trees, the tokenization LM's segmentations) that manages every document; None otherwise."""
    if not has_exact_marginal(model):
        return None
    try:
        return [estimate_document(model, d, EstimatorSettings(estimator="exact"), device) for d in documents]
    except ValueError:
        if has_tractable_marginal(model):
            raise
        # a document too long to enumerate
        return None


def run_sweep(
    model,
    documents: list[str],
    temperatures=DEFAULT_TEMPERATURES,
    peek_modes=(True, False),
    beam_sizes=DEFAULT_BEAM_SIZES,
    num_samples: int = 100,
    seed: int = 1234,
    batch_size: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    smc: bool | None = None,
    resample_threshold: float = DEFAULT_RESAMPLE_THRESHOLD,
    smc_runs: int = DEFAULT_SMC_RUNS,
    workers: int = 1,
) -> dict:
    """Every row of Table 1 (IS, and SMC when ``smc``: default whenever the model is stepwise) and Table 2 plus
    convergence curves, as a JSON-ready dict; each setting's documents estimated in ``workers`` processes
    (``estimators.workers``: the same numbers as one process)."""
    smc = has_stepwise(model) if smc is None else smc
    settings = [(peek, t) for peek in peek_modes for t in temperatures]
    # a bad K, τ or SMC option: one error before any work
    for peek, t in settings[:1] + settings[-1:]:
        EstimatorSettings("smc" if smc else "is", num_samples, t, peek, seed=seed, batch_size=batch_size,
                          resample_threshold=resample_threshold, smc_runs=smc_runs)  # fmt: skip
    for t in temperatures:
        EstimatorSettings("is", num_samples, t, seed=seed, batch_size=batch_size)
    total = len(documents) * ((1 + smc) * len(settings) + len(beam_sizes) + 1)
    bar = tqdm(total=total, desc="sweep", unit="doc", disable=not progress)
    exact = exact_estimates(model, documents, device)
    bar.update(len(documents))
    num_tokens = None
    rows, smc_rows, beam_rows = [], [], []
    with DocumentWorkers(model, device, workers) as pool:
        for peek, temperature in settings:
            s = EstimatorSettings("is", num_samples, temperature, peek, seed=seed, batch_size=batch_size)
            estimates = _estimates(pool, documents, s, bar, diagnostics=True)
            num_tokens = sum(e.num_tokens for e in estimates)
            if num_tokens == 0:
                raise InputError("every document is empty: perplexity is undefined")
            rows.append(is_row(estimates, peek, temperature, num_samples))
        for peek, temperature in settings if smc else ():
            s = EstimatorSettings("smc", num_samples, temperature, peek, seed=seed, batch_size=batch_size,
                                  resample_threshold=resample_threshold, smc_runs=smc_runs)  # fmt: skip
            smc_rows.append(smc_row(_estimates(pool, documents, s, bar), s))
        for k in beam_sizes:
            # summed in the documents' order
            total_ll = 0.0
            for e in _estimates(pool, documents, EstimatorSettings("beam", beam_size=k), bar):
                total_ll += e.log_likelihood
            beam_rows.append(
                {
                    "beam_size": k,
                    "log_likelihood": total_ll,
                    "ppl_upper_bound": math.exp(-total_ll / num_tokens),
                }
            )
    bar.close()
    result = {"num_documents": len(documents), "num_tokens": num_tokens, "is": rows, "beam": beam_rows}
    if smc:
        result["smc"] = smc_rows
    if exact is not None:
        result["exact_ppl"] = math.exp(-sum(e.log_likelihood for e in exact) / num_tokens)
        result["exact_source"] = "the model's log_marginal"
    return result


def _estimates(
    pool: DocumentWorkers, documents: list[str], settings: EstimatorSettings, bar, diagnostics=False
):
    """Every document's estimate under ``settings`` (estimated by ``pool``), in the documents' order; a repeated
    text is estimated once (its random streams are seeded by its text: the same estimate)."""
    times = Counter(documents)
    found = {}
    run = resolve(settings, pool.model)
    for text, estimate in pool.estimate([(t, run) for t in times], 0, "", False, diagnostics):
        found[text] = estimate
        bar.update(times[text])
    return [found[d] for d in documents]


def is_row(estimates, peek: bool, temperature: float, num_samples: int) -> dict:
    """One IS row of Table 1: corpus and instance perplexity at K and along K, the statement, Pareto k̂ and ESS."""
    lws = [e.log_weights for e in estimates]
    curve = corpus_convergence_curve(lws, [e.num_tokens for e in estimates])
    corp_curve = curve["corpus_perplexity"]
    corpus = corpus_estimate(estimates)
    above, _, _ = pareto_k_shares(estimates)
    return {
        "peek": peek,
        "temperature": temperature,
        "num_samples": num_samples,
        "corpus_ppl": corp_curve[-1],
        "instance_ppl": curve["instance_perplexity"][-1],
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "num_pareto_k_above_threshold": above,
        "mean_ess": float(np.mean([e.diagnostics.ess for e in estimates if e.diagnostics])),
        "pareto_k": [e.diagnostics.pareto_k if e.diagnostics else float("nan") for e in estimates],
        "convergence_k": curve["num_samples"],
        "convergence_instance_ppl": curve["instance_perplexity"],
        "convergence_corpus_ppl": corp_curve,
    }


def smc_row(estimates, settings: EstimatorSettings) -> dict:
    """One SMC row: the perplexity with its honest 95% statement (``estimators.intervals``), the certified bound,
    instance and corpus PPL (run r of every document is one corpus sample), ESS over tokens, resampling steps."""
    corpus = corpus_estimate(estimates)
    informative = [e.diagnostics for e in estimates if e.num_tokens > 0]
    return {
        "peek": settings.peek,
        "temperature": settings.temperature,
        "num_samples": settings.num_samples,
        "resample_threshold": settings.resample_threshold,
        "smc_runs": settings.smc_runs,
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "instance_ppl": corpus.instance_perplexity,
        "corpus_ppl": corpus.corpus_perplexity,
        "mean_ess": float(np.mean([d.ess_mean for d in informative])),
        "min_ess": float(np.min([d.ess_min for d in informative])),
        "mean_resampling_steps": float(np.mean([d.resampling_steps for d in informative])),
        "log_likelihoods": [e.log_likelihood for e in estimates],
    }


def _statement(r: dict) -> str:
    """``estimate [lower, upper]`` where a two-sided interval is honest, else the one-sided certified bound."""
    lo, hi = r["perplexity_interval"]
    return f"{r['perplexity']:.3f} [{lo:.3f}, {hi:.3f}]" if lo > 0 else f"≤ {hi:.3f} (one-sided)"


def smc_table_markdown(result: dict) -> str:
    """SMC rows for the same proposals as Table 1: the perplexity with its 95% interval (or the one-sided certified
    bound where no two-sided interval is honest), instance and corpus PPL, ESS over tokens, resampling."""
    first = result["smc"][0]
    header = (
        f"| Proposal (SMC, K={first['num_samples']}, resample when ESS < {first['resample_threshold']:g}·K, "
        f"{first['smc_runs']} run(s)) | Perplexity (95% interval or bound) | Instance PPL | Corpus PPL (runs) "
        "| mean ESS over tokens | min ESS | resampling steps per document |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for name, r in _proposal_rows(result["smc"], "SMC, "):
        lines.append(
            f"| {name} | {_statement(r)} | {r['instance_ppl']:.3f} | {r['corpus_ppl']:.3f} "
            f"| {r['mean_ess']:.1f} | {r['min_ess']:.1f} | {r['mean_resampling_steps']:.2f} |"
        )
    return "\n".join(lines + _exact_row(result, empty_cells=3))


def _exact_row(result: dict, empty_cells: int) -> list[str]:
    """The row of the exact perplexity (where the result has one) under a table of perplexities: its value in the
    first three value columns, then ``empty_cells`` empty cells; [] without an exact perplexity."""
    if "exact_ppl" not in result:
        return []
    e = result["exact_ppl"]
    return [f"| Exact ({result['exact_source']}) | {e:.3f} | {e:.3f} | {e:.3f} |" + " |" * empty_cells]


def _proposal_rows(rows: list[dict], label: str = ""):
    """(row name, row) per proposal: peeking rows by τ, then no-peeking rows by τ; names start with ``label``."""
    no_peeking = f"{label}no peeking" if label else "No peeking"
    for r in sorted(rows, key=lambda r: (not r["peek"], r["temperature"])):
        yield (
            (f"{label}τ = {r['temperature']:g}" if r["peek"] else f"{no_peeking}, τ = {r['temperature']:g}"),
            r,
        )


def table1_markdown(result: dict) -> str:
    """Table 1 layout: one row per proposal (τ with peeking, then no peeking); corpus- and instance-level PPL."""
    k = result["is"][0]["num_samples"]
    lines = [
        (
            f"| Proposal | Corpus PPL | Instance PPL | Perplexity (95% interval or bound) | mean ESS (K={k}) "
            f"| documents with k̂ ≥ {pareto_k_threshold(k):.2f} / with k̂ defined |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, r in _proposal_rows(result["is"]):
        defined = int(np.sum(~np.isnan(np.array(r["pareto_k"], dtype=float))))
        lines.append(
            f"| {name} | {r['corpus_ppl']:.3f} | {r['instance_ppl']:.3f} | {_statement(r)} "
            f"| {r['mean_ess']:.1f} | {r['num_pareto_k_above_threshold']} / {defined} |"
        )
    return "\n".join(lines + _exact_row(result, empty_cells=2))


def table2_markdown(result: dict) -> str:
    """Table 2 layout: beam marginalization, a perplexity upper bound for each beam size k."""
    lines = ["| Beam size k | PPL upper bound |", "|---|---|"]
    lines += [f"| {r['beam_size']} | {r['ppl_upper_bound']:.3f} |" for r in result["beam"]]
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


def _title(result: dict) -> str:
    """Model (checkpoint), corpus, size, K and seed of a sweep."""
    cfg = result.get("config", {})
    model = cfg.get("model", "model") + (f" ({cfg['pretrained']})" if cfg.get("pretrained") else " (bundled)")
    data = "/".join(Path(str(cfg.get("data", "?"))).parts[-2:])
    return (
        f"IS perplexity of {model} on {data}: {result['num_documents']} documents, {result['num_tokens']} tokens, "
        f"K = {result['is'][0]['num_samples']}, seed {cfg.get('seed', '?')}"
    )


def _legend_handles(result: dict, colors: dict, beam: dict | None) -> list:
    # matplotlib only where a figure is drawn: run_sweep and the tables do not need it
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, label=f"τ = {t:g}") for t, c in colors.items()]
    handles += [
        Line2D([], [], color="gray", marker="o", ms=3, label="instance level"),
        Line2D([], [], color="gray", ls="--", label="corpus level"),
    ]
    if "exact_ppl" in result:
        handles.append(Line2D([], [], color="black", label=f"exact ({result['exact_ppl']:.5g})"))
    if beam is not None:
        label = f"beam bound k = {beam['beam_size']} ({beam['ppl_upper_bound']:.5g})"
        handles.append(Line2D([], [], color="gray", ls=":", label=label))
    return handles


def save_convergence_plot(result: dict, path: str | Path) -> None:
    """``convergence_figure`` as a PNG."""
    # matplotlib only where a figure is drawn (convergence_figure chooses the backend first)
    import matplotlib.pyplot as plt

    fig = convergence_figure(result)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def convergence_figure(result: dict):
    """IS perplexity against K, one panel per peeking mode (colour = τ, solid = instance, dashed = corpus level),
    with the exact value and the largest beam's bound as lines; each panel's linear y axis fits the curves being
    compared (``_panel_range``), those that end above it are named below it; title and legend outside the data."""
    # matplotlib only where a figure is drawn; the backend is chosen before pyplot is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["peek"] for r in result["is"]}, reverse=True)
    temps = sorted({r["temperature"] for r in result["is"]})
    colors = dict(zip(temps, plt.cm.viridis(np.linspace(0, 0.9, len(temps)))))
    beam = max(result["beam"], key=lambda r: r["beam_size"]) if result.get("beam") else None
    lines = [v for v in (result.get("exact_ppl"), beam and beam["ppl_upper_bound"]) if v is not None]
    fig, axes = plt.subplots(1, len(modes), figsize=(max(8.0, 5.8 * len(modes)), 5.4), squeeze=False)
    for ax, peek in zip(axes[0], modes):
        rows = [r for r in result["is"] if r["peek"] == peek]
        curves = [c for r in rows for c in (r["convergence_instance_ppl"], r["convergence_corpus_ppl"])]
        bottom, top, off = _panel_range(curves, lines)
        for r in rows:
            curve = {
                "num_samples": r["convergence_k"],
                "instance_perplexity": r["convergence_instance_ppl"],
                "corpus_perplexity": r["convergence_corpus_ppl"],
            }
            plot_convergence(curve, ax=ax, color=colors[r["temperature"]], legend=False)
        if "exact_ppl" in result:
            ax.axhline(result["exact_ppl"], color="black", lw=1)
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


def _floats(text: str) -> list[float]:
    return [float(t) for t in text.split(",") if t]


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default="hmm", help="registered name (hmm, kglm, entitynlm, rnng) or package.module:Class"
    )
    parser.add_argument(
        "--pretrained", default=None, help="checkpoint dir or Hub id (default: the bundled one)"
    )
    parser.add_argument(
        "--data",
        default=None,
        help=".jsonl (field 'text'), .txt (one per line) or PTB trees; default: the model's bundled test set",
    )
    parser.add_argument("--num-samples", type=int, default=100)
    parser.add_argument("--temperatures", type=_floats, default=list(DEFAULT_TEMPERATURES))
    parser.add_argument("--peek", choices=("both", "peek", "no-peek"), default="both")
    parser.add_argument("--beam-sizes", type=_ints, default=list(DEFAULT_BEAM_SIZES))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="particles per log_joint call (memory only; default one sample block)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--output",
        dest="output_dir",
        default="sweep_out",
        help="folder for the tables and plots",
    )
    parser.add_argument(
        "--smc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="SMC rows beside the IS rows (default: whenever the model has the stepwise part)",
    )
    parser.add_argument(
        "--resample-threshold",
        type=float,
        default=DEFAULT_RESAMPLE_THRESHOLD,
        help="SMC resamples when ESS < threshold · particles",
    )
    parser.add_argument(
        "--smc-runs", type=int, default=DEFAULT_SMC_RUNS, help="independent SMC runs per document"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that estimate a setting's documents side by side on the CPU (default: one per torch "
        "thread); the numbers do not depend on it",
    )
    parser.add_argument(
        "--exact-ppl",
        type=float,
        default=None,
        help="the corpus's exact perplexity when known from elsewhere (e.g. python bench/rnng_exact.py for the "
        "bundled RNNG): the tables' exact row and the plot's exact line (a model with log_marginal needs none)",
    )


def run(args: argparse.Namespace) -> int:
    if args.workers is not None:
        check_num_samples(args.workers, "--workers")
    model, _ = load_model(args.model, args.pretrained, device=args.device)
    data = args.data or DATA_DIR / DEFAULT_DATA.get(args.model, "corpus/tiny_test.jsonl")
    peek_modes = {"both": (True, False), "peek": (True,), "no-peek": (False,)}[args.peek]
    # a proposal that declares always_peeks = True: no-peeking rows do not apply
    if getattr(model.proposal, "always_peeks", False):
        if args.peek == "no-peek":
            raise SystemExit(
                f"{type(model.proposal).__name__} always reads the whole text: no no-peeking proposal"
            )
        if args.peek == "both":
            print(f"{type(model.proposal).__name__} always reads the whole text: peeking rows only")
        peek_modes = (True,)
    if args.smc and not has_stepwise(model):
        # the error names the missing methods
        resolve(EstimatorSettings("smc"), model)
    result = run_sweep(
        model,
        read_documents(data),
        args.temperatures,
        peek_modes,
        args.beam_sizes,
        args.num_samples,
        args.seed,
        args.batch_size,
        args.device,
        smc=args.smc,
        resample_threshold=args.resample_threshold,
        smc_runs=args.smc_runs,
        workers=choose_workers(args.workers, torch.device(args.device))[0],
    )
    if args.exact_ppl is not None and "exact_ppl" not in result:
        result["exact_ppl"], result["exact_source"] = args.exact_ppl, "given by --exact-ppl"
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # bundled files as lm_latent_eval/data/...: no machine's path
    # what the numbers depend on (not the processes that computed them)
    options = {k: v for k, v in vars(args).items() if k not in ("func", "workers")}
    result["config"] = options | {"data": package_path(data)}
    write_json(out / "sweep.json", result)
    tables = f"Table 1 (IS perplexity)\n\n{table1_markdown(result)}\n\n"
    if result.get("smc"):
        tables += f"Table 1, SMC rows (same proposals)\n\n{smc_table_markdown(result)}\n\n"
    tables += f"Table 2 (beam marginalization)\n\n{table2_markdown(result)}\n"
    (out / "tables.md").write_text(tables)
    save_convergence_plot(result, out / "convergence.png")
    print(tables)
    print(f"wrote {out / 'sweep.json'}, {out / 'tables.md'}, {out / 'convergence.png'}")
    return 0
