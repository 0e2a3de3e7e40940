"""The estimate exchange: how a latent backend hands its whole estimates to the perplexity tasks.

lm-eval gives a task's ``process_results`` only the float the backend returned for a request. Our perplexity metrics
need the whole estimate of each document (K log weights, SMC runs, diagnostics), a completion task needs the
continuation's token count, and every aggregation needs the run's uncertainty policy (its ``level``). The backend
and the tasks share them through one ``EstimateExchange``:

* **created** per evaluation, by the backend when it is constructed (``EstimateExchange.begin(settings)``, with the
  run's resolved ``EstimatorSettings``); it becomes the *current* exchange;
* **filled** by the backend: ``loglikelihood_rolling`` puts each document's estimate (``put_documents``, which
  replaces the previous batch), ``loglikelihood`` each (context, continuation)'s conditional and token count
  (``put_conditionals``), ``set_cache_hook`` the ``--use_cache`` database (``keep_in``), in which ``put_documents``
  also keeps the estimates, so that a rerun the cache answers without calling the backend still finds them. Filling
  an exchange does not make it current: the backend does that, explicitly, as it starts to answer a batch
  (``make_current``; a process holding two backends: the tasks read the one that answered last);
* **read** by the tasks, which lm-eval calls without context, through the one access point
  ``EstimateExchange.current()``: ``process_results`` looks up each document's estimate (``document``) or a
  continuation's tokens (``continuation_tokens``), the aggregations compute the corpus statement once under the
  run's policy (``corpus``);
* **ended** when the next evaluation's backend is constructed and its exchange becomes current (lm-eval has no
  end-of-evaluation hook: the last aggregation cannot know it is the last). The old exchange then lives only as long
  as its backend. ``clear()`` empties an exchange at once (a test, or a long-lived process that wants the memory).

The exchange is process-local: each rank of a multi-process run fills and reads its own shard.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass
from typing import ClassVar

from ..errors import UserError
from ..estimators import DEFAULT_POLICY, DocumentEstimate, EstimatorSettings, UncertaintyPolicy
from ..estimators.corpus import CorpusEstimate, corpus_estimate
from ..estimators.registry import estimate_from_json
from .cache import EstimateCache
from .lm_eval_versions import TESTED

WHERE = "lm-latent-eval perplexity task"


class NoEstimateError(UserError, RuntimeError):
    """A perplexity task got a number for which this process has no estimate (another model, or a foreign cache)."""


@dataclass(frozen=True)
class Conditional:
    """What ``loglikelihood`` answered for one (context, continuation): log p̂(continuation | context), the
    model tokens of the continuation (a completion task's perplexity divides by them) and the Monte Carlo standard
    error of the value (NaN where it cannot be estimated honestly)."""

    log_likelihood: float
    num_tokens: int
    stderr: float = math.nan


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


class EstimateExchange:
    """The estimates of one evaluation, from the backend that made them to the tasks that report them.

    Parameters
    ----------
    settings : EstimatorSettings, optional
        The run's resolved settings; the corpus statement is made at their ``level``
        (``UncertaintyPolicy.of(settings)``). None: the default policy (95%).

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, ExactEstimate
    >>> exchange = EstimateExchange.begin(EstimatorSettings(estimator="exact", level=0.9))
    >>> exchange.put_documents({"a b": ExactEstimate("a b", 2, -4.0)})
    >>> EstimateExchange.current() is exchange, EstimateExchange.current().document("a b", -4.0).num_tokens
    (True, 2)
    >>> exchange.policy.level
    0.9
    >>> exchange.document("a b", -5.0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.harness.exchange.NoEstimateError: lm-latent-eval perplexity task: document 'a b': lm-eval received log p = -5.0 but ...
    """

    _current: ClassVar[EstimateExchange | None] = None

    def __init__(self, settings: EstimatorSettings | None = None) -> None:
        self.settings = settings
        self._documents: dict[str, DocumentEstimate] = {}
        self._conditionals: dict[tuple[str, str], Conditional] = {}
        self._answers: dict[tuple[str, str], DocumentEstimate] = {}
        self.weight_bound: float | None = None
        self._cache: EstimateCache | None = None
        # corpus statements by their items' fingerprint (a task with an unknown-word penalty has two)
        self._corpora: dict[tuple, CorpusEstimate] = {}

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    @classmethod
    def begin(cls, settings: EstimatorSettings | None = None) -> EstimateExchange:
        """A new, empty exchange for an evaluation with these settings, made current."""
        exchange = cls(settings)
        exchange.make_current()
        return exchange

    @classmethod
    def current(cls) -> EstimateExchange:
        """The exchange the tasks read: the one begun, or made current by the backend answering, last in this
        process.

        Raises
        ------
        NoEstimateError
            No exchange was begun in this process (no lm-latent-eval backend was built).
        """
        if cls._current is None:
            raise NoEstimateError(
                f"{WHERE}: no lm-latent-eval backend has begun an evaluation in this process; run the task with "
                "--model latent_<name> (or build the backend before lm_eval.simple_evaluate), or call "
                "EstimateExchange.begin(settings) first"
            )
        return cls._current

    def make_current(self) -> None:
        """Make this the exchange ``current()`` returns."""
        EstimateExchange._current = self

    def clear(self) -> None:
        """Forget every estimate and the ``--use_cache`` database (a task then refuses every number)."""
        self._documents.clear()
        self._conditionals.clear()
        self._answers.clear()
        self._cache = None
        self._corpora.clear()

    @property
    def policy(self) -> UncertaintyPolicy:
        """The run's uncertainty policy: ``UncertaintyPolicy.of(settings)``."""
        return DEFAULT_POLICY if self.settings is None else UncertaintyPolicy.of(self.settings)

    # ---- filled by the backend ----------------------------------------------------------------------------------

    def keep_in(self, cache: EstimateCache | None) -> None:
        """Keep the documents' estimates in lm-eval's ``--use_cache`` database too, and look them up there."""
        if cache is not None:
            self._cache = cache

    def put_documents(self, estimates: dict[str, DocumentEstimate]) -> None:
        """The estimates (by document text) of a ``loglikelihood_rolling`` batch, replacing the previous batch."""
        self._documents = dict(estimates)
        if self._cache is not None:
            self._cache.put(estimates)

    def put_conditionals(
        self,
        values: dict[tuple[str, str], Conditional],
        estimates: dict[tuple[str, str], DocumentEstimate] | None = None,
        weight_bound: float | None = None,
    ) -> None:
        """What a ``loglikelihood`` batch answered, by (context, continuation), replacing the previous batch; with
        ``estimates`` the whole estimate of each pair a conditional view answered, and the bound its importance
        weights have (``weight_bound``: the model's ``importance_weight_bound``, None: unbounded)."""
        self._conditionals = dict(values)
        self._answers = dict(estimates or {})
        self.weight_bound = weight_bound

    def answer_estimate(self, context: str, continuation: str, log_likelihood: float) -> DocumentEstimate:
        """The whole estimate behind log p̂(continuation | context) from a conditional view (``put_conditionals``).

        Raises
        ------
        NoEstimateError
            This process holds none for the pair with that value (another model, a cache, or no conditional view).
        """
        est = self._answers.get((context, continuation))
        if est is None or not _same(est.log_likelihood, log_likelihood):
            raise NoEstimateError(
                f"{WHERE}: no estimate of the answer {continuation[:40]!r} to {context[-40:]!r} from a conditional "
                "view in this process (an answer-likelihood task needs --model latent_reasoning, without --use_cache)"
            )
        return est

    # ---- read by the tasks --------------------------------------------------------------------------------------

    def peek(self, text: str) -> DocumentEstimate | None:
        """The estimate of ``text`` from the latest batch, or None."""
        return self._documents.get(text)

    def document(self, text: str, log_likelihood: float) -> DocumentEstimate:
        """The estimate of ``text`` whose log p̂ is the ``log_likelihood`` lm-eval handed to the task.

        Raises
        ------
        NoEstimateError
            Neither this exchange nor its ``--use_cache`` database has an estimate of the text, or the estimate
            gives another value (a cache or another model produced the number lm-eval holds).
        """
        est = self._documents.get(text)
        if est is None and self._cache is not None:
            est = self._cache.get(text)
        if est is None:
            raise NoEstimateError(
                f"{WHERE}: no estimate for document {text[:60]!r} in this process or its --use_cache database: "
                + self._why_no_estimate()
            )
        if not _same(est.log_likelihood, log_likelihood):
            raise NoEstimateError(
                f"{WHERE}: document {text[:60]!r}: lm-eval received log p = {log_likelihood!r} but the "
                f"lm-latent-eval backend of this process estimated {est.log_likelihood!r}; the result comes from "
                "another model or from a cache, so its samples are not available"
            )
        return est

    def _why_no_estimate(self) -> str:
        """Why the backend's latest batch lacks a document the task asks for, from what the batch holds."""
        if self._documents:
            seen = next(iter(self._documents))
            return (
                f"the lm-latent-eval backend estimated {len(self._documents)} other texts in its latest batch (e.g. "
                f"{seen[:40]!r}), so the task's loglikelihood_rolling requests do not carry the text its doc_to_target "
                f"gives (check the task's doc_to_target; lm-eval {_lm_eval_version()} is installed, {' and '.join(TESTED)} tested)"
            )
        if self._conditionals:
            return (
                "the lm-latent-eval backend answered loglikelihood requests, not loglikelihood_rolling ones: a "
                "perplexity task needs output_type: loglikelihood_rolling"
            )
        return (
            "no lm-latent-eval backend answered this task's requests. This task needs one (--model latent_hmm, "
            "latent_kglm, or --model latent model=...); a --use_cache database written by another model or by an "
            "older lm-latent-eval lacks the samples (use a new cache file)."
        )

    def continuation_tokens(self, context: str, continuation: str, log_likelihood: float) -> int:
        """The model tokens of ``continuation`` after ``context``, as counted by the backend that returned
        ``log_likelihood`` for the pair; RuntimeError when this process did not (another model, or ``--use_cache``)."""
        value = self._conditionals.get((context, continuation))
        if value is None or not _same(value.log_likelihood, log_likelihood):
            raise RuntimeError(
                f"lm-latent-eval completion task: no estimate of the continuation {continuation[:40]!r} of context "
                f"{context[-40:]!r} by a latent backend of this process (the task counts the continuation's tokens "
                "with the model that scored it; it cannot use --use_cache or another model)"
            )
        return value.num_tokens

    @staticmethod
    def reference(item: dict, field: str) -> EstimateReference:
        """A metric's item that stands for ``item``, the whole estimate the metric ``field`` carries for the same
        document: the fields that identify it (its key, log p̂, estimator and number of log weights), so that lm-eval's
        samples file holds each estimate once; the whole estimate travels with it in memory (``EstimateReference``),
        so ``corpus`` reads a list of references as the list they stand for whichever metrics a task keeps, in
        whatever order lm-eval aggregates them."""
        return EstimateReference(item, field)

    def corpus(self, items: list[dict]) -> CorpusEstimate:
        """The corpus estimate of a perplexity metric's items (``perplexity_task.document_items``: whole estimates,
        or ``reference``s to them) under the run's policy, computed once per list of documents: every metric of a
        task aggregates the same documents, the metric carrying the whole estimates first.

        Raises
        ------
        NoEstimateError
            ``items`` are references read back from JSON (no whole estimate with them) whose whole estimates were
            not aggregated before them.
        """
        fingerprint = (self.policy, *(tuple(_identity(i).values()) for i in items))
        if fingerprint not in self._corpora:
            wholes = [i.whole if isinstance(i, EstimateReference) else i for i in items]
            if any("same_as" in i for i in wholes):
                raise NoEstimateError(
                    f"{WHERE}: this metric's items refer to the estimates of {items[0]['same_as']!r} without "
                    "carrying them (read back from a file?), and those were not aggregated first; aggregate the "
                    "items process_results returned"
                )
            estimates = [estimate_from_json(item) for item in wholes]
            self._corpora[fingerprint] = corpus_estimate(
                estimates, self.policy, keys=[i["key"] for i in wholes]
            )
        return self._corpora[fingerprint]


class EstimateReference(dict):
    """A metric's item that stands for a document's whole estimate held by another metric of the same task
    (``EstimateExchange.reference``): as a dict (what lm-eval writes to the samples file) only the fields that
    identify the estimate and ``same_as``, the metric holding it; in memory the whole item too (``whole``), so that a
    task keeping any subset of the metrics, in any order, aggregates the same estimates (and a multi-process run
    gathers them to rank 0 with the references: pickling keeps ``whole``, the JSON of the samples file does not).

    Examples
    --------
    >>> import json
    >>> whole = {"key": "k", "log_likelihood": -2.0, "estimator": "exact", "log_weights": None, "num_tokens": 1}
    >>> ref = EstimateReference(whole, "latent_perplexity")
    >>> json.dumps(ref)
    '{"same_as": "latent_perplexity", "key": "k", "log_likelihood": -2.0, "estimator": "exact", "num_log_weights": 0}'
    >>> ref.whole is whole
    True
    """

    def __init__(self, whole: dict, field: str) -> None:
        super().__init__(same_as=field, **_identity(whole))
        self.whole = whole

    def __reduce__(self):
        return (EstimateReference, (self.whole, self["same_as"]))


def _identity(item: dict) -> dict:
    """What identifies a document's estimate in a metric's item, whole or a reference."""
    if "same_as" in item:
        return {k: item[k] for k in ("key", "log_likelihood", "estimator", "num_log_weights")}
    num = len(item["log_weights"] or ())
    return {
        "key": item["key"],
        "log_likelihood": item["log_likelihood"],
        "estimator": item["estimator"],
        "num_log_weights": num,
    }


def _lm_eval_version() -> str:
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
