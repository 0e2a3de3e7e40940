"""Multiple-choice answers under Monte Carlo error: the choices of one question, how likely Monte Carlo error flipped
its answer, more samples for the questions not yet settled, and the run's account per task.

lm-eval asks one ``loglikelihood`` request per choice, all of one document (``Instance.doc_id``), and takes the
argmax: acc is a function of estimates, and lm-eval's acc Stderr counts the questions' sampling error only. Each
question's flip probability (``estimators.decisions.flip_probability``) says how likely its chosen answer is not
the exact argmax; their sum is the expected number of flipped questions. Under a precision target (``target_se``,
as ``auto`` runs for a model without an exact marginal) every question whose flip probability exceeds
``UncertaintyPolicy.max_flip_probability`` (or cannot be estimated) has the documents that tell its choices apart
estimated afresh at four times their samples, up to ``max_samples``, for up to ``max_stages`` − 1 rounds, and keeps
its newest estimates. Stopping once the flip probability is small is a sequential decision: with at most
``max_stages`` looks, the chance that a settled answer is wrong is about ``max_stages`` times the threshold at most
(a union bound over the looks).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..estimators import DocumentEstimate, UncertaintyPolicy
from ..estimators.decisions import flip_probability, moving_documents, weight_correlation
from .conditionals import ConditionalEstimates, Pair

logger = logging.getLogger(__name__)
# a question whose flip probability exceeds this (or is unknown) is listed as unsettled in the run's account
UNSETTLED = 0.05
# samples of an unsettled question's documents grow by this factor per round
GROWTH = 4


@dataclass(frozen=True)
class Question:
    """The choices of one multiple-choice question: lm-eval's task and document, and the (context, continuation) of
    each choice in its order."""

    task: str
    doc_id: int
    pairs: tuple[Pair, ...]


def questions_of(requests) -> list[Question]:
    """The questions among lm-eval's ``loglikelihood`` requests: those of one (task, document) with two or more
    distinct pairs, in the order lm-eval numbered the choices (``Instance.idx``).

    Examples
    --------
    >>> from lm_eval.api.instance import Instance
    >>> reqs = [Instance("loglikelihood", {}, ("Q:", c), i, ("t", 7, 1)) for i, c in enumerate([" a", " b"])]
    >>> questions_of(reqs)
    [Question(task='t', doc_id=7, pairs=(('Q:', ' a'), ('Q:', ' b')))]
    """
    groups: dict[tuple, dict[Pair, None]] = {}
    for req in sorted(requests, key=lambda r: r.idx):
        if getattr(req, "doc_id", None) is not None:
            groups.setdefault((req.task_name, req.doc_id), {})[tuple(req.args)] = None
    return [Question(task, doc, tuple(pairs)) for (task, doc), pairs in groups.items() if len(pairs) > 1]


def _signs(question: Question, found: ConditionalEstimates) -> tuple[np.ndarray, list]:
    """[m, d] signs of the question's m choices over its d distinct documents, and the documents' keys."""
    keys = list(dict.fromkeys(key for pair in question.pairs for _, key in found.terms[pair]))
    signs = np.zeros((len(question.pairs), len(keys)))
    for i, pair in enumerate(question.pairs):
        for sign, key in found.terms[pair]:
            signs[i, keys.index(key)] += sign
    return signs, keys


def _correlation(keys: list, found: ConditionalEstimates) -> np.ndarray | None:
    """[d, d] correlations of the keys' errors where some share a random stream (``found.streams``: the same K draws,
    ``weight_correlation`` of their paired weights), None where none does; NaN entries where two that share a stream
    hold different draws (other sample sizes): their dependence is unknown."""
    streams = [found.streams.get(k) for k in keys]
    if all(name is None or streams.count(name) == 1 for name in streams):
        return None
    out = np.eye(len(keys))
    for i, j in zip(*np.triu_indices(len(keys), 1)):
        if streams[i] is None or streams[i] != streams[j]:
            continue
        a, b = (found.estimates[keys[n]].importance_weights for n in (i, j))
        paired = a is not None and b is not None and a.shape == b.shape
        out[i, j] = out[j, i] = weight_correlation(a, b) if paired else math.nan
    return out


def _flip(signs: np.ndarray, keys: list, found: ConditionalEstimates, policy: UncertaintyPolicy) -> float:
    """The probability that Monte Carlo error flipped the answer of the question of ``_signs`` (NaN: unknown)."""
    correlation = _correlation(keys, found)
    moving = moving_documents(signs)
    if correlation is not None and np.isnan(correlation[np.ix_(moving, moving)]).any():
        return math.nan
    return flip_probability(signs, [found.estimates[k].error(policy) for k in keys], correlation)


def settle(
    questions: list[Question],
    found: ConditionalEstimates,
    reestimate: Callable[[dict, int], dict],
    policy: UncertaintyPolicy,
    budget: int,
) -> ConditionalEstimates:
    """More samples for the questions not yet settled (module docstring). ``reestimate({key: K}, round)`` returns
    fresh estimates of those documents at those sizes, from streams of that round; ``budget``: max_samples."""
    for round_ in range(1, policy.max_stages):
        sizes = {}
        for q in questions:
            signs, keys = _signs(q, found)
            if _flip(signs, keys, found, policy) <= policy.max_flip_probability:
                continue
            grown = {}
            for j in moving_documents(signs):
                est = found.estimates[keys[j]]
                if est.sampled and est.num_samples < budget:
                    grown[keys[j]] = min(GROWTH * est.num_samples, budget)
            # documents on one stream keep common draws: the largest size for them all (a key alone: its own)
            largest: dict = {}
            for key, k in grown.items():
                stream = found.streams.get(key, key)
                largest[stream] = max(largest.get(stream, 0), k)
            sizes |= {key: largest[found.streams.get(key, key)] for key in grown}
        if not sizes:
            break
        logger.info(
            "multiple choice: %d documents of unsettled questions re-estimated with more samples (round %d)",
            len(sizes),
            round_,
        )
        found = found.replace(reestimate(sizes, round_))
    return found


@dataclass
class ChoiceAccount:
    """Per task, what Monte Carlo error may have done to the answers of one ``loglikelihood`` batch: questions,
    expected flipped questions (the sum of the flip probabilities), questions whose flip probability is unknown or
    above ``UNSETTLED``, the mean samples per document that tells their choices apart, and per question (by lm-eval's
    doc_id) its flip probability (None: unknown) and each choice's standard error (None: cannot be estimated).
    ``tasks`` goes into lm-eval's results (``choice_monte_carlo``; its samples file has no field for them),
    ``lines()`` into the log beside its table."""

    tasks: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def of(
        cls, questions: list[Question], found: ConditionalEstimates, policy: UncertaintyPolicy
    ) -> ChoiceAccount:
        rows: dict[str, dict] = {}
        for q in questions:
            signs, keys = _signs(q, found)
            p = _flip(signs, keys, found, policy)
            moving = [_samples(found.estimates[keys[j]]) for j in moving_documents(signs)]
            row = rows.setdefault(
                q.task,
                {
                    "questions": 0,
                    "expected_flips": 0.0,
                    "unknown": 0,
                    "unsettled": 0,
                    "mean_samples": 0.0,
                    "per_question": {},
                },
            )
            stderr = [found.conditional(pair).stderr for pair in q.pairs]
            row["per_question"][str(q.doc_id)] = {
                "flip_probability": None if math.isnan(p) else p,
                "stderr": [None if math.isnan(se) else se for se in stderr],
            }
            row["questions"] += 1
            row["unknown"] += int(math.isnan(p))
            row["unsettled"] += int(not p <= UNSETTLED)
            row["expected_flips"] += 0.0 if math.isnan(p) else p
            row["mean_samples"] += float(np.mean(moving)) if moving else 0.0
        for row in rows.values():
            row["mean_samples"] /= row["questions"]
        return cls(rows)

    def lines(self, advice: list[str]) -> list[tuple[str, bool]]:
        """(line, whether it is a warning: some answer may be flipped) per task; ``advice``: the estimator's, what to
        try where an estimate's error cannot be trusted (``Estimator.advice``)."""
        tries = f"; try {', '.join(advice)}" if advice else ""
        return [
            (
                f"{task}: Monte Carlo error flipped {r['expected_flips']:.2f} of the "
                f"{r['questions'] - r['unknown']} answers whose flip probability is known, in expectation"
                + (
                    f"; for {r['unknown']} of the {r['questions']} questions it is unknown (an estimate's error "
                    f"cannot be trusted{tries})"
                    if r["unknown"]
                    else ""
                )
                + f"; {r['unsettled'] - r['unknown']} questions have a flip probability above {UNSETTLED:.0%} "
                "(lm-eval's acc Stderr counts the questions' sampling only)",
                r["unsettled"] > 0 or r["expected_flips"] >= 0.005,
            )
            for task, r in self.tasks.items()
        ]


def _samples(estimate: DocumentEstimate) -> float:
    return estimate.num_samples if estimate.sampled else 0.0
