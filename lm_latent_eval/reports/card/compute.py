"""An estimate card's figures from one run (``build_card``): a JSON-ready dict that ``render`` prints and ``cli`` writes.

Every estimator-specific word comes from the estimator object the run recorded (``estimators.registry``): the name and
kind of a deterministic figure (``Estimator.figure_name``, ``kind``), its diagnostics (``corpus_diagnostics``), what to
try when no two-sided interval is honest (``advice``), and whether a run's figure is known with certainty
(``fixed_statement``), which decides the runs that join a card and the reference lines of its plot.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from tqdm.auto import tqdm

from ...errors import InputError
from ...estimators import Estimator, EstimatorSettings, resolve
from ...estimators.corpus import CorpusEstimate, corpus_estimate
from ...estimators.diagnostics import corpus_convergence_curve
from ...estimators.intervals import Interval
from ...estimators.policy import UncertaintyPolicy
from ...estimators.registry import estimator_named, recorded_settings
from ...estimators.settings import DEFAULT_LEVEL
from ...models import checkpoint_hash, load_model
from ..coverage import measured_coverage
from ..lm_eval_output import TaskRun
from .reproduce import reproduce_command, reproduce_note


def _figure(name: str, value: float, kind: str, interval=None, note: str | None = None) -> dict:
    fig = {"name": name, "value": value, "kind": kind, "interval": interval}
    if note:
        fig["interval_note"] = note
    return fig


def sampled_figures(label: str, corpus: CorpusEstimate) -> list[dict]:
    """The figures of a sampling run: the perplexity to quote with its honest statement at the corpus's level, the
    certified bound, and the paper's instance- and corpus-level estimates.

    Parameters
    ----------
    label : str
        Put before every figure's name ("" or, for a model with an unknown-word penalty, "UPP ...: ").
    corpus : CorpusEstimate
        The run's corpus figures (``estimators.corpus.corpus_estimate``).

    Returns
    -------
    list of dict
        One per figure: ``name``, ``value``, ``kind`` (what it is), ``interval`` ([lower, upper] or None) and, where
        the interval needs one, ``interval_note``.

    Examples
    --------
    >>> import numpy as np
    >>> from lm_latent_eval.estimators import ISEstimate
    >>> lw = np.log(np.linspace(0.5, 1.5, 64)) - 20.0
    >>> corpus = corpus_estimate([ISEstimate("a b", 10, float(np.log(np.exp(lw).mean())), lw)])
    >>> [f["name"] for f in sampled_figures("", corpus)]  # doctest: +NORMALIZE_WHITESPACE
    ['perplexity', 'certified upper bound (95%)', 'instance-level perplexity (Eq. 5)',
     'corpus-level perplexity (Eq. 6)']
    """
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
    """Reliability of a sampling run's estimates, as its estimator states it (``Estimator.corpus_diagnostics``: IS's
    ESS and Pareto k̂ against its threshold, SMC's runs, ESS over tokens and resampling), and a ``verdict``.

    Parameters
    ----------
    run : TaskRun
        The run whose documents are judged (those with tokens; the diagnostics read the sampled ones, and
        ``computed_exactly`` counts the others).
    corpus : CorpusEstimate
        Its corpus figures.
    progress : bool
        Show a progress bar where the diagnostics take a while.

    Returns
    -------
    dict
        The estimator's diagnostics with ``num_documents``, ``interval`` (described), both standard errors,
        ``verdict`` and ``what_to_try``.
    """
    docs = [d for d in run.documents if d.num_tokens > 0]
    sampled = [d for d in docs if d.sampled]
    summary = {
        "estimator": corpus.estimator,
        "num_documents": len(docs),
        "interval": corpus.interval.describe(),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "sampling_stderr": corpus.sampling_stderr,
    }
    if len(sampled) < len(docs):
        # exact_where_cheaper: their log p is exact, and the diagnostics describe the sampled ones
        summary["computed_exactly"] = len(docs) - len(sampled)
    if sampled:
        summary |= corpus.method.corpus_diagnostics(sampled, progress)
    summary["verdict"], summary["what_to_try"] = verdict(corpus, run.estimator_settings)
    return summary


def verdict(corpus: CorpusEstimate, settings: EstimatorSettings) -> tuple[str, list[str]]:
    """Plain words on whether the estimate can be quoted with its interval and, when it cannot, what to try: the
    estimator's own ``advice`` for the run's settings (the model is not loaded: advice that holds whatever it is).

    Parameters
    ----------
    corpus : CorpusEstimate
        The run's corpus figures.
    settings : EstimatorSettings
        The settings the run recorded (``TaskRun.estimator_settings``).

    Returns
    -------
    tuple of str and list of str
        The verdict, and what to try in order (empty where the figure can be quoted with its interval).

    Examples
    --------
    >>> from lm_latent_eval.estimators import ExactEstimate
    >>> verdict(corpus_estimate([ExactEstimate("a b", 2, -3.0)]), EstimatorSettings("exact"))
    ('Deterministic: no Monte Carlo error.', [])
    """
    if not corpus.method.draws_samples:
        return "Deterministic: no Monte Carlo error.", []
    if corpus.interval.two_sided:
        return (
            "Reliable: every document's Monte Carlo error can be estimated and the bias correction is small "
            f"(remainder {corpus.interval.remainder:.2f} standard errors, {corpus.interval.remainder_share:.2f} of the "
            "correction); quote the perplexity with its "
            "interval, which allows the bias anywhere from 0 to twice its estimate."
        ), []
    return (
        f"UNRELIABLE as a two-sided figure: {corpus.interval.reason}. Quote the certified bound: with "
        f"{corpus.interval.level:.0%} certainty the true perplexity is at most {corpus.perplexity_upper_bound:.4g}."
    ), corpus.method.advice(settings, model=None)


def certain_statement(method: Estimator, log_likelihood: float, level: float) -> Interval | None:
    """The statement about S = Σ_n log p(x_n) that a deterministic estimator makes with certainty from its Σ log p̂:
    S itself (a point, two-sided: the exact marginal) or a lower bound on S (one-sided: the beam); None for an
    estimator whose statement the uncertainty policy decides, or one that holds in expectation only (the ELBO).

    Parameters
    ----------
    method : Estimator
        The estimator that made the figure.
    log_likelihood : float
        Its Σ_n log p̂(x_n) (nats).
    level : float
        The card's level (the statement's record of it; a certain statement holds at every level).

    Returns
    -------
    Interval or None

    Examples
    --------
    >>> from lm_latent_eval.estimators import ESTIMATORS
    >>> [(name, certain_statement(e, -10.0, 0.95).two_sided) for name, e in ESTIMATORS.items()
    ...  if certain_statement(e, -10.0, 0.95) is not None]
    [('exact', True), ('beam', False), ('canonical', False)]
    """
    statement = None if method.draws_samples else method.fixed_statement(log_likelihood, level)
    return statement if statement is not None and math.isfinite(statement.lower) else None


@dataclass(frozen=True)
class Reference:
    """A figure known with certainty joined to a card (another run's, or recomputed by ``report``): its row of the
    card's table and its ``certain_statement`` (two-sided: the true perplexity; one-sided: a bound on it)."""

    figure: dict
    statement: Interval


def reference(
    method: Estimator, settings: dict, log_likelihood: float, num_tokens: int, level: float, note: str
) -> Reference | None:
    """A figure as a card's reference, where it is known with certainty.

    Parameters
    ----------
    method : Estimator
        The estimator that made it.
    settings : dict
        Its recorded settings (they name the figure: ``Estimator.figure_name``).
    log_likelihood : float
        Σ_n log p̂(x_n), nats.
    num_tokens : int
        The corpus's tokens.
    level : float
        The card's level.
    note : str
        Where the figure comes from.

    Returns
    -------
    Reference or None
        None where the statement is not certain (``certain_statement``).

    Examples
    --------
    >>> from lm_latent_eval.estimators import ESTIMATORS
    >>> ref = reference(ESTIMATORS["beam"], {"beam_size": 4}, -20.0, 10, 0.95, "from results_x.json")
    >>> ref.figure["name"], round(ref.figure["value"], 4), ref.statement.two_sided
    ('beam bound (k=4)', 7.3891, False)
    """
    statement = certain_statement(method, log_likelihood, level)
    if statement is None:
        return None
    value = math.exp(-log_likelihood / num_tokens)
    return Reference(_figure(method.figure_name(settings), value, method.kind, note=note), statement)


def _same_documents(a: TaskRun, b: TaskRun) -> bool:
    return [d.document for d in a.documents] == [d.document for d in b.documents]


def sibling_references(run: TaskRun, siblings, num_tokens: int, level: float) -> list[Reference]:
    """The figures known with certainty (exact, beam) of the other runs of the same checkpoint, task and documents.

    Parameters
    ----------
    run : TaskRun
        The card's run.
    siblings : sequence of TaskRun
        Runs that may join (``run`` among them is skipped).
    num_tokens : int
        The corpus's tokens.
    level : float
        The card's level.

    Returns
    -------
    list of Reference
        In the order of ``siblings``.
    """
    same = [
        s
        for s in siblings
        if s is not run
        and s.task == run.task
        and s.config.get("checkpoint_sha256") == run.config.get("checkpoint_sha256")
        and _same_documents(s, run)
    ]
    found = [
        reference(
            s.method,
            s.settings,
            sum(d.log_likelihood for d in s.documents),
            num_tokens,
            level,
            f"from {s.results_file.name}",
        )
        for s in same
    ]
    return [r for r in found if r is not None]


def _model_identity(run: TaskRun) -> dict:
    cfg = run.config
    return {
        "name": run.model_name,
        "backend": cfg.get("model"),
        "class": cfg.get("latent_model_class"),
        "checkpoint_sha256": cfg.get("checkpoint_sha256"),
        "num_parameters": cfg.get("model_num_parameters"),
        "dtype": cfg.get("dtype"),
        # the matrix products' precision in effect (runs recorded before model_args precision existed: None)
        "precision": cfg.get("precision"),
        "device": cfg.get("device_type"),
        "lm_latent_eval_version": cfg.get("lm_latent_eval_version"),
        "lm_eval_version": run.results.get("lm_eval_version"),
    }


def recompute(
    run: TaskRun, settings: EstimatorSettings, device: str = "cpu", progress: bool = True
) -> list[float]:
    """log p̂ of the run's documents under other ``settings`` (``report --beam-size``: the beam bound), from the run's
    recorded checkpoint (its sha256 checked first).

    Parameters
    ----------
    run : TaskRun
        An lm-latent-eval run (its config names ``latent_model`` and ``checkpoint``).
    settings : EstimatorSettings
        The estimator to run and its settings.
    device : str
        Where the model runs.
    progress : bool
        Show a progress bar over the documents.

    Returns
    -------
    list of float
        One log p̂ per document, in the run's order.
    """
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
    bound = resolve(settings, model)
    label = bound.estimator.describe(bound.recorded_settings())
    return [
        bound.estimate(d.document, device=device).log_likelihood
        for d in tqdm(run.documents, desc=label, disable=not progress)
    ]


def build_card(
    run: TaskRun,
    siblings: list[TaskRun] = (),
    beam_size: int | None = None,
    level: float = DEFAULT_LEVEL,
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    """The estimate card of one run, as a JSON-ready dict.

    Runs among ``siblings`` of the same checkpoint, task and documents whose figure is known with certainty (exact,
    beam: ``certain_statement``) join it as rows and as the convergence plot's reference lines.

    Parameters
    ----------
    run : TaskRun
        The run (``lm_eval_output.read_runs``).
    siblings : list of TaskRun
        Runs that may join the card (``run`` itself among them is skipped).
    beam_size : int, optional
        Also recompute the beam bound with this k from the recorded checkpoint (not for a run whose own figure is
        a certain bound already: a beam run).
    level : float
        The level of every interval and certified bound.
    device : str
        Where ``beam_size``'s model runs.
    progress : bool
        Show progress bars.

    Returns
    -------
    dict
        ``task``, ``model`` (identity), ``settings`` (with ``estimator_choice`` and ``level``), ``corpus`` (documents,
        tokens), ``figures`` (rows of the table), ``uncertainty`` (level, normal quantile, standard errors and what
        lm-eval's Stderr held), ``diagnostics`` (sampling runs; else None), ``convergence`` (IS runs; else None),
        ``exact_perplexity`` and ``beam_perplexity`` (the reference lines: the true perplexity and the last certain
        bound joined, or None), ``reproduce`` (the command), ``reproduce_note`` and ``sources``.
    """
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
        figures.append(
            _figure(corpus.method.figure_name(run.settings), corpus.instance_perplexity, corpus.kind)
        )
    total = corpus.num_tokens
    references = sibling_references(run, siblings, total, level)
    own = certain_statement(corpus.method, sum(d.log_likelihood for d in docs), level)
    if beam_size is not None and (own is None or own.two_sided):
        settings = EstimatorSettings("beam", beam_size=beam_size)
        ll = sum(recompute(run, settings, device, progress))
        method = estimator_named(settings.estimator)
        references.append(
            reference(method, recorded_settings(settings), ll, total, level, "recomputed by report")
        )
    figures += [r.figure for r in references]
    exact = [r.figure["value"] for r in references if r.statement.two_sided]
    bounds = [r.figure["value"] for r in references if not r.statement.two_sided]
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
        # the plot's reference lines: the true perplexity, and the last certain bound joined
        "exact_perplexity": exact[-1] if exact else None,
        "beam_perplexity": bounds[-1] if bounds else None,
        "reproduce": reproduce_command(run),
        "reproduce_note": reproduce_note(run),
        "sources": {"results": str(run.results_file), "samples": str(run.samples_file)},
    }
