"""The link between a latent backend and the perplexity tasks: per-document estimates handed over by text.

lm-eval gives a task's ``process_results`` only the float log-likelihood the backend returned. Our perplexity
metrics need the whole estimate (K log weights, SMC runs, diagnostics), so ``loglikelihood_rolling`` ``record``s the
estimates of its request batch here and the task ``lookup``s each document by its text. The table is process-local
(each rank of a multi-process run records and looks up its own shard) and holds one batch at a time.

Under ``--use_cache`` lm-eval answers a rerun's requests from its database without calling the backend, so the
backend also keeps each estimate in that database (``record``), which it checked to belong to the same model and
settings, and ``lookup`` reads it back from there (``keep_in``).

``loglikelihood`` likewise records, per (context, continuation), the value it returned and the continuation's token
count, which a completion task's perplexity needs (``completion_tokens``).
"""

from __future__ import annotations

import hashlib
import math

from ..errors import UserError
from ..estimators import DocumentEstimate
from ..estimators.registry import estimate_from_json

WHERE = "lm-latent-eval perplexity task"
_ESTIMATES: dict[str, DocumentEstimate] = {}
_KEPT: list = []  # at most one dict-like database (lm-eval's --use_cache SqliteDict) that also keeps the estimates
_CONDITIONALS: dict[tuple[str, str], tuple[float, int]] = {}


class NoEstimateError(UserError, RuntimeError):
    """A perplexity task got a number for which this process has no estimate (another model, or a foreign cache)."""


def _key(text: str) -> str:
    return "lm_latent_eval:estimate:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def keep_in(database) -> None:
    """Look documents up in ``database`` (a dict-like; lm-eval's --use_cache SqliteDict) when this process has no
    estimate of them: a rerun answered from the cache calls no backend."""
    _KEPT[:] = [database]


def record(estimates: dict[str, DocumentEstimate], database=None) -> None:
    """Replace the table with the estimates (by document text) of the latest ``loglikelihood_rolling`` batch; keep
    them in ``database`` too (the backend's --use_cache database, or None, which also stops looking in an old one)."""
    _ESTIMATES.clear()
    _ESTIMATES.update(estimates)
    _KEPT[:] = [] if database is None else [database]
    if database is not None:
        for text, est in estimates.items():
            database[_key(text)] = est.to_json()
        database.commit()


def clear() -> None:
    """Empty the table (a task then refuses results that did not come from a latent backend of this process)."""
    _ESTIMATES.clear()
    _KEPT.clear()


def _kept(text: str) -> DocumentEstimate | None:
    for database in _KEPT:
        stored = database.get(_key(text))
        if stored is not None:
            return estimate_from_json(stored)
    return None


def peek(text: str) -> DocumentEstimate | None:
    """The recorded estimate of ``text``, or None."""
    return _ESTIMATES.get(text)


def lookup(text: str, log_likelihood: float) -> DocumentEstimate:
    """The estimate of ``text`` whose log p̂ is the ``log_likelihood`` lm-eval handed to the task.

    NoEstimateError when neither this process nor the ``--use_cache`` database has an estimate of the text, or when
    the estimate gives another value (a cache or another model produced the number lm-eval holds).
    """
    est = _ESTIMATES.get(text)
    if est is None:
        est = _kept(text)
    if est is None:
        raise NoEstimateError(
            f"{WHERE}: no estimate for document {text[:60]!r} in this process or its --use_cache database. "
            "This task needs an lm-latent-eval backend (--model latent_hmm, latent_kglm, or --model latent model=...); "
            "a --use_cache database written by another model or by an older lm-latent-eval lacks the samples "
            "(use a new cache file)."
        )
    if not math.isclose(est.log_likelihood, log_likelihood, rel_tol=1e-12, abs_tol=1e-12):
        raise NoEstimateError(
            f"{WHERE}: document {text[:60]!r}: lm-eval received log p = {log_likelihood!r} but the "
            f"lm-latent-eval backend of this process estimated {est.log_likelihood!r}; the result comes from "
            "another model or from a cache, so its samples are not available"
        )
    return est


def record_conditionals(values: dict[tuple[str, str], tuple[float, int]]) -> None:
    """Replace the table of the latest ``loglikelihood`` batch: (context, continuation) -> (log p̂(continuation |
    context), model tokens of the continuation)."""
    _CONDITIONALS.clear()
    _CONDITIONALS.update(values)


def completion_tokens(context: str, continuation: str, log_likelihood: float) -> int:
    """The model tokens of ``continuation`` after ``context``, as counted by the backend that returned
    ``log_likelihood`` for the pair; RuntimeError when this process did not (another model, or ``--use_cache``)."""
    value = _CONDITIONALS.get((context, continuation))
    if value is None or not math.isclose(value[0], log_likelihood, rel_tol=1e-12, abs_tol=1e-12):
        raise RuntimeError(
            f"lm-latent-eval completion task: no estimate of the continuation {continuation[:40]!r} of context "
            f"{context[-40:]!r} by a latent backend of this process (the task counts the continuation's tokens with "
            "the model that scored it; it cannot use --use_cache or another model)"
        )
    return value[1]
