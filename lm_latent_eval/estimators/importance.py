"""Importance sampling: log w_k = log p(x, z_k) − log q_τ(z_k | x), z_k ~ q_τ(· | x); log p̂ = logsumexp_k log w_k − log K.

E[p̂] = p (unbiased); E[log p̂] ≤ log p, so IS perplexity is an upper bound in expectation. Samples are drawn in
fixed-size blocks of particles, each from its own random stream (``seeding``), and scored ``batch_size`` at a time.

What one document's draws say about its error (``importance_error``), in order:

1. **The support covered** (``DistinctDraws``, ``UncertaintyPolicy.support_covered``): the distinct draws D carry
   all of q's mass, Σ_{z ∈ D} q_τ(z | x) = 1, so every z with q > 0, hence every z with p(x, z) > 0, is in D and
   Σ_{z ∈ D} p(x, z) = p(x): log p exactly, v = 0. Short of that, Σ_{z ∈ D} p(x, z) ≤ p(x) with certainty.
2. **Every weight equal** (to float32 rounding) over at least two distinct configurations: q ∝ p on what it drew,
   v̂ = 0 (or the rounding's). One configuration drawn K times says nothing of the rest: case 4 judges it.
3. **PSIS can fit the tail** (k̂ defined): v̂ = s²_w / (K w̄²) with K − 1 degrees of freedom, trusted when k̂ is below
   the threshold at K (``UncertaintyPolicy.importance_doubt``).
4. **Tied weights** (k̂ undefined: the largest weights take fewer than 5 values): the K independent draws as R
   independent batches, judged exactly as SMC's R runs are (``smc_variance.importance_runs``,
   ``UncertaintyPolicy.tied_importance_doubt``): v̂ the larger of the batches' spread and their IS v̂, R − 1 degrees
   of freedom, trusted only where the distinct draws leave less of q unseen than one draw carries (K · unseen mass
   ≤ 1): ties say the proposal keeps drawing the same few z, which is information only where they cover q.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from scipy.special import logsumexp
from tqdm.auto import tqdm

from ..protocol import (
    LatentLM,
    has,
    latent_support,
    num_particles,
    select_particles,
)
from .aggregate import corpus_log_likelihood, log_mean_exp
from .base import STOCHASTIC_BOUND, Estimator, sample_sizes, sampling_advice
from .diagnostics import (
    convergence_curve,
    effective_sample_size,
    pareto_k_shares,
    pareto_k_threshold,
    pareto_khat,
    relative_variance,
)
from .intervals import FLOAT32_EPSILON, DocumentError, proven_rounding
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .seeding import (
    document_generator,
    sample_block,
    side_by_side_chunks,
    side_by_side_particles,
    stage_block,
    stream_text,
)
from .settings import EstimatorSettings
from .smc_variance import importance_runs

__all__ = ["STOCHASTIC_BOUND", "DistinctDraws", "ISDiagnostics", "ISEstimate", "importance_error"]


def _clusters(values: np.ndarray, order: np.ndarray, tolerance: float) -> np.ndarray:
    """Cluster ids of ``values`` [K] visited in ``order``: a new cluster wherever two neighbours differ by more than
    ``tolerance`` (−inf values form one cluster of their own)."""
    v = np.asarray(values, dtype=np.float64)[order]
    with np.errstate(invalid="ignore"):
        gaps = np.diff(v)
    gaps = np.where(np.isneginf(v[:-1]) & np.isneginf(v[1:]), 0.0, gaps)
    return np.concatenate([[0], np.cumsum(~(gaps <= tolerance))])


@dataclass(frozen=True)
class DistinctDraws:
    """The distinct configurations D among one document's K draws: how much of q_τ(· | x) they cover and the sum of
    p(x, z) over them (float64 logs), recorded when the weights are drawn (the weights alone lose log q).

    The estimators never look inside z, so a configuration is known by its pair (log p(x, z), log q_τ(z | x)):
    draws whose two values agree to ``MERGE_TOLERANCE`` (relative to the largest magnitude, float32 rounding of
    sums over tokens) count as one, with the smaller of each value. Merging can only understate what D covers:
    the same z always merges (its values differ by rounding only), and two different z that merge are counted once.
    Hence ``log_covered_mass`` ≤ log Σ_{z ∈ D} q_τ(z | x) ≤ 0 and ``log_likelihood`` ≤ log Σ_{z ∈ D} p(x, z) ≤ log p(x),
    the last with certainty (every term of p(x) = Σ_z p(x, z) is ≥ 0). If the merged mass reaches 1 − ε, every z
    outside the counted ones (a z never drawn, or a second z merged into a drawn one) has q-mass ≤ ε, so for
    ε below float32 rounding (``UncertaintyPolicy.support_covered``) D is q's support and ``log_likelihood`` is
    log p(x) itself, since q_τ(z | x) > 0 wherever p(x, z) > 0 (importance sampling's own requirement; q_τ and q
    share their support). A continuous latent has no such sum (log q is a density): no record.

    Examples
    --------
    >>> log_q = np.log([0.5, 0.25, 0.25, 0.5])  # z = a, b, c, a; a and b, c differ in p
    >>> log_p = np.log([0.2, 0.1, 0.05, 0.2])
    >>> d = DistinctDraws.of(log_p, log_q)
    >>> d.num_distinct, round(float(np.exp(d.log_covered_mass)), 6), round(float(np.exp(d.log_likelihood)), 6)
    (3, 1.0, 0.35)
    """

    MERGE_TOLERANCE: ClassVar[float] = 1e-4

    num_distinct: int
    log_covered_mass: float
    log_likelihood: float
    temperature: float = 1.0
    # nats: the float32 rounding of a log weight (``intervals.FLOAT32_EPSILON`` · T · (1 + |log p| + |log q|))
    rounding: float = 0.0

    @property
    def unseen_mass(self) -> float:
        """1 − Σ_{z ∈ D} q_τ(z | x): the proposal's mass that no draw landed on (≥ 0)."""
        return max(0.0, -math.expm1(self.log_covered_mass))

    @classmethod
    def of(
        cls, log_p: np.ndarray, log_q: np.ndarray, temperature: float = 1.0, num_tokens: int = 1
    ) -> DistinctDraws:
        """The record of K draws' log p(x, z_k) [K] and log q_τ(z_k | x) [K] (``temperature``: τ they were drawn at;
        ``num_tokens``: T of the document, for ``rounding``)."""
        log_p, log_q = np.asarray(log_p, np.float64), np.asarray(log_q, np.float64)
        tol_q = cls.MERGE_TOLERANCE * (1.0 + float(np.max(np.abs(log_q))))
        finite_p = log_p[np.isfinite(log_p)]
        tol_p = cls.MERGE_TOLERANCE * (1.0 + float(np.max(np.abs(finite_p), initial=0.0)))
        by_q = np.argsort(log_q, kind="stable")
        q_cluster = np.empty(log_q.size, dtype=np.int64)
        q_cluster[by_q] = _clusters(log_q, by_q, tol_q)
        order = np.lexsort((log_p, q_cluster))
        p_ids = _clusters(log_p, order, tol_p)
        new = np.concatenate([[True], (np.diff(q_cluster[order]) != 0) | (np.diff(p_ids) != 0)])
        group = np.cumsum(new) - 1
        n = int(group[-1]) + 1
        q_min = np.full(n, np.inf)
        p_min = np.full(n, np.inf)
        np.minimum.at(q_min, group, log_q[order])
        np.minimum.at(p_min, group, log_p[order])
        size = 1.0 + float(np.max(np.abs(finite_p), initial=0.0)) + float(np.max(np.abs(log_q)))
        rounding = FLOAT32_EPSILON * max(int(num_tokens), 1) * size
        return cls(n, float(logsumexp(q_min)), float(logsumexp(p_min)), float(temperature), rounding)


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


def importance_error(
    log_weights: np.ndarray,
    policy: UncertaintyPolicy = DEFAULT_POLICY,
    draws: DistinctDraws | None = None,
    num_tokens: int = 1,
) -> DocumentError:
    """What one document's K log weights [K] contribute to a corpus statement (module docstring, cases 1–4).

    Parameters
    ----------
    log_weights : numpy.ndarray
        log w_k, float64 [K].
    policy : UncertaintyPolicy
        Its gates decide whether v̂ is trusted.
    draws : DistinctDraws, optional
        The distinct draws' q-mass and Σ p(x, z), recorded when the weights were drawn; without them (weights
        alone, as the ``is_perplexity`` metric gets them) the support is never taken as covered, and tied weights
        are judged as drawn at temperature 1.
    num_tokens : int
        T, for the float32 rounding of a proven log p (``intervals.proven_rounding``).

    Returns
    -------
    DocumentError
        Every weight equal: p̂, v = 0. Otherwise p̂ with v̂ = s²_w / (K w̄²) on K − 1 degrees of freedom, gated by
        PSIS, or, where ties leave k̂ undefined, v̂ of R independent batches on R − 1, gated as SMC's runs. Support
        covered: the same, with log p itself as ``proven``.

    Examples
    --------
    >>> importance_error(np.full(8, -3.0))
    DocumentError(log_likelihood=-3.0, relative_variance=0.0, degrees_of_freedom=inf, reason=None)
    >>> tied = np.log(np.tile([1.0, 2.0, 3.0, 4.0], 25))  # four values: PSIS cannot fit a tail
    >>> importance_error(tied).trusted  # without log q, what the draws left unseen is unknown
    False
    >>> draws = DistinctDraws(4, math.log1p(-0.001), math.log(2.5), 1.0)  # 0.1% of q unseen: under 1/K
    >>> err = importance_error(tied, draws=draws)
    >>> err.trusted, err.degrees_of_freedom, round(err.log_likelihood, 4) == round(math.log(2.5), 4)
    (True, 3.0, True)
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    err = _estimated_error(lw, policy, draws)
    if policy.support_covered(draws):
        rounding = proven_rounding(draws.log_likelihood, num_tokens)
        return dataclasses.replace(err, proven=draws.log_likelihood, rounding=rounding)
    return err


def _estimated_error(lw: np.ndarray, policy: UncertaintyPolicy, draws: DistinctDraws | None) -> DocumentError:
    """p̂ and v̂ of K log weights [K] (``importance_error``'s cases 2–4: equal weights, PSIS, batches)."""
    ll = float(log_mean_exp(lw))
    spread = float(np.ptp(lw[np.isfinite(lw)]))
    # equal weights say q ∝ p only over two or more distinct configurations (one drawn K times says nothing)
    evidenced = draws is None or draws.num_distinct >= 2
    if spread == 0.0 and evidenced:
        return DocumentError(ll, 0.0, math.inf)
    if draws is not None and evidenced and spread <= draws.rounding:
        # equal up to float32 rounding: v̂ (as small as the rounding) trusted, no tail to fit
        return DocumentError(ll, relative_variance(lw), lw.size - 1.0)
    # one configuration drawn K times: no tail, nothing to fit; judged as tied
    khat = math.nan if spread == 0.0 else pareto_khat(lw)
    if math.isnan(khat) and lw.size >= 2:
        runs = importance_runs(lw, 1.0 if draws is None else draws.temperature)
        doubt = policy.tied_importance_doubt(runs, draws)
        return DocumentError(ll, runs.relative_variance, runs.smc_runs - 1.0, doubt)
    return DocumentError(ll, relative_variance(lw), lw.size - 1.0, policy.importance_doubt(lw, khat))


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
    """An IS estimate: the K log weights [K] (mean of exp = p̂) and, once ``summarized``, their ``ISDiagnostics``.

    ``unk_penalty`` [K]: for a model with an unknown-word penalty (the part ``"unknown_word_penalty"``), the nats
    that log_joint subtracted from each sample; the log weights include it (UPP), ``log_weights + unk_penalty`` do
    not (PPL).
    ``distinct_draws``: what the distinct draws cover (``DistinctDraws``; None for a continuous latent or weights
    given without their log q).
    """

    estimator: ClassVar[str] = "is"
    diagnostics_type: ClassVar[type] = ISDiagnostics
    distinct_draws_type: ClassVar[type] = DistinctDraws
    log_weights: np.ndarray | None = None
    unk_penalty: np.ndarray | None = None
    diagnostics: ISDiagnostics | None = field(default=None, kw_only=True)
    distinct_draws: DistinctDraws | None = field(default=None, kw_only=True)

    @property
    def importance_weights(self) -> np.ndarray | None:
        """The K log weights of a sampled document (exchangeable IS samples; ``DocumentEstimate.sampled``)."""
        return self.log_weights if self.sampled else None

    @property
    def certain_lower_bound(self) -> float | None:
        """log Σ_{z ∈ D} p(x, z) ≤ log p(x) over the distinct draws D, less the float32 rounding of the model's
        log p(x, z) (``intervals.proven_rounding``: without it, a D that covers the support gives log p itself, which
        rounding can put above the true value); 0 without tokens, None where not recorded."""
        if self.num_tokens == 0:
            return 0.0
        if self.distinct_draws is None:
            return None
        covered = self.distinct_draws.log_likelihood
        return covered - proven_rounding(covered, self.num_tokens)

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        if not self.sampled:
            return self.known_error()
        return self.with_cap(importance_error(self.log_weights, policy, self.distinct_draws, self.num_tokens))

    def diagnostic_items(self) -> dict[str, float]:
        """ESS and Pareto k̂ of the K weights of a document with tokens: ``is_ess_mean`` and ``is_ess_min`` (the
        task aggregates them by mean and min), whether k̂ is at or above its threshold at K, whether it is undefined."""
        weights = self.importance_weights
        if weights is None:
            return {}
        khat, threshold = pareto_khat(weights), pareto_k_threshold(weights.size)
        ess = effective_sample_size(weights)
        return {
            "is_ess_mean": ess,
            "is_ess_min": ess,
            "is_pareto_k_share": float(khat >= threshold),
            "is_pareto_k_undefined": float(math.isnan(khat)),
        }

    def summarized(self) -> ISEstimate:
        """With ``summarize``'s ``ISDiagnostics`` of a sampled document's weights (computed where not yet)."""
        if self.diagnostics is not None or not self.sampled:
            return self
        return dataclasses.replace(self, diagnostics=summarize(self.log_weights))

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
    draws_from_proposal = True
    settings_fields = ("num_samples", "temperature", "peek", "seed")

    def auto_reason(self, model) -> str:
        return f"auto: IS, {type(model).__name__} has neither a tractable marginal nor the stepwise part"

    def advice(self, settings, model=None) -> list[str]:
        if model is None:
            smc = ["sequential Monte Carlo (estimator=smc or auto) where the model has the stepwise part"]
        else:
            smc = ["sequential Monte Carlo (estimator=smc or auto)"] if has(model, "stepwise") else []
        peek = [] if settings.peek else ["a peeking proposal (peek=true)"]
        return smc + sampling_advice(settings) + peek

    def batches_documents(self, model) -> bool:
        """Side by side where the proposal draws several documents at once (``protocol.DocumentSampler``)."""
        return has(model, "document_sampler")

    def estimate_documents(self, model, documents, *, device="cpu", progress=None, stage=0):
        """The documents' sample blocks drawn side by side by the proposal (``sample_documents``, in chunks of at
        most ``side_by_side_particles``, or of the model's ``side_by_side_limit`` where it declares a smaller one: a
        block is never split), then each document weighted as ``estimate`` weights it, as soon as its blocks are
        drawn (memory: one chunk's draws): each block's draws are those of its own (seed, block, document) stream, so
        every number is the one it gets alone."""
        if not has(model, "document_sampler") or len(documents) < 2:
            return super().estimate_documents(model, documents, device=device, progress=progress, stage=stage)
        block_size = sample_block(device)
        # (document, its block, the block's draws) in order: a document's blocks are consecutive
        lanes = [
            (d, start // block_size, min(block_size, settings.num_samples - start))
            for d, (_, _, settings) in enumerate(documents)
            for start in range(0, settings.num_samples, block_size)
        ]
        drawn: dict[int, dict] = {}
        out: list[ISEstimate] = []
        budget = min(side_by_side_particles(device), getattr(model, "side_by_side_limit", None) or math.inf)
        for chunk in side_by_side_chunks([k for _, _, k in lanes], budget):
            part = [lanes[i] for i in chunk]
            settings = documents[part[0][0]][2]
            gens = [
                document_generator(
                    documents[d][2].seed,
                    stream_text(model, documents[d][1]),
                    stage_block(b, stage),
                    device=device,
                )
                for d, b, _ in part
            ]
            got = model.proposal.sample_documents(
                [documents[d][0] for d, _, _ in part],
                [k for _, _, k in part],
                settings.temperature,
                settings.peek,
                gens,
            )
            for (d, b, _), draws in zip(part, got or [None] * len(part)):
                drawn.setdefault(d, {})[b] = draws
            # the documents before the next lane's are drawn whole
            following = lanes[chunk[-1] + 1][0] if chunk[-1] + 1 < len(lanes) else len(documents)
            while len(out) < following:
                x, text, doc_settings = documents[len(out)]
                out.append(
                    self._weighted(model, x, text, doc_settings, device, progress, stage, drawn.pop(len(out)))
                )
        return out

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        return self._weighted(model, x, document, settings, device, progress, stage, None)

    def _weighted(self, model, x, document, settings, device, progress, stage, drawn) -> ISEstimate:
        """``estimate`` from the proposal's draws of each block (``drawn``: already drawn, a block's None or all
        None: drawn here)."""
        if drawn is not None and any(v is None for v in drawn.values()):
            drawn = None
        penalty = np.zeros(settings.num_samples) if has(model, "unknown_word_penalty") else None
        # log q of every draw, for what the distinct draws cover (a density for a continuous z: not recorded)
        log_q = np.empty(settings.num_samples) if latent_support(model) == "discrete" else None
        lw = draw_log_weights(model, x, settings, document, device, progress, penalty, stage, log_q, drawn)
        draws = (
            None if log_q is None else DistinctDraws.of(lw + log_q, log_q, settings.temperature, x.numel())
        )
        return ISEstimate(
            document, int(x.numel()), float(log_mean_exp(lw)), lw, penalty, distinct_draws=draws
        )

    def known(self, document, num_tokens, log_likelihood, settings, model) -> ISEstimate:
        """K log weights log p: every p̂ = p exactly (no unknown-word penalty: ``exact_marginal_cost`` is stated
        only without one)."""
        k = settings.num_samples
        return ISEstimate(
            document, num_tokens, log_likelihood, np.full(k, log_likelihood),
            np.zeros(k) if has(model, "unknown_word_penalty") else None, computed_exactly=num_tokens > 0,
        )  # fmt: skip

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
    log_q_out: np.ndarray | None = None,
    drawn: dict | None = None,
) -> np.ndarray:
    """The K = ``settings.num_samples`` log importance weights of one document, float64 [K], in
    O(block + batch_size) model memory. ``unknown_penalty`` (float64 [K], optional) is filled with each sample's
    ``model.unknown_word_penalty`` (nats), ``log_q_out`` (float64 [K], optional) with each sample's log q_τ(z_k | x);
    ``stage`` > 0 draws from fresh random streams; ``drawn``: each sample block's (z, log q) already drawn from its
    stream (``IS.estimate_documents``: documents drawn side by side), else the proposal draws them here."""
    doc = f"document {document[:60]!r}"
    k_total, block_size = settings.num_samples, sample_block(device)
    chunk = settings.batch_size or block_size
    out = np.empty(k_total, dtype=np.float64)
    for block, start in enumerate(range(0, k_total, block_size)):
        k = min(block_size, k_total - start)
        if drawn is not None:
            z, log_q = drawn[block]
        else:
            gen = document_generator(
                settings.seed, stream_text(model, document), stage_block(block, stage), device=device
            )
            z, log_q = model.proposal.sample(
                x, k, temperature=settings.temperature, peek=settings.peek, generator=gen
            )
        if num_particles(z) != k:
            raise ValueError(f"{doc}: proposal returned {num_particles(z)} samples, asked for {k}")
        log_q = _check_log_q(log_q, k, doc)
        if log_q_out is not None:
            log_q_out[start : start + k] = log_q.numpy()
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
