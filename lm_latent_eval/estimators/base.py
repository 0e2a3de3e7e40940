"""What every estimator is and returns: the ``Estimator`` base class and the ``DocumentEstimate`` record.

An estimator is one object (one per module: ``importance``, ``smc``, ``beam``, ``exact``, ``elbo``) registered by name in one
table (``estimators.registry.ESTIMATORS``). It estimates log p(x) of one document (``estimate``), returns a typed
record of its own family (a subclass of ``DocumentEstimate``) whose ``error`` states what the document contributes to
a corpus statement, and says how its documents combine into a corpus figure (``corpus_log_likelihood``,
``fixed_statement``). Adding an estimator is one module, one row of the table, its tests and its docs row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import UnsupportedError
from ..protocol import LatentLM
from .intervals import DocumentError, Interval
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .settings import AUTO_TARGET_SE, EstimatorSettings

STOCHASTIC_BOUND = "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)"


@dataclass
class DocumentEstimate:
    """log p̂(x) of one document over its ``num_tokens`` model tokens; each estimator family subclasses it.

    ``stage_log_likelihoods``: under a precision target, log p̂ of every stage (each drawn afresh,
    ``estimators.adaptive``); the last is the estimate.
    """

    estimator: ClassVar[str] = ""
    # the class of the family's ``diagnostics`` field, if it has one
    diagnostics_type: ClassVar[type | None] = None
    # the class of the family's ``distinct_draws`` field (IS: ``importance.DistinctDraws``), if it has one
    distinct_draws_type: ClassVar[type | None] = None
    document: str
    num_tokens: int
    log_likelihood: float
    stage_log_likelihoods: list[float] | None = field(default=None, kw_only=True)

    @property
    def log_weights(self) -> np.ndarray | None:
        """The K log weights whose mean of exp is p̂ (IS, SMC); None for a deterministic estimate."""
        return None

    @property
    def importance_weights(self) -> np.ndarray | None:
        """The K log weights when they are exchangeable IS samples with informative diagnostics (ESS, Pareto k̂)."""
        return None

    @property
    def certain_lower_bound(self) -> float | None:
        """A lower bound on log p(x) that holds with certainty (IS: log Σ_{z ∈ D} p(x, z) over the distinct draws D,
        ``importance.DistinctDraws``), or None where the estimate gives none."""
        return None

    @property
    def num_samples(self) -> int:
        """Samples or particles drawn for this estimate (0 for a deterministic one)."""
        return 0 if self.log_weights is None else int(self.log_weights.size)

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        """log p̂, v̂ = estimated Var(p̂)/p², its degrees of freedom, and whether ``policy`` trusts v̂."""
        raise NotImplementedError

    def without_unk_penalty(self) -> DocumentEstimate | None:
        """The same samples scored without an unknown-word penalty (PPL rather than UPP); None when not recorded."""
        return None

    def diagnostic_items(self) -> dict[str, float]:
        """This document's diagnostics as the perplexity task's metric items, by metric name (IS: ``is_ess_*``,
        ``is_pareto_k_*``; SMC: ``smc_*``); empty where the family keeps none or the document has no tokens.

        Returns
        -------
        dict of str to float
            One item per diagnostic metric a task may keep (the task YAML names which).

        Examples
        --------
        >>> DocumentEstimate("a b", 2, -3.0).diagnostic_items()
        {}
        """
        return {}

    def to_json(self) -> dict:
        """A JSON-ready record; ``estimators.registry.estimate_from_json`` reads it back. Every family writes the
        same keys (None where a field does not apply): arrays as lists, the diagnostics as a dict."""
        diagnostics = getattr(self, "diagnostics", None)
        return {
            "document": self.document,
            "num_tokens": self.num_tokens,
            "log_likelihood": self.log_likelihood,
            "estimator": self.estimator,
            "log_weights": as_list(self.log_weights),
            "diagnostics": None if diagnostics is None else vars(diagnostics).copy(),
            "unk_penalty": as_list(getattr(self, "unk_penalty", None)),
            "stage_log_likelihoods": self.stage_log_likelihoods,
            "distinct_draws": None
            if getattr(self, "distinct_draws", None) is None
            else vars(self.distinct_draws).copy(),
        }

    @classmethod
    def from_json(cls, record: dict) -> DocumentEstimate:
        """The estimate written by ``to_json``: the family's own fields (arrays as float64, the diagnostics as
        ``diagnostics_type``) where the record class has them."""
        names = {f.name for f in fields(cls)}
        own = {name: as_array(record.get(name)) for name in ("log_weights", "unk_penalty") if name in names}
        if "diagnostics" in names and record.get("diagnostics") is not None:
            own["diagnostics"] = cls.diagnostics_type(**record["diagnostics"])
        if "distinct_draws" in names and record.get("distinct_draws") is not None:
            own["distinct_draws"] = cls.distinct_draws_type(**record["distinct_draws"])
        return cls(
            str(record.get("document", "")),
            int(record["num_tokens"]),
            float(record["log_likelihood"]),
            stage_log_likelihoods=record.get("stage_log_likelihoods"),
            **own,
        )


def as_array(values) -> np.ndarray | None:
    """float64 numpy array of a JSON list, or None."""
    return None if values is None else np.asarray(values, dtype=np.float64)


def as_list(values) -> list | None:
    """A JSON list of a float64 array, or None."""
    return None if values is None else np.asarray(values, np.float64).tolist()


class Estimator:
    """One estimator of log p(x) = log Σ_z p(x, z), registered by ``name`` in ``estimators.registry.ESTIMATORS``.

    Class attributes: ``name`` (the ``estimator=`` value), ``result`` (its ``DocumentEstimate`` family), ``kind``
    (what its perplexity is: exact, a strict or a stochastic bound), ``draws_samples`` (K samples from seeded random
    streams), ``draws_from_proposal`` (z from ``proposal.sample``), ``settings_fields`` (the ``EstimatorSettings`` fields that change its numbers).
    """

    name: ClassVar[str]
    result: ClassVar[type[DocumentEstimate]]
    kind: ClassVar[str]
    draws_samples: ClassVar[bool] = False
    # whether z is drawn by the proposal's own ``sample`` (its options, such as latent_tokenization's canonical_mix,
    # then change the numbers; SMC draws through the stepwise part instead)
    draws_from_proposal: ClassVar[bool] = False
    settings_fields: ClassVar[tuple[str, ...]] = ()

    def missing(self, model: Any) -> str | None:
        """Why ``model`` cannot serve this estimator (one line naming the alternatives), or None."""
        return None

    def require(self, model: Any) -> None:
        """``UnsupportedError`` (one line, ``missing``'s reason) when ``model`` cannot serve this estimator."""
        reason = self.missing(model)
        if reason is not None:
            raise UnsupportedError(reason)

    def auto_reason(self, model: Any) -> str | None:
        """Why ``estimator=auto`` picks this estimator for ``model``, or None when it does not."""
        return None

    def check(self, settings: EstimatorSettings) -> None:
        """Rules tying two settings together for this estimator (InputError); single values are checked by
        ``EstimatorSettings``."""

    def estimate(
        self,
        model: LatentLM,
        x: torch.Tensor,
        document: str,
        settings: EstimatorSettings,
        *,
        device: torch.device | str = "cpu",
        progress=None,
        stage: int = 0,
        diagnostics: bool = False,
    ) -> DocumentEstimate:
        """log p̂(x) of one document with tokens x [T ≥ 1] on ``device``; ``stage`` > 0 draws from fresh random
        streams (the precision target's later stages)."""
        raise NotImplementedError

    def empty(self, document: str, settings: EstimatorSettings, model: Any) -> DocumentEstimate:
        """The estimate of a document without tokens: log p = 0 exactly."""
        return self.result(document, 0, 0.0)

    def advice(self, settings: EstimatorSettings, model: Any = None) -> list[str]:
        """What to try, in order, when no two-sided interval of this estimator's estimates is honest (``model`` None:
        not loaded, as in a report read from a run's files: advice that holds whatever the model)."""
        return []

    def corpus_diagnostics(self, estimates: Sequence[DocumentEstimate], progress: bool = False) -> dict:
        """What this estimator's diagnostics say about a corpus's documents with tokens (an estimate card's
        reliability section): nothing for a deterministic estimator."""
        return {}

    def describe(self, settings: dict) -> str:
        """A few words naming the estimator and the recorded settings that tell its runs apart."""
        return self.name

    def figure_name(self, settings: dict) -> str:
        """The name of this estimator's perplexity in a card's table of figures, from its recorded ``settings``
        (``exact perplexity``; the beam: ``beam bound (k=10)``)."""
        return f"{self.name} perplexity"

    def conditionals(self, model: Any, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]] | None:
        """(log p(continuation | context), greedy) per (context, continuation) where this estimator scores a
        continuation its own way (``canonical``: the model's tooling, with ``is_greedy``), else None: the backend then
        answers log p̂(context ⊕ continuation) − log p̂(context)."""
        return None

    def corpus_log_likelihood(self, estimates: Sequence[DocumentEstimate]) -> float | None:
        """The paper's corpus-level log p̂ (one joint sample of the whole corpus, Logan et al. 2020 Eq. 6), or None
        where no joint sample exists."""
        return None

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval | None:
        """The statement about S = Σ_n log p(x_n) of a deterministic estimator (its Σ log p̂ is exact or a certain
        bound), or None for an estimator whose statement the uncertainty policy decides from the documents' errors."""
        return None

    def bound_stderr(self, estimates: Sequence[DocumentEstimate]) -> float:
        """The Monte Carlo standard error (nats, documents fixed) of Σ_n log p̂_n for an estimator whose figure is a
        bound on S that it reports with its own standard error and no interval on S (the ELBO), else NaN."""
        return math.nan


@dataclass(frozen=True)
class ResolvedEstimator:
    """An estimator bound to its settings and model, resolved once per run (``registry.resolve``: ``auto``
    replaced by its choice, the estimator's own rules and its refusal of the model checked) and passed down to every
    stage and document as it is; nothing below it looks the estimator up or checks the settings again.

    Parameters
    ----------
    estimator : Estimator
        The estimator of the table that runs.
    settings : EstimatorSettings
        Its settings (``settings.estimator`` is ``estimator.name``).
    model : LatentLM
        The model it estimates with.
    reason : str
        Why this estimator (one sentence, recorded with the results).

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> run = resolve(EstimatorSettings("is", num_samples=50, seed=3), hmm)
    >>> est = run.estimate("the cat sat")
    >>> type(est).__name__, est.num_tokens, est.log_weights.shape
    ('ISEstimate', 3, (50,))
    >>> run.sized(80).estimate("the cat sat").num_samples
    80
    """

    estimator: Estimator
    settings: EstimatorSettings
    model: Any
    reason: str = ""

    def sized(self, num_samples: int) -> ResolvedEstimator:
        """The same estimator with K = ``num_samples`` and no further precision target (a document of a later stage
        of ``adaptive``'s precision target; under SMC the same number of runs, each larger)."""
        settings = self.settings.replace(num_samples=num_samples, target_se=None)
        self.estimator.check(settings)
        return dataclasses.replace(self, settings=settings)

    def on(self, model: Any) -> ResolvedEstimator:
        """The same estimator and settings on another model (a view of this one: the prefix view of
        ``loglikelihood``); refused in one line where that model cannot serve it."""
        self.estimator.require(model)
        return dataclasses.replace(self, model=model)

    def estimate(
        self,
        text: str,
        *,
        device: torch.device | str = "cpu",
        stage: int = 0,
        diagnostics: bool = False,
        progress=None,
    ) -> DocumentEstimate:
        """log p̂ of one document: its text tokenized by the model and estimated (``Estimator.estimate``); a text
        without tokens has log p = 0 exactly (``Estimator.empty``).

        Parameters
        ----------
        text : str
            The document.
        device : torch.device or str
            Where the model runs; random streams differ between CPU and GPU.
        stage : int
            > 0 draws from fresh random streams (a later stage of the precision target, ``estimators.adaptive``).
        diagnostics : bool
            Under IS, also compute ``ISDiagnostics``.
        progress : tqdm, optional
            Updated with the samples drawn.

        Returns
        -------
        DocumentEstimate
            The record of the estimator's family (``ISEstimate``, ``SMCEstimate``, ``BeamEstimate``, ...).
        """
        x = self.model.tokenize(text)
        if x.numel() == 0:
            return self.estimator.empty(text, self.settings, self.model)
        return self.estimator.estimate(
            self.model,
            x.to(device),
            text,
            self.settings,
            device=device,
            progress=progress,
            stage=stage,
            diagnostics=diagnostics,
        )


def sample_sizes(sizes: list[int]) -> dict:
    """The fewest, mean and most samples per document (they differ under a precision target)."""
    return {
        "num_samples": int(min(sizes)),
        "num_samples_mean": float(np.mean(sizes)),
        "num_samples_max": int(max(sizes)),
    }


def sampling_advice(settings: EstimatorSettings) -> list[str]:
    """What helps any sampling estimator: a precision target (or a larger budget under one), more samples."""
    budget = (
        f"a larger budget (max_samples={4 * settings.sample_budget})"
        if settings.target_se
        else f"a precision target (target_se={AUTO_TARGET_SE})"
    )
    return [budget, f"more samples (num_samples={10 * settings.num_samples})"]
