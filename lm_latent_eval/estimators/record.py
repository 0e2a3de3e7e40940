"""What every estimator returns for one document: the ``DocumentEstimate`` record (each estimator family subclasses
it), whose ``error`` states what the document contributes to a corpus statement."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

import numpy as np

from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy


@dataclass
class DocumentEstimate:
    """log p̂(x) of one document over its ``num_tokens`` model tokens; each estimator family subclasses it.

    ``stage_log_likelihoods``: under a precision target, log p̂ of every stage (each drawn afresh,
    ``estimators.adaptive``); the last is the estimate. ``capped_variance``: under a precision target whose
    ``max_samples`` held the document below the size it planned, c / K from the stages before (``DocumentError``'s,
    read by the interval's gates). ``computed_exactly``: a sampling estimator's record of a
    document whose log p the model computed instead (``Estimator.known``: ``exact_where_cheaper``); its K log weights
    are all log p, none drawn.

    Examples
    --------
    The properties of an IS, an SMC and an exact estimate of one document:

    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> est = {name: resolve(EstimatorSettings(name, num_samples=8), hmm).estimate("the cat sat")
    ...        for name in ["is", "smc", "exact"]}
    >>> est["is"].log_weights.shape, est["smc"].log_weights.shape, est["exact"].log_weights is None
    ((8,), (8,), True)
    >>> est["is"].importance_weights.shape, est["smc"].importance_weights is None
    ((8,), True)
    >>> est["is"].certain_lower_bound <= est["exact"].log_likelihood, est["smc"].certain_lower_bound is None
    (True, True)
    >>> est["smc"].num_samples, est["exact"].num_samples
    (8, 0)
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
    computed_exactly: bool = field(default=False, kw_only=True)
    capped_variance: float | None = field(default=None, kw_only=True, repr=False)

    @property
    def sampled(self) -> bool:
        """Whether the estimate rests on draws that diagnostics describe: a document with tokens that was not
        computed exactly."""
        return self.num_tokens > 0 and not self.computed_exactly

    def known_error(self) -> DocumentError:
        """The error of a log p known without sampling (no tokens, or ``computed_exactly``): v = 0, proven."""
        return DocumentError(self.log_likelihood, 0.0, math.inf, proven=self.log_likelihood)

    def with_cap(self, err: DocumentError) -> DocumentError:
        """``err`` with this estimate's ``capped_variance`` (a sampling family's ``error`` returns it so)."""
        return err if self.capped_variance is None else replace(err, capped_variance=self.capped_variance)

    @property
    def log_weights(self) -> np.ndarray | None:
        """The K log weights whose mean of exp is p̂ (IS, SMC); None for a deterministic estimate.

        Returns
        -------
        numpy.ndarray or None
            float64 [K]: log w_k, with log p̂ = logsumexp_k log w_k − log K.
        """
        return None

    @property
    def importance_weights(self) -> np.ndarray | None:
        """The K log weights when they are exchangeable IS samples with informative diagnostics (ESS, Pareto k̂).

        Returns
        -------
        numpy.ndarray or None
            float64 [K], ``log_weights`` of an IS estimate of a document with tokens; None otherwise (SMC's particles
            are neither independent nor exchangeable).
        """
        return None

    @property
    def certain_lower_bound(self) -> float | None:
        """A lower bound on log p(x) that holds with certainty (IS: log Σ_{z ∈ D} p(x, z) over the distinct draws D,
        ``importance.DistinctDraws``), or None where the estimate gives none.

        Returns
        -------
        float or None
            The bound in nats.
        """
        return None

    @property
    def num_samples(self) -> int:
        """Samples or particles drawn for this estimate (0 for a deterministic one).

        Returns
        -------
        int
            K, the size of ``log_weights``.
        """
        return 0 if self.log_weights is None else int(self.log_weights.size)

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        """log p̂, v̂ = estimated Var(p̂)/p², its degrees of freedom, and whether ``policy`` trusts v̂.

        Parameters
        ----------
        policy : UncertaintyPolicy
            Decides whether v̂ is trusted (its gates: Pareto k̂, the runs' shares, ...).

        Returns
        -------
        DocumentError
            ``log_likelihood`` (log p̂), ``relative_variance`` (v̂; NaN where the family states none, as for a bound),
            ``degrees_of_freedom`` and ``reason`` (why v̂ is not trusted; None when it is).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> ESTIMATORS["exact"].result("a b", 2, -3.0).error()
        DocumentError(log_likelihood=-3.0, relative_variance=0.0, degrees_of_freedom=inf, reason=None)
        """
        raise NotImplementedError

    def without_unk_penalty(self) -> DocumentEstimate | None:
        """The same samples scored without an unknown-word penalty (PPL rather than UPP); None when not recorded.

        Returns
        -------
        DocumentEstimate or None
            An estimate of the same family whose log weights [K] are ``log_weights + unk_penalty`` (IS under a model
            with ``unknown_word_penalty``); None for a family or a run that keeps no penalty.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> est = ESTIMATORS["is"].result("a b", 2, -3.0, np.array([-3.0, -3.0]), np.array([0.5, 0.5]))
        >>> est.without_unk_penalty().log_likelihood
        -2.5
        >>> DocumentEstimate("a b", 2, -3.0).without_unk_penalty() is None
        True
        """
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

    def summarized(self) -> DocumentEstimate:
        """This estimate with its family's diagnostics computed where they are not yet (IS: ``ISDiagnostics`` of a
        sampled document's weights; every other family: itself). The same numbers: what ``diagnostics`` describes.

        Examples
        --------
        >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> est = resolve(EstimatorSettings("is", num_samples=8), hmm).estimate("the cat sat")
        >>> est.diagnostics is None, est.summarized().diagnostics.num_samples
        (True, 8)
        """
        return self

    def to_json(self) -> dict:
        """A JSON-ready record; ``estimators.registry.estimate_from_json`` reads it back. Every family writes the
        same keys (None where a field does not apply): arrays as lists, the diagnostics as a dict.

        Returns
        -------
        dict
            ``document``, ``num_tokens``, ``log_likelihood``, ``estimator``, ``log_weights`` (list [K]),
            ``diagnostics``, ``unk_penalty`` (list [K]), ``stage_log_likelihoods``, ``distinct_draws``,
            ``computed_exactly``, ``capped_variance``.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> record = ESTIMATORS["exact"].result("a b", 2, -3.0).to_json()
        >>> record["estimator"], record["log_likelihood"], record["log_weights"]
        ('exact', -3.0, None)
        """
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
            "computed_exactly": self.computed_exactly,
            "capped_variance": self.capped_variance,
        }

    @classmethod
    def from_json(cls, record: dict) -> DocumentEstimate:
        """The estimate written by ``to_json``: the family's own fields (arrays as float64, the diagnostics as
        ``diagnostics_type``) where the record class has them.

        Parameters
        ----------
        record : dict
            A record written by ``to_json`` of this family (keys it lacks read as None).

        Returns
        -------
        DocumentEstimate
            An instance of ``cls``.

        Examples
        --------
        >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> est = resolve(EstimatorSettings("smc", num_samples=8), hmm).estimate("the cat sat")
        >>> back = type(est).from_json(est.to_json())
        >>> bool((back.log_weights == est.log_weights).all()), back.diagnostics == est.diagnostics
        (True, True)
        """
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
            computed_exactly=bool(record.get("computed_exactly", False)),
            capped_variance=record.get("capped_variance"),
            **own,
        )


def as_array(values) -> np.ndarray | None:
    """float64 numpy array of a JSON list, or None."""
    return None if values is None else np.asarray(values, dtype=np.float64)


def as_list(values) -> list | None:
    """A JSON list of a float64 array, or None."""
    return None if values is None else np.asarray(values, np.float64).tolist()
