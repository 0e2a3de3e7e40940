"""The lm-eval side of our perplexity tasks (tasks/latent_ppl_tiny and every task built on it).

``document_items`` is what a task's ``process_results`` returns for one document: every metric's item, all from the
SAME estimate the backend made (read from the current ``EstimateExchange``), as JSON-ready dicts (lm-eval writes
them to the samples file, where ``reports`` reads the per-document log weights back). The aggregations below turn
the items of all documents into the corpus figures, at the run's ``level`` (the exchange carries the run's
settings: ``UncertaintyPolicy.of(settings)``); the task YAML names them directly
(``aggregation: !function lm_latent_eval.harness.perplexity_task.instance_perplexity``), as it names the corpus
loader and ``process_results`` here: every function of the task is importable, so a copy of a task YAML works from
any folder (a task over another corpus is ``class: !function lm_latent_eval.harness.template_task.PerplexityTask``).
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
from pathlib import Path

import datasets
from lm_eval.api.task import ConfigurableTask

from ..documents import TEXT_FIELD, corpus_loader, document_key, read_texts
from ..errors import InputError
from ..estimators import DocumentEstimate
from ..estimators.corpus import CorpusEstimate
from ..paths import DATA_DIR
from .exchange import EstimateExchange, EstimateReference
from .lm_eval_versions import own_stderr, rolling_log_likelihood
from .task_introspection import calling_task, metric_names, template_config

# the metric whose item is the document's whole estimate (what reports read from the samples file); the other
# metrics of the same statement carry a reference to it (``EstimateExchange.reference``), so lm-eval's samples file
# holds each estimate once. Not "perplexity": lm-eval 0.5 registers that name as its own loglikelihood metric and
# refuses a loglikelihood_rolling task that names it
SAMPLES_FIELD = "latent_perplexity"
PERPLEXITY_METRICS = (
    SAMPLES_FIELD,
    "latent_perplexity_stderr",
    "perplexity_upper_bound",
    "perplexity_sampling_se",
    "instance_perplexity",
    "corpus_perplexity",
)
# the names these two metrics had before lm-eval 0.5 (lm-latent-eval 0.1.0's samples files and task YAMLs): a
# template-based task's metric_list and ``reports`` still read them
RENAMED_METRICS = {"perplexity": SAMPLES_FIELD, "perplexity_stderr": "latent_perplexity_stderr"}
logger = logging.getLogger(__name__)


@corpus_loader
def load_corpus(data_file: str | None = None, **_metadata):
    """``custom_dataset`` of latent_ppl_tiny: the bundled tiny corpus, or the file of ``--metadata
    '{"data_file": ...}'``.

    Parameters
    ----------
    data_file : str, optional
        A .jsonl file with a ``text`` field, or one document per line (an unusable line is an InputError naming the
        file and line); None: ``data/corpus/tiny_test.jsonl``.
    **_metadata
        The other metadata and model_args lm-eval passes; ignored.

    Returns
    -------
    datasets.DatasetDict
        One split, ``test``, with one row per document and a ``text`` column.

    Examples
    --------
    >>> corpus = load_corpus()
    >>> corpus["test"].num_rows, corpus["test"][0]
    (30, {'text': 'The busy teacher waited.'})
    """
    path = Path(data_file) if data_file else DATA_DIR / "corpus" / "tiny_test.jsonl"
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict({TEXT_FIELD: read_texts(path)})})


def doc_to_target(doc: dict) -> str:
    """The document text scored by loglikelihood_rolling.

    Parameters
    ----------
    doc : dict
        A row of the task's dataset, with a ``text`` field.

    Returns
    -------
    str

    Examples
    --------
    >>> doc_to_target({"text": "the cat sat"})
    'the cat sat'
    """
    return doc[TEXT_FIELD]


def process_results(doc: dict, results: list) -> dict:
    """``process_results`` of every perplexity task: the items of every metric, all from the backend's estimate of
    this very document (``document_items``).

    Parameters
    ----------
    doc : dict
        A row of the task's dataset, with a ``text`` field.
    results : list
        What ``loglikelihood_rolling`` returned for it: ``[log p̂]`` (lm-eval 0.4) or ``[(log p̂, False)]`` (0.5).

    Returns
    -------
    dict
        The item of every metric by name (``document_items``).

    Raises
    ------
    NoEstimateError
        The current ``EstimateExchange`` has no estimate of the document giving that log p̂.

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> run = resolve(EstimatorSettings("exact"), hmm)
    >>> exact = run.estimate("the cat sat")
    >>> EstimateExchange.begin(run.settings).put_documents({"the cat sat": exact})
    >>> items = process_results({"text": "the cat sat"}, [exact.log_likelihood])
    >>> items["latent_perplexity"]["num_tokens"], items["latent_perplexity_stderr"]["same_as"]
    (3, 'latent_perplexity')
    >>> process_results({"text": "the cat sat"}, [(exact.log_likelihood, False)]) == items  # lm-eval 0.5's results
    True
    """
    text = doc_to_target(doc)
    log_likelihood = rolling_log_likelihood(results)
    items = document_items(text, log_likelihood, ConfigurableTask.count_words(text))
    task = calling_task()  # the metrics the calling task lists (none without a task)
    listed = None if task is None else metric_names(getattr(task.config, "metric_list", None))
    if listed is None:
        return items
    return kept_items(items, listed, getattr(task.config, "task", None) or "this task")


def document_items(text: str, log_likelihood: float, num_words: int) -> dict:
    """Per-document items of every metric of the task, from the current exchange's estimate of ``text``.

    Parameters
    ----------
    text : str
        The document.
    log_likelihood : float
        The log p̂ lm-eval handed to the task (checked against the exchange's estimate).
    num_words : int
        lm-eval's whitespace word count; 0 is kept for a document without tokens or words (lm-eval counts "" as one
        word and "   " as two, which would divide its log p = 0.0 into ``word_perplexity`` while ``perplexity``
        rightly leaves the document out; a model that scores whitespace keeps its log p in the numerator, over no
        word).

    Returns
    -------
    dict
        ``latent_perplexity``: the whole estimate (``DocumentEstimate.to_json`` less the text, with its ``key`` and
        ``num_words``); the other perplexity metrics: a reference to it (``EstimateExchange.reference``);
        ``word_perplexity``: (log p̂, words); the family's ``diagnostic_items``; and, for a model with an unknown-word
        penalty, ``ppl_*`` and ``upp_*``.

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, ExactEstimate
    >>> EstimateExchange.begin(EstimatorSettings("exact")).put_documents({"a b": ExactEstimate("a b", 2, -4.0)})
    >>> items = document_items("a b", -4.0, 2)
    >>> items["latent_perplexity"]["log_likelihood"], items["instance_perplexity"]["same_as"], items["word_perplexity"]
    (-4.0, 'latent_perplexity', (-4.0, 2))
    """
    exchange = EstimateExchange.current()
    est = exchange.document(text, log_likelihood)
    num_words = num_words if est.num_tokens > 0 and text.split() else 0
    item = _item(est, text) | {"num_words": num_words}
    # the whole estimate once, first: lm-eval aggregates the metrics in this order, and the references' aggregations
    # find the corpus statement the first one computed
    same = exchange.reference(item, SAMPLES_FIELD)
    items = {SAMPLES_FIELD: item, **dict.fromkeys(PERPLEXITY_METRICS[1:], same)}
    items["word_perplexity"] = (log_likelihood, num_words)
    # the estimator family's own diagnostics (IS: ESS and k̂; SMC: resampling and ESS), no row otherwise
    items |= est.diagnostic_items()
    # a model with an unknown-word penalty (KGLM): PPL without it, UPP with it
    plain = est.without_unk_penalty()
    if plain is not None:
        plain_item = _item(plain, text)
        items |= {
            "ppl_instance": plain_item,
            "ppl_corpus": exchange.reference(plain_item, "ppl_instance"),
            "upp_instance": same,
            "upp_corpus": same,
        }
    return items


@functools.cache
def valid_metric_names() -> tuple[str, ...]:
    """Every metric ``process_results`` may give an item for (the bundled template's ``metric_list``, and the names
    before the rename); read from the bundled YAML once per process (``process_results`` checks every document's
    task against it)."""
    return (*metric_names(template_config()["metric_list"]), *RENAMED_METRICS)


def kept_items(items: dict, listed: list[str], task: str = "this task") -> dict:
    """The items of the metrics a task lists, whichever subset and order (lm-eval would aggregate an item the task
    does not list by ``mean``, which a whole estimate is not). Each estimate stays whole in the first kept metric that
    stands for it (the samples file holds it once: ``reports`` read it there); the other kept metrics refer to that
    one. An old name of ``RENAMED_METRICS`` gets the renamed metric's item.

    Raises
    ------
    InputError
        The task lists a metric that no ``process_results`` of ours gives (a misspelling): one line naming the task,
        the name, the closest valid name and the valid names.

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, ExactEstimate
    >>> EstimateExchange.begin(EstimatorSettings("exact")).put_documents({"a b": ExactEstimate("a b", 2, -4.0)})
    >>> items = kept_items(document_items("a b", -4.0, 2), ["corpus_perplexity", "instance_perplexity"])
    >>> list(items), "log_weights" in items["corpus_perplexity"], items["instance_perplexity"]["same_as"]
    (['corpus_perplexity', 'instance_perplexity'], True, 'corpus_perplexity')
    >>> kept_items(items, ["latnet_perplexity"], "my_ppl")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: task my_ppl: metric_list names 'latnet_perplexity', which ...
    """
    check_metric_names(listed, task)
    names = [RENAMED_METRICS.get(name, name) for name in listed]
    kept, holders = {}, {}
    for old, name in zip(listed, names, strict=True):
        if name not in items:
            continue  # a metric of another estimator family or model (is_*, smc_*, ppl_*): no item here
        item = items[name]
        if isinstance(item, EstimateReference) or (isinstance(item, dict) and "log_weights" in item):
            whole = item.whole if isinstance(item, EstimateReference) else item
            holder = holders.setdefault(id(whole), old)
            item = whole if holder == old else EstimateExchange.reference(whole, holder)
        kept[old] = item
    return kept


def check_metric_names(listed: list[str], task: str = "this task") -> None:
    """Refuse a metric name that no ``process_results`` of ours gives, in one line with the closest valid name."""
    valid = valid_metric_names()
    for name in listed:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise InputError(
                f"task {task}: metric_list names {name!r}, which lm-latent-eval's process_results does not give; "
                f"{hint}valid names: {', '.join(v for v in valid if v not in RENAMED_METRICS)}"
            )


def _item(est: DocumentEstimate, text: str) -> dict:
    record = est.to_json()
    # the samples file holds the document already
    record.pop("document")
    # repeated texts share a random stream
    record["key"] = document_key(text)
    return record


def _corpus(items) -> CorpusEstimate:
    """The corpus estimate of a metric's items under the run's policy (computed once by the exchange: every metric of
    a task aggregates the same items)."""
    return EstimateExchange.current().corpus(items)


@own_stderr
def perplexity(items) -> float:
    """The perplexity to quote (metric ``latent_perplexity``): bias-corrected where a two-sided interval is honest,
    else the instance level. Also logs why other rows of lm-eval's table repeat a number (``repeated_rows``), once
    per task.

    Parameters
    ----------
    items : list of dict
        The ``latent_perplexity`` items of the task's documents (``process_results``).

    Returns
    -------
    float
        The corpus perplexity under the run's policy (``CorpusEstimate.perplexity``).

    Examples
    --------
    Every aggregation of a task's items; two exact estimates, log p = −6 over 3 tokens (the other metrics' items
    are references to these, and aggregate alike):

    >>> from lm_latent_eval.estimators import EstimatorSettings, ExactEstimate
    >>> docs = {"a b": ExactEstimate("a b", 2, -4.0), "c": ExactEstimate("c", 1, -2.0)}
    >>> EstimateExchange.begin(EstimatorSettings("exact")).put_documents(docs)
    >>> items = [process_results({"text": t}, [e.log_likelihood])["latent_perplexity"] for t, e in docs.items()]
    >>> round(perplexity(items), 6), round(instance_perplexity(items), 6), round(corpus_perplexity(items), 6)
    (7.389056, 7.389056, 7.389056)
    >>> perplexity_stderr(items), perplexity_upper_bound(items) == perplexity(items), perplexity_sampling_se(items)
    (0.0, True, 0.0)
    """
    for note in repeated_rows(items):
        logger.info("%s", note)
    return _corpus(items).perplexity


def repeated_rows(items) -> list[str]:
    """One sentence per pair of rows of the task's table that show the same number, saying why."""
    corpus, notes = _corpus(items), []
    items = [i.whole if isinstance(i, EstimateReference) else i for i in items]
    if corpus.bound_with_error:
        notes.append(bound_label(corpus))
    if corpus.corpus_perplexity is None and not corpus.method.draws_samples:
        notes.append(
            f"corpus_perplexity repeats instance_perplexity: an estimator={corpus.estimator} run has no importance "
            "samples to pair across documents"
        )
    elif corpus.corpus_perplexity is None:
        notes.append(
            "corpus_perplexity is N/A: the precision target drew different numbers of samples per document, so "
            "there is no joint corpus sample (Eq. 6)"
        )
    if all(i.get("num_words") == i["num_tokens"] for i in items):
        notes.append(
            "word_perplexity repeats instance_perplexity: the model's tokens are the whitespace words"
        )
    penalties = [i.get("unk_penalty") for i in items]
    if all(p is not None for p in penalties):
        unpenalized = not any(any(p) for p in penalties)
        notes.append(
            "upp_instance and upp_corpus repeat instance_perplexity and corpus_perplexity: for a model with an "
            "unknown-word penalty those are the UPP"
            + ("; ppl_* repeat them too: no sample paid an unknown-word penalty" if unpenalized else "")
        )
    return notes


def bound_label(corpus: CorpusEstimate) -> str:
    """What ``latent_perplexity`` and its Stderr are for a bound reported with its own standard error (the ELBO's)."""
    return (
        f"latent_perplexity {corpus.perplexity:.4f} ± {corpus.monte_carlo_stderr:.4f} (Stderr) is a bound, not an estimate "
        f"of the true perplexity: estimator={corpus.estimator} is an {corpus.kind}, so the figure estimates a "
        "perplexity at or above the true one; its Stderr is the Monte Carlo error of that bound, never an interval "
        f"on the true perplexity (perplexity_upper_bound {corpus.perplexity_upper_bound:.4g}: no certified bound)"
    )


@own_stderr
def perplexity_stderr(items) -> float | str:
    """lm-eval's Stderr column of ``latent_perplexity`` (metric ``latent_perplexity_stderr``; documents fixed): the run's ``level`` interval's half-width over
    its normal quantile (1.96 at 95%), so that perplexity ± 1.96 · Stderr is the honest interval
    (``CorpusEstimate.interval_stderr``); for a bound reported with its own error (``estimator=elbo``) that error,
    ``CorpusEstimate.monte_carlo_stderr``, the ELBO's and no interval on the true perplexity (``repeated_rows``
    says so); "N/A" where no two-sided interval is honest (the certified ``perplexity_upper_bound`` still holds).

    Parameters
    ----------
    items : list of dict
        This metric's items of the task's documents (``process_results``: references to the ``latent_perplexity`` items).

    Returns
    -------
    float or str
        The Stderr in perplexity units, or "N/A".

    Examples
    --------
    With 50 importance samples per document the bundled HMM's weights are too few for an honest interval; the
    certified bound still holds:

    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> run = resolve(EstimatorSettings("is", num_samples=50, seed=1), hmm)
    >>> docs = {t: run.estimate(t) for t in ("the cat sat", "a dog ran", "the dog sat on the mat")}
    >>> EstimateExchange.begin(run.settings).put_documents(docs)
    >>> items = [process_results({"text": t}, [e.log_likelihood])["latent_perplexity"] for t, e in docs.items()]
    >>> perplexity_stderr(items), perplexity_upper_bound(items) > perplexity(items)
    ('N/A', True)
    """
    value, kind = _corpus(items).reported_stderr
    return "N/A" if kind is None else value


@own_stderr
def perplexity_upper_bound(items) -> float:
    """Certified: the true perplexity exceeds this with probability at most 1 − level (5% at the default 95%;
    Markov's inequality).

    Parameters
    ----------
    items : list of dict
        This metric's items of the task's documents (``process_results``).

    Returns
    -------
    float
        The bound (the perplexity itself for exact estimates).

    See Also
    --------
    perplexity_stderr : its example computes this aggregation too.
    """
    return _corpus(items).perplexity_upper_bound


@own_stderr
def perplexity_sampling_se(items) -> float | str:
    """Standard error of ``latent_perplexity`` over documents drawn at random (what lm-eval's hf users compare with); "N/A"
    where it cannot be estimated (fewer than two documents with tokens), as the table's other undefined cells.

    Parameters
    ----------
    items : list of dict
        This metric's items of the task's documents (``process_results``).

    Returns
    -------
    float or str
        The standard error in perplexity units, or "N/A".

    See Also
    --------
    perplexity : its example computes this aggregation too.
    """
    se = _corpus(items).sampling_stderr
    return "N/A" if math.isnan(se) else se


@own_stderr
def instance_perplexity(items) -> float:
    """Instance-level PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n) (Logan et al. 2020, Eq. 5).

    Parameters
    ----------
    items : list of dict
        This metric's items of the task's documents (``process_results``).

    Returns
    -------
    float

    See Also
    --------
    perplexity : its example computes this aggregation too.
    """
    return _corpus(items).instance_perplexity


@own_stderr
def corpus_perplexity(items) -> float | str:
    """Corpus-level PPL (Eq. 6): sample k (IS) or run r (SMC) of every document forms one corpus sample; for exact and
    beam estimates the instance level; "N/A" where documents were drawn with different samples (a precision target),
    since no joint corpus sample exists then.

    Parameters
    ----------
    items : list of dict
        This metric's items of the task's documents (``process_results``).

    Returns
    -------
    float or str
        The perplexity, or "N/A".

    See Also
    --------
    perplexity : its example computes this aggregation too.
    """
    corpus = _corpus(items)
    if corpus.corpus_perplexity is not None:
        return corpus.corpus_perplexity
    return "N/A" if corpus.method.draws_samples else corpus.instance_perplexity


def _informative(items) -> list[float]:
    return [float(v) for v in items if v is not None and not math.isnan(v)]


@own_stderr
def mean_over_documents(items) -> float:
    """Mean over documents of a per-document diagnostic: ESS = (Σ_k w_k)² / Σ_k w_k², SMC's resampling steps, or
    0/1 flags (the share of documents whose Pareto k̂ is at or above its threshold, or undefined).

    Parameters
    ----------
    items : list of float or None
        One value per document (``DocumentEstimate.diagnostic_items``); None and NaN are left out.

    Returns
    -------
    float
        The mean, NaN without a value.

    Examples
    --------
    >>> mean_over_documents([1.0, None, 3.0, math.nan])
    2.0
    """
    values = _informative(items)
    return sum(values) / len(values) if values else math.nan


@own_stderr
def min_over_documents(items) -> float:
    """Smallest per-document value of a diagnostic such as ESS.

    Parameters
    ----------
    items : list of float or None
        One value per document; None and NaN are left out.

    Returns
    -------
    float
        The least value, NaN without a value.

    Examples
    --------
    >>> min_over_documents([4.0, None, 2.5]), min_over_documents([None])
    (2.5, nan)
    """
    values = _informative(items)
    return min(values) if values else math.nan


def completion_items(doc: dict, results: list) -> dict:
    """A completion task's item for one document, aggregated by lm-eval's ``weighted_perplexity`` into
    exp(−Σ log p̂ / Σ tokens).

    Parameters
    ----------
    doc : dict
        A row of the task's dataset, with fields ``context`` and ``continuation``.
    results : list
        What ``loglikelihood`` returned for it: ``[(log p̂(continuation | context), is_greedy)]``.

    Returns
    -------
    dict
        ``completion_perplexity``: (log p̂, the continuation's model tokens as the backend counted them).

    Examples
    --------
    >>> from lm_latent_eval.harness.exchange import Conditional
    >>> EstimateExchange.begin().put_conditionals({("the cat", " sat"): Conditional(-2.5, 1)})
    >>> completion_items({"context": "the cat", "continuation": " sat"}, [(-2.5, False)])
    {'completion_perplexity': (-2.5, 1)}
    """
    ((log_likelihood, _),) = results
    tokens = EstimateExchange.current().continuation_tokens(
        doc["context"], doc["continuation"], log_likelihood
    )
    return {"completion_perplexity": (log_likelihood, tokens)}
