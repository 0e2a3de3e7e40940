"""Importance sampling: log w_k = log p(x, z_k) − log q_τ(z_k | x), z_k ~ q_τ(· | x); log p̂ = logsumexp_k log w_k − log K.

E[p̂] = p (unbiased); E[log p̂] ≤ log p, so IS perplexity is an upper bound in expectation. Samples are drawn in
fixed-size blocks of particles, each from its own random stream (``seeding``), and scored ``batch_size`` at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from ..protocol import LatentLM, has_stepwise, has_unknown_word_penalty, num_particles, select_particles
from .aggregate import corpus_log_likelihood, log_mean_exp
from .base import DocumentEstimate, Estimator, sample_sizes, sampling_advice
from .diagnostics import (
    convergence_curve,
    effective_sample_size,
    pareto_k_shares,
    pareto_k_threshold,
    pareto_khat,
    relative_variance,
)
from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .seeding import document_generator, sample_block, stage_block
from .settings import EstimatorSettings, checked_settings

STOCHASTIC_BOUND = "stochastic upper bound in expectation (E[log p̂] ≤ log p, so E[log PPL̂] ≥ log PPL)"


@dataclass
class ISDiagnostics:
    """Diagnostics of one document's K importance weights: ESS, Pareto k̂ and its threshold at K, v̂ = estimated
    Var(p̂)/p², the honest interval of log p (``[lower, inf]`` where only the certified one-sided bound is honest),
    and the convergence curve log p̂ from the first K' samples (K' = 1, 2, 4, ..., K)."""

    num_samples: int
    log_likelihood: float
    ess: float
    pareto_k: float
    pareto_k_threshold: float
    relative_variance: float
    interval: list[float]
    convergence_k: list[int]
    convergence_log_likelihood: list[float]


def importance_error(log_weights: np.ndarray, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
    """log p̂, v̂ = s²_w / (K w̄²) with K − 1 degrees of freedom, and whether ``policy`` trusts v̂
    (``UncertaintyPolicy.importance_doubt``); every weight equal means q ∝ p on what it drew: p̂ exact, v = 0.

    Examples
    --------
    >>> importance_error(np.full(8, -3.0))
    DocumentError(log_likelihood=-3.0, relative_variance=0.0, degrees_of_freedom=inf, reason=None)
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    ll = float(log_mean_exp(lw))
    if np.ptp(lw[np.isfinite(lw)]) == 0.0:
        return DocumentError(ll, 0.0, math.inf)
    return DocumentError(ll, relative_variance(lw), lw.size - 1.0, policy.importance_doubt(lw))


def summarize(log_weights: np.ndarray, policy: UncertaintyPolicy = DEFAULT_POLICY) -> ISDiagnostics:
    """All diagnostics of one document's K log weights [K]."""
    lw = np.asarray(log_weights, dtype=np.float64)
    interval = policy.interval([importance_error(lw, policy)])
    ks, curve = convergence_curve(lw)
    return ISDiagnostics(
        int(lw.size),
        float(log_mean_exp(lw)),
        effective_sample_size(lw),
        pareto_khat(lw),
        pareto_k_threshold(lw.size),
        relative_variance(lw),
        [interval.lower, interval.upper],
        ks.tolist(),
        curve.tolist(),
    )


@dataclass
class ISEstimate(DocumentEstimate):
    """An IS estimate: the K log weights [K] (mean of exp = p̂) and, when asked for, their ``ISDiagnostics``.

    ``unk_penalty`` [K]: for a model with an unknown-word penalty (``has_unknown_word_penalty``), the nats that
    log_joint subtracted from each sample; the log weights include it (UPP), ``log_weights + unk_penalty`` do not (PPL).
    """

    estimator: ClassVar[str] = "is"
    diagnostics_type: ClassVar[type] = ISDiagnostics
    log_weights: np.ndarray | None = None
    unk_penalty: np.ndarray | None = None
    diagnostics: ISDiagnostics | None = field(default=None, kw_only=True)

    @property
    def importance_weights(self) -> np.ndarray | None:
        """The K log weights of a document with tokens (exchangeable IS samples)."""
        return self.log_weights if self.num_tokens > 0 else None

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        if self.num_tokens == 0:
            return DocumentError(self.log_likelihood, 0.0, math.inf)
        return importance_error(self.log_weights, policy)

    def log_weights_without_unk_penalty(self) -> np.ndarray | None:
        """log p(x, z_k) − log q(z_k | x) without the unknown-word penalty [K]; None when it was not recorded."""
        if self.log_weights is None or self.unk_penalty is None:
            return None
        return self.log_weights + self.unk_penalty

    def without_unk_penalty(self) -> ISEstimate | None:
        plain = self.log_weights_without_unk_penalty()
        if plain is None:
            return None
        return ISEstimate(self.document, self.num_tokens, float(log_mean_exp(plain)), plain)


class ImportanceSampling(Estimator):
    """``estimator=is``: K samples from the proposal, p̂ = mean_k w_k (float64)."""

    name = "is"
    result = ISEstimate
    kind = STOCHASTIC_BOUND
    draws_samples = True
    settings_fields = ("num_samples", "temperature", "peek", "seed")

    def auto_reason(self, model) -> str:
        return f"auto: IS, {type(model).__name__} has neither a tractable marginal nor the stepwise part"

    def advice(self, settings, model) -> list[str]:
        smc = ["sequential Monte Carlo (estimator=smc or auto)"] if has_stepwise(model) else []
        peek = [] if settings.peek else ["a peeking proposal (peek=true)"]
        return smc + sampling_advice(settings) + peek

    def estimate(
        self, model, x, document, settings, *, device="cpu", progress=None, stage=0, diagnostics=False
    ):
        penalty = np.zeros(settings.num_samples) if has_unknown_word_penalty(model) else None
        lw = draw_log_weights(model, x, settings, document, device, progress, penalty, stage)
        diag = summarize(lw) if diagnostics else None
        return ISEstimate(document, int(x.numel()), float(log_mean_exp(lw)), lw, penalty, diagnostics=diag)

    def empty(self, document, settings, model) -> ISEstimate:
        """K zero log weights: every p̂ = 1 exactly."""
        k = settings.num_samples
        return ISEstimate(
            document, 0, 0.0, np.zeros(k), np.zeros(k) if has_unknown_word_penalty(model) else None
        )

    def corpus_diagnostics(self, estimates: Sequence[ISEstimate], progress: bool = False) -> dict:
        """ESS (min, median, mean), the largest Pareto k̂, the documents whose k̂ is at or above the threshold at
        their K or undefined, and the samples per document."""
        lws = [e.log_weights for e in estimates]
        ess = np.array([effective_sample_size(lw) for lw in lws])
        khat = np.array([pareto_khat(lw) for lw in tqdm(lws, desc="Pareto k̂", disable=not progress)])
        above, undefined, _ = pareto_k_shares(estimates)
        return sample_sizes([lw.size for lw in lws]) | {
            "ess_min": float(ess.min()),
            "ess_median": float(np.median(ess)),
            "ess_mean": float(ess.mean()),
            "pareto_k_max": float(np.nanmax(khat)) if (~np.isnan(khat)).any() else math.nan,
            "num_pareto_k_above_threshold": above,
            "num_pareto_k_undefined": undefined,
        }

    def describe(self, settings: dict) -> str:
        peek = "peek" if settings.get("peek") else "no peek"
        return f"IS K={settings.get('num_samples')} τ={settings.get('temperature')} {peek}"

    def corpus_log_likelihood(self, estimates: Sequence[ISEstimate]) -> float | None:
        """Sample k of every document forms one corpus sample: needs the same K for every document."""
        if len({e.num_samples for e in estimates}) != 1:
            return None
        return corpus_log_likelihood([e.log_weights for e in estimates])


IMPORTANCE = ImportanceSampling()


def _check_log_q(log_q: torch.Tensor, k: int, doc: str) -> torch.Tensor:
    log_q = log_q.detach().to("cpu", torch.float64)
    if log_q.shape != (k,):
        raise ValueError(f"{doc}: proposal returned log_q of shape {tuple(log_q.shape)} for {k} samples")
    bad = ~torch.isfinite(log_q)
    if bad.any():
        raise ValueError(
            f"{doc}: proposal returned {int(bad.sum())} non-finite log q values (e.g. {log_q[bad][0].item()}) "
            "for samples it drew; log q must be finite for every drawn z"
        )
    return log_q


def _check_log_joint(log_p: torch.Tensor, k: int, doc: str) -> torch.Tensor:
    log_p = log_p.detach().to("cpu", torch.float64)
    if log_p.shape != (k,):
        raise ValueError(f"{doc}: log_joint returned shape {tuple(log_p.shape)} for {k} samples")
    if torch.isnan(log_p).any() or torch.isposinf(log_p).any():
        raise ValueError(
            f"{doc}: log_joint returned NaN or +inf for {int((~torch.isfinite(log_p) & ~torch.isneginf(log_p)).sum())} samples"
        )
    return log_p


@torch.no_grad()
def draw_log_weights(
    model: LatentLM,
    x: torch.Tensor,
    settings: EstimatorSettings,
    document: str = "",
    device: torch.device | str = "cpu",
    progress=None,
    unknown_penalty: np.ndarray | None = None,
    stage: int = 0,
) -> np.ndarray:
    """The K = ``settings.num_samples`` log importance weights of one document, float64 [K], in
    O(block + batch_size) model memory. ``unknown_penalty`` (float64 [K], optional) is filled with each sample's
    ``model.unknown_word_penalty`` (nats); ``stage`` > 0 draws from fresh random streams."""
    doc = f"document {document[:60]!r}"
    k_total, block_size = settings.num_samples, sample_block(device)
    chunk = settings.batch_size or block_size
    out = np.empty(k_total, dtype=np.float64)
    for block, start in enumerate(range(0, k_total, block_size)):
        k = min(block_size, k_total - start)
        gen = document_generator(settings.seed, document, stage_block(block, stage), device=device)
        z, log_q = model.proposal.sample(
            x, k, temperature=settings.temperature, peek=settings.peek, generator=gen
        )
        if num_particles(z) != k:
            raise ValueError(f"{doc}: proposal returned {num_particles(z)} samples, asked for {k}")
        log_q = _check_log_q(log_q, k, doc)
        for s in range(0, k, chunk):
            e = min(k, s + chunk)
            part = select_particles(z, slice(s, e))
            log_p = _check_log_joint(model.log_joint(x, part), e - s, doc)
            out[start + s : start + e] = (log_p - log_q[s:e]).numpy()
            if unknown_penalty is not None:
                penalty = model.unknown_word_penalty(x, part)
                unknown_penalty[start + s : start + e] = penalty.detach().to("cpu", torch.float64).numpy()
        if progress is not None:
            progress.update(k)
    if np.isneginf(out).all():
        raise ValueError(
            f"{doc}: all {k_total} samples have p(x, z) = 0: the proposal misses the support of the model"
        )
    return out


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
    unknown_penalty: np.ndarray | None = None,
    stage: int = 0,
) -> np.ndarray:
    """The K log importance weights of one document, float64 [K] (``draw_log_weights`` with loose arguments,
    validated as ``EstimatorSettings``; a bad one is an InputError naming the document).

    Parameters
    ----------
    model : LatentLM
        The model (``log_joint``) with its proposal (``proposal.sample``).
    x : torch.Tensor
        The document's tokens, LongTensor [T].
    num_samples, temperature, peek, seed, batch_size
        As in ``EstimatorSettings``.
    document : str
        The document's text: with ``seed``, it seeds the random streams.
    unknown_penalty : numpy.ndarray, optional
        float64 [K], filled with each sample's ``model.unknown_word_penalty`` (nats).
    stage : int
        > 0 draws from fresh random streams (the precision target's later stages).

    Returns
    -------
    numpy.ndarray
        float64 [K]: log p(x, z_k) − log q_τ(z_k | x).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> x = hmm.tokenize("the cat sat")
    >>> lw = importance_log_weights(hmm, x, num_samples=100, seed=1, document="the cat sat")
    >>> lw.shape, abs(float(log_mean_exp(lw)) - float(hmm.log_marginal(x))) < 0.2
    ((100,), True)
    """
    settings = checked_settings(
        document, estimator="is", num_samples=num_samples, temperature=temperature, peek=peek, seed=seed,
        batch_size=batch_size,
    )  # fmt: skip
    return draw_log_weights(model, x, settings, document, device, progress, unknown_penalty, stage)
