"""The metric keys lm-eval writes into the results: no ``<metric>_stderr_stderr`` beside a metric that is a Stderr.

lm-eval files a ``<metric>_stderr`` key beside every metric of a task (a number where it knows how to estimate one,
else ``"N/A"``), and its table shows that key as the metric's Stderr. Our perplexity tasks give
``latent_perplexity``'s Stderr as a metric of its own, ``latent_perplexity_stderr`` (lm-eval has no other way to take
a task's own standard error), so lm-eval also wrote ``latent_perplexity_stderr_stderr: "N/A"`` into every results
file: a key that means nothing. ``drop_stderr_of_stderr`` wraps lm-eval's per-task aggregation
(``evaluator_utils._compute_task_aggregations``: its arguments differ between lm-eval 0.4 and 0.5, its first
result is the dict of aggregated keys in both) so that it leaves out the ``X_stderr_stderr`` key where the same
filter has both ``X`` and ``X_stderr`` and that key holds no number; every other key, of every task, is left as
lm-eval computed it. Where an lm-eval release has no such function the wrapper is not installed (the key is then
only surplus).

Nothing is wrapped on import: the backend wraps lm-eval when it is built (``lm_eval_versions.adapt_lm_eval``, once
per process, for the lm-eval versions the package supports, saying so in one line of the log).
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

STDERR = "_stderr"


def stderr_of_stderr_keys(agg_metrics: dict) -> list[str]:
    """The keys ``X_stderr_stderr,<filter>`` of ``agg_metrics`` that hold no number, where ``X,<filter>`` and
    ``X_stderr,<filter>`` are keys too (``X_stderr`` was then a metric of its own: lm-eval files a Stderr key only
    beside a metric).

    Examples
    --------
    >>> agg = {"latent_perplexity,none": 5.0, "latent_perplexity_stderr,none": 0.1,
    ...        "latent_perplexity_stderr_stderr,none": "N/A", "acc,none": 0.5, "acc_stderr,none": 0.01,
    ...        "alone_stderr,none": 1.0, "alone_stderr_stderr,none": "N/A"}
    >>> stderr_of_stderr_keys(agg)
    ['latent_perplexity_stderr_stderr,none']
    """
    keys = []
    for key, value in agg_metrics.items():
        name, comma, filter_key = key.partition(",")
        if not comma or not name.endswith(STDERR + STDERR) or isinstance(value, int | float):
            continue
        metric = name[: -2 * len(STDERR)]
        if f"{metric},{filter_key}" in agg_metrics and f"{metric}{STDERR},{filter_key}" in agg_metrics:
            keys.append(key)
    return sorted(keys)


def drop_stderr_of_stderr() -> bool:
    """Install the wrapper (once, saying so in one line of the log); False where this lm-eval has no
    ``_compute_task_aggregations`` to wrap."""
    original = getattr(evaluator_utils, "_compute_task_aggregations", None)
    if original is None:
        return False
    if getattr(original, "drops_stderr_of_stderr", False):
        return True

    @functools.wraps(original)
    def compute_task_aggregations(*args, **kwargs):
        result = original(*args, **kwargs)
        agg_metrics = result[0] if isinstance(result, tuple) else result
        if isinstance(agg_metrics, dict):
            for key in stderr_of_stderr_keys(agg_metrics):
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
