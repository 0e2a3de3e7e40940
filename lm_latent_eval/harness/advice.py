"""What a backend tells its user about a run, in plain words: a slow setting, documents without tokens, and estimates
for which no two-sided interval is honest (with the estimator's own ``advice``: what to try).

Log lines go through lm-eval's handler and level once a backend exists (``log_like_lm_eval``): lm-eval's logger does
not propagate, so ours would otherwise show warnings only.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable

from ..estimators import DocumentEstimate, EstimatorSettings, estimator_named
from ..estimators.corpus import reliability_warning
from ..estimators.policy import UncertaintyPolicy

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


def advise_on_settings(owner: str, settings: EstimatorSettings, choice: str) -> None:
    """Log the estimator a backend (``owner``) runs and why (``choice``: ``auto``'s reason); from now on through
    lm-eval's handler (``log_like_lm_eval``)."""
    log_like_lm_eval()
    logger.info("%s: %s", owner, choice)


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
