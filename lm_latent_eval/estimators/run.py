"""The bound run: ``ResolvedEstimator``, an estimator bound to its settings and model once per run, which answers the
run's questions (what it records, ignores and advises) and estimates its documents, computing exactly those whose
exact program is cheaper than their samples (``log_marginal_where_cheaper``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..protocol import exact_marginal_cost
from .base import Estimator
from .exact import checked_log_marginal
from .record import DocumentEstimate
from .seeding import sample_block
from .settings import DEFAULT_LEVEL, EstimatorSettings


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
        # each distinct K's settings built and checked once
        sized = {
            k: self.settings if k == self.settings.num_samples else self.sized(k).settings for k in set(sizes)
        }
        for i, (text, k) in enumerate(zip(texts, sizes)):
            settings = sized[k]
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
