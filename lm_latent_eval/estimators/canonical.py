"""The canonical configuration: log p(x, z*) ≤ log p(x) of the one z* a model's own tooling scores (a tokenizer's
segmentation of the text), scored as that tooling scores it.

p(x) = Σ_z p(x, z) ≥ p(x, z*) for any single z*, so the canonical figure is a lower bound on log p(x) with
certainty, as the beam sum is, and its perplexity an upper bound. It is what the latent LM's authors report when they
ignore the latent: for ``latent_tokenization``, lm-eval's ``hf`` backend's number (the tokenizer's tokens, hf's
rolling windows and truncation), so the gap between it and the marginal is the cost of fixing the tokenization.

A model offers it through the optional part of the contract ``CanonicalScoringLM`` (the part ``"canonical_scoring"``):
``canonical_log_likelihood(text)`` and, where the tooling scores a continuation its own way (hf's ``_encode_pair``,
with ``is_greedy``), ``canonical_conditionals(pairs)``.
"""

from __future__ import annotations

from typing import ClassVar

from ..protocol import has
from .base import Estimator
from .beam import BeamEstimate, certain_lower_bound
from .intervals import Interval


class CanonicalEstimate(BeamEstimate):
    """log p(x, z*) of the canonical configuration: a lower bound on log p(x) with certainty, no error estimate (a
    beam of one chosen configuration)."""

    estimator: ClassVar[str] = "canonical"
    not_an_estimate: ClassVar[str] = (
        "the canonical configuration's probability is a lower bound, not an estimate"
    )


class CanonicalConfiguration(Estimator):
    """``estimator=canonical``: the model's canonical configuration z*, scored by the model's own tooling
    (``canonical_log_likelihood``); never picked by ``auto``.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> CANONICAL.missing(hmm)
    'HMMLanguageModel has no canonical configuration (canonical_log_likelihood)'
    """

    name = "canonical"
    result = CanonicalEstimate
    kind = "strict upper bound (one configuration's probability p(x, z*) is ≤ p(x) for every document)"

    def missing(self, model) -> str | None:
        if has(model, "canonical_scoring"):
            return None
        return f"{type(model).__name__} has no canonical configuration (canonical_log_likelihood)"

    def figure_name(self, settings: dict) -> str:
        return "canonical configuration's bound"

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        return CanonicalEstimate(document, int(x.numel()), float(model.canonical_log_likelihood(document)))

    def conditionals(self, model, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]] | None:
        """(log p(continuation | context), greedy) per pair as the model's tooling scores a continuation, or None
        where it scores none its own way (then log p(context ⊕ continuation) − log p(context))."""
        own = getattr(model, "canonical_conditionals", None)
        return None if own is None else own(pairs)

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval:
        """Σ log p(x, z*) ≤ S with certainty: one-sided, the perplexity is at most the canonical figure."""
        return certain_lower_bound(log_likelihood, level, "the canonical configuration's probability")


CANONICAL = CanonicalConfiguration()
