"""lm-eval backends: ``--model latent`` (any contract-conforming latent LM) and ``--model latent_<name>`` for every
row of ``lm_latent_eval.models.MODELS`` that names a backend class.

``LatentLMEval`` answers lm-eval's three request types from document-level estimates log p̂(x) by the run's
estimator, resolved once when the backend is built (``estimators.resolve``: a ``ResolvedEstimator``, as ``estimator=``
chooses); ``DocumentBatches`` (over ``estimate_texts``) is their batching. Every other job is a collaborator's:
``model_args`` (what model_args are accepted, parsed once; lm-eval's constructors, ``ModelArgsLM``),
``distributed`` (the processes of a multi-process run and lm-eval's collectives, ``ProcessesLM``), ``provenance`` (``get_model_info``), ``results_store``
(resumable runs), ``cache`` (``--use_cache``), ``exchange`` (the whole estimates handed to the tasks),
``conditionals`` (loglikelihood's prefix-probability policy), ``generation`` (``generate_until``'s sampling) and
``advice`` (warnings in plain words).

The ``latent_<name>`` classes (``LatentHMMEval``, ``LatentKGLMEval``, ...) are this module's attributes, built on
first use from their row of MODELS by its ``__getattr__`` (PEP 562), the same class every time; a backend that
answers requests its own way is defined in a module of its own (``OWN_MODULES``: ``LatentTokenizationEval`` in
``tokenization_backend``) and served from here too. Importing this module does nothing else: lm-eval finds the
backends through the start-up hook (``hook.register_backends``, for lm-eval releases without plugin discovery) or
pyproject's entry points, both from MODELS. Building a backend adapts lm-eval to the package
(``lm_eval_versions.adapt_lm_eval``: one line for a version outside those supported, the wrappers of its
aggregation) and, under lm-eval's command line only, makes the process's excepthook ours; torch's thread count and
the precision of its matrix products are set only while it estimates (``DocumentBatches.computing``:
``threads.torch_threads``, ``precision.matmul_precision``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import logging
from collections.abc import Iterator

import torch
from lm_eval.api.instance import Instance

from ..errors import install_excepthook, running_lm_eval
from ..estimators import DocumentEstimate, EstimatorSettings, ResolvedEstimator, UncertaintyPolicy
from ..estimators.adaptive import estimate_corpus
from ..models import MODELS, checkpoint_hash, load_model, model_target
from ..precision import DEFAULT_PRECISION, in_effect, matmul_precision
from .advice import choose_estimator, log_like_lm_eval, warn_about_empty_documents, warn_if_unreliable
from .cache import EstimateCache
from .choices import ChoiceAccount, questions_of, settle
from .conditionals import (
    NOT_GREEDY,
    GreedyNotice,
    Pair,
    has_conditional_model,
    prefix_estimates,
    prefix_model,
    refuse_rolling,
    texts_to_estimate,
    view_conditional_estimates,
    view_estimates,
    weight_bound,
)
from .device_choice import choose_device, default_location
from .distributed import Processes, ProcessesLM, distributed_state
from .exchange import EstimateExchange
from .generation import generate
from .lm_eval_versions import adapt_lm_eval, rolling_answers, rolling_texts
from .model_args import ModelArgsLM, parse_backend_args
from .provenance import model_info, run_identity
from .results_store import ResultsStore, stage_tally
from .threads import Cores, plan_cores, torch_threads

__all__ = ["DocumentBatches", "LatentLMEval", "distributed_state", "estimate_texts", "model_backend"]
logger = logging.getLogger(__name__)
# backends that answer requests their own way, each defined in a module of its own, which subclasses LatentLMEval:
# imported by name on first use (an import statement here would be an import cycle)
OWN_MODULES = {"LatentTokenizationEval": "lm_latent_eval.harness.tokenization_backend"}


class LatentLMEval(ModelArgsLM, ProcessesLM):
    """lm-eval backend over a latent LM: log p̂(x) by importance sampling, SMC, a beam bound or exact marginalization.

    ``run``: the estimator resolved once (``auto`` replaced by its choice, for the reason ``estimator_choice``);
    ``exchange``: where each request's whole estimates go for the tasks (begun here: one per evaluation).

    Parameters
    ----------
    **model_args
        lm-eval's ``--model_args`` (parsed values) with its CLI's ``device`` and ``batch_size`` (particles per
        ``log_joint`` call: memory only). Accepted names: ``model_args.backend_args_doc``, docs/lm-eval.md.
    """

    def __init__(self, **model_args) -> None:
        super().__init__()
        join_lm_eval()
        name = type(self).__name__
        self.args = args = parse_backend_args(name, self.MODEL, model_args)
        self.device_choice = choose_device(args.device, args.device_asked, default_location(args))
        self.model_kwargs, self.processes = args.model_kwargs, Processes(self.device_choice.device)
        self._device = self.processes.device
        if self.device_choice.reason and self.rank == 0:
            logger.info("%s: %s", name, self.device_choice.reason)
        cores = plan_cores(args.threads, args.workers, self._device, name, self.world_size)
        self.model, self.checkpoint = load_model(
            args.model, args.pretrained, device=self._device, dtype=args.dtype, **args.model_kwargs
        )
        if args.memory_budget is not None:
            self.model.memory_budget = args.memory_budget
        self.checkpoint_sha256 = checkpoint_hash(self.checkpoint)
        # resolved once (said once, on rank 0): every request, stage and document below runs this bound estimator
        self.run, self.estimator_choice = choose_estimator(name, args, self.model, announce=self.rank == 0)
        self.results_store = open_results_store(args.results_dir, self.model_identity())
        self.choices = ChoiceAccount()
        if running_lm_eval():
            install_excepthook(resume_hint(self.results_store))
        store = self.results_store
        self.batches = DocumentBatches(
            name, self.model, self._device, store, self.processes, cores, args.precision
        )
        self.greedy = GreedyNotice(NOT_GREEDY.format(owner=name))
        self.exchange = EstimateExchange.begin(self.settings)

    @property
    def settings(self) -> EstimatorSettings:
        """The run's resolved settings (``run.settings``)."""
        return self.run.settings

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list:
        """log p̂(x) of each document; its whole estimate goes to ``exchange`` for the perplexity tasks.

        Parameters
        ----------
        requests : list of Instance
            ``args == (text,)`` (lm-eval 0.4) or ``("", text)`` (0.5): ``lm_eval_versions.rolling_texts``.
        disable_tqdm : bool
            No progress bar.

        Returns
        -------
        list of float, or of (float, False)
            One log p̂(x) per request (0.0 for a text without tokens, with a warning naming it): floats under
            lm-eval 0.4, ``(log p̂, False)`` pairs under 0.5 (``lm_eval_versions.rolling_answers``).

        Examples
        --------
        >>> lm = LatentLMEval(model="hmm", estimator="exact", device="cpu")
        >>> from lm_latent_eval.harness.lm_eval_versions import rolling_log_likelihood
        >>> request = Instance("loglikelihood_rolling", {}, ("Anna saw the dog.",), 0)
        >>> value = rolling_log_likelihood(lm.loglikelihood_rolling([request]))
        >>> value == lm.exchange.document("Anna saw the dog.", value).log_likelihood < 0, lm.exchange.settings.estimator
        (True, 'exact')
        """
        refuse_rolling(self.model)
        texts = rolling_texts(requests)
        estimates = self.batches.estimate(texts, self.run, "log p(x)", not disable_tqdm)
        self.exchange.make_current()  # the tasks read the backend that answered last
        self.exchange.put_documents(estimates)
        warn_about_empty_documents(estimates)
        return rolling_answers([estimates[text].log_likelihood for text in texts])

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """log p̂(continuation | context): from the model's view of the context revealed where it offers
        ``conditional_model`` (the masked LMs), else log p̂(context ⊕ continuation) − log p̂(context) from a prefix
        probability only (``conditionals``).

        Parameters
        ----------
        requests : list of Instance
            ``args == (context, continuation)``.
        disable_tqdm : bool
            No progress bar.

        Returns
        -------
        list of (float, bool)
            (log p̂(continuation | context), False) per request: ``is_greedy`` is not computed (a warning says so).

        Examples
        --------
        >>> lm = LatentLMEval(model="hmm", estimator="exact", device="cpu")
        >>> [(value, greedy)] = lm.loglikelihood([Instance("loglikelihood", {}, ("Anna saw", " the dog."), 0)])
        >>> value < 0, greedy, lm.exchange.continuation_tokens("Anna saw", " the dog.", value)
        (True, False, 3)
        """
        pairs = [tuple(req.args) for req in requests]
        if has_conditional_model(self.model):
            found, again = self.batches.view_conditionals(self.run, pairs, not disable_tqdm)
        else:
            found, again = self.batches.prefix_conditionals(self.run, pairs, not disable_tqdm)
        questions, policy = questions_of(requests), UncertaintyPolicy.of(self.settings)
        if questions and self.run.targets_precision:
            found = settle(questions, found, again, policy, self.settings.sample_budget)
        self.choices = ChoiceAccount.of(questions, found, policy)
        advice = self.run.advice()
        for line, doubt in self.choices.lines(advice) if self.rank == 0 else []:
            logger.log(logging.WARNING if doubt else logging.INFO, "%s: %s", type(self).__name__, line)
        values = {pair: found.conditional(pair) for pair in dict.fromkeys(pairs)}
        self.greedy.warn()
        self.exchange.make_current()
        self.exchange.put_conditionals(
            values, found.view_estimates(), weight_bound(self.model, self.settings)
        )
        return [(values[pair].log_likelihood, False) for pair in pairs]

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Ancestral samples from p(· | context), seeded from (seed, context), cut at the first ``until`` string;
        under ``do_sample: false`` (lm-eval's default) the most probable of ``generation.GREEDY_CANDIDATES`` such
        samples under the run's estimator (``generation``: greedy decoding approximated), and under a temperature
        τ ≠ 1 one of them drawn ∝ p̂(continuation | context)^(1/τ − 1) (``generation.tempered_pick``).

        Parameters
        ----------
        requests : list of Instance
            ``args == (context, gen_kwargs)``, with ``until`` (str or list) and ``max_gen_toks`` in ``gen_kwargs``.
        disable_tqdm : bool
            No progress bar.

        Returns
        -------
        list of str
            One continuation per request, the same for the same (seed, context) in any order.

        Examples
        --------
        >>> lm = LatentLMEval(model="hmm", device="cpu", seed=3)
        >>> "." in lm.generate_until([Instance("generate_until", {}, ("Anna", {"until": ["."]}), 0)])[0]
        False
        """
        with self.batches.computing():
            scores = functools.partial(self.batches.greedy_scores, self.run)
            return generate(self.model, requests, self.settings.seed, self._device, not disable_tqdm, scores)

    def get_model_info(self) -> dict:
        """``model_identity`` and, after multiple-choice requests, their Monte Carlo account per task
        (``choice_monte_carlo``: ``choices.ChoiceAccount``); lm-eval merges it into ``results["config"]``."""
        return self.model_identity() | (
            {"choice_monte_carlo": self.choices.tasks} if self.choices.tasks else {}
        )

    def model_identity(self) -> dict:
        """Model identity and estimator settings (``provenance``): what keys the results store and the cache."""
        loaded = (self.model, self.checkpoint, self.checkpoint_sha256)
        info = model_info(self.args, *loaded, self.run, self.estimator_choice, self._device)
        return info | {"device_choice": self.device_choice.reason or "as asked or by default"}

    def set_cache_hook(self, cache_hook) -> None:
        """lm-eval's ``--use_cache``: refuse a database another model or estimator wrote; keep our estimates in it."""
        self.exchange.keep_in(EstimateCache.of(cache_hook, self.model_identity()))
        super().set_cache_hook(cache_hook)

    def before_gather(self, dst: int) -> None:
        """The reliability warnings the ranks held back, made once on rank ``dst`` about the whole corpus
        (``DocumentBatches.warn_gathered``)."""
        self.batches.warn_gathered(dst)


class DocumentBatches:
    """The request methods' batching for one backend (``owner``): its model's estimates of a batch of texts.

    Parameters
    ----------
    owner : str
        The backend's name, for its warnings.
    model
        The latent LM; ``device`` where it runs.
    store : ResultsStore or None
        model_args ``results_dir``'s store of the model's estimates.
    processes : Processes
        The run's processes (the precision target sums its corpus totals over them). With several, each rank holds
        its shard's reliability check back (``held``) until lm-eval gathers the results: rank 0 then warns once,
        about every rank's estimates (``warn_gathered``), not each rank about its half.
    cores : Cores
        torch's threads while it estimates and the processes that estimate a batch's documents side by side
        (``harness.threads.plan_cores``).
    precision : str
        model_args ``precision``: the precision of the matrix products while it estimates (``computing``).
    """

    def __init__(
        self,
        owner: str,
        model,
        device: torch.device,
        store: ResultsStore | None,
        processes,
        cores: Cores,
        precision: str = DEFAULT_PRECISION,
    ) -> None:
        self.owner, self.model, self.device, self.store = owner, model, device, store
        self.processes, self.cores, self.precision = processes, cores, precision
        if in_effect(precision, device) != precision:
            logger.info(
                "%s: precision=%s has no effect on %s: float32 matrix products", owner, precision, device
            )
        self.held: list[tuple[str, EstimatorSettings, dict[str, DocumentEstimate]]] = []

    def estimate(
        self, texts: list[str], estimator: ResolvedEstimator, desc: str, progress: bool, check=True
    ) -> dict[str, DocumentEstimate]:
        """One estimate per distinct text (``estimate_texts``) by the run's ``estimator``, on the model or on a view
        of it (``ResolvedEstimator.on``: a view's estimates are not stored); ``check``: one warning, with the
        estimator's advice, when no two-sided interval of the batch is honest."""
        store = self.store if estimator.model is self.model else None
        with self.computing():
            estimates = estimate_texts(
                estimator,
                texts,
                self.device,
                store,
                self.processes.all_reduce,
                desc,
                progress,
                self.cores.workers,
            )
        exact = sum(e.computed_exactly for e in estimates.values())
        if exact:
            logger.info(
                "%s: %s: %d of %d texts computed exactly (exact_where_cheaper: their exact program costs no more "
                "than their samples), the others by %s",
                self.owner, desc, exact, len(estimates), estimator.settings.estimator,
            )  # fmt: skip
        if check:
            self.check(desc, estimator, estimates)
        return estimates

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """The block runs with the run's torch threads and matrix-product precision (forked workers inherit both),
        torch's settings restored after it."""
        with torch_threads(self.cores.threads), matmul_precision(self.precision, self.device):
            yield

    def prefix_conditionals(self, estimator: ResolvedEstimator, pairs: list[Pair], progress: bool) -> tuple:
        """log p̂(continuation | context) = log p̂(context ⊕ continuation) − log p̂(context) from the model's prefix
        probability (``conditionals``: refused where the model has none): the ``ConditionalEstimates`` and the
        function that estimates some of their texts again with more samples (``resized``)."""
        view = prefix_model(self.model)
        desc = f"{estimator.settings.estimator} log p(context, continuation)"
        found = self.estimate(texts_to_estimate(view, pairs), estimator.on(view), desc, progress)

        def again(sizes: dict[str, int], round_: int) -> dict[str, DocumentEstimate]:
            return self.resized(estimator.on(view), sizes, round_)

        return prefix_estimates(pairs, found), again

    def view_conditionals(self, estimator: ResolvedEstimator, pairs: list[Pair], progress: bool) -> tuple:
        """log p̂(continuation | context) from the model's conditional views (``conditionals.view_estimates``), one
        reliability warning for them all; as ``prefix_conditionals``, with the function that estimates again."""

        def estimate(view, texts):
            desc = f"{estimator.settings.estimator} log p(continuation | context)"
            return self.estimate(texts, estimator.on(view), desc, False, check=False)

        estimates = view_estimates(self.model, pairs, estimate, progress)
        self.check("log p(continuation | context)", estimator, estimates)

        def again(sizes: dict[Pair, int], round_: int) -> dict[Pair, DocumentEstimate]:
            out = {}
            for ctx in dict.fromkeys(ctx for ctx, _ in sizes):
                on_view = estimator.on(self.model.conditional_model(ctx))
                texts = {ctx + cont: (ctx, cont) for c, cont in sizes if c == ctx}
                resized = self.resized(on_view, {t: sizes[pair] for t, pair in texts.items()}, round_)
                out |= {texts[t]: e for t, e in resized.items()}
            return out

        return view_conditional_estimates(self.model, estimates), again

    def resized(self, estimator: ResolvedEstimator, sizes: dict[str, int], round_: int) -> dict:
        """Fresh estimates of the texts of ``sizes`` at their K, from the streams of round ``round_`` after the
        precision target's stages (``harness.choices.settle``)."""
        stage = UncertaintyPolicy.of(estimator.settings).max_stages + round_
        with self.computing():
            done = estimator.estimate_documents(
                list(sizes), list(sizes.values()), device=self.device, stage=stage
            )
        return dict(zip(sizes, done))

    def greedy_scores(
        self, estimator: ResolvedEstimator, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], float]:
        """log p̂(continuation | context) of each candidate under the run's estimator, for greedy decoding's ranking:
        from the context's view where the model offers ``conditional_model`` (the masked LMs, whose log p̂(context ⊕
        continuation) is no prefix probability and ranks candidates differently), else log p̂(context ⊕
        continuation) (the context shared: the same ranking); without the precision target (whose corpus totals are
        summed over the processes, which hold different requests) and outside the results store."""
        fixed = estimator.sized(estimator.settings.num_samples)

        def estimate(model, texts):
            return estimate_texts(
                fixed.on(model), texts, self.device, None, lambda values: values, "greedy candidates", False,
                self.cores.workers,
            )  # fmt: skip

        if has_conditional_model(self.model):
            return {pair: e.log_likelihood for pair, e in view_estimates(self.model, pairs, estimate).items()}
        estimates = estimate(self.model, sorted({ctx + cont for ctx, cont in pairs}))
        return {(ctx, cont): estimates[ctx + cont].log_likelihood for ctx, cont in pairs}

    def check(self, desc: str, run: ResolvedEstimator, estimates: dict) -> None:
        """One warning, with the run's advice, when no two-sided interval of ``estimates`` is honest; under several
        processes held back (``held``, by ``desc``; the run without its model) until lm-eval's gather
        (``warn_gathered``)."""
        if self.processes.world_size > 1:
            self.held.append((desc, dataclasses.replace(run, model=None), estimates))
        else:
            warn_if_unreliable(self.owner, estimates.values(), run)

    def warn_gathered(self, dst: int = 0) -> None:
        """Every rank's held-back batches gathered on rank ``dst``, which warns once per kind of batch (``desc``:
        the documents, or the contexts and continuations) about all ranks' estimates together. A collective: every
        rank calls it at the same point (lm-eval's gather after the requests); a later call finds nothing held."""
        if self.processes.world_size <= 1:
            return
        gathered, self.held = self.processes.gather_object(self.held, dst), []
        merged: dict[str, tuple[ResolvedEstimator, dict[str, DocumentEstimate]]] = {}
        for desc, run, estimates in (batch for rank in gathered or [] for batch in rank):
            merged.setdefault(desc, (run, {}))[1].update(estimates)
        for run, estimates in merged.values():
            warn_if_unreliable(self.owner, estimates.values(), dataclasses.replace(run, model=self.model))


def join_lm_eval() -> None:
    """What building a backend does to the process: lm-eval's handler for our log (from the first line on), lm-eval
    adapted to the package (``lm_eval_versions.adapt_lm_eval``: one line where its version is outside those
    supported, its aggregation wrapped) and, under lm-eval's command line only, whose process is the run's, the
    excepthook that prints a user's error in one line."""
    if running_lm_eval():
        install_excepthook()
    log_like_lm_eval()
    adapt_lm_eval()


def estimate_texts(
    estimator: ResolvedEstimator,
    texts: list[str],
    device,
    store,
    all_reduce,
    desc: str,
    progress: bool,
    workers: int = 1,
) -> dict[str, DocumentEstimate]:
    """One estimate per distinct text (seeded from (seed, text), so order, batching and ``workers`` never matter),
    with the precision target's later stages where set; the results store ``store``, if any, is read before and
    written after every document's estimate (an interrupted run loses at most the documents in progress)."""
    if store is not None:
        loaded, distinct = store.count_stored(texts), len(set(texts))
        message = "%s: %d of %d documents have their first estimate stored in %s (results_dir)"
        logger.info(message, desc, loaded, distinct, store.folder)
    before = store.tally.copy() if store is not None else None
    estimates = estimate_corpus(
        estimator, texts, device, all_reduce, progress=progress, store=store, workers=workers
    )
    if store is not None:
        logger.info("%s: %s", desc, stage_tally(store.tally - before))
    return estimates


def resume_hint(store: ResultsStore | None) -> str:
    """What a Ctrl-C prints: how to resume (with a results store, every finished document is kept)."""
    if store is None:
        return (
            "add results_dir=DIR to --model_args to make a run resumable: a rerun of the same command then loads "
            "every document already estimated"
        )
    return f"rerun the same command to resume: the documents estimated so far are kept in {store.folder}"


def open_results_store(folder: str | None, info: dict) -> ResultsStore | None:
    """The results store of model_args ``results_dir`` (None: off), keyed by the run's identity."""
    if folder is None:
        return None
    store = ResultsStore(folder, run_identity(info))
    logger.info("per-document results in %s (%d stored)", store.folder, len(store))
    return store


@functools.cache
def model_backend(model: str, class_name: str) -> type[LatentLMEval]:
    """The ``--model latent_<model>`` backend: ``LatentLMEval`` with the model fixed (built once)."""
    doc = f"``--model latent_{model}``: {model_target(model)} (bundled checkpoint unless ``pretrained=``)."
    namespace = {"MODEL": model, "__doc__": doc, "__module__": __name__, "__qualname__": class_name}
    return type(class_name, (LatentLMEval,), namespace)


def _built_here() -> dict[str, str]:
    """Class name -> model, for the rows of MODELS whose backend this module builds."""
    return {
        e.backend: name
        for name, e in MODELS.items()
        if e.backend is not None and e.backend not in OWN_MODULES
    }


def __getattr__(name: str) -> type[LatentLMEval]:
    """``Latent<Name>Eval`` (PEP 562): built on first use from its row of MODELS, or imported from its own module."""
    if name in OWN_MODULES:
        return getattr(importlib.import_module(OWN_MODULES[name]), name)
    if name in _built_here():
        return model_backend(_built_here()[name], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_built_here(), *OWN_MODULES])
