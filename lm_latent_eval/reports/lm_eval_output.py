"""Reading an lm-eval output folder: ``<model>/results_<date>.json`` and ``samples_<task>_<date>.jsonl`` (``--log_samples``).

lm-eval 0.4.13 writes, per run, one results file (``results``, ``config`` with our ``get_model_info()``, top-level
``model_name``) and one samples file per task with one JSON line per document; our perplexity tasks put the
document's whole estimate (token count, log p̂, estimator, K log weights, SMC diagnostics, unknown-word penalties) in
its ``corpus_perplexity`` field (``DocumentEstimate.to_json``).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..documents import document_key, text_lines
from ..errors import InputError, MissingFileError
from ..estimators import DocumentEstimate, Estimator, EstimatorSettings
from ..estimators.registry import estimate_from_json, estimator_named
from ..harness.perplexity_task import PERPLEXITY_METRICS, RENAMED_METRICS, SAMPLES_FIELD


@dataclass
class TaskRun:
    """One task of one lm-eval run: the results file's config and metrics plus every document from the samples."""

    results_file: Path
    samples_file: Path
    task: str
    results: dict
    documents: list[DocumentEstimate] = field(default_factory=list)

    @property
    def config(self) -> dict:
        return self.results.get("config", {})

    @property
    def metrics(self) -> dict:
        return self.results.get("results", {}).get(self.task, {})

    @property
    def settings(self) -> dict:
        return self.config.get("estimator_settings", {})

    @property
    def estimator(self) -> str:
        """The estimator the run recorded, else the one its documents' records name."""
        recorded = self.settings.get("estimator")
        if recorded is None and not self.documents:
            raise InputError(
                f"{self.results_file}: task {self.task!r} records no estimator and {self.samples_file.name} holds "
                "no document: rerun lm_eval with --log_samples"
            )
        return recorded or self.documents[0].estimator

    @property
    def method(self) -> Estimator:
        """The estimator (``estimators.registry``) the run used."""
        return estimator_named(self.estimator)

    @property
    def estimator_settings(self) -> EstimatorSettings:
        """The recorded settings as the record they were made from (what was not recorded at its default)."""
        recorded = {
            f.name: self.settings[f.name] for f in fields(EstimatorSettings) if f.name in self.settings
        }
        return EstimatorSettings(**(recorded | {"estimator": self.estimator}))

    @property
    def model_name(self) -> str:
        return str(
            self.config.get("model_name") or self.results.get("model_name") or self.config.get("model")
        )

    @property
    def label(self) -> str:
        """A short name: model name and the settings that tell runs of one model apart."""
        detail = self.method.describe(self.settings)
        return f"{Path(self.model_name).name} ({detail})"


class NotAPerplexityTask(ValueError):
    """The samples file has no per-document log weights (a task other than our perplexity tasks)."""


def _read_documents(samples_file: Path) -> list[DocumentEstimate]:
    docs = []
    for n, line in text_lines(samples_file):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"{samples_file}:{n}: not a JSON line ({err.msg}, column {err.colno}): the samples file is damaged; "
                "rerun lm_eval with --log_samples"
            ) from None
        item = _whole_estimate(row)
        if not isinstance(item, dict):
            raise NotAPerplexityTask(
                f"{samples_file}: line {n} has no {SAMPLES_FIELD!r} field: not the samples of an lm-latent-eval "
                "perplexity task (latent_ppl_tiny, linked_wikitext2*, coref_tiny, conll2012_ppl)"
            )
        if "estimator" not in item:
            raise InputError(
                f"{samples_file}: line {n}: written by an older lm-latent-eval (no 'estimator' in "
                f"{SAMPLES_FIELD!r}); rerun lm_eval with this version"
            )
        text = document_text(row, item.get("key"))
        if text is None:
            raise InputError(
                f"{samples_file}: line {n}: no field of the row holds the document its estimate scored (key "
                f"{item.get('key')}): the samples file was edited; rerun lm_eval with --log_samples"
            )
        docs.append(estimate_from_json({**item, "document": text}))
    return docs


def _whole_estimate(row) -> dict | None:
    """The item of a samples row that holds the document's whole estimate: ``SAMPLES_FIELD``, or its name before
    lm-eval 0.5 (``RENAMED_METRICS``: a samples file lm-latent-eval 0.1.0 wrote), or, for a task that keeps other
    metrics of the same statement only, the first of them that holds it whole (``perplexity_task.kept_items``)."""
    if not isinstance(row, dict):
        return None
    old = next(old for old, new in RENAMED_METRICS.items() if new == SAMPLES_FIELD)
    if SAMPLES_FIELD in row or old in row:
        return row.get(SAMPLES_FIELD, row.get(old))
    return next(
        (
            row[name]
            for name in PERPLEXITY_METRICS
            if isinstance(row.get(name), dict) and "log_weights" in row[name]
        ),
        None,
    )


def document_text(row: dict, key: str | None = None) -> str | None:
    """The document a samples row scored: the rolling request's last argument (lm-eval 0.4 writes ``arguments`` as
    ``{"gen_args_0": {"arg_0": text}}``, 0.5 as ``{..., {"arg_0": "", "arg_1": text}}`` and ``target`` "0"), else its
    ``target``, else ``doc["text"]``: the first whose ``document_key`` is the estimate's ``key`` (None: none is).

    Examples
    --------
    >>> document_text({"target": "0", "arguments": {"gen_args_0": {"arg_0": "", "arg_1": "a b"}}}, "c8687a08aa5d6ed2")
    'a b'
    >>> document_text({"target": "a b", "arguments": [["a b"]]})
    'a b'
    """
    candidates = [
        *_request_arguments(row.get("arguments")),
        row.get("target"),
        row.get("doc", {}).get("text"),
    ]
    texts = [c for c in candidates if isinstance(c, str)]
    for text in texts:
        if key is None or document_key(text) == key:
            return text
    return None


def _request_arguments(arguments) -> list:
    """The last argument of each request of a samples row, in either layout lm-eval writes (a list of argument lists,
    or ``{"gen_args_i": {"arg_j": ...}}``)."""
    if isinstance(arguments, dict):
        arguments = [list(a.values()) if isinstance(a, dict) else a for a in arguments.values()]
    if not isinstance(arguments, list):
        return []
    return [a[-1] for a in arguments if isinstance(a, list) and a]


def check_samples_match_results(run: TaskRun) -> None:
    """Refuse a samples file whose documents are not the ones the results file's table was computed from (a line
    deleted, added or edited since the run): an ``InputError`` naming both files and what differs.

    Two checks, each where the results file holds the figure: the number of documents (lm-eval's
    ``n-samples.effective``, else the task's ``sample_len``) and the instance-level perplexity exp(−Σ log p̂ / Σ T)
    recomputed from the samples, to 1e-9 relative (what lm-eval wrote is a float64 of the same sum).
    """
    where = f"{run.samples_file} does not match {run.results_file.name}"
    fix = "rerun lm_eval with --log_samples, or report the results and samples files of one run"
    expected = (
        run.results.get("n-samples", {}).get(run.task, {}).get("effective", run.metrics.get("sample_len"))
    )
    if isinstance(expected, int) and expected != len(run.documents):
        raise InputError(
            f"{where}: it holds {len(run.documents)} documents, the results' task {run.task!r} {expected}; {fix}"
        )
    recorded = run.metrics.get("instance_perplexity,none")
    tokens = sum(d.num_tokens for d in run.documents)
    if not isinstance(recorded, float) or not math.isfinite(recorded) or tokens == 0:
        return
    recomputed = math.exp(-math.fsum(d.log_likelihood for d in run.documents) / tokens)
    if not math.isclose(recomputed, recorded, rel_tol=1e-9):
        raise InputError(
            f"{where}: its {len(run.documents)} documents ({tokens} tokens) give instance_perplexity "
            f"{recomputed:.6g}, the results' table {recorded:.6g}; {fix}"
        )


def read_runs(path: str | Path) -> list[TaskRun]:
    """Every (results file, task) under ``path`` (a folder searched recursively, or one results_*.json file).

    A task without its samples file is an error that says to rerun with ``--log_samples``; a task whose samples
    carry no log weights (not one of our perplexity tasks) is skipped with a warning naming it; when no task under
    ``path`` is one of them, that is an InputError naming the tasks found.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.rglob("results_*.json"))
    if not files:
        raise MissingFileError(f"{path}: no lm-eval results_*.json (run lm_eval with --output_path {path})")
    runs, skipped = [], []
    for results_file in files:
        results = json.loads(results_file.read_text(encoding="utf-8"))
        date = results_file.stem.removeprefix("results_")
        for task in results.get("results", {}):
            samples = results_file.parent / f"samples_{task}_{date}.jsonl"
            if not samples.is_file():
                raise MissingFileError(
                    f"{results_file}: task {task!r} has no samples file {samples.name}; rerun lm_eval with --log_samples "
                    "(the per-document log weights are in it)"
                )
            try:
                run = TaskRun(results_file, samples, task, results, _read_documents(samples))
            except NotAPerplexityTask as err:
                skipped.append((task, err))
                continue
            check_samples_match_results(run)
            runs.append(run)
    if not runs:
        raise InputError(
            f"{path}: no lm-latent-eval perplexity task among its results "
            f"({', '.join(sorted({task for task, _ in skipped})) or 'none'}): report and compare read the "
            "per-document estimates of latent_ppl_tiny and the tasks built on it"
        )
    for task, err in skipped:
        warnings.warn(f"skipping task {task!r}: {err}", stacklevel=2)
    return runs
