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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import UnsupportedError
from ..protocol import LatentLM, exact_marginal_cost
from .intervals import DocumentError, Interval
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .seeding import sample_block
from .settings import AUTO_TARGET_SE, DEFAULT_LEVEL, EstimatorSettings

STOCHASTIC_BOUND = "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)"


@dataclass
class DocumentEstimate:
    """log p̂(x) of one document over its ``num_tokens`` model tokens; each estimator family subclasses it.

    ``stage_log_likelihoods``: under a precision target, log p̂ of every stage (each drawn afresh,
    ``estimators.adaptive``); the last is the estimate. ``computed_exactly``: a sampling estimator's record of a
    document whose log p the model computed instead (``Estimator.known``: ``exact_where_cheaper``); its K log weights
    are all log p, none drawn.

    Examples
    --------
    The properties of an IS, an SMC and an exact estimate of one document:

    >>> from lm_latent_eval.estimators import resolve
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

    @property
    def sampled(self) -> bool:
        """Whether the estimate rests on draws that diagnostics describe: a document with tokens that was not
        computed exactly."""
        return self.num_tokens > 0 and not self.computed_exactly

    def known_error(self) -> DocumentError:
        """The error of a log p known without sampling (no tokens, or ``computed_exactly``): v = 0, proven."""
        return DocumentError(self.log_likelihood, 0.0, math.inf, proven=self.log_likelihood)

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
        >>> from lm_latent_eval.estimators import resolve
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
            ``diagnostics``, ``unk_penalty`` (list [K]), ``stage_log_likelihoods``, ``distinct_draws``.

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
        >>> from lm_latent_eval.estimators import resolve
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
        """Why ``model`` cannot serve this estimator, or None.

        Parameters
        ----------
        model : LatentLM
            Any object; the estimator looks for the parts of the contract it needs.

        Returns
        -------
        str or None
            One line naming what the model lacks (``registry.require`` adds the estimators it can use).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> ESTIMATORS["smc"].missing(hmm) is None
        True
        >>> ESTIMATORS["elbo"].missing(hmm)
        'HMMLanguageModel is not a masked LM: the ELBO needs masked_token_log_probs(x, revealed)'
        >>> ESTIMATORS["elbo"].require(hmm)
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.UnsupportedError: HMMLanguageModel is not a masked LM: the ELBO needs masked_token_log_probs(x, revealed)
        """
        return None

    def require(self, model: Any) -> None:
        """``UnsupportedError`` (one line, ``missing``'s reason) when ``model`` cannot serve this estimator.

        Parameters
        ----------
        model : LatentLM
            The model to estimate with.

        Raises
        ------
        UnsupportedError
            Where ``missing(model)`` is not None.

        See Also
        --------
        missing : its example shows the refusal too.
        """
        reason = self.missing(model)
        if reason is not None:
            raise UnsupportedError(reason)

    def auto_reason(self, model: Any) -> str | None:
        """Why ``estimator=auto`` picks this estimator for ``model``, or None when it does not (``registry.resolve``
        picks the first estimator of ``ESTIMATORS`` with a reason).

        Parameters
        ----------
        model : LatentLM
            The model to estimate with.

        Returns
        -------
        str or None
            One sentence, recorded with the results.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> ESTIMATORS["exact"].auto_reason(hmm)
        'auto: exact, HMMLanguageModel has a tractable log_marginal'
        >>> ESTIMATORS["beam"].auto_reason(hmm) is None
        True
        """
        return None

    def check(self, settings: EstimatorSettings) -> None:
        """Rules tying two settings together for this estimator; single values are checked by ``EstimatorSettings``.

        Parameters
        ----------
        settings : EstimatorSettings
            The settings this estimator runs with.

        Raises
        ------
        InputError
            Where the settings break one of the estimator's rules (SMC: K particles form at least ``smc_runs`` runs).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> ESTIMATORS["smc"].check(EstimatorSettings("smc", num_samples=3, smc_runs=4))
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.InputError: num_samples = 3 particles cannot form smc_runs = 4 runs
        """

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
    ) -> DocumentEstimate:
        """log p̂(x) of one document with tokens (``ResolvedEstimator.estimate`` tokenizes a text and calls it).

        Parameters
        ----------
        model : LatentLM
            A model this estimator can serve (``require``).
        x : torch.Tensor
            The document's tokens, LongTensor [T] with T ≥ 1, on ``device``.
        document : str
            The document's text: with ``settings.seed`` it seeds the random streams; named in errors.
        settings : EstimatorSettings
            Checked by ``check``; the fields of ``settings_fields`` change the numbers.
        device : torch.device or str
            Where the model runs; random streams differ between CPU and GPU.
        progress : tqdm, optional
            Updated with the samples drawn.
        stage : int
            > 0 draws from fresh random streams (the precision target's later stages).

        Returns
        -------
        DocumentEstimate
            A record of this estimator's family (``result``).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> x = hmm.tokenize("the cat sat")
        >>> est = ESTIMATORS["is"].estimate(hmm, x, "the cat sat", EstimatorSettings("is", num_samples=8))
        >>> type(est).__name__, est.num_tokens, est.log_weights.shape
        ('ISEstimate', 3, (8,))
        """
        raise NotImplementedError

    def batches_documents(self, model: LatentLM) -> bool:
        """Whether ``estimate_documents`` advances several documents of ``model`` side by side (then the workers
        hand it chunks of documents; else one document at a time, each stored as soon as it is estimated).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> ESTIMATORS["smc"].batches_documents(hmm), ESTIMATORS["is"].batches_documents(hmm)
        (True, False)
        """
        return False

    def estimate_documents(
        self,
        model: LatentLM,
        documents: Sequence[tuple[torch.Tensor, str, EstimatorSettings]],
        *,
        device: torch.device | str = "cpu",
        progress=None,
        stage: int = 0,
    ) -> list[DocumentEstimate]:
        """``estimate`` of several documents with tokens, which an estimator may advance side by side (``smc`` on a
        model with ``protocol.DocumentBatchLM``); each estimate is the one ``estimate`` gives that document alone
        (its random streams are its own), so which documents share a call never changes a number.

        Parameters
        ----------
        model : LatentLM
            A model this estimator can serve.
        documents : sequence of (torch.Tensor, str, EstimatorSettings)
            Each document's tokens (T ≥ 1, on ``device``), text and settings (the same but for ``num_samples``).
        device, progress, stage
            As ``estimate``'s.

        Returns
        -------
        list of DocumentEstimate
            In the documents' order.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> texts, smc = ["the cat sat", "a dog"], ESTIMATORS["smc"]
        >>> docs = [(hmm.tokenize(t), t, EstimatorSettings("smc", 40, seed=2)) for t in texts]
        >>> together = smc.estimate_documents(hmm, docs)
        >>> alone = smc.estimate(hmm, *docs[1])
        >>> bool((together[1].log_weights == alone.log_weights).all())
        True
        """
        return [
            self.estimate(model, x, text, settings, device=device, progress=progress, stage=stage)
            for x, text, settings in documents
        ]

    def known(
        self, document: str, num_tokens: int, log_likelihood: float, settings: EstimatorSettings, model: Any
    ) -> DocumentEstimate:
        """The estimate of a document whose log p is known without sampling: log p = 0 for a document without
        tokens, or the model's exact value where it costs no more than the samples (``exact_where_cheaper``).

        A sampling estimator records K log weights all equal to log p (each sample's weight replaced by its
        expectation p(x)), so that its record, its sample size and the precision target's allocation read as for a
        sampled document, with v = 0 (``DocumentEstimate.known_error``).

        Parameters
        ----------
        document : str
            The text.
        num_tokens : int
            Its model tokens (0: no tokens).
        log_likelihood : float
            log p(x), exact.
        settings : EstimatorSettings
            The settings (a sampling estimator records K weights).
        model : LatentLM
            The model.

        Returns
        -------
        DocumentEstimate
            A record of this estimator's family, ``computed_exactly`` where the document has tokens.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> ESTIMATORS["exact"].known("", 0, 0.0, EstimatorSettings("exact"), hmm)
        ExactEstimate(document='', num_tokens=0, log_likelihood=0.0, stage_log_likelihoods=None, computed_exactly=False)
        >>> known = ESTIMATORS["smc"].known("a b", 2, -3.0, EstimatorSettings("smc", num_samples=8), hmm)
        >>> known.diagnostics.run_sizes, known.error().relative_variance, known.error().exact, known.sampled
        ([2, 2, 2, 2], 0.0, True, False)
        """
        return self.result(document, num_tokens, log_likelihood)

    def advice(self, settings: EstimatorSettings, model: Any = None) -> list[str]:
        """What to try, in order, when no two-sided interval of this estimator's estimates is honest.

        Parameters
        ----------
        settings : EstimatorSettings
            The settings that ran (the advice names larger values).
        model : LatentLM, optional
            None: not loaded, as in a report read from a run's files (advice that holds whatever the model).

        Returns
        -------
        list of str
            Short phrases, the most promising first; empty for a deterministic estimator.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> for line in ESTIMATORS["smc"].advice(EstimatorSettings("smc", smc_runs=1)):
        ...     print(line)
        smc_runs=4 (runs give the Monte Carlo error)
        a precision target (target_se=0.002)
        more samples (num_samples=1000)
        """
        return []

    def corpus_diagnostics(self, estimates: Sequence[DocumentEstimate], progress: bool = False) -> dict:
        """What this estimator's diagnostics say about a corpus's documents with tokens (an estimate card's
        reliability section): nothing for a deterministic estimator.

        Parameters
        ----------
        estimates : sequence of DocumentEstimate
            The documents with tokens, records of this estimator's family.
        progress : bool
            Show a progress bar (IS: Pareto k̂ of every document).

        Returns
        -------
        dict
            Figures by name (samples per document, ESS, Pareto k̂, resampling steps, ...).

        Examples
        --------
        >>> from lm_latent_eval.estimators import resolve
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> est = resolve(EstimatorSettings("smc", num_samples=8), hmm).estimate("the cat sat")
        >>> sorted(ESTIMATORS["smc"].corpus_diagnostics([est]))
        ['ess_mean', 'ess_min', 'num_samples', 'num_samples_max', 'num_samples_mean', 'resampling_steps', 'smc_runs']
        >>> ESTIMATORS["exact"].corpus_diagnostics([])
        {}
        """
        return {}

    def describe(self, settings: dict) -> str:
        """A few words naming the estimator and the recorded settings that tell its runs apart.

        Parameters
        ----------
        settings : dict
            Recorded settings (``registry.recorded_settings``); missing keys read as None.

        Returns
        -------
        str

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> ESTIMATORS["is"].describe({"num_samples": 100, "temperature": 1.0, "peek": True})
        'IS K=100 τ=1.0 peek'
        >>> ESTIMATORS["beam"].describe({"beam_size": 10})
        'beam k=10'
        """
        return self.name

    def figure_name(self, settings: dict) -> str:
        """The name of this estimator's perplexity in a card's table of figures.

        Parameters
        ----------
        settings : dict
            Recorded settings (``registry.recorded_settings``).

        Returns
        -------
        str

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> ESTIMATORS["exact"].figure_name({}), ESTIMATORS["beam"].figure_name({"beam_size": 10})
        ('exact perplexity', 'beam bound (k=10)')
        """
        return f"{self.name} perplexity"

    def conditionals(self, model: Any, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]] | None:
        """(log p(continuation | context), greedy) per (context, continuation) where this estimator scores a
        continuation its own way (``canonical``: the model's tooling, with ``is_greedy``), else None: the backend then
        answers log p̂(context ⊕ continuation) − log p̂(context)."""
        return None

    def corpus_log_likelihood(self, estimates: Sequence[DocumentEstimate]) -> float | None:
        """The paper's corpus-level log p̂ (one joint sample of the whole corpus, Logan et al. 2020 Eq. 6), or None
        where no joint sample exists.

        Parameters
        ----------
        estimates : sequence of DocumentEstimate
            The documents, records of this estimator's family (IS: the same K; SMC: the same runs).

        Returns
        -------
        float or None
            log p̂ of the corpus in nats: IS, logsumexp_k Σ_n log w_nk − log K; SMC, run r of every document as one
            corpus sample.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> one = ESTIMATORS["is"].result("a b", 2, math.log(2.0), np.log([1.0, 3.0]))
        >>> round(ESTIMATORS["is"].corpus_log_likelihood([one, one]), 6) == round(math.log(5.0), 6)
        True
        >>> ESTIMATORS["exact"].corpus_log_likelihood([]) is None
        True
        """
        return None

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval | None:
        """The statement about S = Σ_n log p(x_n) of a deterministic estimator (its Σ log p̂ is exact or a certain
        bound), or None for an estimator whose statement the uncertainty policy decides from the documents' errors.

        Parameters
        ----------
        log_likelihood : float
            Σ_n log p̂_n over the corpus.
        level : float
            The statement's level (recorded in the interval).

        Returns
        -------
        Interval or None
            Bounds on S: a point (exact), one-sided (a certain bound) or unbounded (no statement).

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> exact = ESTIMATORS["exact"].fixed_statement(-10.0, 0.95)
        >>> exact.lower, exact.upper, ESTIMATORS["beam"].fixed_statement(-10.0, 0.95).upper
        (-10.0, -10.0, inf)
        >>> ESTIMATORS["is"].fixed_statement(-10.0, 0.95) is None
        True
        """
        return None

    def bound_stderr(self, estimates: Sequence[DocumentEstimate]) -> float:
        """The Monte Carlo standard error (nats, documents fixed) of Σ_n log p̂_n for an estimator whose figure is a
        bound on S that it reports with its own standard error and no interval on S (the ELBO), else NaN.

        Parameters
        ----------
        estimates : sequence of DocumentEstimate
            The documents, records of this estimator's family.

        Returns
        -------
        float
            The standard error in nats, or NaN.

        Examples
        --------
        >>> from lm_latent_eval.estimators.registry import ESTIMATORS
        >>> elbo = ESTIMATORS["elbo"].result("a b", 2, -3.0, samples=np.array([-3.5, -2.5]))
        >>> round(ESTIMATORS["elbo"].bound_stderr([elbo, elbo]), 6) == round(math.sqrt(0.5), 6)
        True
        >>> ESTIMATORS["is"].bound_stderr([])
        nan
        """
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

    @property
    def targets_precision(self) -> bool:
        """Whether the precision target draws more samples for the documents that need them (a sampling estimator
        with ``target_se`` > 0)."""
        return self.estimator.draws_samples and bool(self.settings.target_se)

    def recorded_settings(self, device: torch.device | str = "cpu") -> dict:
        """The settings that change this run's numbers on ``device``, as recorded with every result (batch_size never
        does; ``sample_block`` is the seeding scheme's block on ``device``; the level where it is not the default).

        Examples
        --------
        >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> resolve(EstimatorSettings("beam", beam_size=4), hmm).recorded_settings()
        {'estimator': 'beam', 'beam_size': 4}
        >>> resolve(EstimatorSettings("is", num_samples=8, level=0.9), hmm).recorded_settings()
        {'estimator': 'is', 'num_samples': 8, 'temperature': 1.0, 'peek': True, 'seed': 1234, 'level': 0.9, 'sample_block': 1024}
        """
        settings, own, draws = self.settings, self.estimator.settings_fields, self.estimator.draws_samples
        record = {"estimator": settings.estimator} | {name: getattr(settings, name) for name in own}
        if self.targets_precision:
            record |= {"target_se": settings.target_se, "max_samples": settings.sample_budget}
        if settings.exact_where_cheaper and draws:
            record["exact_where_cheaper"] = True
        if settings.level != DEFAULT_LEVEL:
            record["level"] = settings.level
        return record | ({"sample_block": sample_block(device)} if draws else {})

    def settings_used(self) -> set[str]:
        """The ``EstimatorSettings`` fields that can matter to this run: the estimator's ``settings_fields``, the
        precision target and the statement's level for a sampling estimator, the particle block (memory only) and the
        seed (``generate_until`` samples with it whatever the estimator)."""
        used = {"estimator", "batch_size", "seed", *self.estimator.settings_fields}
        if self.estimator.draws_samples:
            used |= {"target_se", "level"} | ({"max_samples"} if self.settings.target_se else set())
        return used

    def ignored_settings(self, given: Iterable[str]) -> list[str]:
        """The names in ``given`` (settings the user gave) that this run ignores.

        Examples
        --------
        >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> resolve(EstimatorSettings("exact"), hmm).ignored_settings(["num_samples", "estimator", "seed"])
        ['num_samples']
        >>> resolve(EstimatorSettings("is"), hmm).ignored_settings(["num_samples", "seed", "max_samples"])
        ['max_samples']
        """
        used = self.settings_used()
        return [name for name in given if name not in used]

    def advice(self) -> list[str]:
        """What to try where this run's estimates give no honest interval (``Estimator.advice`` for its model)."""
        return self.estimator.advice(self.settings, self.model)

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
        progress : tqdm, optional
            Updated with the samples drawn.

        Returns
        -------
        DocumentEstimate
            The record of the estimator's family (``ISEstimate``, ``SMCEstimate``, ``BeamEstimate``, ...).
        """
        return self.estimate_documents([text], device=device, stage=stage, progress=progress)[0]

    def estimate_documents(
        self,
        texts: Sequence[str],
        num_samples: Sequence[int] | None = None,
        *,
        device: torch.device | str = "cpu",
        stage: int = 0,
        progress=None,
    ) -> list[DocumentEstimate]:
        """``estimate`` of several documents, each with its own sample size, estimated side by side where the
        estimator can (``Estimator.estimate_documents``): each estimate is the one ``estimate`` gives it alone.

        Parameters
        ----------
        texts : sequence of str
            The documents.
        num_samples : sequence of int, optional
            Each document's K (``sized``); default ``settings.num_samples`` for all.
        device, stage, progress
            As ``estimate``'s.

        Returns
        -------
        list of DocumentEstimate
            In the texts' order; a text without tokens gets ``Estimator.empty``'s log p = 0.

        Examples
        --------
        >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> run = resolve(EstimatorSettings("smc", 40, seed=1), hmm)
        >>> two = run.estimate_documents(["the cat sat", "a dog"], [40, 80])
        >>> bool((two[1].log_weights == run.sized(80).estimate("a dog").log_weights).all()), two[1].num_samples
        (True, 80)
        """
        sizes = [self.settings.num_samples] * len(texts) if num_samples is None else list(num_samples)
        out: list[DocumentEstimate | None] = [None] * len(texts)
        todo = []
        for i, (text, k) in enumerate(zip(texts, sizes)):
            settings = self.settings if k == self.settings.num_samples else self.sized(k).settings
            x = self.model.tokenize(text).to(device)
            known = 0.0 if x.numel() == 0 else log_marginal_where_cheaper(self.model, x, text, settings)
            if known is None:
                todo.append((i, (x, text, settings)))
            else:
                out[i] = self.estimator.known(text, x.numel(), known, settings, self.model)
        estimates = self.estimator.estimate_documents(
            self.model, [doc for _, doc in todo], device=device, progress=progress, stage=stage
        )
        for (i, _), estimate in zip(todo, estimates):
            out[i] = estimate
        return out


def checked_log_marginal(model: Any, x: torch.Tensor, document: str = "") -> float:
    """``model.log_marginal(x)`` as a float, refused where it is NaN or +inf (naming the document)."""
    value = float(model.log_marginal(x))
    if math.isnan(value) or value == math.inf:
        raise ValueError(f"document {document[:60]!r}: log_marginal returned {value}")
    return value


def log_marginal_where_cheaper(
    model: Any, x: torch.Tensor, document: str, settings: EstimatorSettings
) -> float | None:
    """log p(x) from the model's exact program where ``settings.exact_where_cheaper`` asks for it and the program
    costs no more than the document's K samples (``protocol.exact_marginal_cost`` ≤ ``num_samples``); None where the
    document is sampled.

    The choice reads the text and K only, never a draw, so the documents computed exactly are not a selection by
    what sampling them showed: their log p is exact (v = 0) and the statement about the others is unchanged. Under a
    precision target a document's K can only grow, so one computed exactly at a stage is computed at every later one.

    Parameters
    ----------
    model : LatentLM
        The model (one that states ``exact_marginal_cost``; any other is always sampled).
    x : torch.Tensor
        The document's tokens, LongTensor [T] with T > 0.
    document : str
        Its text, for error messages.
    settings : EstimatorSettings
        The document's settings (its K).

    Returns
    -------
    float or None
        log p(x), or None.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> masked, _ = load_model("masked")
    >>> x = masked.tokenize("the cat sat on the mat")  # 6 tokens: (2^6 - 1) / 6 = 10.5 samples' worth
    >>> cheap = EstimatorSettings("smc", num_samples=16, exact_where_cheaper=True)
    >>> log_marginal_where_cheaper(masked, x, "", cheap) == masked.log_marginal(x)
    True
    >>> log_marginal_where_cheaper(masked, x, "", cheap.replace(num_samples=8)) is None
    True
    """
    if not settings.exact_where_cheaper:
        return None
    cost = exact_marginal_cost(model, x)
    if cost is None or cost > settings.num_samples:
        return None
    return checked_log_marginal(model, x, document)


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
