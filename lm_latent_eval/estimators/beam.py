"""The beam bound: log Σ_{z ∈ top-k of q} p(x, z) ≤ log p(x) (no q, no 1/k), equal once the beam covers the support."""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..protocol import LatentLM, has, missing_beam, num_particles
from .base import Estimator
from .intervals import DocumentError, Interval
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .seeding import side_by_side_chunks, side_by_side_particles


class BeamEstimate(DocumentEstimate):
    """A beam sum: a strict lower bound on log p(x), with no Monte Carlo error and no error estimate (any sum of
    p(x, z) over chosen configurations is one: ``canonical``'s record is this one's subclass)."""

    estimator: ClassVar[str] = "beam"
    # why the sum has no error a statement could use
    not_an_estimate: ClassVar[str] = "a beam sum is a lower bound, not an estimate"

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        if self.num_tokens == 0:
            return DocumentError(self.log_likelihood, 0.0, math.inf)
        return DocumentError(self.log_likelihood, math.nan, 0.0, self.not_an_estimate)


def certain_lower_bound(log_likelihood: float, level: float, what: str) -> Interval:
    """The statement of a sum of p(x, z) over chosen configurations: Σ ≤ S with certainty, one-sided (the perplexity
    is at most the figure); ``what`` names the sum."""
    reason = f"{what} is a lower bound on S with certainty (the perplexity is at most its figure)"
    return Interval(log_likelihood, math.inf, math.nan, math.nan, math.nan, math.nan, level, reason)


class BeamBound(Estimator):
    """``estimator=beam``: the ``beam_size`` configurations of highest q(z | x), their p(x, z) summed."""

    name = "beam"
    result = BeamEstimate
    kind = "strict upper bound (the beam sum is ≤ p(x) for every document)"
    settings_fields = ("beam_size",)

    def missing(self, model) -> str | None:
        """A continuous latent (no configurations to rank), or a proposal without ``beam(x, k)``
        (``protocol.missing_beam``; ``registry.require`` adds the estimators the model can use)."""
        return missing_beam(model)

    def describe(self, settings: dict) -> str:
        return f"beam k={settings.get('beam_size')}"

    def figure_name(self, settings: dict) -> str:
        return f"beam bound (k={settings.get('beam_size')})"

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        return BeamEstimate(document, int(x.numel()), beam_sum(model, x, settings.beam_size, document))

    def batches_documents(self, model) -> bool:
        """Side by side where the proposal searches several documents at once (``protocol.DocumentBeam``)."""
        return has(model, "document_beam")

    def estimate_documents(self, model, documents, *, device="cpu", progress=None, stage=0):
        """The documents' beams searched side by side (``beam_documents``, in chunks of at most
        ``side_by_side_particles`` hypotheses), each summed as ``estimate`` sums it."""
        if not self.batches_documents(model) or len(documents) < 2:
            return super().estimate_documents(model, documents, device=device, progress=progress, stage=stage)
        k = documents[0][2].beam_size
        out = []
        for chunk in side_by_side_chunks([k] * len(documents), side_by_side_particles(device)):
            part = [documents[i] for i in chunk]
            beams = model.proposal.beam_documents([x for x, _, _ in part], k)
            out += [
                BeamEstimate(text, int(x.numel()), beam_sum(model, x, k, text, z))
                for (x, text, _), z in zip(part, beams)
            ]
        return out

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval:
        """Σ beam ≤ S with certainty: one-sided, the perplexity is at most the beam figure."""
        return certain_lower_bound(log_likelihood, level, "a beam sum")


BEAM = BeamBound()


@torch.no_grad()
def beam_sum(model: LatentLM, x: torch.Tensor, beam_size: int, document: str = "", z=None) -> float:
    """log Σ_{z ∈ beam_k} p(x, z) of a validated ``beam_size``: a lower bound on log p(x) (``z``: the beam, if
    already searched).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> beam_sum(hmm, x, 4) <= float(hmm.log_marginal(x))
    True
    """
    doc = f"document {document[:60]!r}"
    z = model.proposal.beam(x, beam_size) if z is None else z
    k = num_particles(z)
    if not 1 <= k <= beam_size:
        raise ValueError(f"{doc}: beam returned {k} configurations for beam_size {beam_size}")
    log_p = model.log_joint(x, z).detach().to("cpu", torch.float64)
    if torch.isnan(log_p).any() or torch.isposinf(log_p).any():
        raise ValueError(f"{doc}: log_joint returned NaN or +inf on the beam")
    value = float(torch.logsumexp(log_p, 0))
    if value == -math.inf:
        raise ValueError(f"{doc}: every beam configuration has p(x, z) = 0: the proposal misses the support")
    return value
