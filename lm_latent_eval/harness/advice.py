"""What a backend tells its user about a run, in plain words: a slow setting, documents without tokens, and estimates
for which no two-sided interval is honest (with the estimator's own ``advice``: what to try).

Log lines go through lm-eval's handler and level once a backend exists (``log_like_lm_eval``): lm-eval's logger does
not propagate, so ours would otherwise show warnings only.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable

from ..estimators import DocumentEstimate, EstimatorSettings, ResolvedEstimator, estimator_named, resolve
from ..estimators.corpus import reliability_warning
from ..estimators.policy import UncertaintyPolicy
from ..estimators.registry import with_model_defaults

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
        advise_on_settings(owner, estimator.settings, choice, args.given_settings)
    return estimator, choice


def advise_on_settings(
    owner: str,
    settings: EstimatorSettings,
    choice: str,
    given: dict | None = None,
) -> None:
    """Log the estimator a backend (``owner``) runs and why (``choice``: ``auto``'s reason), and one warning naming
    the settings model_args gave (``given``) that this estimator ignores; from now on through lm-eval's handler
    (``log_like_lm_eval``)."""
    log_like_lm_eval()
    logger.info("%s: %s", owner, choice)
    unused = ignored_settings(settings, given or {})
    if unused:
        listing = ", ".join(f"{name}={given[name]}" for name in unused)
        uses = sorted(settings_used(settings) - {"estimator", "batch_size", "seed"})
        what = f"it uses {', '.join(uses)}" if uses else "it draws no samples and takes no settings"
        if not estimator_named(settings.estimator).draws_samples:
            what += " (estimator=is or estimator=smc draws samples)"
        verb = "has" if len(unused) == 1 else "have"
        logger.warning(
            "%s: model_args %s %s no effect under estimator=%s (%s): %s",
            owner, listing, verb, settings.estimator, choice, what,
        )  # fmt: skip


def settings_used(settings: EstimatorSettings) -> set[str]:
    """The ``EstimatorSettings`` fields that can matter to a run of the resolved ``settings.estimator``: its own
    ``settings_fields``, the precision target and the statement's level for a sampling estimator, the particle
    block (memory only, and usually lm-eval's ``--batch_size``) and the seed (``generate_until`` samples with it
    whatever the estimator)."""
    estimator = estimator_named(settings.estimator)
    used = {"estimator", "batch_size", "seed", *estimator.settings_fields}
    if estimator.draws_samples:
        used |= {"target_se", "level"}
        if settings.target_se:
            used.add("max_samples")
    return used


def ignored_settings(settings: EstimatorSettings, given: Iterable[str]) -> list[str]:
    """The names in ``given`` (settings model_args gave) that the resolved ``settings.estimator`` ignores.

    Examples
    --------
    >>> ignored_settings(EstimatorSettings("exact"), ["num_samples", "estimator", "seed"])  # seed: generate_until
    ['num_samples']
    >>> ignored_settings(EstimatorSettings("is"), ["num_samples", "seed", "max_samples"])
    ['max_samples']
    """
    used = settings_used(settings)
    return [name for name in given if name not in used]


def warn_if_unreliable(
    owner: str, estimates: Iterable[DocumentEstimate], settings: EstimatorSettings, model
) -> None:
    """One warning for a batch of estimates when no two-sided interval of them is honest at the run's level, with the
    estimator's advice for ``model`` (``owner``: the backend)."""
    advice = estimator_named(settings.estimator).advice(settings, model)
    message = reliability_warning(list(estimates), advice, UncertaintyPolicy.of(settings))
    if message is not None:
        logger.warning("%s: %s", owner, message)


def warn_about_empty_documents(estimates: dict[str, DocumentEstimate]) -> None:
    """A warning naming each document without tokens (its log p is 0.0 over 0 tokens)."""
    for text, est in estimates.items():
        if est.num_tokens == 0:
            what = f"document {text[:60]!r}" if text.strip() else f"an empty document ({text!r})"
            # stacklevel 3: the caller of the backend's loglikelihood_rolling
            warnings.warn(f"{what} has no tokens: log p = 0.0 over 0 tokens", stacklevel=3)
