"""The precision target: more samples for the documents that need them, until the corpus meets ``target_se``.

Stage 0 estimates every document with ``num_samples``. With a target τ_se (nats per token) and T corpus tokens, the
corpus needs Σ_n v_n ≤ V = (τ_se · T)² (v_n = Var(p̂_n)/p_n²) and, for an honest two-sided interval, the remainder
R = Σ v^{3/2} of the bias correction small (``intervals``), against SE (G = R / √Σ v) or against the correction
C = Σ v / 2, which max_n v_n ≤ cap(N) = max(ρ / √N, (ρ / 2)²) guarantees for N documents (G ≤ √N max v and
R / C ≤ 2 √(max v); ρ = 0.35, below the interval's 0.5: ``UncertaintyPolicy.document_variance_cap``). From c_n = v̂_n K_n (the relative
variance per sample, K_n the samples drawn), the cheapest allocation meeting Σ c_n / K'_n ≤ V over cost Σ K'_n T_n is
K'_n = √(c_n / T_n) · Σ_m √(c_m T_m) / V; each document gets max(that, c_n / cap(N)), at least twice what it had, at
most ``max_samples``. c_n is the largest seen over the stages so far: a stage in which one SMC run found a latent
path the others missed shows a large c_n, and the next stage, which may not find it, must not forget it. A document
at least doubles its samples where its v̂ cannot be trusted (IS weights PSIS cannot judge, one SMC run carrying the
estimate), and where this stage's bias-corrected log p̂ and the stage before's differ by more than their v̂ allow
(|z| above the two-sided 5% / N Bonferroni quantile): two independent estimates that disagree say that one of them
missed mass that its own samples cannot show. The target is met when Σ v̂ ≤ V, the remainder is acceptable, no document is in doubt
and none is short of c_n / cap(N) samples by its largest c_n (unless at ``max_samples``); an info line says which
of these a stage missed. Then
EVERY document is estimated afresh from new random streams with its new sample size, and only the newest stage is
kept: each estimate's size was fixed before it was drawn, so it stays unbiased given the earlier stages (keeping the
old estimates of the documents that needed no more would keep exactly those whose tail was not seen, a selection
that biases the corpus low).

Which stage is reported is decided before it is drawn, never by looking at it: when stage s needs no more samples
for any document (it met the target, or nothing can grow), stage s + 1 estimates every document once more, afresh, at
the same sizes, and is the last. A stage in which every document's log p is proven (its draws covered the proposal's
support: ``UncertaintyPolicy.support_covered``) is reported at once, and nothing more is drawn: its statement is the
exact value, true whichever stage gave it, so stopping on it selects nothing; stage ``UncertaintyPolicy.max_stages`` − 1 is the last in any case. Reporting stage s itself would
keep the stages whose spread came out small by chance, and their intervals would be too narrow (on the HMM they
covered well under 95% at 10 and 50 documents). The last stage reports the precision it achieved, two-sided or
certified by its own gate. Where the model states of some document that its interval has no measured coverage
(``protocol.smc_interval_doubt``, ``DocumentError.lasting``: it reads the text and the settings, never a draw), the
corpus statement is the certified bound whatever the stages draw, so no target is pursued: stage 0 is reported, its
bound at δ (one stage, decided before any was drawn), and one warning says so. Where the budget (``max_samples``) or
the stage limit ended the stages before the target was met and the last stage's standard error is above it, one
warning says so (the standard error reached, what to do), and a document that ``max_samples`` held below the size
planned for it carries c_n / K_n from the stages before (``capped_variance``): the interval's gates judge the larger
of that and its v̂ at the limits the target plans for (``UncertaintyPolicy.held_by_budget``), decided before the
stage was drawn, since a last stage short of samples passes its own gates more often when its tail went unseen. Before it spends, once stage 1's sizes are known, one line projects what the stages left will draw at least
(Σ K_n T_n samples·tokens, and seconds at stage 0's rate): a warning where that is long or where documents need more
than ``max_samples``, since a model whose cost grows faster than linearly in the text's length may run for hours.

The allocation reads corpus-wide sums only (documents, tokens, Σ √(c T), documents in doubt or short), rounded to 9
significant digits, so with ``all_reduce`` summing them over processes the samples of a document never depend on
batching, order or the number of processes. Every stage's estimates are kept (``stage_log_likelihoods``): each stage's product of p̂ is unbiased
given the stages before, so the certified bound takes the best stage at δ / max_stages (a union bound).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .intervals import DocumentError
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate
from .run import ResolvedEstimator
from .settings import EstimatorSettings
from .workers import DocumentWorkers

logger = logging.getLogger(__name__)

# a projection of the stages left above this many seconds is a warning, not an info line (``_announce``)
PROJECTED_SECONDS_WARNING = 300.0
# below this many seconds, stage 0's time says nothing of its rate (estimates read from the store, a tiny corpus)
TIMED_SECONDS_MINIMUM = 0.1


class DocumentStore(Protocol):
    """Where estimates are kept between runs, by text and stage (``harness.results_store.ResultsStore``)."""

    def get(self, text: str, stage: int = 0) -> DocumentEstimate | None: ...

    def put(self, estimate: DocumentEstimate, stage: int = 0) -> None: ...


def _round(value: float) -> float:
    return float(f"{value:.9g}")


@dataclass(frozen=True)
class _Allocation:
    """The next stage's samples per document and why the stage just drawn was not enough (empty where it was)."""

    sizes: list[int]
    reason: str = ""


def _allocation(
    estimates: Sequence[DocumentEstimate],
    earlier: Sequence[_History],
    settings: EstimatorSettings,
    all_reduce,
    documents: float,
    policy: UncertaintyPolicy = DEFAULT_POLICY,
) -> _Allocation:
    """Samples per document for the next stage (the current count where a document needs no more; more than
    ``max_samples`` where the target needs more than the budget: the caller caps them); ``earlier``
    holds what the stages before said of each document, and is updated with this stage; ``documents`` counts the
    corpus's sampled documents over every process (``DocumentEstimate.sampled``: with tokens, not computed
    exactly; the others add nothing to Σ v or R, so the per-document cap counts only these)."""
    errors = [e.error(policy) for e in estimates]
    sizes = [e.num_samples for e in estimates]
    sampled = [e.sampled for e in estimates]
    disagree = [s and h.disagrees(err, documents, policy) for h, err, s in zip(earlier, errors, sampled)]
    for h, err, k, s in zip(earlier, errors, sizes, sampled):
        if s:
            h.update(err, k)
        else:
            h.settle()
    c = [h.variance_per_sample for h in earlier]
    tokens = [e.num_tokens for e in estimates]
    v = [e.relative_variance for e in errors if e.trusted and math.isfinite(e.relative_variance)]
    doubt = [not e.trusted or d for e, d in zip(errors, disagree)]
    v_max = policy.document_variance_cap(documents)
    # below the per-document precision that keeps the remainder small, by the largest c seen
    short = [not math.isnan(ci) and ci / k > v_max and k < settings.sample_budget for ci, k in zip(c, sizes)]
    totals = all_reduce(
        [
            float(sum(tokens)),
            sum(math.sqrt(ci * t) for ci, t in zip(c, tokens) if not math.isnan(ci)),
            sum(v),
            sum(x**1.5 for x in v),
            float(sum(doubt)),
            float(sum(short)),
            float(sum(not e.trusted for e in errors)),
            float(sum(disagree)),
        ]
    )
    total_tokens, neyman, sum_v, sum_v15, doubted, shorted, *counts = (_round(x) for x in totals)
    if total_tokens == 0:
        return _Allocation(sizes)
    budget_v = (settings.target_se * total_tokens) ** 2
    remainder = policy.remainder_acceptable(sum_v, sum_v15)
    if doubted == 0 and shorted == 0 and sum_v <= budget_v and remainder:
        return _Allocation(sizes)
    out = []
    for ci, t, k, err, d in zip(c, tokens, sizes, errors, doubt):
        if t == 0 or (err.trusted and err.relative_variance == 0):
            out.append(k)
            continue
        wanted = 0.0 if math.isnan(ci) else max(math.sqrt(ci / t) * neyman / budget_v, ci / v_max)
        # v̂ cannot be trusted, or disagrees with the stage before: more samples are the only remedy
        if d:
            wanted = max(wanted, 2 * k)
        out.append(k if wanted <= k else max(math.ceil(wanted), 2 * k))
    return _Allocation(out, _shortfall(sum_v, budget_v, remainder, documents, (*counts, shorted), v_max))


def _shortfall(
    sum_v: float, budget_v: float, remainder: bool, documents: float, counts: tuple, v_max: float
) -> str:
    """Why a stage was not enough: Σ v̂ of the trusted documents against the budget, the remainder, and the
    ``counts`` of documents whose v̂ is not trusted, that disagree with the stage before, and that are short of the
    per-document cap ``v_max`` by their largest c."""
    untrusted, disagreeing, short = counts
    return (
        f"Σ v̂ = {sum_v:.3g} (the trusted) of the budget (target_se · T)² = {budget_v:.3g}"
        f"{'' if remainder else ', its remainder too large'}; of {documents:.0f} documents {untrusted:.0f} with v̂ "
        f"not trusted, {disagreeing:.0f} disagreeing with the stage before, {short:.0f} above the per-document "
        f"cap {v_max:.3g} by their largest c = v̂ K"
    )


@dataclass
class _History:
    """What the stages so far said of one document: the largest relative variance per sample c = v̂ K seen (an
    untrusted v̂ counts too: it is then a lower bound), and the latest stage's error for the next one to agree with."""

    variance_per_sample: float = math.nan
    last: DocumentError | None = None

    def update(self, err: DocumentError, num_samples: int) -> None:
        if math.isfinite(err.relative_variance):
            c = err.relative_variance * num_samples
            self.variance_per_sample = (
                c if math.isnan(self.variance_per_sample) else max(c, self.variance_per_sample)
            )
        self.last = err

    def settle(self) -> None:
        """The document was computed exactly (``exact_where_cheaper``), as it will be at every later stage: it needs
        no samples (c = 0) and has no estimate to disagree with."""
        self.variance_per_sample, self.last = 0.0, None

    def disagrees(
        self, err: DocumentError, documents: float, policy: UncertaintyPolicy = DEFAULT_POLICY
    ) -> bool:
        """Whether two independent stages' bias-corrected log p̂ differ by more than their v̂ allow: |z| above
        ``policy.disagreement_quantile(documents)`` (Bonferroni over the N documents), a sign that one stage missed a latent path the
        other found, which neither v̂ shows."""
        a, b = self.last, err
        if a is None or not all(math.isfinite(x) for x in (a.relative_variance, b.relative_variance)):
            return False
        spread = a.relative_variance + b.relative_variance
        gap = b.corrected - a.corrected
        if spread <= 0:
            return gap != 0
        return abs(gap) / math.sqrt(spread) > policy.disagreement_quantile(documents)


def _all_exact(estimates, policy: UncertaintyPolicy, all_reduce) -> bool:
    """Whether every document's log p is proven, not estimated (``DocumentError.exact``: IS draws that covered the
    proposal's support), over every process. Then the statement is the exact value and no stage can improve it, so
    the precision target stops: a proven value is the same whichever stage gave it, so stopping on it selects
    nothing (unlike stopping on a small spread, which is why a settled corpus gets one more fresh stage)."""
    inexact = sum(not e.error(policy).exact for e in estimates if e.num_tokens > 0)
    return not all_reduce([float(inexact)])[0]


def _one_sided_at_any_size(current: dict, settings: EstimatorSettings, policy, all_reduce) -> bool:
    """Whether the model states of some document that its interval has no measured coverage (``DocumentError.lasting``,
    over every process): then the corpus statement is the certified bound at any sample size, the precision target
    has nothing to reach, and one warning says that stage 0 is reported."""
    reasons = [err.reason for err in (e.error(policy) for e in current.values()) if err.lasting]
    lasting, documents = all_reduce([float(len(reasons)), float(len(current))])
    if lasting:
        logger.warning(
            "precision target target_se=%g not pursued: for %.0f of %.0f documents the statement is the certified "
            "bound at any sample size (%s), so every document keeps its estimate from num_samples=%d samples; raise "
            "num_samples for a tighter bound",
            settings.target_se, lasting, documents, reasons[0] if reasons else "the model's reason, on another process",
            settings.num_samples,
        )  # fmt: skip
    return bool(lasting)


def estimate_corpus(
    estimator: ResolvedEstimator,
    texts: Sequence[str],
    device="cpu",
    all_reduce: Callable[[list[float]], list[float]] | None = None,
    progress: bool = True,
    store: DocumentStore | None = None,
    workers: int = 1,
) -> dict[str, DocumentEstimate]:
    """One estimate per distinct text: ``num_samples`` each, then, with a precision target, more for those that need
    it (see the module docstring).

    Parameters
    ----------
    estimator : ResolvedEstimator
        The estimator, its settings and the model (``registry.resolve``); a sampling estimator with ``target_se`` > 0
        runs the precision target.
    texts : sequence of str
        The corpus (repeated texts are estimated once).
    device : torch.device or str
        Where the model runs.
    all_reduce : callable, optional
        Sums a list of floats over processes (default: this process only).
    progress : bool
        Progress bars.
    store : DocumentStore, optional
        Estimates kept between runs (the lm-eval backend's ``results_dir``): a document's estimate at a stage is
        read from it where present, else computed and written to it at once.
    workers : int
        Processes that estimate a stage's documents side by side on the CPU (``workers.DocumentWorkers``: the
        same numbers as one process, bit for bit).

    Returns
    -------
    dict of str to DocumentEstimate
        The last stage's estimate of every distinct text, with every stage's log p̂ (``stage_log_likelihoods``)
        under a precision target that was pursued.

    Examples
    --------
    >>> from lm_latent_eval.estimators import resolve
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> texts = ["the cat sat", "a dog ran", "the cat sat"]
    >>> run = resolve(EstimatorSettings("smc", 32, target_se=0.05, seed=1), hmm)
    >>> out = estimate_corpus(run, texts, progress=False)
    >>> len(out), all(len(e.stage_log_likelihoods) >= 2 for e in out.values())
    (2, True)
    """
    all_reduce = all_reduce or (lambda values: values)
    unique = list(dict.fromkeys(texts))
    with DocumentWorkers(estimator.model, device, workers, len(unique)) as pool:
        stage = functools.partial(_stage, pool, store, progress)
        first = f"{estimator.settings.estimator} log p(x)"
        first = f"precision target, {stage_label(0)}: {first}" if estimator.targets_precision else first
        started = time.perf_counter()
        current = stage(estimator, [(t, estimator.settings.num_samples) for t in unique], 0, first)
        if not estimator.targets_precision:
            return current
        return _later_stages(current, estimator, stage, all_reduce, time.perf_counter() - started)


def stage_label(number: int) -> str:
    """How a stage is named wherever a run shows it (progress bars, the results store's summary line): counted from 1,
    ``number`` (the random streams' stage index) from 0.

    Examples
    --------
    >>> stage_label(0), stage_label(2)
    ('stage 1', 'stage 3')
    """
    return f"stage {number + 1}"


def _stage(
    pool: DocumentWorkers,
    store: DocumentStore | None,
    progress: bool,
    run: ResolvedEstimator,
    jobs: list[tuple[str, int]],
    number: int,
    desc: str,
) -> dict[str, DocumentEstimate]:
    """Every job's (text, K) estimate by ``run`` at stage ``number``, in the jobs' order: read from ``store`` where
    there, else estimated by ``pool`` and written to ``store`` as each finishes."""
    found = {t: store.get(t, number) for t, _ in jobs} if store is not None else {}
    todo = [(t, k) for t, k in jobs if found.get(t) is None]
    for text, estimate in pool.estimate(run, todo, number, desc, progress and bool(todo)):
        if store is not None:
            store.put(estimate, number)
        found[text] = estimate
    return {t: found[t] for t, _ in jobs}


def _later_stages(
    current: dict, estimator: ResolvedEstimator, stage: Callable, all_reduce, seconds: float = 0.0
) -> dict:
    """Stages 1, 2, ... of the precision target after stage 0's estimates ``current``, which took ``seconds``
    (module docstring): every document estimated afresh at its allocated size until a stage needs no more samples,
    then once more."""
    settings = estimator.settings
    policy = UncertaintyPolicy.of(settings)
    if _one_sided_at_any_size(current, settings, policy, all_reduce):
        return current
    unique = list(current)
    stages = {t: [e.log_likelihood] for t, e in current.items()}
    earlier = [_History() for _ in unique]
    stopped_short = False  # whether the budget or the stage limit ended the stages before the target was met
    announced = 0.0  # the samples·tokens per stage the last cost line said
    # a later stage's documents: sized one by one (each its own K), with no precision target of their own
    later = estimator.sized(settings.num_samples)
    capped: dict = {}  # the drawn stage's documents that max_samples held below their planned size: c / K
    for number in range(1, policy.max_stages):
        if _all_exact(current.values(), policy, all_reduce):
            stopped_short = False
            break
        documents = _round(all_reduce([float(sum(current[t].sampled for t in unique))])[0])
        plan = _allocation([current[t] for t in unique], earlier, settings, all_reduce, documents, policy)
        if plan.reason:
            logger.info("precision target, after %s: %s", stage_label(number - 1), plan.reason)
        wanted = {t: min(k, settings.sample_budget) for t, k in zip(unique, plan.sizes)}
        grow = [t for t in unique if wanted[t] > current[t].num_samples]
        # the documents that grow, those beyond max_samples, and what the stage draws (samples·tokens)
        drawn = sum(wanted[t] * current[t].num_tokens for t in unique if current[t].sampled)
        growing, beyond, per_stage = all_reduce(
            [float(len(grow)), float(sum(k > settings.sample_budget for k in plan.sizes)), float(drawn)]
        )
        last = not growing or number == policy.max_stages - 1
        stopped_short = bool(growing or beyond)
        # said after stage 1's allocation, and again where a later one more than doubles what was said
        if per_stage > 2 * announced:
            args = (1 if last else 2, seconds, beyond, documents, settings, all_reduce, number - 1)
            _announce(list(current.values()), per_stage, *args)
            announced = per_stage
        what = f"{len(grow)} documents need more samples" if grow else "the same sizes afresh"
        desc = f"precision target, {stage_label(number)}{' (last)' * last}: {what}"
        started = time.perf_counter()
        current = stage(later, [(t, wanted[t]) for t in unique], number, desc)
        seconds = time.perf_counter() - started
        capped = {
            t: h.variance_per_sample / wanted[t]
            for t, h, k in zip(unique, earlier, plan.sizes)
            if k > settings.sample_budget and math.isfinite(h.variance_per_sample)
        }
        for t in unique:
            stages[t].append(current[t].log_likelihood)
        if last:
            break
    if stopped_short:
        _warn_if_target_missed(list(current.values()), settings, policy, all_reduce, number + 1)
    return {
        t: dataclasses.replace(e, stage_log_likelihoods=stages[t], capped_variance=capped.get(t))
        for t, e in current.items()
    }


def _announce(
    estimates, per_stage: float, stages: int, seconds: float, beyond: float, documents: float, settings,
    all_reduce, number: int = 0,
) -> None:  # fmt: skip
    """One line, before the next stage is drawn, on what the stages left (``stages``: 2, or 1 where the next is the
    last) will draw at least: ``per_stage`` Σ K_n T_n samples·tokens at the next stage's sizes over the sampled
    documents (every process), against stage ``number``'s ``estimates``, and the seconds that take at its rate
    (``seconds``, averaged over processes). A warning where that exceeds ``PROJECTED_SECONDS_WARNING`` or ``beyond``
    documents (of ``documents``, over every process) need more than ``max_samples``, else an info line. The
    allocation never reads these figures."""
    spent, timed, processes = all_reduce(
        [float(sum(e.num_samples * e.num_tokens for e in estimates if e.sampled)), seconds, 1.0]
    )
    if spent == 0:
        return
    projected = stages * per_stage
    ratio, first = projected / spent, stage_label(number)
    timed /= processes
    eta = ratio * timed if timed >= TIMED_SECONDS_MINIMUM else math.nan
    when = ""
    if not math.isnan(eta):
        scale = next(((u, d) for u, d in (("h", 3600), ("min", 60)) if eta >= d), ("s", 1))
        when = f" (about {eta / scale[1]:.2g} {scale[0]} at the rate of {first}, which took {timed:.2g} s)"
    line = (
        f"precision target: the next {stages} stage{'s' * (stages > 1)} will draw at least {projected:.2g} "
        f"samples·tokens, {ratio:.3g} times {first}'s {spent:.2g}{when}"
    )
    if beyond:
        line += (
            f"; {beyond:.0f} of {documents:.0f} documents need more than max_samples={settings.sample_budget} "
            "samples, so the target may not be met"
        )
    if beyond or eta > PROJECTED_SECONDS_WARNING:
        # target_se is the standard error aimed at: a larger one asks for fewer samples
        remedy = (
            "raise max_samples or target_se"
            if beyond
            else "to spend less, raise target_se or lower max_samples"
        )
        logger.warning(
            "%s: %s, or shorten the texts (docs/estimators.md, the precision target)", line, remedy
        )
    else:
        logger.info("%s", line)


def _warn_if_target_missed(estimates, settings: EstimatorSettings, policy, all_reduce, stages: int) -> None:
    """A warning when the last stage, which the budget or the stage limit made the last, did not reach the target:
    its standard error √(Σ v̂) / T nats per token over the documents whose v̂ is trusted (summed over the processes),
    and what to do."""
    errors = [e.error(policy) for e in estimates if e.sampled]
    v = [err.relative_variance for err in errors if err.trusted and math.isfinite(err.relative_variance)]
    tokens, sum_v, unjudged = all_reduce(
        [float(sum(e.num_tokens for e in estimates)), sum(v), float(len(errors) - len(v))]
    )
    if tokens == 0 or (unjudged == 0 and math.sqrt(sum_v) <= settings.target_se * tokens):
        return
    untrusted = f" ({unjudged:.0f} documents' error could not be judged)" if unjudged else ""
    logger.warning(
        "the precision target target_se=%g was not reached: a standard error of %.3g nats per token%s after %d "
        "stages of up to max_samples=%d samples per document; raise max_samples or num_samples, or set a "
        "target_se this budget can meet",
        settings.target_se, math.sqrt(sum_v) / tokens, untrusted, stages, settings.sample_budget,
    )  # fmt: skip
