"""The link between a latent backend and the perplexity tasks: per-document estimates handed over by text.

lm-eval gives a task's ``process_results`` only the float log-likelihood the backend returned. Our perplexity
metrics need the whole estimate (K log weights, SMC runs, diagnostics), so ``loglikelihood_rolling`` ``record``s the
estimates of its request batch here and the task ``lookup``s each document by its text. The table is process-local
(each rank of a multi-process run records and looks up its own shard) and holds one batch at a time.
``loglikelihood`` likewise records, per (context, continuation), the value it returned and the continuation's token
count, which a completion task's perplexity needs (``completion_tokens``).
"""

from __future__ import annotations

import math

from ..estimators import DocumentEstimate

WHERE = "lm-latent-eval perplexity task"
_ESTIMATES: dict[str, DocumentEstimate] = {}
_CONDITIONALS: dict[tuple[str, str], tuple[float, int]] = {}


def record(estimates: dict[str, DocumentEstimate]) -> None:
    """Replace the table with the estimates (by document text) of the latest ``loglikelihood_rolling`` batch."""
    _ESTIMATES.clear()
    _ESTIMATES.update(estimates)


def clear() -> None:
    """Empty the table (a task then refuses results that did not come from a latent backend of this process)."""
    _ESTIMATES.clear()


def peek(text: str) -> DocumentEstimate | None:
    """The recorded estimate of ``text``, or None."""
    return _ESTIMATES.get(text)


def lookup(text: str, log_likelihood: float) -> DocumentEstimate:
    """The estimate of ``text`` whose log p̂ is the ``log_likelihood`` lm-eval handed to the task.

    RuntimeError when this process has no estimate of the text (another model, or ``--use_cache`` answered) or when
    the recorded estimate gives another value (a cache or another model produced the number lm-eval holds).
    """
    est = _ESTIMATES.get(text)
    if est is None:
        raise RuntimeError(
            f"{WHERE}: no importance-sampling estimate for document {text[:60]!r} in this process. "
            "This task needs an lm-latent-eval backend (--model latent_hmm, latent_kglm, or --model latent model=...) and "
            "cannot use results from --use_cache or from another model."
        )
    if not math.isclose(est.log_likelihood, log_likelihood, rel_tol=1e-12, abs_tol=1e-12):
        raise RuntimeError(
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
