"""The uncertainty policy: the one object that decides every statement the package prints about log p and perplexity.

``UncertaintyPolicy`` owns the level, the trust gates (when a document's v̂ = estimated Var(p̂)/p² may be believed:
PSIS's k̂ for importance weights, the run rules for SMC), the remainder test of the bias correction, the bias
allowance, the certified bound's δ = 1 − level and its union over the stages of a precision target, and the
per-document precision the precision target allocates for. The interval (``interval``), the corpus statement
(``estimators.corpus``), the certified bound and the precision target's allocation (``estimators.adaptive``) all
consult the same instance, so a threshold is stated once. The math of the statement itself is in
``estimators.intervals``.

Error vocabulary (one name each, in code, results JSON, cards and docs): ``relative_variance`` v̂ of one document;
``log_likelihood_stderr`` √v̂, the standard error of one document's log p̂ (SMC diagnostics); ``standard_error`` SE =
√Σ v̂ of S = Σ log p̂ (nats); ``bias_correction`` C = Σ v̂ / 2; ``remainder`` G in standard errors; ``interval`` a
statement [lower, upper] (``log_likelihood_interval`` of log p, ``perplexity_interval`` of perplexity; upper = inf
where it is one-sided); ``monte_carlo_stderr`` the perplexity's standard error with the documents fixed;
``interval_stderr`` the interval's half-width over the normal quantile (lm-eval's Stderr column of ``perplexity``);
``sampling_stderr`` the perplexity's standard error over documents drawn at random (lm-eval's table row
``perplexity_sampling_se``: a metric whose name ends in ``_stderr`` is read by lm-eval as another row's Stderr).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from .bounded import BoundedInterval, bounded_interval
from .diagnostics import pareto_k_threshold, pareto_khat, pareto_tail_size
from .intervals import DocumentError, Interval, certified_lower_bound, satterthwaite_degrees_of_freedom
from .settings import DEFAULT_LEVEL


def _why(text: str) -> dict:
    return {"why": text}


@dataclass(frozen=True)
class UncertaintyPolicy:
    """When a two-sided interval is honest, and what is printed otherwise.

    Parameters
    ----------
    level : float
        Level of the two-sided interval; the certified bound fails with probability at most δ = 1 − level.
    max_remainder : float
        Largest remainder G (in standard errors) of the first-order bias correction the interval accepts, unless
        the remainder is small against the bias allowance instead (``max_remainder_share``).
    max_remainder_share : float
        Largest R / C the interval accepts where G is above ``max_remainder``: the remainder R = Σ v̂^{3/2} (nats)
        against the bias correction C = Σ v̂ / 2, so that C ± R stays well inside the allowance [0, 2C].
    allocation_remainder : float
        The G the precision target allocates samples for (below ``max_remainder``, so that it is met); also the
        limit for documents ``max_samples`` held below their planned size (``held_by_budget``).
    allocation_remainder_share : float
        The R / C the precision target allocates samples for (below ``max_remainder_share``); likewise.
    min_run_size : int
        SMC runs smaller than this give no trusted error (as IS at K ≤ 10, where PSIS's threshold is 0).
    max_run_share : float
        One SMC run carrying more of p̂ than this: v̂ sits at the runs' ceiling and is not trusted.
    max_stages : int
        Stages of the precision target; the certified bound is a union bound over them.
    max_unseen_draws : float
        Tied importance weights are trusted only where their distinct draws leave at most this many draws' worth of
        q's mass unseen (K · unseen mass; ``tied_importance_doubt``).
    max_unresampled_khat : float
        SMC runs that never resampled are importance sampling: their pooled weights' Pareto k̂ must not be above
        this at the policy's level (``smc_doubt``): at 32 tokens of a masked LM the runs agreed while missing p(x)
        (docs/models.md, "At length").
    support_tolerance : float
        How far from 1 the q-mass of a document's distinct draws may be for them to count as q's whole support
        (``support_covered``): the rounding of float32 probabilities that sum to 1.
    agreement_level : float
        Nominal chance, per stage, that some document of a well-estimated corpus is called in disagreement: the
        normal quantile takes each v̂ as exact, and v̂ from a few SMC runs makes |z| heavier-tailed (false alarms per
        stage measured: docs/estimators.md, the precision target). A false alarm costs samples, never coverage; Student's t at the runs' degrees of freedom would be calibrated but blind to the missed latent path
        the test is for.
    max_flip_probability : float
        A multiple-choice question is settled when Monte Carlo error flipped its answer with at most this probability
        (``decisions.flip_probability``); under a precision target the others get more samples.

    Examples
    --------
    >>> policy = UncertaintyPolicy(level=0.9)
    >>> round(policy.delta, 3)
    0.1
    >>> round(policy.certified_lower_bound([-1.0, -2.0]), 4)  # Σ log p̂ + log δ
    -5.3026
    """

    level: float = DEFAULT_LEVEL
    max_remainder: float = field(default=0.5, metadata=_why("the remainder may move S̃ by half an SE"))
    max_remainder_share: float = field(default=0.5, metadata=_why("C ± R within [C/2, 3C/2] of [0, 2C]"))
    allocation_remainder: float = field(default=0.35, metadata=_why("below max_remainder: the target is met"))
    allocation_remainder_share: float = field(
        default=0.35, metadata=_why("below max_remainder_share: the target is met")
    )
    min_run_size: int = field(default=16, metadata=_why("as IS at K ≤ 10: too few to show a tail"))
    max_run_share: float = field(default=0.8, metadata=_why("one run carrying p̂: v̂ at its ceiling"))
    max_stages: int = field(default=6, metadata=_why("stage 0 and five rounds of fresh estimates"))
    max_flip_probability: float = field(
        default=1e-3, metadata=_why("40 questions: no flip in about 96% of runs")
    )
    agreement_level: float = field(
        default=0.05, metadata=_why("nominal false alarms per stage, whole corpus")
    )
    support_tolerance: float = field(
        default=1e-6, metadata=_why("float32 rounding of probabilities that sum to 1")
    )
    max_unseen_draws: float = field(
        default=1.0, metadata=_why("tied weights: under one draw's worth of q unseen")
    )
    max_unresampled_khat: float = field(
        default=1.0, metadata=_why("k̂ ≥ 1: the weights' mean itself is not estimable")
    )

    @classmethod
    def of(cls, settings) -> UncertaintyPolicy:
        """The policy at the ``level`` an ``EstimatorSettings`` record asks for."""
        return cls(level=settings.level)

    @property
    def delta(self) -> float:
        """δ = 1 − level: the probability that a certified bound fails."""
        return 1.0 - self.level

    # ---- trust gates: may one document's v̂ be believed? ----------------------------------------------------------

    def importance_doubt(self, log_weights: np.ndarray, khat: float | None = None) -> str | None:
        """Why the v̂ of K importance weights cannot be trusted, or None: PSIS must fit their tail (k̂ defined) and find
        it light enough (k̂ below the threshold at K, Vehtari et al. 2024). ``khat``: k̂ if already computed."""
        khat = pareto_khat(log_weights) if khat is None else khat
        threshold = pareto_k_threshold(len(log_weights))
        if math.isnan(khat):
            return (
                "importance weights too concentrated to fit their tail (Pareto k̂ undefined), so their variance "
                "cannot be estimated from these samples"
            )
        if khat >= threshold:
            return "heavy-tailed importance weights (Pareto k̂ at or above the threshold at their K)"
        return None

    def smc_doubt(self, diagnostics, log_weights: np.ndarray | None = None) -> str | None:
        """Why the v̂ of R independent SMC runs (``SMCDiagnostics``) cannot be trusted, or None: at least two runs of
        at least ``min_run_size`` particles, none carrying more than ``max_run_share`` of p̂, a proposal temperature
        of at least 1; and where no run resampled, the K final ``log_weights`` are independent importance weights
        whose Pareto k̂ must not be above ``max_unresampled_khat`` at the policy's level (k̂'s standard error
        (1 + k̂) / √M over its M tail draws: at small K, k̂ alone is above 1 by chance): runs that all miss the same
        heavy tail agree with each other."""
        doubt = self._runs_doubt(
            diagnostics, "SMC run", "SMC runs", "particles", "more particles per run are needed"
        )
        if doubt is None and diagnostics.resampling_steps == 0 and log_weights is not None:
            khat, draws = pareto_khat(log_weights), int(np.isfinite(log_weights).sum())
            # the tail index above the limit at the policy's level: k̂'s standard error (1 + k̂) / √M of M tail draws
            margin = stats.norm.ppf(self.level) * (1 + khat) / math.sqrt(max(pareto_tail_size(draws), 1))
            if khat - margin >= self.max_unresampled_khat:
                doubt = (
                    f"heavy-tailed importance weights (Pareto k̂ above {self.max_unresampled_khat:g}: no estimable "
                    "mean), whose SMC runs that never resample agree while missing the same tail"
                )
        return doubt

    def tied_importance_doubt(self, runs, draws=None) -> str | None:
        """Why the v̂ of importance weights whose tail PSIS cannot fit (ties: k̂ undefined) cannot be trusted, or None.

        The K independent draws are read as R independent batches (``smc_variance.importance_runs``: SMC runs that
        never resample), and judged by the gates of SMC's runs (``smc_doubt``): batches of at least ``min_run_size``
        draws, none carrying more than ``max_run_share`` of p̂, a proposal temperature of at least 1. Ties are no
        obstacle to them: a batch's p̂_r is unbiased whatever values the weights take, and a configuration found by
        one batch only (a large weight the others missed) shows as that batch's share of p̂. What no batch found
        cannot show, so ties are trusted only where they mean that the proposal's support is nearly covered: the
        distinct draws (``importance.DistinctDraws``) leave at most ``max_unseen_draws`` / K of q's mass unseen
        (the RNNG's tree CRF without this gate: docs/estimators.md, tied weights). ``draws`` None (weights without
        their log q): never trusted.
        """
        doubt = self._runs_doubt(runs, "IS batch", "IS batches", "draws", "more samples are needed")
        k = int(sum(runs.run_sizes))
        if draws is None:
            doubt = "without their log q the proposal's mass they left unseen is unknown"
        elif k * draws.unseen_mass > self.max_unseen_draws:
            doubt = (
                f"their distinct configurations leave over {self.max_unseen_draws:g} draw's worth of the "
                "proposal's mass unseen: configurations the proposal rarely draws may carry much of p"
            )
        if doubt is None:
            return None
        return f"importance weights too concentrated to fit their tail (Pareto k̂ undefined), and {doubt}"

    def _runs_doubt(self, d, run: str, runs: str, units: str, remedy: str) -> str | None:
        """The gates of R independent runs (``SMCDiagnostics``), worded for ``run`` (singular) and ``runs``."""
        if d.smc_runs < 2:
            return f"one {run} has no honest error estimate (use smc_runs ≥ 2)"
        if min(d.run_sizes) < self.min_run_size:
            return f"{runs} of fewer than {self.min_run_size} {units} cannot show the weights' tail"
        if d.largest_run_share > self.max_run_share:
            return (
                f"one {run} carries over {self.max_run_share:.0%} of p̂ (a latent path the other {runs} missed): "
                f"the {runs}' spread cannot measure how rarely it is found; {remedy}"
            )
        if d.temperature < 1.0:
            return (
                f"a sharpened proposal (temperature {d.temperature:g} < 1) is lighter-tailed than the target: "
                f"its {runs} can agree while all of them miss the same probability mass"
            )
        return None

    def support_covered(self, draws) -> bool:
        """Whether the distinct draws D of one document (``importance.DistinctDraws``) carry all of the proposal's
        mass: |Σ_{z ∈ D} q(z | x) − 1| ≤ ``support_tolerance``.

        Then no z with q(z | x) > 0 is missing from D, and since q(z | x) > 0 wherever p(x, z) > 0 (what importance
        sampling itself needs to be unbiased), Σ_{z ∈ D} p(x, z) = Σ_z p(x, z) = p(x): the document's log p is known
        exactly, with no sampling error (``importance.DistinctDraws`` says why merging draws can only understate
        the covered mass, never overstate it).
        """
        return draws is not None and abs(math.expm1(draws.log_covered_mass)) <= self.support_tolerance

    # ---- the statements -----------------------------------------------------------------------------------------

    def certified_lower_bound(self, log_likelihoods: Sequence[float], keys: Sequence | None = None) -> float:
        """L with P(S < L) ≤ δ from independent unbiased log p̂_n (``intervals.certified_lower_bound``)."""
        return certified_lower_bound(log_likelihoods, self.level, keys)

    def staged_certified_bound(
        self, stages: Sequence[Sequence[float]], keys: Sequence | None = None
    ) -> float:
        """The certified bound over the stages of a precision target: each stage's product of p̂ is unbiased given
        the stages before, so the best stage's bound at δ / ``max_stages`` holds with probability ≥ 1 − δ (union
        bound). ``stages[n]`` lists document n's log p̂ of every stage."""
        stage_level = 1.0 - self.delta / self.max_stages
        return max(
            certified_lower_bound([s[i] for s in stages], stage_level, keys)
            for i in range(min(map(len, stages)))
        )

    def interval(
        self,
        errors: Sequence[DocumentError],
        keys: Sequence | None = None,
        lower_certified: float | None = None,
    ) -> Interval:
        """The honest statement about S = Σ_n log p(x_n) from the documents' errors: the exact S where every
        document's log p is proven (``DocumentError.proven``), else two-sided S̃ ± (t·SE + C) where every v̂ is
        trusted and the remainder is small (``remainder_acceptable``), else the one-sided certified bound with the reason
        (``estimators.intervals``). ``lower_certified`` replaces the certified bound of the errors' log p̂ (the
        caller's, e.g. over the stages of a precision target).

        Examples
        --------
        >>> from lm_latent_eval.estimators.intervals import DocumentError
        >>> statement = UncertaintyPolicy().interval([DocumentError(-3.0, 0.0, math.inf)])
        >>> statement.two_sided, statement.lower, statement.upper
        (True, -3.0, -3.0)
        """
        if errors and all(e.exact for e in errors):
            return self.proven_statement(errors)
        ll = np.array([e.log_likelihood for e in errors], dtype=np.float64)
        v = np.array([e.relative_variance for e in errors], dtype=np.float64)
        if lower_certified is None:
            lower_certified = self.certified_lower_bound(ll, keys)
        untrusted = Counter(e.reason for e in errors if not e.trusted).most_common()
        if untrusted:
            # each reason with the number of documents it holds for (the two most common, then the rest counted)
            reason = "; ".join(f"{n} of {len(errors)} documents: {why}" for why, n in untrusted[:2])
            if len(untrusted) > 2:
                reason += f"; {sum(n for _, n in untrusted[2:])} more for other reasons"
            return Interval(
                lower_certified, math.inf, math.nan, math.nan, math.nan, math.nan, self.level, reason
            )
        sum_v, sum_v15 = float(v.sum()), float((v**1.5).sum())
        se, correction = math.sqrt(sum_v), sum_v / 2
        centre = float(ll.sum()) + correction
        remainder = sum_v15 / se if se > 0 else 0.0
        if (held := self.held_by_budget(errors)) is not None:
            return Interval(lower_certified, math.inf, math.nan, se, correction, remainder, self.level, held)
        if not self.remainder_acceptable(sum_v, sum_v15):
            reason = (
                f"the estimates are too imprecise for a bias correction (its remainder is {remainder:.2f} standard "
                f"errors, above {self.max_remainder}, and {sum_v15 / correction:.2f} of the correction, above "
                f"{self.max_remainder_share}); more samples per document would allow a two-sided interval"
            )
            return Interval(
                lower_certified, math.inf, math.nan, se, correction, remainder, self.level, reason
            )
        dof = satterthwaite_degrees_of_freedom(v, [e.degrees_of_freedom for e in errors])
        q = (
            float(stats.t.ppf(0.5 + self.level / 2, dof))
            if math.isfinite(dof) and dof > 0
            else self.normal_quantile
        )
        # the bias allowance: anywhere from 0 to twice the correction
        half_width = q * se + correction
        return Interval(
            centre - half_width, centre + half_width, centre, se, correction, remainder, self.level
        )

    def held_by_budget(self, errors: Sequence[DocumentError]) -> str | None:
        """Why no two-sided interval is honest where ``max_samples`` held documents below the size the precision
        target planned for them: the remainder, judged with each document's ``gate_variance`` (the larger of v̂ and
        the stages before's c / K), above what the target plans for (``remainder_acceptable(planned=True)``); None
        where no document was held or the remainder meets the plan.

        The plan's stricter limits, not the interval's: a held document's stages can all miss the same tail, so its
        c / K can be small exactly when its estimate is low (docs/estimators.md, "A budget below what the target
        needs").

        Examples
        --------
        >>> policy = UncertaintyPolicy()
        >>> policy.held_by_budget([DocumentError(-10.0, 0.02, 3.0, capped_variance=0.3)] * 4)[:33]
        'max_samples held 4 of 4 documents'
        >>> policy.held_by_budget([DocumentError(-10.0, 0.02, 3.0)] * 4) is None
        True
        """
        held = sum(e.gate_variance > e.relative_variance for e in errors)
        if not held:
            return None
        gate = np.array([e.gate_variance for e in errors], dtype=np.float64)
        if self.remainder_acceptable(float(gate.sum()), float((gate**1.5).sum()), planned=True):
            return None
        return (
            f"max_samples held {held} of {len(errors)} documents below the samples the precision target planned for "
            "them, and with the variance their earlier stages showed the bias correction's remainder is above what "
            "the target plans for; raise max_samples for a two-sided interval"
        )

    def proven_statement(self, errors: Sequence[DocumentError]) -> Interval:
        """The exact S = Σ_n proven log p(x_n), ± the float32 rounding of each (``DocumentError.rounding``), for
        documents whose every log p is proven.

        All or nothing: a proven value replaces the estimates only where every document has one (``interval``). Let
        A be that event and C the event that the statement from the estimates alone holds. On A the exact S holds
        with certainty, so P(the printed statement holds) = P(A) + P(C ∩ not A) ≥ P(A) + P(C) − P(A) = P(C): proving
        some documents never lowers the coverage, whatever A depends on. Mixing per document would: a document's
        draws miss part of q's support exactly when they missed its configurations, so the estimates of the
        documents left unproven are a selection, biased high (docs/estimators.md, mixing measured), and proving the
        others takes away the variance that covered that bias.
        """
        total, rounding = float(sum(e.proven for e in errors)), float(sum(e.rounding for e in errors))
        return Interval(total - rounding, total + rounding, total, 0.0, 0.0, 0.0, self.level)

    @property
    def normal_quantile(self) -> float:
        """z_{(1 + level)/2} (1.96 at 95%): the width of lm-eval's Stderr column (``interval_stderr``)."""
        return float(stats.norm.ppf(0.5 + self.level / 2))

    # ---- the precision target's allocation ------------------------------------------------------------------------

    def remainder_acceptable(self, sum_v: float, sum_v15: float, planned: bool = False) -> bool:
        """Whether the first-order bias correction's remainder R = Σ v^{3/2} (nats) is small enough for a
        two-sided interval: against the standard error, G = R / √Σ v ≤ ``max_remainder``, or against the correction
        itself, R / C ≤ ``max_remainder_share`` (C = Σ v / 2); with ``planned``, at the limits the precision target
        allocates for (``allocation_remainder``, ``allocation_remainder_share``).

        The interval allows the bias of Σ log p̂ anywhere in [0, 2C] (plus t·SE either side), so the correction need
        not be accurate to a fraction of SE: where R ≤ C/2, C ± R lies in [C/2, 3C/2], well inside the allowance.
        R / C = 2 Σ v^{3/2} / Σ v is a v-weighted mean of 2√v, so it does not grow with N as G does (documents of a
        fixed precision: G ∝ √N). Their two-sided rates and coverage at 1,000 documents: ``bench/remainder_rules.py``.

        Examples
        --------
        >>> policy = UncertaintyPolicy()
        >>> policy.remainder_acceptable(1.0, 0.4)   # G = 0.4
        True
        >>> policy.remainder_acceptable(100.0, 10.0)  # G = 1.0, but R / C = 0.2
        True
        >>> policy.remainder_acceptable(1.0, 0.6)   # G = 0.6 and R / C = 1.2
        False
        >>> policy.remainder_acceptable(1.0, 0.4, planned=True)   # G = 0.4 > 0.35
        False
        """
        if sum_v == 0:
            return True
        if planned:
            limit, share = self.allocation_remainder, self.allocation_remainder_share
        else:
            limit, share = self.max_remainder, self.max_remainder_share
        return sum_v15 / math.sqrt(sum_v) <= limit or sum_v15 / (sum_v / 2) <= share

    def document_variance_cap(self, documents: float) -> float:
        """The largest v_n that the precision target lets a document keep, for N documents: where every v_n is at
        most it, G ≤ ``allocation_remainder`` (ρ / √N, since G ≤ √N max v) or R / C ≤ ``allocation_remainder_share``
        ((ρ_C / 2)², since R / C ≤ 2 √max v), whichever cap is larger.

        Examples
        --------
        >>> policy = UncertaintyPolicy()
        >>> round(policy.document_variance_cap(20), 4)  # 0.35 / √20
        0.0783
        >>> round(policy.document_variance_cap(1000), 4)  # (0.35 / 2)², not 0.35 / √1000 = 0.0111
        0.0306
        """
        if not documents:
            return math.inf
        return max(
            self.allocation_remainder / math.sqrt(documents), (self.allocation_remainder_share / 2) ** 2
        )

    def disagreement_quantile(self, documents: float) -> float:
        """|z| above which two independent stages of one document disagree: the two-sided 1 − agreement_level / N
        quantile (Bonferroni over the N documents)."""
        return float(stats.norm.isf(self.agreement_level / (2 * max(documents, 1.0))))

    # ---- weights the model bounds ----------------------------------------------------------------------------------

    def bounded_interval(self, weights: Sequence[np.ndarray], bound: float) -> BoundedInterval:
        """The statement about S from importance weights w ∈ [0, ``bound``] (the model's ``importance_weight_bound``:
        the reasoning model's own sampler, w = p(y | x, z)): a betting interval per document at (1 − level) / N
        (``estimators.bounded``), valid at any K, stated beside ``interval``'s."""
        return bounded_interval(weights, bound, self.level)


DEFAULT_POLICY = UncertaintyPolicy()


def log_likelihood_interval(
    errors: Sequence[DocumentError],
    level: float = DEFAULT_LEVEL,
    keys: Sequence | None = None,
    lower_certified: float | None = None,
) -> Interval:
    """``UncertaintyPolicy(level).interval(...)``: the honest ``level`` statement about S from the documents' errors."""
    return UncertaintyPolicy(level=level).interval(errors, keys, lower_certified)
