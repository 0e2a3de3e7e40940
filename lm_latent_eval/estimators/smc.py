"""Sequential Monte Carlo (a particle filter with adaptive systematic resampling): an unbiased estimator of p(x).

One SMC run with N particles: for t = 0..T-1 every particle draws z_t ~ q_τ(z_t | x, z_<t) and multiplies its weight
by the incremental weight p(x_t, z_t | x_<t, z_<t) / q_τ(z_t | x, z_<t); whenever the effective sample size
(Σ w)² / Σ w² of the current weights falls below ``resample_threshold · N`` (and t < T-1), the run banks
log mean_k w_k, resamples N ancestors systematically in proportion to w and resets every weight to 1. Then
log p̂ = Σ over resampling epochs of log mean_k w_k (float64), and E[p̂] = p(x): the estimate is unbiased for any
threshold; threshold 0 never resamples and is importance sampling with the same proposal.

K particles are split into R = max(``smc_runs``, ⌈K / SAMPLE_BLOCK⌉) independent runs of near-equal size N_r, and
p̂ = Σ_r (N_r / K) p̂_r is again unbiased. Consecutive runs are packed into blocks of at most ``sample_block(device)``
particles (bounded memory for any K; on an accelerator 16 runs share one block's stream, so a document of K particles
costs ⌈K / 16,384⌉ draws per step, not ⌈K / 1,024⌉) that the model advances as one batch; block b draws from the
random stream of IS block b (seeded by (seed, b, document)), and every run resamples only among its own particles.
The blocks ("lanes") of several documents advance together, one step per token for all, where the model offers
``protocol.DocumentBatchLM`` (``smc_lanes``, ``draw_smc_documents``): each lane draws what it draws alone, so no
document's numbers depend on its neighbours. Uncertainty: the spread of the R runs (an honest estimate of Var(p̂)
whenever it is finite) and, from each run's genealogy (Eve indices), the Lee & Whiteley (2018) estimate.

The particle filter and the estimator live here; the resampling scheme (runs, blocks, ESS, systematic resampling) in
``resampling``, the variance estimators (``SMCRun``, ``SMCDiagnostics``, Lee-Whiteley, the runs' spread) in
``smc_variance``. Their names are importable from here as well.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ..errors import InputError
from ..protocol import has, missing, smc_interval_doubt
from .aggregate import log_mean_exp
from .base import STOCHASTIC_BOUND, Estimator, sample_sizes, sampling_advice
from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .resampling import RunLayout, blocks_of_runs, run_sizes, systematic_resample
from .seeding import (
    document_generator,
    sample_block,
    side_by_side_chunks,
    side_by_side_particles,
    stage_block,
)
from .settings import EstimatorSettings
from .smc_variance import (
    SMCDiagnostics,
    SMCRun,
    importance_runs,
    lee_whiteley_relative_variance,
    lee_whiteley_runs,
    runs_corpus_log_likelihood,
    smc_diagnostics,
)

# the resampling scheme (``resampling``) and the variance estimators (``smc_variance``) by the names they had here
__all__ = [
    "SMC",
    "SMCDiagnostics",
    "SMCEstimate",
    "SMCRun",
    "SequentialMonteCarlo",
    "importance_runs",
    "lee_whiteley_relative_variance",
    "run_sizes",
    "runs_corpus_log_likelihood",
    "smc_block",
    "smc_diagnostics",
    "systematic_resample",
]


def _checked_increments(
    inc: torch.Tensor, lanes: Sequence[Lane], ended: torch.Tensor | None, t: int
) -> torch.Tensor:
    """The increments [Σ particles] as float64 on the CPU (under no_grad: no graph to detach from), 0 for the
    particles of lanes that have ended (``ended``, None while none has), checked for shape, NaN and +inf (an error
    naming the document)."""
    n = sum(sum(lane.sizes) for lane in lanes)
    if inc.dtype != torch.float64 or inc.device.type != "cpu":
        inc = inc.to("cpu", torch.float64)
    if inc.shape != (n,):
        raise ValueError(
            f"{lanes[0].doc}: the model's SMC step returned {tuple(inc.shape)} incremental weights at token {t} for "
            f"{n} particles"
        )
    if ended is not None:
        inc = inc.masked_fill(ended, 0.0)
    # max is NaN with any NaN and +inf with any +inf: one reduction on the usual path
    if float(inc.max()) < math.inf:
        return inc
    bad = torch.isnan(inc) | torch.isposinf(inc)
    if bad.any():
        first = int(torch.nonzero(bad)[0])
        counts = np.cumsum([sum(lane.sizes) for lane in lanes])
        doc = lanes[int(np.searchsorted(counts, first, side="right"))].doc
        raise ValueError(
            f"{doc}: smc_step returned {int(bad.sum())} NaN or +inf log incremental weights at token {t} "
            "(log p NaN or log q = -inf for a drawn z_t)"
        )
    return inc


@dataclass
class Lane:
    """One sample block of one document in a batch of particle filters: its tokens x [T], its runs' sizes, its
    random stream and its name in errors."""

    x: torch.Tensor
    sizes: list[int]
    generator: torch.Generator | None
    doc: str = "document"


class _Particles:
    """The particles of a batch's lanes, advanced together: the stepwise part's state for one lane, the
    ``DocumentBatchLM`` state of several (None where the model declines to batch them)."""

    def __init__(self, model, lanes: Sequence[Lane], settings: EstimatorSettings) -> None:
        self.model, self.generators = model, [lane.generator for lane in lanes]
        counts = [sum(lane.sizes) for lane in lanes]
        tau, peek = settings.temperature, settings.peek
        if len(lanes) == 1:
            self.state = model.smc_init(lanes[0].x, counts[0], temperature=tau, peek=peek)
        elif has(model, "document_batches"):
            self.state = model.smc_init_documents(
                [lane.x for lane in lanes], counts, temperature=tau, peek=peek
            )
        else:
            self.state = None

    def step(self, t: int) -> torch.Tensor:
        if len(self.generators) == 1:
            self.state, inc = self.model.smc_step(self.state, t, self.generators[0])
        else:
            self.state, inc = self.model.smc_step_documents(self.state, t, self.generators)
        return inc

    def reorder(self, ancestors: torch.Tensor) -> None:
        self.state = self.model.smc_reorder(self.state, ancestors)


@torch.no_grad()
def smc_lanes(model, lanes: Sequence[Lane], settings: EstimatorSettings) -> list[list[SMCRun]]:
    """The runs of every lane (a sample block of a document: ``Lane``), the lanes' particles advanced side by side
    where the model offers it (``protocol.DocumentBatchLM``), else one lane after another.

    A lane whose document has ended adds 0; a run resamples (among its own particles, from its lane's stream:
    ``RunLayout.resample``) when its ESS falls below ``settings.resample_threshold`` · N_r before its document's last
    token. A lane draws what it draws alone, in the same order: its runs do not depend on the other lanes.

    Parameters
    ----------
    model : StepwiseLatentLM
        The model; ``DocumentBatchLM`` as well to advance several lanes together.
    lanes : sequence of Lane
        The lanes (documents with T > 0).
    settings : EstimatorSettings
        The proposal's ``temperature``, ``peek`` and ``resample_threshold`` (the lanes' sizes count the particles).

    Returns
    -------
    list of list of SMCRun
        Each lane's runs, in the lanes' order.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> lane = lambda text, seed: Lane(hmm.tokenize(text), [8, 8], torch.Generator().manual_seed(seed))
    >>> together = smc_lanes(hmm, [lane("a cat", 0), lane("the dog ran", 1)], EstimatorSettings("smc", 16))
    >>> alone = smc_lanes(hmm, [lane("the dog ran", 1)], EstimatorSettings("smc", 16))
    >>> [r.log_likelihood for r in together[1]] == [r.log_likelihood for r in alone[0]]
    True
    """
    particles = _Particles(model, lanes, settings)
    if particles.state is None:
        return [smc_lanes(model, [lane], settings)[0] for lane in lanes]
    sizes = [n for lane in lanes for n in lane.sizes]
    layout = RunLayout(sizes)
    lane_of_run = [i for i, lane in enumerate(lanes) for _ in lane.sizes]
    generators = [lanes[i].generator for i in lane_of_run]
    books = _RunBooks([int(lanes[i].x.shape[0]) for i in lane_of_run], sizes, settings.resample_threshold)
    particle_length = torch.tensor(books.length).repeat_interleave(torch.tensor(sizes))
    log_w = torch.zeros(layout.starts[-1], dtype=torch.float64)
    # Eve index: the first-generation ancestor of every particle
    eve = torch.arange(layout.starts[-1])
    for t in range(max(books.length)):
        ended = particle_length <= t if t >= min(books.length) else None
        log_w = log_w + _checked_increments(particles.step(t), lanes, ended, t)
        statistics = layout.statistics(log_w)
        chosen = books.record(t, *statistics)
        if chosen:
            # each run among its own particles, from its lane's stream
            ancestors, resampled = layout.resample(log_w, chosen, generators)
            log_w = log_w.masked_fill(resampled, 0.0)
            particles.reorder(ancestors)
            eve = eve.index_select(0, ancestors)
            statistics = None
    # the last step resamples no run (none resamples at its document's last token): its statistics are the final ones
    out = books.finished(log_w, eve, layout, statistics)
    first_run = np.cumsum([0, *[len(lane.sizes) for lane in lanes]]).tolist()
    return [out[first_run[i] : first_run[i + 1]] for i in range(len(lanes))]


class _RunBooks:
    """What each run has recorded so far: its ESS after every step of its document, the log mean weights banked at
    its resampling steps, how often it resampled."""

    def __init__(self, length: list[int], sizes: list[int], threshold: float) -> None:
        self.length, self.sizes, self.threshold = length, sizes, threshold
        self.ess: list[list[float]] = [[] for _ in sizes]
        self.banked, self.resampled = [0.0] * len(sizes), [0] * len(sizes)

    def record(self, t: int, log_ess: list[float], log_mean: list[float]) -> list[int]:
        """Step t's ESS of every run whose document has token t; the runs that resample now (ESS below the
        threshold before their document's last token), their log mean weight banked."""
        chosen = []
        for r, (e, m) in enumerate(zip(log_ess, log_mean)):
            if t >= self.length[r]:
                continue
            # every particle of the run has p = 0: its p̂ is 0 from here on
            if e == -math.inf:
                self.ess[r].append(0.0)
                continue
            self.ess[r].append(math.exp(e))
            if t < self.length[r] - 1 and self.ess[r][-1] < self.threshold * self.sizes[r]:
                self.banked[r] += m
                self.resampled[r] += 1
                chosen.append(r)
        return chosen

    def finished(
        self, log_w: torch.Tensor, eve: torch.Tensor, layout: RunLayout, statistics=None
    ) -> list[SMCRun]:
        """Every run's record from the last step's weights [Σ N_r] and Eve indices (global) of every particle: the
        runs' means and Lee-Whiteley estimates in a few batched operations (``RunLayout.statistics``, or the last
        step's ``statistics`` of these very weights; ``lee_whiteley_runs``), not a handful per run."""
        _, log_mean = statistics or layout.statistics(log_w)
        relative = lee_whiteley_runs(log_w, eve, layout, self.resampled)
        weights = log_w.numpy()
        runs = []
        for r, (a, b) in enumerate(itertools.pairwise(layout.starts)):
            if log_mean[r] == -math.inf:
                runs.append(SMCRun(np.full(b - a, -np.inf), -math.inf, self.resampled[r], self.ess[r], 0.0))
                continue
            banked = self.banked[r]
            runs.append(
                SMCRun(
                    banked + weights[a:b], banked + log_mean[r], self.resampled[r], self.ess[r], relative[r]
                )
            )
        return runs


def smc_block(
    model, x: torch.Tensor, sizes: list[int], settings: EstimatorSettings, generator, doc: str = "document"
) -> list[SMCRun]:
    """R independent SMC runs of N_1..N_R particles over the text x [T], advanced together: one ``smc_init`` of
    Σ_r N_r particles, so the model steps every particle of the block in one batch, and resampling only within a run
    (ancestors of run r come from run r, drawn from the block's one random stream; see the module docstring): the
    one lane of ``smc_lanes``."""
    return smc_lanes(model, [Lane(x, list(sizes), generator, doc)], settings)[0]


@torch.no_grad()
def draw_smc_documents(
    model,
    documents: Sequence[tuple[torch.Tensor, str, EstimatorSettings]],
    device: torch.device | str = "cpu",
    progress=None,
    stage: int = 0,
) -> list[tuple[np.ndarray, SMCDiagnostics]]:
    """Each document's K final SMC log weights, float64 [K] (particle k of run r weighs log p̂_r(earlier epochs) +
    log w_k(last epoch), so mean_k exp = Σ_r N_r p̂_r / K), and its run diagnostics, of several documents (tokens,
    text, settings; the same proposal and threshold), their sample blocks advanced side by side (``smc_lanes``) in
    batches of at most ``side_by_side_particles(device, T)`` particles (T: the longest document's tokens). Block b of
    a document draws from the stream seeded by (seed, b, document) wherever it runs, so every document's weights are
    those it gets alone."""
    if not documents:
        return []
    if len({(s.temperature, s.peek, s.resample_threshold) for _, _, s in documents}) > 1:
        raise ValueError("documents advanced side by side share the proposal and the resampling threshold")
    lanes, owner, plans = [], [], []
    for d, (x, text, settings) in enumerate(documents):
        sizes = run_sizes(settings.num_samples, settings.smc_runs)
        plans.append(sizes)
        for b, block in enumerate(blocks_of_runs(sizes, sample_block(device))):
            generator = document_generator(settings.seed, text, stage_block(b, stage), device=device)
            lanes.append(Lane(x, block, generator, f"document {text[:60]!r}"))
            owner.append(d)
    runs: list[list[SMCRun]] = [[] for _ in documents]
    budget = side_by_side_particles(device, max(int(x.shape[0]) for x, _, _ in documents))
    for batch in side_by_side_chunks([sum(lane.sizes) for lane in lanes], budget):
        for j, lane_runs in zip(batch, smc_lanes(model, [lanes[j] for j in batch], documents[0][2])):
            runs[owner[j]] += lane_runs
            if progress is not None:
                progress.update(sum(lanes[j].sizes))
    out = []
    for (x, text, settings), sizes, doc_runs in zip(documents, plans, runs):
        log_weights = np.concatenate([run.log_weights for run in doc_runs])
        if np.isneginf(log_weights).all():
            raise ValueError(
                f"document {text[:60]!r}: all {settings.num_samples} particles have p(x, z) = 0: the proposal misses "
                "the support of the model"
            )
        doubt = smc_interval_doubt(model, x, settings)
        diagnostics = smc_diagnostics(
            doc_runs, sizes, settings.resample_threshold, settings.temperature, doubt
        )
        out.append((log_weights, diagnostics))
    return out


@dataclass
class SMCEstimate(DocumentEstimate):
    """An SMC estimate: the K final particle log weights [K] (mean of exp = p̂; neither independent nor
    exchangeable, so no ESS or k̂ of them) and the R runs' ``SMCDiagnostics``."""

    estimator: ClassVar[str] = "smc"
    diagnostics_type: ClassVar[type] = SMCDiagnostics
    log_weights: np.ndarray | None = None
    diagnostics: SMCDiagnostics | None = field(default=None, kw_only=True)

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        """v̂ from the runs (``SMCDiagnostics.relative_variance``) with R − 1 degrees of freedom, trusted where
        ``policy.smc_doubt`` finds nothing in the runs or, where none resampled, in the weights, and the model stated
        no doubt (``SMCDiagnostics.model_doubt``: lasting, and the reason given where there are both); v = 0, proven,
        for a document without tokens or computed exactly."""
        if not self.sampled:
            return self.known_error()
        d = self.diagnostics
        lasting = d.model_doubt is not None
        reason = d.model_doubt if lasting else policy.smc_doubt(d, self.log_weights)
        return self.with_cap(
            DocumentError(self.log_likelihood, d.relative_variance, d.smc_runs - 1.0, reason, lasting=lasting)
        )

    def diagnostic_items(self) -> dict[str, float]:
        """Resampling steps per run and the ESS over tokens (least and mean) of a sampled document."""
        if not self.sampled:
            return {}
        d = self.diagnostics
        return {
            "smc_resampling_steps": d.resampling_steps,
            "smc_ess_min": d.ess_min,
            "smc_ess_mean": d.ess_mean,
        }


class SequentialMonteCarlo(Estimator):
    """``estimator=smc``: R independent particle filters per document (module docstring)."""

    name = "smc"
    result = SMCEstimate
    kind = STOCHASTIC_BOUND
    draws_samples = True
    settings_fields = ("num_samples", "temperature", "peek", "seed", "resample_threshold", "smc_runs")

    def missing(self, model) -> str | None:
        absent = missing(model, "stepwise")
        if not absent:
            return None
        return (
            f"estimator=smc needs the stepwise part of the contract, but {type(model).__name__} does not define "
            f"{', '.join(absent)} (see lm_latent_eval.protocol.StepwiseLatentLM)"
        )

    def auto_reason(self, model) -> str | None:
        if not has(model, "stepwise"):
            return None
        return f"auto: SMC, {type(model).__name__} has the stepwise part"

    def check(self, settings: EstimatorSettings) -> None:
        """K particles must form at least ``smc_runs`` runs."""
        if settings.num_samples < settings.smc_runs:
            raise InputError(
                f"num_samples = {settings.num_samples} particles cannot form smc_runs = "
                f"{settings.smc_runs} runs"
            )

    def advice(self, settings, model=None) -> list[str]:
        runs = ["smc_runs=4 (runs give the Monte Carlo error)"] if settings.smc_runs < 2 else []
        return runs + sampling_advice(settings)

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        return self.estimate_documents(
            model, [(x, document, settings)], device=device, progress=progress, stage=stage
        )[0]

    def batches_documents(self, model) -> bool:
        """Side by side on a model with ``protocol.DocumentBatchLM``."""
        return has(model, "document_batches")

    def estimate_documents(self, model, documents, *, device="cpu", progress=None, stage=0):
        """The documents' particle filters advanced side by side (``draw_smc_documents``): each document's numbers
        are those it gets alone."""
        drawn = draw_smc_documents(model, documents, device, progress, stage)
        return [
            SMCEstimate(text, int(x.numel()), float(log_mean_exp(lw)), lw, diagnostics=diag)
            for (x, text, _), (lw, diag) in zip(documents, drawn)
        ]

    def known(self, document, num_tokens, log_likelihood, settings, model) -> SMCEstimate:
        """Every run's p̂ = p exactly, nothing resampled, no ESS."""
        sizes = run_sizes(settings.num_samples, settings.smc_runs)
        runs = [SMCRun(np.full(n, log_likelihood), log_likelihood, 0, [], 0.0) for n in sizes]
        diag = smc_diagnostics(runs, sizes, settings.resample_threshold)
        weights = np.full(settings.num_samples, log_likelihood)
        return SMCEstimate(document, num_tokens, log_likelihood, weights, diagnostics=diag,
                           computed_exactly=num_tokens > 0)  # fmt: skip

    def corpus_diagnostics(self, estimates: Sequence[SMCEstimate], progress: bool = False) -> dict:
        """The runs per document, ESS over tokens (min, mean), resampling steps per run, samples per document."""
        d = [e.diagnostics for e in estimates]
        return sample_sizes([x.num_samples for x in d]) | {
            "smc_runs": int(min(x.smc_runs for x in d)),
            "ess_min": float(min(x.ess_min for x in d)),
            "ess_mean": float(np.mean([x.ess_mean for x in d])),
            "resampling_steps": float(np.mean([x.resampling_steps for x in d])),
        }

    def corpus_log_likelihood(self, estimates: Sequence[SMCEstimate]) -> float | None:
        """Run r of every document forms one corpus sample: needs the same runs for every document."""
        if len({tuple(e.diagnostics.run_sizes) for e in estimates}) != 1:
            return None
        return runs_corpus_log_likelihood(
            [e.diagnostics.run_log_likelihoods for e in estimates],
            [e.diagnostics.run_sizes for e in estimates],
        )


SMC = SequentialMonteCarlo()
