"""The metric keys lm-eval writes into the results: no ``<metric>_stderr_stderr`` beside a metric that is a Stderr.

lm-eval files a ``<metric>_stderr`` key beside every metric of a task (a number where it knows how to estimate one,
else ``"N/A"``), and its table shows that key as the metric's Stderr. Our perplexity tasks give ``perplexity``'s
Stderr as a metric of its own, ``perplexity_stderr`` (lm-eval has no other way to take a task's own standard
error), so lm-eval also wrote ``perplexity_stderr_stderr: "N/A"`` into every results file: a key that means nothing.
``drop_stderr_of_stderr`` wraps lm-eval's per-task aggregation (``evaluator_utils._compute_task_aggregations``) so
that it leaves out the ``X_stderr_stderr`` key of a task that has both metrics ``X`` and ``X_stderr`` where that
key holds no number; every other key, of every task, is left as lm-eval computed it. Where an lm-eval release has no
such function the wrapper is not installed (the key is then only surplus).

Nothing is wrapped on import: the backend wraps lm-eval when it is built (``patch_lm_eval``, once per process,
for the lm-eval versions it was tested with, saying so in one line of the log).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging

try:
    from lm_eval import evaluator_utils
except ImportError:  # a release without the module: nothing to wrap
    evaluator_utils = None

logger = logging.getLogger(__name__)
# the lm-eval releases whose private _compute_task_aggregations the wrapper was tested on
TESTED_LM_EVAL = "0.4."

STDERR = "_stderr"


def stderr_of_stderr_keys(metrics, agg_metrics: dict) -> list[str]:
    """The keys ``X_stderr_stderr,<filter>`` of ``agg_metrics`` that hold no number, for each ``(X_stderr, filter)``
    of ``metrics`` (pairs of metric name and filter) where ``X`` is a metric of the same filter too.

    Examples
    --------
    >>> metrics = [("perplexity", "none"), ("perplexity_stderr", "none"), ("acc", "none")]
    >>> agg = {"perplexity,none": 5.0, "perplexity_stderr,none": 0.1, "perplexity_stderr_stderr,none": "N/A",
    ...        "acc,none": 0.5, "acc_stderr,none": 0.01}
    >>> stderr_of_stderr_keys(metrics, agg)
    ['perplexity_stderr_stderr,none']
    """
    pairs = set(metrics)
    keys = []
    for name, filter_key in pairs:
        key = f"{name}{STDERR},{filter_key}"
        is_a_stderr = name.endswith(STDERR) and (name[: -len(STDERR)], filter_key) in pairs
        if is_a_stderr and key in agg_metrics and not isinstance(agg_metrics[key], int | float):
            keys.append(key)
    return sorted(keys)


def patch_lm_eval() -> bool:
    """Wrap lm-eval's per-task aggregation (``drop_stderr_of_stderr``) where its version is one the wrapper was
    tested on (``TESTED_LM_EVAL``), with one line in the log the first time; another version is left as it is, and
    the log says so. Whether the wrapper is in place.

    Returns
    -------
    bool
        True where lm-eval's aggregation is wrapped (now or before).
    """
    version = importlib.metadata.version("lm_eval")
    if not version.startswith(TESTED_LM_EVAL):
        logger.info(
            "lm-eval %s: its per-task aggregation is left as it is (the wrapper that leaves out a meaningless "
            "perplexity_stderr_stderr key was tested on lm-eval %sx)",
            version,
            TESTED_LM_EVAL,
        )
        return False
    return drop_stderr_of_stderr()


def drop_stderr_of_stderr() -> bool:
    """Install the wrapper (once, saying so in one line of the log); False where this lm-eval has no
    ``_compute_task_aggregations`` to wrap."""
    original = getattr(evaluator_utils, "_compute_task_aggregations", None)
    if original is None:
        return False
    if getattr(original, "drops_stderr_of_stderr", False):
        return True

    @functools.wraps(original)
    def compute_task_aggregations(task, raw_metrics, *args, **kwargs):
        result = original(task, raw_metrics, *args, **kwargs)
        agg_metrics = result[0] if isinstance(result, tuple) else result
        if isinstance(agg_metrics, dict):
            for key in stderr_of_stderr_keys(list(raw_metrics), agg_metrics):
                del agg_metrics[key]
        return result

    compute_task_aggregations.drops_stderr_of_stderr = True
    evaluator_utils._compute_task_aggregations = compute_task_aggregations
    logger.info(
        "lm-eval %s: evaluator_utils._compute_task_aggregations wrapped to leave out the X_stderr_stderr key beside "
        "a task's own X_stderr metric (lm_latent_eval.harness.metric_keys)",
        importlib.metadata.version("lm_eval"),
    )
    return True
