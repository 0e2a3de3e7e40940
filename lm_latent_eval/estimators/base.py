"""What every estimator is: the ``Estimator`` base class, the extension point.

An estimator is one object (one per module: ``importance``, ``smc``, ``beam``, ``exact``, ``elbo``) registered by name in one
table (``estimators.registry.ESTIMATORS``). It estimates log p(x) of one document (``estimate``), returns a typed
record of its own family (a subclass of ``record.DocumentEstimate``) and says how its documents combine into a corpus
figure (``corpus_log_likelihood``, ``fixed_statement``). Adding an estimator is one module, one row of the table, its
tests and its docs row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from ..errors import UnsupportedError
from ..protocol import LatentLM
from .intervals import Interval
from .record import DocumentEstimate
from .settings import AUTO_TARGET_SE, EstimatorSettings

STOCHASTIC_BOUND = "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)"


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
