"""``lm-latent-eval report <lm-eval output dir>``: one estimate card (Markdown, JSON, convergence PNG) per model × task.

A card states every figure with its 95% interval and what kind of figure it is (exact, strict bound, or a stochastic
upper bound in expectation), the settings that produced it (K, τ, peeking, seed, estimator), the model's identity
(class, checkpoint sha256, dtype, device), the reliability diagnostics (ESS, Pareto k̂) with a plain-words verdict
and what to try, and the command that reproduces the run. Everything comes from lm-eval's results and samples files
(``--log_samples``); ``--beam-size`` additionally recomputes the beam bound from the recorded checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from pathlib import Path

import numpy as np

from ..estimators.aggregate import corpus_log_likelihood, log_mean_exp
from ..estimators.diagnostics import (
    PARETO_K_THRESHOLD,
    corpus_convergence_curve,
    effective_sample_size,
    pareto_khat,
)
from ..estimators.intervals import (
    DEFAULT_INTERVAL,
    INTERVAL_METHODS,
    corpus_log_likelihood_interval,
    log_likelihood_interval,
    measured_coverage,
)
from .lm_eval_output import TaskRun, read_runs

KINDS = {
    "is": "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)",
    "beam": "strict upper bound (the beam sum is ≤ p(x) for every document)",
    "exact": "exact",
}
ESS_FLOOR = 10.0  # fewer effective samples than this: the interval rests on a handful of weights
CONVERGENCE_TOLERANCE = 0.01  # relative change of PPL between K/2 and K that still counts as converged


def _ppl_interval(log_lik_interval, num_tokens: int) -> list[float]:
    """Perplexity interval from an interval of the total log likelihood (ends swap: PPL falls as log p rises)."""
    lo, hi = log_lik_interval
    return [math.exp(-hi / num_tokens), math.exp(-lo / num_tokens) if math.isfinite(lo) else math.inf]


def _figure(name: str, value: float, kind: str, interval=None, note: str | None = None) -> dict:
    fig = {"name": name, "value": value, "kind": kind, "ci95": interval}
    if note:
        fig["interval_note"] = note
    return fig


def is_figures(label: str, lws: list[np.ndarray], num_tokens: list[int], method: str, level: float, seed: int) -> list:
    """Instance- and corpus-level perplexity with intervals from the K log weights of every document."""
    total = int(sum(num_tokens))
    rng = np.random.default_rng(seed)
    k = min(lw.size for lw in lws)
    inst_ll = float(sum(log_mean_exp(lw) for lw in lws))
    inst_ci = corpus_log_likelihood_interval(lws, level, method, rng=rng)
    figures = [_figure(f"{label}instance-level perplexity", math.exp(-inst_ll / total), KINDS["is"],
                       _ppl_interval(inst_ci, total), f"instance level: {measured_coverage(method, k, 'corpus')}")]
    if len({lw.size for lw in lws}) == 1:
        joint = np.sum(lws, axis=0)  # [K]: log weight of corpus sample k
        corp_ci = log_likelihood_interval(joint, level, method, rng=rng)
        figures.append(_figure(f"{label}corpus-level perplexity", math.exp(-corpus_log_likelihood(lws) / total),
                               KINDS["is"], _ppl_interval(corp_ci, total),
                               f"corpus level: {measured_coverage(method, k, 'document')} (here of the joint weights)"))
    return figures


def diagnostics(lws: list[np.ndarray], num_tokens: list[int], settings: dict, progress: bool = True) -> dict:
    """ESS and Pareto k̂ summaries over documents, convergence over K, and a verdict with what to try."""
    from tqdm.auto import tqdm

    informative = [(lw, t) for lw, t in zip(lws, num_tokens) if t > 0]
    ess = np.array([effective_sample_size(lw) for lw, _ in informative])
    khat = np.array([pareto_khat(lw) for lw, _ in tqdm(informative, desc="Pareto k̂", disable=not progress)])
    defined = khat[~np.isnan(khat)]
    k = int(min(lw.size for lw in lws))
    curve = corpus_convergence_curve(lws, num_tokens)
    inst = curve["instance_perplexity"]
    change = abs(inst[-1] - inst[-2]) / inst[-1] if len(inst) > 1 else math.nan
    equal_k = len({lw.size for lw in lws}) == 1
    summary = {
        "num_samples": k,
        "corpus_ess": effective_sample_size(np.sum(lws, axis=0)) if equal_k else math.nan,
        "ess_min": float(ess.min()) if ess.size else math.nan,
        "ess_median": float(np.median(ess)) if ess.size else math.nan,
        "ess_mean": float(ess.mean()) if ess.size else math.nan,
        "pareto_k_max": float(defined.max()) if defined.size else math.nan,
        "pareto_k_median": float(np.median(defined)) if defined.size else math.nan,
        "num_pareto_k_above_threshold": int((defined > PARETO_K_THRESHOLD).sum()),
        "num_pareto_k_undefined": int(np.isnan(khat).sum()),
        "num_documents": len(informative),
        "pareto_k_threshold": PARETO_K_THRESHOLD,
        "relative_change_last_doubling": change,
        "convergence": curve,
    }
    summary["verdict"], summary["what_to_try"] = verdict(summary, settings)
    return summary


def verdict(d: dict, settings: dict) -> tuple[str, list[str]]:
    """Plain words on whether the IS estimates can be trusted, and what to try when they cannot."""
    problems = []
    if d["num_pareto_k_above_threshold"]:
        problems.append(
            f"{d['num_pareto_k_above_threshold']} of {d['num_documents']} documents have Pareto k̂ > "
            f"{PARETO_K_THRESHOLD} (largest {d['pareto_k_max']:.2f}): their weights are so heavy-tailed that log p̂ "
            "can sit far below log p, so the perplexity is likely overestimated and its interval too narrow"
        )
    if d["ess_min"] < ESS_FLOOR:
        problems.append(
            f"the smallest effective sample size is {d['ess_min']:.1f} of K = {d['num_samples']} (median "
            f"{d['ess_median']:.1f}): some documents' estimates rest on a handful of samples"
        )
    corpus_problem = None
    if d["corpus_ess"] < ESS_FLOOR:
        corpus_problem = (
            f"the corpus-level figure rests on {d['corpus_ess']:.1f} effective joint samples of {d['num_samples']} "
            "(sample k of every document forms one corpus sample, so its weights are products over documents)"
        )
    if math.isfinite(d["relative_change_last_doubling"]) and d["relative_change_last_doubling"] > CONVERGENCE_TOLERANCE:
        problems.append(
            f"instance-level perplexity still moved by {100 * d['relative_change_last_doubling']:.1f}% over the last "
            "doubling of K: not converged"
        )
    reliable = ("every defined Pareto k̂ ≤ 0.7, every document has at least "
                f"{ESS_FLOOR:g} effective samples, and the estimate moved by less than 1% over the last doubling of K")
    if not problems and corpus_problem is None:
        return f"Reliable by the PSIS criterion: {reliable}.", []
    if not problems:
        return (f"Instance-level figure reliable by the PSIS criterion ({reliable}); corpus-level figure UNRELIABLE: "
                f"{corpus_problem}."), ["quote the instance-level perplexity; the corpus level needs far more samples"]
    tries = [f"more samples: num_samples={10 * d['num_samples']} (the bias of log p̂ shrinks roughly as 1/K)"]
    if corpus_problem is not None:
        problems.append(corpus_problem)
    if float(settings.get("temperature", 1.0)) <= 1.0:
        tries.append("a slightly flatter proposal, temperature=1.1 or 1.2 (a proposal with heavier tails than p(z | x) gives lighter-tailed weights)")
    if settings.get("peek") is False:
        tries.append("peek=true: a proposal that reads the token it labels is much closer to p(z | x)")
    tries.append("SMC (estimator=smc) where the model supports stepwise scoring: resampling keeps particles on "
                 "likely latent paths")
    return "UNRELIABLE: " + "; ".join(problems) + ".", tries


def _format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def reproduce_command(run: TaskRun) -> str:
    """The lm_eval command line that reproduces the run, with every estimator setting spelled out."""
    cfg = run.config
    args = cfg.get("model_args") or {}
    if isinstance(args, str):
        args = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
    args = dict(args)
    for key, value in run.settings.items():
        if key != "sample_block":
            args.setdefault(key, value)
    parts = ["lm_eval", "--model", cfg.get("model", "latent"),
             "--model_args", ",".join(f"{k}={_format_value(v)}" for k, v in args.items()),
             "--tasks", run.task, "--include_path", '"$(lm-latent-eval tasks-path)"']
    metadata = {k: v for k, v in (run.results.get("configs", {}).get(run.task, {}).get("metadata") or {}).items()
                if k not in ("version", "config_source") and k not in args}
    if metadata:
        parts += ["--metadata", shlex.quote(json.dumps(metadata))]
    for flag in ("device", "batch_size", "limit"):
        if cfg.get(flag) is not None:
            value = cfg[flag]
            parts += [f"--{flag}", str(int(value) if flag == "limit" and float(value).is_integer() else value)]
    seeds = [cfg.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")]
    if all(s is not None for s in seeds):
        parts += ["--seed", ",".join(str(s) for s in seeds)]
    parts += ["--output_path", "OUT", "--log_samples"]
    return " ".join(p if p.startswith(('"$(', "'")) else shlex.quote(str(p)) for p in parts)


def _same_documents(a: TaskRun, b: TaskRun) -> bool:
    return [d.document for d in a.documents] == [d.document for d in b.documents]


def _model_identity(run: TaskRun) -> dict:
    cfg = run.config
    return {
        "name": run.model_name,
        "backend": cfg.get("model"),
        "class": cfg.get("latent_model_class"),
        "checkpoint_sha256": cfg.get("checkpoint_sha256"),
        "num_parameters": cfg.get("model_num_parameters"),
        "dtype": cfg.get("dtype"),
        "device": cfg.get("device_type"),
        "lm_latent_eval_version": cfg.get("lm_latent_eval_version"),
        "lm_eval_version": run.results.get("lm_eval_version"),
    }


def recompute_beam(run: TaskRun, beam_size: int, device: str = "cpu", progress: bool = True) -> list[float]:
    """Beam bounds log Σ_{z ∈ top-k of q} p(x, z) for the run's documents, from its recorded checkpoint (sha256 checked)."""
    from tqdm.auto import tqdm

    from ..estimators import EstimatorSettings, estimate_document
    from ..models import checkpoint_hash, load_model

    cfg = run.config
    if not cfg.get("latent_model") or not cfg.get("checkpoint"):
        raise ValueError(f"{run.results_file}: no latent_model / checkpoint in the config: not an lm-latent-eval run")
    if checkpoint_hash(cfg["checkpoint"]) != cfg.get("checkpoint_sha256"):
        raise ValueError(f"checkpoint {cfg['checkpoint']} no longer has the sha256 recorded in {run.results_file}")
    files = {k: v for k, v in (cfg.get("model_args") or {}).items()
             if k in ("knowledge_graph", "alias_database", "proposal_archive")} if isinstance(cfg.get("model_args"), dict) else {}
    model, _ = load_model(cfg["latent_model"], cfg["checkpoint"], device=device, **files)
    settings = EstimatorSettings(estimator="beam", beam_size=beam_size)
    return [estimate_document(model, d.document, settings, device).log_likelihood
            for d in tqdm(run.documents, desc=f"beam k={beam_size}", disable=not progress)]


def build_card(run: TaskRun, siblings: list[TaskRun] = (), beam_size: int | None = None, level: float = 0.95,
               method: str = DEFAULT_INTERVAL, seed: int = 0, device: str = "cpu", progress: bool = True) -> dict:
    """The card of one run as a JSON-ready dict; beam / exact runs of the same checkpoint, task and documents join it."""
    docs = run.documents
    if not docs:
        raise ValueError(f"{run.samples_file}: no documents")
    num_tokens = [d.num_tokens for d in docs]
    total = int(sum(num_tokens))
    if total == 0:
        raise ValueError(f"{run.samples_file}: every document is empty; perplexity is undefined")
    figures, diag, curve = [], None, None
    if run.estimator == "is":
        lws = [d.log_weights for d in docs]
        if any(lw is None for lw in lws):
            raise ValueError(f"{run.samples_file}: an IS run without per-document log weights")
        penalized = all(d.unk_penalty is not None for d in docs)
        figures += is_figures("UPP (unknown-penalized): " if penalized else "", lws, num_tokens, method, level, seed)
        if penalized:
            figures += is_figures("PPL (no unknown-word penalty): ", [d.log_weights_without_unk_penalty() for d in docs],
                                  num_tokens, method, level, seed)
        diag = diagnostics(lws, num_tokens, run.settings, progress)
        curve = diag["convergence"]
    else:
        kind = KINDS.get(run.estimator, run.estimator)
        name = "exact perplexity" if run.estimator == "exact" else f"beam bound (k={run.settings.get('beam_size')})"
        figures.append(_figure(name, math.exp(-sum(d.log_likelihood for d in docs) / total), kind))
    same = [s for s in siblings if s is not run and s.task == run.task and s.estimator in ("beam", "exact")
            and s.config.get("checkpoint_sha256") == run.config.get("checkpoint_sha256") and _same_documents(s, run)]
    beam = exact = None
    for s in same:
        value = math.exp(-sum(d.log_likelihood for d in s.documents) / total)
        if s.estimator == "exact":
            exact = value
            figures.append(_figure("exact perplexity", value, KINDS["exact"], note=f"from {s.results_file.name}"))
        else:
            beam = value
            figures.append(_figure(f"beam bound (k={s.settings.get('beam_size')})", value, KINDS["beam"],
                                   note=f"from {s.results_file.name}"))
    if beam_size is not None and run.estimator != "beam":
        beam = math.exp(-sum(recompute_beam(run, beam_size, device, progress)) / total)
        figures.append(_figure(f"beam bound (k={beam_size})", beam, KINDS["beam"], note="recomputed by report"))
    return {
        "task": run.task,
        "model": _model_identity(run),
        "settings": {**run.settings, **({"interval": method, "level": level} if run.estimator == "is" else {})},
        "corpus": {"num_documents": len(docs), "num_tokens": total},
        "figures": figures,
        "diagnostics": None if diag is None else {k: v for k, v in diag.items() if k != "convergence"},
        "convergence": curve,
        "exact_perplexity": exact,
        "beam_perplexity": beam,
        "reproduce": reproduce_command(run),
        "sources": {"results": str(run.results_file), "samples": str(run.samples_file)},
    }


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return "∞" if x == math.inf else f"{x:.4g}"
    return str(x)


def card_markdown(card: dict, plot_file: str | None = None) -> str:
    """The card as Markdown."""
    m, s = card["model"], card["settings"]
    lines = [f"# Estimate card: {m['name']} on {card['task']}", "",
             f"{card['corpus']['num_documents']} documents, {card['corpus']['num_tokens']} model tokens.", "",
             "| figure | value | 95% interval | what it is |", "|---|---|---|---|"]
    for f in card["figures"]:
        ci = "–" if f["ci95"] is None else f"[{_fmt(f['ci95'][0])}, {_fmt(f['ci95'][1])}]"
        lines.append(f"| {f['name']} | {_fmt(f['value'])} | {ci} | {f['kind']} |")
    notes = sorted({f["interval_note"] for f in card["figures"] if f.get("interval_note")})
    lines += [""] + [f"- {n}" for n in notes]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in s.items()]
    lines += ["", "## Model", "", "| | |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in m.items()]
    d = card["diagnostics"]
    if d is not None:
        lines += ["", "## Reliability", "",
                  (f"- effective sample size over documents: min {_fmt(d['ess_min'])}, median {_fmt(d['ess_median'])}, "
                  f"mean {_fmt(d['ess_mean'])} (of K = {d['num_samples']}); of the K joint corpus samples: "
                  f"{_fmt(d['corpus_ess'])}"),
                  (f"- Pareto k̂: median {_fmt(d['pareto_k_median'])}, max {_fmt(d['pareto_k_max'])}; "
                  f"{d['num_pareto_k_above_threshold']} of {d['num_documents']} documents above {d['pareto_k_threshold']}, "
                  f"{d['num_pareto_k_undefined']} undefined (too few distinct weights in the tail)"),
                  "", f"**Verdict.** {d['verdict']}"]
        if d["what_to_try"]:
            lines += ["", "What to try:"] + [f"- {t}" for t in d["what_to_try"]]
    if plot_file:
        lines += ["", "## Convergence", "", f"![perplexity against K]({plot_file})"]
    lines += ["", "## Reproduce", "", "```bash", card["reproduce"], "```", "",
              f"Source: `{card['sources']['results']}`, `{card['sources']['samples']}`.", ""]
    return "\n".join(lines)


def save_plot(card: dict, path: Path) -> bool:
    """Convergence PNG (PPL against K; beam and exact lines when known); False when the run is not IS."""
    if card["convergence"] is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import plot_convergence

    fig, ax = plt.subplots(figsize=(5.5, 4))
    plot_convergence(card["convergence"], ax=ax, true_perplexity=card["exact_perplexity"],
                     beam_perplexity=card["beam_perplexity"])
    ax.set_title(f"{Path(card['model']['name']).name} on {card['task']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_cards(output_dir: str | Path, out: str | Path | None = None, **kwargs) -> list[Path]:
    """A card (.md, .json and .png) for every run and task under ``output_dir``; returns the Markdown files."""
    runs = read_runs(output_dir)
    out = Path(out) if out is not None else Path(output_dir) / "cards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        card = build_card(run, runs, **kwargs)
        stem = f"{run.results_file.parent.name}__{run.task}__{run.results_file.stem.removeprefix('results_')}"
        plot = f"{stem}.png" if save_plot(card, out / f"{stem}.png") else None
        (out / f"{stem}.json").write_text(json.dumps(card, indent=1, default=float))
        (out / f"{stem}.md").write_text(card_markdown(card, plot))
        written.append(out / f"{stem}.md")
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output_dir", help="lm-eval --output_path of runs made with --log_samples (or one results_*.json)")
    parser.add_argument("--output", default=None, help="folder for the cards (default: <output_dir>/cards)")
    parser.add_argument("--beam-size", type=int, default=None, help="also compute the beam bound with this k")
    parser.add_argument("--interval", choices=INTERVAL_METHODS, default=DEFAULT_INTERVAL)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals")
    parser.add_argument("--device", default="cpu", help="for --beam-size")


def run(args: argparse.Namespace) -> int:
    for path in write_cards(args.output_dir, args.output, beam_size=args.beam_size, level=args.level,
                            method=args.interval, seed=args.seed, device=args.device):
        print(f"wrote {path} (+ .json, .png)")
    return 0
