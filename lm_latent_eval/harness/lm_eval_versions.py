"""What differs between the lm-eval releases the package runs on, in one place (tested: ``TESTED``).

lm-eval 0.4.13 and the 0.5 preview (0.5.0.dev1) disagree on four things our backends and tasks touch:

- a ``loglikelihood_rolling`` request's arguments: ``(text,)`` in 0.4, ``("", text)`` in 0.5 (an empty context
  beside the text, as a ``loglikelihood`` request): ``rolling_texts`` reads the text under either convention and
  refuses any other shape, so a document is never scored as its empty context;
- what ``loglikelihood_rolling`` returns: one float per request in 0.4, a ``(log p, False)`` pair in 0.5
  (``rolling_answers``), which is then what a task's ``process_results`` receives (``rolling_log_likelihood``);
- the class a perplexity task built from our template subclasses: 0.4's ``ConfigurableTask`` builds every
  request type, 0.5's is an alias of the base ``Task``, whose ``construct_requests`` builds none: ``rolling_task_base``
  gives 0.5's ``LoglikelihoodRollingTask`` there;
- the Stderr lm-eval files beside a metric: 0.4 bootstraps only a list of its own aggregations, 0.5 every
  aggregation but ``mean``, by re-running it on documents drawn with replacement. Our aggregations report their
  own Monte Carlo error as a metric of its own (``perplexity_task.latent_perplexity_stderr``); a bootstrap of our corpus
  statement would be slow and mean something else, so ``own_stderr`` marks them and ``skip_bootstrap_of_own``
  has lm-eval file "N/A" beside them, as 0.4 does.

``adapt_lm_eval`` (called when a backend is built) says in one line when the installed lm-eval is outside the
versions pyproject allows (``SUPPORTED``), then installs the wrapper above and ``metric_keys``'s.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
from collections.abc import Callable, Sequence

from ..errors import UnsupportedError

logger = logging.getLogger(__name__)
# the releases the package's tests and bench/lm_eval_versions.py ran on; pyproject bounds lm-eval to SUPPORTED
TESTED = ("0.4.13", "0.5.0.dev1")
SUPPORTED = ">=0.4.13,<0.6"
LOWEST, BELOW = (0, 4, 13), (0, 6)
# the attribute ``own_stderr`` sets on an aggregation whose standard error is a metric of its own
OWN_STDERR = "lm_latent_eval_own_stderr"


def installed_version() -> str:
    """The installed lm-eval's version string (``importlib.metadata``)."""
    return importlib.metadata.version("lm_eval")


def release(version: str) -> tuple[int, int, int]:
    """The release numbers of a version string, pre-release tags ignored.

    Examples
    --------
    >>> release("0.4.13"), release("0.5.0.dev1"), release("0.6")
    ((0, 4, 13), (0, 5, 0), (0, 6, 0))
    """
    numbers = [int(part) for part in re.findall(r"\d+", version.split("+")[0].split(".dev")[0])[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))  # type: ignore[return-value]


def is_supported(version: str) -> bool:
    """Whether ``version`` is within ``SUPPORTED`` (0.4.13 up to, not including, 0.6; 0.5's previews included).

    Examples
    --------
    >>> [is_supported(v) for v in ("0.4.12", "0.4.13", "0.4.14", "0.5.0.dev1", "0.6.0")]
    [False, True, True, True, False]
    """
    return LOWEST <= release(version) < BELOW


def version_line(version: str) -> str | None:
    """The one line said at start-up about an lm-eval outside ``SUPPORTED``; None within it.

    Examples
    --------
    >>> version_line("0.5.0.dev1") is None
    True
    >>> print(version_line("0.3.0"))
    lm-eval 0.3.0 is outside the versions lm-latent-eval supports (lm-eval>=0.4.13,<0.6; tested on 0.4.13 and 0.5.0.dev1): its figures are unchecked there; install one with pip install "lm-eval>=0.4.13,<0.6"
    """
    if is_supported(version):
        return None
    return (
        f"lm-eval {version} is outside the versions lm-latent-eval supports (lm-eval{SUPPORTED}; tested on "
        f"{' and '.join(TESTED)}): its figures are unchecked there; install one with pip install "
        f'"lm-eval{SUPPORTED}"'
    )


def rolling_returns_pairs(version: str | None = None) -> bool:
    """Whether lm-eval ``version`` (default: the installed one) expects ``(log p, False)`` pairs from
    ``loglikelihood_rolling`` (0.5 on) rather than floats (0.4)."""
    return release(version or installed_version()) >= (0, 5, 0)


def rolling_texts(requests: Sequence) -> list[str]:
    """The text of each ``loglikelihood_rolling`` request: ``args == (text,)`` (lm-eval 0.4) or ``("", text)`` (0.5).

    Parameters
    ----------
    requests : sequence of Instance
        lm-eval's requests (anything with ``args``).

    Returns
    -------
    list of str

    Raises
    ------
    UnsupportedError
        A request of another shape (a context that is not empty): scoring its first argument would score the wrong
        text.

    Examples
    --------
    >>> from types import SimpleNamespace as Request
    >>> rolling_texts([Request(args=("the cat",)), Request(args=("", "the dog"))])
    ['the cat', 'the dog']
    """
    texts = []
    for request in requests:
        args = tuple(request.args)
        if len(args) == 1 and isinstance(args[0], str):
            texts.append(args[0])
        elif len(args) == 2 and args[0] == "" and isinstance(args[1], str):
            texts.append(args[1])
        else:
            raise UnsupportedError(
                f"a loglikelihood_rolling request has arguments {_short(args)}; lm-latent-eval reads (text,) "
                f"(lm-eval 0.4) or ('', text) (0.5), tested on lm-eval {' and '.join(TESTED)} "
                f"(installed: {installed_version()})"
            )
    return texts


def rolling_answers(values: Sequence[float], version: str | None = None) -> list:
    """What ``loglikelihood_rolling`` returns for the log p̂ ``values`` under lm-eval ``version`` (default: the
    installed one): the floats (0.4) or ``(log p, False)`` pairs (0.5: ``is_greedy`` is not computed for a rolling
    score).

    Examples
    --------
    >>> rolling_answers([-1.5], "0.4.13"), rolling_answers([-1.5], "0.5.0.dev1")
    ([-1.5], [(-1.5, False)])
    """
    if rolling_returns_pairs(version):
        return [(value, False) for value in values]
    return list(values)


def rolling_log_likelihood(results: Sequence) -> float:
    """The log p̂ of one document from what a ``loglikelihood_rolling`` task's ``process_results`` receives:
    ``[log p]`` (lm-eval 0.4) or ``[(log p, False)]`` (0.5).

    Examples
    --------
    >>> rolling_log_likelihood([-2.0]), rolling_log_likelihood([(-2.0, False)])
    (-2.0, -2.0)
    """
    (result,) = results
    if isinstance(result, tuple | list):
        return float(result[0])
    return float(result)


@functools.cache
def rolling_task_base() -> type:
    """The lm-eval class a ``loglikelihood_rolling`` task built from our template subclasses: 0.5's
    ``LoglikelihoodRollingTask`` where it exists (its ``ConfigurableTask`` builds no request), else 0.4's
    ``ConfigurableTask``."""
    import lm_eval.api.task as task_module

    return getattr(task_module, "LoglikelihoodRollingTask", None) or task_module.ConfigurableTask


def own_stderr(aggregation: Callable) -> Callable:
    """Mark ``aggregation`` as one whose standard error is a metric of its own, or that has none: lm-eval files
    "N/A" beside it instead of bootstrapping it (``skip_bootstrap_of_own``). Returns the same function."""
    setattr(aggregation, OWN_STDERR, True)
    return aggregation


def skip_bootstrap_of_own() -> bool:
    """Wrap lm-eval's ``stderr_for_metric`` (where lm-eval looks it up) so that it gives no bootstrap for an
    aggregation marked ``own_stderr``; every other aggregation keeps lm-eval's. Once per process; whether lm-eval
    has such a function."""
    from lm_eval.api import metrics

    original = getattr(metrics, "stderr_for_metric", None)
    if original is None:
        return False
    if not getattr(original, OWN_STDERR, False):

        @functools.wraps(original)
        def stderr_for_metric(metric, *args, **kwargs):
            if getattr(metric, OWN_STDERR, False):
                return None
            return original(metric, *args, **kwargs)

        setattr(stderr_for_metric, OWN_STDERR, True)
        metrics.stderr_for_metric = stderr_for_metric
        try:  # 0.4 imports it into evaluator_utils by name
            from lm_eval import evaluator_utils
        except ImportError:
            evaluator_utils = None
        if getattr(evaluator_utils, "stderr_for_metric", None) is original:
            evaluator_utils.stderr_for_metric = stderr_for_metric
    return True


@functools.cache
def adapt_lm_eval() -> bool:
    """What building a backend does to lm-eval, once per process: one line where its version is outside
    ``SUPPORTED`` (nothing patched then); else the bootstrap of our aggregations skipped (``skip_bootstrap_of_own``)
    and the meaningless ``X_stderr_stderr`` keys left out (``metric_keys.drop_stderr_of_stderr``). Whether the
    version is supported."""
    from .metric_keys import drop_stderr_of_stderr

    version = installed_version()
    line = version_line(version)
    if line is not None:
        logger.warning("%s", line)
        return False
    skip_bootstrap_of_own()
    drop_stderr_of_stderr()
    return True


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) <= 80 else text[:77] + "..."
