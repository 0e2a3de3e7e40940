"""What a backend tells its user about a run, in plain words: a slow setting, documents without tokens, and estimates
for which no two-sided interval is honest (with the estimator's own ``advice``: what to try).

Log lines go through lm-eval's handler and level once a backend exists (``log_like_lm_eval``): lm-eval's logger does
not propagate, so ours would otherwise show warnings only.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable

from ..estimators import DocumentEstimate, ResolvedEstimator, resolve
from ..estimators.corpus import reliability_warning
from ..estimators.policy import UncertaintyPolicy
from ..estimators.registry import ESTIMATORS, with_model_defaults

logger = logging.getLogger(__name__)
PACKAGE = __name__.split(".")[0]


def log_like_lm_eval() -> None:
    """Our log lines (the estimator auto chose, documents loaded from results_dir, ...) through the handler and level
    of lm-eval's CLI, when it has set them up."""
    ours, theirs = logging.getLogger(PACKAGE), logging.getLogger("lm_eval")
    if theirs.handlers and not ours.handlers:
        for handler in theirs.handlers:
            ours.addHandler(handler)
        if ours.level == logging.NOTSET:
            ours.setLevel(theirs.level)


def choose_estimator(owner: str, args, model, announce: bool = True) -> tuple[ResolvedEstimator, str]:
    """The run's estimator, resolved once for ``model`` from the parsed model_args ``args`` (``BackendArgs``; the
    model's own ``default_settings`` for what they did not give), and the sentence recorded as why it runs; logged,
    with a warning about the settings it ignores, where ``announce`` (rank 0 of a multi-process run).

    Parameters
    ----------
    owner : str
        The backend's name, for the log.
    args : BackendArgs
        The parsed model_args (``settings``, ``given_settings``).
    model : LatentLM
        The loaded model.
    announce : bool
        Log the choice and the advice.

    Returns
    -------
    (ResolvedEstimator, str)
        The estimator bound to its settings and the model, and why it runs.
    """
    settings, own = with_model_defaults(args.settings, model, args.given_settings)
    estimator = resolve(settings, model)
    choice = estimator.reason + own
    if announce:
        advise_on_settings(owner, estimator, choice, args.given_settings)
    return estimator, choice


def advise_on_settings(owner: str, run: ResolvedEstimator, choice: str, given: dict | None = None) -> None:
    """Log the estimator a backend (``owner``) runs and why (``choice``: ``auto``'s reason), and one warning naming
    the settings model_args gave (``given``) that the ``run`` ignores (``ResolvedEstimator.ignored_settings``); from
    now on through lm-eval's handler (``log_like_lm_eval``)."""
    log_like_lm_eval()
    logger.info("%s: %s", owner, choice)
    unused = run.ignored_settings(given or {})
    if unused:
        listing = ", ".join(f"{name}={given[name]}" for name in unused)
        uses = sorted(run.settings_used() - {"estimator", "batch_size", "seed"})
        what = f"it uses {', '.join(uses)}" if uses else "it draws no samples and takes no settings"
        if not run.estimator.draws_samples:
            sampling = " or ".join(f"estimator={e.name}" for e in ESTIMATORS.values() if e.draws_samples)
            what += f" ({sampling} draws samples)"
        verb = "has" if len(unused) == 1 else "have"
        logger.warning(
            "%s: model_args %s %s no effect under estimator=%s (%s): %s",
            owner, listing, verb, run.settings.estimator, choice, what,
        )  # fmt: skip


def warn_if_unreliable(owner: str, estimates: Iterable[DocumentEstimate], run: ResolvedEstimator) -> None:
    """One warning for a batch of estimates when no two-sided interval of them is honest at the run's level, with the
    run's advice (``owner``: the backend)."""
    message = reliability_warning(list(estimates), run.advice(), UncertaintyPolicy.of(run.settings))
    if message is not None:
        logger.warning("%s: %s", owner, message)


def warn_about_empty_documents(estimates: dict[str, DocumentEstimate]) -> None:
    """A warning naming each document without tokens (its log p is 0.0 over 0 tokens)."""
    for text, est in estimates.items():
        if est.num_tokens == 0:
            what = f"document {text[:60]!r}" if text.strip() else f"an empty document ({text!r})"
            # stacklevel 3: the caller of the backend's loglikelihood_rolling
            warnings.warn(f"{what} has no tokens: log p = 0.0 over 0 tokens", stacklevel=3)
