"""The exact marginal log p(x) = log Σ_z p(x, z) from the model's own ``log_marginal`` (the HMM's forward algorithm)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..errors import UnsupportedError
from ..protocol import LatentLM, has
from .base import Estimator
from .intervals import DocumentError, Interval
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate


class ExactEstimate(DocumentEstimate):
    """log p(x) itself: no Monte Carlo error."""

    estimator: ClassVar[str] = "exact"

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        return DocumentError(self.log_likelihood, 0.0, math.inf)


class ExactMarginal(Estimator):
    """``estimator=exact``: the model's ``log_marginal(x)``."""

    name = "exact"
    result = ExactEstimate
    kind = "exact"

    def missing(self, model) -> str | None:
        if has(model, "exact_marginal"):
            return None
        return f"{type(model).__name__} has no exact log_marginal(x)"

    def auto_reason(self, model) -> str | None:
        if not has(model, "tractable_marginal"):
            return None
        return f"auto: exact, {type(model).__name__} has a tractable log_marginal"

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        try:
            return ExactEstimate(document, int(x.numel()), exact_log_marginal(model, x, document))
        except UnsupportedError as err:  # the model's program refuses this document (too long, too costly)
            raise UnsupportedError(f"{err}; use estimator=auto, which samples such a document") from None

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval:
        """S itself: a point."""
        return Interval(log_likelihood, log_likelihood, log_likelihood, 0.0, 0.0, 0.0, level)


EXACT = ExactMarginal()


@torch.no_grad()
def exact_log_marginal(model: LatentLM, x: torch.Tensor, document: str = "") -> float:
    """log p(x) from the model's own exact marginalization.

    Parameters
    ----------
    model : LatentLM
        A model that offers ``log_marginal(x)``.
    x : torch.Tensor
        The document's tokens, LongTensor [T].
    document : str
        The document's text, for error messages.

    Returns
    -------
    float
        log p(x).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> round(exact_log_marginal(hmm, hmm.tokenize("the cat sat")), 4) < 0
    True
    """
    EXACT.require(model)
    return checked_log_marginal(model, x, document)


def checked_log_marginal(model: Any, x: torch.Tensor, document: str = "") -> float:
    """``model.log_marginal(x)`` as a float, refused where it is NaN or +inf (naming the document)."""
    value = float(model.log_marginal(x))
    if math.isnan(value) or value == math.inf:
        raise ValueError(f"document {document[:60]!r}: log_marginal returned {value}")
    return value
