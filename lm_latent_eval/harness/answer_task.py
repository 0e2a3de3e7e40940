"""Answer-likelihood tasks: log p(answer | question) per question from a conditional view (``latent_reasoning``: the
model's chains of thought marginalized), their mean over the task's questions with its two errors apart, and, for a
multiple-choice task, acc under the marginal.

Per question the item holds the answer's whole estimate (its log weights: the samples file keeps them). The
aggregations state about the mean M = (1/N) Σ_n log p(y_n | x_n):

* ``answer_log_likelihood``: the mean of the estimates, (1/N) Σ_n log p̂_n (biased low: E[log p̂] ≤ log p);
* ``answer_ll_lower`` / ``answer_ll_upper``: the package's statement (``UncertaintyPolicy.interval``: two-sided
  where every document's v̂ is trusted, else the certified lower bound and +inf), divided by N;
* ``answer_ll_bounded_lower`` / ``answer_ll_bounded_upper``: where the model bounds the weights (its own sampler:
  w = p(y | x, z) ∈ [0, 1]), the betting interval (``UncertaintyPolicy.bounded_interval``), valid at any K; NaN
  otherwise;
* ``answer_ll_mc_se``: the Monte Carlo standard error of M with the questions fixed, √Σ v̂_n / N (NaN where a v̂ is
  not trusted); ``answer_ll_sampling_se``: the standard error over questions drawn at random, s(log p̂) / √N.

The answers to one question share their chains (common random numbers), so two items whose questions repeat are
not independent: the items are split into groups of distinct questions (first occurrences, second, ...), each
group's statement made at level 1 − δ / G, and the ends summed (a union bound; one group where no question repeats).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..estimators import UncertaintyPolicy
from ..estimators.registry import estimate_from_json
from .exchange import EstimateExchange

METRICS = (
    "answer_log_likelihood",
    "answer_ll_lower",
    "answer_ll_upper",
    "answer_ll_bounded_lower",
    "answer_ll_bounded_upper",
    "answer_ll_mc_se",
    "answer_ll_sampling_se",
)


def gsm8k_question(doc: dict) -> str:
    """The question as lm-eval's gsm8k task writes it: ``Question: ...\\nAnswer:``."""
    return f"Question: {doc['question']}\nAnswer:"


def gsm8k_answer(doc: dict) -> str:
    """The final numeric answer after ``####``, with its leading space: the continuation scored.

    Examples
    --------
    >>> gsm8k_answer({"answer": "2 + 2 = <<2+2=4>>4 bones.\\n#### 4"})
    ' 4'
    """
    return " " + doc["answer"].split("####")[-1].strip()


def arc_question(doc: dict) -> str:
    """The question as lm-eval's arc_easy task writes it."""
    return f"Question: {doc['question']}\nAnswer:"


def arc_gold(doc: dict) -> int:
    """The index of the correct choice."""
    return doc["choices"]["label"].index(doc["answerKey"])


def answer_item(context: str, continuation: str, log_likelihood: float) -> dict:
    """The item of one question: the answer's whole estimate (``answer_estimate``) with the question as its key."""
    exchange = EstimateExchange.current()
    record = exchange.answer_estimate(context, continuation, log_likelihood).to_json()
    record.pop("document")
    return record | {"key": context, "weight_bound": exchange.weight_bound}


def gsm8k_items(doc: dict, results: list) -> dict:
    """``process_results`` of the gsm8k answer-likelihood task: one item per metric (the same item)."""
    ((log_likelihood, _),) = results
    item = answer_item(gsm8k_question(doc), gsm8k_answer(doc), log_likelihood)
    return dict.fromkeys(METRICS, item)


def arc_items(doc: dict, results: list) -> dict:
    """``process_results`` of the multiple-choice task: acc under the marginal (the choice of largest log p̂) and
    the correct choice's item."""
    values = [ll for ll, _ in results]
    gold = arc_gold(doc)
    item = answer_item(arc_question(doc), " " + doc["choices"]["text"][gold], values[gold])
    return {"acc": float(int(np.argmax(values)) == gold), **dict.fromkeys(METRICS, item)}


@dataclass(frozen=True)
class AnswerStatement:
    """What the aggregations report about M, the mean log p(y | x) over the questions (module docstring)."""

    mean: float
    lower: float
    upper: float
    bounded_lower: float
    bounded_upper: float
    monte_carlo_se: float
    sampling_se: float


_STATEMENTS: dict[tuple, AnswerStatement] = {}


def statement(items: list[dict]) -> AnswerStatement:
    """The ``AnswerStatement`` of a task's items under the run's policy (computed once per list of items)."""
    policy = EstimateExchange.current().policy
    fingerprint = (policy, *((i["key"], i["log_likelihood"]) for i in items))
    if fingerprint not in _STATEMENTS:
        _STATEMENTS[fingerprint] = _statement(items, policy)
    return _STATEMENTS[fingerprint]


def _statement(items: list[dict], policy: UncertaintyPolicy) -> AnswerStatement:
    n = len(items)
    estimates = [estimate_from_json(i | {"document": i["key"]}) for i in items]
    ll = np.array([e.log_likelihood for e in estimates])
    errors = [e.error(policy) for e in estimates]
    seen: Counter = Counter()
    groups: dict[int, list[int]] = {}
    for j, item in enumerate(items):
        seen[item["key"]] += 1
        groups.setdefault(seen[item["key"]], []).append(j)
    group_policy = UncertaintyPolicy(level=1.0 - policy.delta / len(groups))
    intervals = [group_policy.interval([errors[j] for j in members]) for members in groups.values()]
    lower, upper = sum(i.lower for i in intervals) / n, sum(i.upper for i in intervals) / n
    v = np.array([e.relative_variance for e in errors])
    trusted = all(e.trusted for e in errors) and np.isfinite(v).all()
    bound = items[0].get("weight_bound")
    weights = [e.importance_weights for e in estimates]
    if bound is not None and all(w is not None for w in weights):
        bounded = policy.bounded_interval([np.exp(w) for w in weights], bound)
        bounded_lower, bounded_upper = bounded.lower / n, bounded.upper / n
    else:
        bounded_lower = bounded_upper = math.nan
    return AnswerStatement(
        float(ll.mean()),
        lower,
        upper,
        bounded_lower,
        bounded_upper,
        math.sqrt(float(v.sum())) / n if trusted else math.nan,
        float(ll.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
    )


def mean_log_likelihood(items) -> float:
    """``answer_log_likelihood``: (1/N) Σ_n log p̂(y_n | x_n)."""
    return statement(items).mean


def lower(items) -> float:
    """``answer_ll_lower``: the lower end of the package's statement about M."""
    return statement(items).lower


def upper(items) -> float:
    """``answer_ll_upper``: its upper end (+inf where only the certified bound is honest)."""
    return statement(items).upper


def bounded_lower(items) -> float:
    """``answer_ll_bounded_lower``: the bounded-weights interval's lower end (NaN: weights unbounded)."""
    return statement(items).bounded_lower


def bounded_upper(items) -> float:
    """``answer_ll_bounded_upper``: its upper end."""
    return statement(items).bounded_upper


def monte_carlo_se(items) -> float:
    """``answer_ll_mc_se``: the Monte Carlo standard error of M, the questions fixed."""
    return statement(items).monte_carlo_se


def sampling_se(items) -> float:
    """``answer_ll_sampling_se``: the standard error of M over questions drawn at random."""
    return statement(items).sampling_se
