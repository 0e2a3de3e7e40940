"""``lm-latent-eval report <lm-eval output dir>``: one estimate card (Markdown, JSON, convergence PNG) per model × task.

A card states the perplexity to quote with its honest statement at the ``--level`` asked for (95% by default;
two-sided where that is honest, else the certified one-sided bound, with the reason), the certified bound, the
paper's instance- and corpus-level estimates and what kind of figure each is (exact, strict bound, or a stochastic
upper bound in expectation), the Monte Carlo error and the sampling error over documents apart, the settings that
produced them (estimator and why it was chosen, K, τ, peeking, seed), the model's identity (class, checkpoint sha256,
dtype, device), the reliability diagnostics (IS: ESS, Pareto k̂ against its threshold; SMC: runs, ESS over tokens)
with a plain-words verdict and what to try, and the command that reproduces the run. Everything comes from lm-eval's
results and samples files (``--log_samples``); ``--beam-size`` additionally recomputes the beam bound from the
recorded checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import shlex
from pathlib import Path

from tqdm.auto import tqdm

import lm_latent_eval

from ..errors import InputError
from ..estimators import EstimatorSettings, estimate_document
from ..estimators.beam import BEAM
from ..estimators.corpus import CorpusEstimate, corpus_estimate
from ..estimators.diagnostics import corpus_convergence_curve
from ..estimators.exact import EXACT
from ..estimators.importance import ImportanceSampling
from ..estimators.policy import UncertaintyPolicy
from ..estimators.settings import DEFAULT_LEVEL
from ..models import checkpoint_hash, load_model
from .coverage import measured_coverage
from .json_files import write_json
from .lm_eval_output import TaskRun, read_runs
from .plots import plot_convergence

# fewer effective samples than this: the interval rests on a handful of weights
ESS_FLOOR = 10.0


def _figure(name: str, value: float, kind: str, interval=None, note: str | None = None) -> dict:
    fig = {"name": name, "value": value, "kind": kind, "interval": interval}
    if note:
        fig["interval_note"] = note
    return fig


def sampled_figures(label: str, corpus: CorpusEstimate) -> list[dict]:
    """The perplexity to quote with its honest statement at the corpus's level, the certified bound and the paper's two estimates."""
    interval = corpus.interval
    quote_kind = (
        "bias-corrected estimate (Monte Carlo interval, documents fixed)"
        if interval.two_sided
        else corpus.kind
    )
    note = f"{interval.describe()}; {measured_coverage(corpus.estimator, corpus.num_documents)}"
    figures = [
        _figure(f"{label}perplexity", corpus.perplexity, quote_kind, list(corpus.perplexity_interval), note),
        _figure(
            f"{label}certified upper bound ({interval.level:.0%})",
            corpus.perplexity_upper_bound,
            f"P(true perplexity > bound) ≤ {1 - interval.level:.0%} for any proposal and K (Markov's inequality)",
        ),
        _figure(f"{label}instance-level perplexity (Eq. 5)", corpus.instance_perplexity, corpus.kind),
    ]
    if corpus.corpus_perplexity is not None:
        figures.append(
            _figure(
                f"{label}corpus-level perplexity (Eq. 6)",
                corpus.corpus_perplexity,
                corpus.kind,
                [0.0, corpus.corpus_perplexity_upper_bound],
                "one-sided: the certified bound of the corpus-level estimate",
            )
        )
    return figures


def diagnostics(run: TaskRun, corpus: CorpusEstimate, progress: bool = True) -> dict:
    """Reliability of the run's estimates: IS (ESS, Pareto k̂ against its threshold, convergence over K) or SMC
    (runs, ESS over tokens, resampling), and a verdict with what to try."""
    docs = [d for d in run.documents if d.num_tokens > 0]
    summary = {
        "estimator": corpus.estimator,
        "num_documents": len(docs),
        "interval": corpus.interval.describe(),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "sampling_stderr": corpus.sampling_stderr,
    }
    summary |= corpus.method.corpus_diagnostics(docs, progress)
    summary["verdict"], summary["what_to_try"] = verdict(corpus, run.settings)
    return summary


def _k_text(d: dict) -> str:
    """K = 100, or K = 100 to 25,600 (mean 3,462) where the precision target drew more for some documents."""
    if d["num_samples"] == d.get("num_samples_max", d["num_samples"]):
        return f"K = {d['num_samples']:,}"
    return f"K = {d['num_samples']:,} to {d['num_samples_max']:,} (mean {d['num_samples_mean']:,.0f})"


def verdict(corpus: CorpusEstimate, settings: dict) -> tuple[str, list[str]]:
    """Plain words on whether the estimate can be quoted with its interval, and what to try when it cannot."""
    if not corpus.method.draws_samples:
        return "Deterministic: no Monte Carlo error.", []
    if corpus.interval.two_sided:
        return (
            "Reliable: every document's Monte Carlo error can be estimated and the bias correction is small "
            f"(remainder {corpus.interval.remainder:.2f} standard errors, {corpus.interval.remainder_share:.2f} of the "
            "correction); quote the perplexity with its "
            "interval, which allows the bias anywhere from 0 to twice its estimate."
        ), []
    tries = []
    if isinstance(corpus.method, ImportanceSampling):
        tries.append(
            "SMC (estimator=smc or auto) where the model has the stepwise part: its runs give an honest error"
        )
    if not settings.get("target_se"):
        tries.append("a precision target (target_se=0.002): more samples for the documents that need them")
    tries.append(f"more samples: num_samples={10 * int(settings.get('num_samples') or 100)}")
    if settings.get("peek") is False:
        tries.append("peek=true: a proposal that reads the token it labels is much closer to p(z | x)")
    return (
        f"UNRELIABLE as a two-sided figure: {corpus.interval.reason}. Quote the certified bound: with "
        f"{corpus.interval.level:.0%} certainty the true perplexity is at most {corpus.perplexity_upper_bound:.4g}."
    ), tries


def _format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


BUNDLED_TASKS = '"$(lm-latent-eval tasks-path)"'


def _task_yaml(run: TaskRun) -> Path | None:
    """The task YAML the run read: lm-eval records it as the task config's ``metadata.config_source`` (None where the
    results file does not say, or the task had no YAML)."""
    source = (run.results.get("configs", {}).get(run.task, {}).get("metadata") or {}).get("config_source")
    if not source or source == "inline":
        return None
    # relative to the folder lm_eval ran in (a relative --include_path), which the backend records
    path, where = Path(source), run.config.get("working_directory")
    return Path(where) / path if where and not path.is_absolute() else path


def include_path(run: TaskRun) -> str | None:
    """The ``--include_path`` that finds the run's task again: the bundled tasks (as ``$(lm-latent-eval tasks-path)``)
    for one of ours or where the results file does not say, nothing for one of lm-eval's own tasks, else the folder of
    the user's YAML (a copy of a bundled task that keeps its name must not run the bundled one)."""
    yaml = _task_yaml(run)
    if yaml is None or yaml.resolve().is_relative_to(Path(lm_latent_eval.tasks_path()).resolve()):
        return BUNDLED_TASKS
    # lm-eval's own tasks (found without importing lm_eval, which is slow to import)
    lm_eval_spec = importlib.util.find_spec("lm_eval")
    if (
        lm_eval_spec
        and lm_eval_spec.origin
        and yaml.is_relative_to(Path(lm_eval_spec.origin).parent / "tasks")
    ):
        return None
    return str(yaml.parent)


def reproduce_note(run: TaskRun) -> str | None:
    """What the reader must know before running the card's command (None where nothing)."""
    yaml = _task_yaml(run)
    if yaml is None:
        return (
            f"The results file does not name the YAML of task {run.task!r} (lm-eval's metadata.config_source), so the "
            "command assumes the bundled tasks; for a task of your own, replace the --include_path folder with yours."
        )
    if not yaml.is_absolute():
        return (
            f"The --include_path {include_path(run)} is relative to the folder lm_eval ran in, which the results file "
            "does not name (a run made before lm-latent-eval recorded its working_directory): run it from there."
        )
    return None


def reproduce_command(run: TaskRun) -> str:
    """The lm_eval command line that reproduces the run, with every estimator setting spelled out, on the device type
    the run used (random streams differ between CPU and GPU), with the PYTHONPATH the model's code needed."""
    cfg = run.config
    args = cfg.get("model_args") or {}
    if isinstance(args, str):
        args = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
    args = dict(args)
    for key, value in run.settings.items():
        if key != "sample_block":
            args.setdefault(key, value)
    # where it ran; lm-eval's own "device" is the --device asked for (cuda:0 default)
    device = cfg.get("device_type")
    if device is not None and "device" in args:
        args["device"] = device
    parts = [
        *([f"PYTHONPATH={shlex.quote(cfg['model_pythonpath'])}"] if cfg.get("model_pythonpath") else []),
        "lm_eval",
        "--model",
        cfg.get("model", "latent"),
        "--model_args",
        ",".join(f"{k}={_format_value(v)}" for k, v in args.items()),
        "--tasks",
        run.task,
    ]
    include = include_path(run)
    if include is not None:
        parts += ["--include_path", include]
    metadata = {
        k: v
        for k, v in (run.results.get("configs", {}).get(run.task, {}).get("metadata") or {}).items()
        if k not in ("version", "config_source") and k not in args
    }
    if metadata:
        parts += ["--metadata", shlex.quote(json.dumps(metadata))]
    for flag in ("device", "batch_size", "limit"):
        value = device if flag == "device" and device is not None else cfg.get(flag)
        if value is not None:
            parts += [
                f"--{flag}",
                str(int(value) if flag == "limit" and float(value).is_integer() else value),
            ]
    seeds = [cfg.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")]
    if all(s is not None for s in seeds):
        parts += ["--seed", ",".join(str(s) for s in seeds)]
    parts += ["--output_path", "OUT", "--log_samples"]
    return " ".join(p if p.startswith(('"$(', "'", "PYTHONPATH=")) else shlex.quote(str(p)) for p in parts)


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
    cfg = run.config
    if not cfg.get("latent_model") or not cfg.get("checkpoint"):
        raise InputError(
            f"{run.results_file}: no latent_model / checkpoint in the config: not an lm-latent-eval run"
        )
    if checkpoint_hash(cfg["checkpoint"]) != cfg.get("checkpoint_sha256"):
        raise InputError(
            f"checkpoint {cfg['checkpoint']} no longer has the sha256 recorded in {run.results_file}"
        )
    files = (
        {
            k: v
            for k, v in (cfg.get("model_args") or {}).items()
            if k in ("knowledge_graph", "alias_database", "proposal_archive")
        }
        if isinstance(cfg.get("model_args"), dict)
        else {}
    )
    model, _ = load_model(cfg["latent_model"], cfg["checkpoint"], device=device, **files)
    settings = EstimatorSettings(estimator="beam", beam_size=beam_size)
    return [
        estimate_document(model, d.document, settings, device).log_likelihood
        for d in tqdm(run.documents, desc=f"beam k={beam_size}", disable=not progress)
    ]


def _stderr_line(u: dict) -> str:
    """What lm-eval's Stderr of ``perplexity`` held (``harness.perplexity_task.perplexity_stderr``): the interval's
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


def build_card(
    run: TaskRun,
    siblings: list[TaskRun] = (),
    beam_size: int | None = None,
    level: float = DEFAULT_LEVEL,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """The card of one run as a JSON-ready dict; beam / exact runs of the same checkpoint, task and documents join it."""
    docs = run.documents
    if not docs:
        raise InputError(f"{run.samples_file}: no documents")
    keys = [hashlib.sha256(d.document.encode()).hexdigest() for d in docs]
    policy = UncertaintyPolicy(level=level)
    corpus = corpus_estimate(docs, policy, keys)
    figures, diag, curve = [], None, None
    if corpus.method.draws_samples:
        plain = [d.without_unk_penalty() for d in docs]
        penalized = all(p is not None for p in plain)
        figures += sampled_figures("UPP (unknown-penalized): " if penalized else "", corpus)
        if penalized:
            figures += sampled_figures(
                "PPL (no unknown-word penalty): ", corpus_estimate(plain, policy, keys)
            )
        diag = diagnostics(run, corpus, progress)
        if all(d.importance_weights is not None for d in docs if d.num_tokens > 0):
            curve = corpus_convergence_curve([d.log_weights for d in docs], [d.num_tokens for d in docs])
    else:
        name = (
            "exact perplexity"
            if corpus.method is EXACT
            else f"beam bound (k={run.settings.get('beam_size')})"
        )
        figures.append(_figure(name, corpus.instance_perplexity, corpus.kind))
    total = corpus.num_tokens
    same = [
        s
        for s in siblings
        if s is not run
        and s.task == run.task
        and s.estimator in (BEAM.name, EXACT.name)
        and s.config.get("checkpoint_sha256") == run.config.get("checkpoint_sha256")
        and _same_documents(s, run)
    ]
    beam = exact = None
    for s in same:
        value = math.exp(-sum(d.log_likelihood for d in s.documents) / total)
        if s.estimator == EXACT.name:
            exact = value
            figures.append(_figure("exact perplexity", value, EXACT.kind, note=f"from {s.results_file.name}"))
        else:
            beam = value
            figures.append(
                _figure(
                    f"beam bound (k={s.settings.get('beam_size')})",
                    value,
                    BEAM.kind,
                    note=f"from {s.results_file.name}",
                )
            )
    if beam_size is not None and run.estimator != BEAM.name:
        beam = math.exp(-sum(recompute_beam(run, beam_size, device, progress)) / total)
        figures.append(_figure(f"beam bound (k={beam_size})", beam, BEAM.kind, note="recomputed by report"))
    return {
        "task": run.task,
        "model": _model_identity(run),
        "settings": {**run.settings, "estimator_choice": run.config.get("estimator_choice"), "level": level},
        "corpus": {"num_documents": len(docs), "num_tokens": total},
        "figures": figures,
        "uncertainty": {
            # the level of every statement, and the normal quantile that divides the interval in lm-eval's Stderr
            "level": level,
            "normal_quantile": policy.normal_quantile,
            "monte_carlo_stderr": corpus.monte_carlo_stderr,
            "interval_stderr": corpus.interval_stderr,
            # what lm-eval's Stderr held: "interval", "bound" (its own error) or None (N/A)
            "stderr_kind": corpus.reported_stderr[1],
            "sampling_stderr": corpus.sampling_stderr,
        },
        "diagnostics": diag,
        "convergence": curve,
        "exact_perplexity": exact,
        "beam_perplexity": beam,
        "reproduce": reproduce_command(run),
        "reproduce_note": reproduce_note(run),
        "sources": {"results": str(run.results_file), "samples": str(run.samples_file)},
    }


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


def _reliability_lines(d: dict) -> list[str]:
    """The IS or SMC diagnostics as Markdown bullets."""
    if "pareto_k_max" in d:
        return [
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
    return [
        (
            f"- {d['smc_runs']} independent runs of {_k_text(d)} particles in all per document; ESS over "
            f"tokens: min {_fmt(d['ess_min'])}, mean {_fmt(d['ess_mean'])}; resampling steps per run "
            f"{_fmt(d['resampling_steps'])}"
        )
    ]


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


def write_cards(output_dir: str | Path, out: str | Path | None = None, **kwargs) -> list[list[Path]]:
    """A card (.md, .json, and a .png for IS runs) for every run and task under ``output_dir``; returns the files
    written, one list per card, the Markdown file first."""
    runs = read_runs(output_dir)
    out = Path(out) if out is not None else Path(output_dir) / "cards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        card = build_card(run, runs, **kwargs)
        stem = f"{run.results_file.parent.name}__{run.task}__{run.results_file.stem.removeprefix('results_')}"
        files = [out / f"{stem}.md", out / f"{stem}.json"]
        if save_plot(card, out / f"{stem}.png"):
            files.append(out / f"{stem}.png")
        write_json(files[1], card)
        files[0].write_text(card_markdown(card, files[2].name if len(files) > 2 else None))
        written.append(files)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "output_dir", help="lm-eval --output_path of runs made with --log_samples (or one results_*.json)"
    )
    parser.add_argument("--output", default=None, help="folder for the cards (default: <output_dir>/cards)")
    parser.add_argument("--beam-size", type=int, default=None, help="also compute the beam bound with this k")
    parser.add_argument(
        "--level", type=float, default=DEFAULT_LEVEL, help="level of the intervals and certified bounds"
    )
    parser.add_argument("--device", default="cpu", help="for --beam-size")


def run(args: argparse.Namespace) -> int:
    for files in write_cards(
        args.output_dir, args.output, beam_size=args.beam_size, level=args.level, device=args.device
    ):
        print(f"wrote {files[0]} (+ {', '.join(f.suffix for f in files[1:])})")
    return 0
