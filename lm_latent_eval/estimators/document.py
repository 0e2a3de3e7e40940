"""One document's estimate: ``estimate_document(model, text, settings) -> DocumentEstimate``."""

from __future__ import annotations

from ..protocol import LatentLM
from .base import DocumentEstimate
from .registry import resolve
from .settings import EstimatorSettings


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
