"""One document's estimate: ``estimate_document(model, text, settings) -> DocumentEstimate``, and the helpers with
loose arguments over its tokens (``importance_log_weights``, ``smc_log_weights``, ``beam_log_marginal``): each one
``resolve`` (every check of a run) and the estimator's ``estimate``."""

from __future__ import annotations

import numpy as np
import torch

from ..protocol import LatentLM
from .record import DocumentEstimate
from .registry import resolve
from .settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS, EstimatorSettings
from .smc_variance import SMCDiagnostics


def estimate_document(
    model: LatentLM,
    text: str,
    settings: EstimatorSettings,
    device="cpu",
    progress=None,
    stage: int = 0,
) -> DocumentEstimate:
    """Tokenize ``text`` and estimate its log probability with the estimator ``settings`` name (``auto`` resolved
    for ``model``); an empty text has log p = 0 over 0 tokens. One call: ``resolve(settings, model).estimate(text)``
    (a run of many documents resolves once and calls ``ResolvedEstimator.estimate`` for each).

    Parameters
    ----------
    model : LatentLM
        The model.
    text : str
        The document.
    settings : EstimatorSettings
        The estimator and its settings (resolved or ``auto``).
    device : torch.device or str
        Where the model runs; random streams differ between CPU and GPU.
    progress : tqdm, optional
        Updated with the samples drawn.
    stage : int
        > 0 draws from fresh random streams (a later stage of the precision target, ``estimators.adaptive``).

    Returns
    -------
    DocumentEstimate
        The record of the estimator's family (``ISEstimate``, ``SMCEstimate``, ``BeamEstimate``, ``ExactEstimate``).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> est = estimate_document(hmm, "the cat sat", EstimatorSettings("is", num_samples=50, seed=3))
    >>> type(est).__name__, est.num_tokens, est.log_weights.shape
    ('ISEstimate', 3, (50,))
    >>> estimate_document(hmm, "", EstimatorSettings("exact")).log_likelihood
    0.0
    """
    return resolve(settings, model).estimate(text, device=device, stage=stage, progress=progress)


def _estimate_tokens(
    settings: EstimatorSettings, model: LatentLM, x: torch.Tensor, document: str, **where
) -> DocumentEstimate:
    """The estimate of tokens ``x`` (text ``document``) by ``resolve(settings, model)``: refused as a run would be."""
    run = resolve(settings, model)
    return run.estimator.estimate(model, x, document, run.settings, **where)


def importance_log_weights(
    model: LatentLM,
    x: torch.Tensor,
    *,
    num_samples: int,
    temperature: float = 1.0,
    peek: bool = True,
    seed: int = 0,
    document: str = "",
    batch_size: int | None = None,
    device: torch.device | str = "cpu",
    progress=None,
    stage: int = 0,
) -> np.ndarray:
    """The K log importance weights of one document's tokens (``estimator=is``, checked by ``resolve``).

    Parameters
    ----------
    model : LatentLM
        The model with its proposal.
    x : torch.Tensor
        The document's tokens, LongTensor [T], on ``device``.
    num_samples, temperature, peek, seed, batch_size
        As in ``EstimatorSettings``.
    document : str
        The document's text: with ``seed``, it seeds the random streams.
    device, progress, stage
        As in ``ResolvedEstimator.estimate``.

    Returns
    -------
    numpy.ndarray
        float64 [K]: log p(x, z_k) − log q_τ(z_k | x).

    Examples
    --------
    >>> from lm_latent_eval.estimators import log_mean_exp
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> lw = importance_log_weights(hmm, x, num_samples=100, seed=1, document="the cat sat")
    >>> lw.shape, abs(float(log_mean_exp(lw)) - float(hmm.log_marginal(x))) < 0.2
    ((100,), True)
    """
    settings = EstimatorSettings(
        "is", num_samples, temperature=temperature, peek=peek, seed=seed, batch_size=batch_size
    )
    return _estimate_tokens(
        settings, model, x, document, device=device, progress=progress, stage=stage
    ).log_weights


def smc_log_weights(
    model: LatentLM,
    x: torch.Tensor,
    *,
    num_samples: int,
    temperature: float = 1.0,
    peek: bool = True,
    seed: int = 0,
    document: str = "",
    resample_threshold: float = DEFAULT_RESAMPLE_THRESHOLD,
    smc_runs: int = DEFAULT_SMC_RUNS,
    device: torch.device | str = "cpu",
    progress=None,
    stage: int = 0,
) -> tuple[np.ndarray, SMCDiagnostics]:
    """The K final SMC log weights of one document's tokens and the runs' diagnostics (``estimator=smc``, checked
    by ``resolve``).

    Parameters
    ----------
    model : StepwiseLatentLM
        A model with the stepwise part of the contract.
    x : torch.Tensor
        The document's tokens, LongTensor [T], on ``device``.
    num_samples, temperature, peek, seed, resample_threshold, smc_runs
        As in ``EstimatorSettings``.
    document : str
        The document's text: with ``seed``, it seeds the random streams.
    device, progress, stage
        As in ``ResolvedEstimator.estimate``.

    Returns
    -------
    tuple of numpy.ndarray and SMCDiagnostics
        float64 [K] (log p̂ = logsumexp − log K) and the runs' diagnostics.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> lw, diag = smc_log_weights(hmm, x, num_samples=64, seed=1, document="the cat sat")
    >>> lw.shape, diag.smc_runs, abs(diag.log_likelihood - float(hmm.log_marginal(x))) < 0.2
    ((64,), 4, True)
    """
    settings = EstimatorSettings(
        "smc", num_samples, temperature=temperature, peek=peek, seed=seed,
        resample_threshold=resample_threshold, smc_runs=smc_runs,
    )  # fmt: skip
    est = _estimate_tokens(settings, model, x, document, device=device, progress=progress, stage=stage)
    return est.log_weights, est.diagnostics


def beam_log_marginal(model: LatentLM, x: torch.Tensor, beam_size: int, document: str = "") -> float:
    """log Σ_{z ∈ beam_k} p(x, z) ≤ log p(x) of one document's tokens, equal once the beam covers the support of
    p(· | x) (``estimator=beam``, checked by ``resolve``; ``document`` names it in errors).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> beam_log_marginal(hmm, x, 4) <= float(hmm.log_marginal(x))
    True
    """
    return _estimate_tokens(EstimatorSettings("beam", beam_size=beam_size), model, x, document).log_likelihood
