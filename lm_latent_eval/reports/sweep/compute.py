"""The rows of a sweep (``run_sweep``): IS over τ × {peek, no peek}, SMC for the same proposals (models with the
stepwise part), beam bounds for several k and the exact value where the model gives it, as one ``SweepResult``."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from ...errors import InputError
from ...estimators import EstimatorSettings, resolve
from ...estimators.corpus import corpus_estimate, pareto_k_shares
from ...estimators.diagnostics import corpus_convergence_curve
from ...estimators.settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS
from ...estimators.workers import DocumentWorkers
from ...protocol import has
from ..json_files import as_json, from_json, json_key

DEFAULT_TEMPERATURES = (0.5, 0.9, 1.0, 1.1, 2.0, 5.0)
DEFAULT_BEAM_SIZES = (1, 10, 100)
# the estimators of a sweep's rows, chosen once: sweep.json keys each one's rows by its name
IS_RUN, SMC_RUN, BEAM_RUN = EstimatorSettings("is"), EstimatorSettings("smc"), EstimatorSettings("beam")


@dataclass
class SweepResult:
    """Every row of a sweep (Logan et al. 2020, Tables 1 and 2), as ``sweep.json`` holds it (``to_json``).

    Attributes
    ----------
    num_documents, num_tokens : int
        The corpus.
    is_rows : list of dict
        One IS row per proposal (``is_row``): perplexities at K and along K, the statement, Pareto k̂ and ESS.
    beam_rows : list of dict
        One row per beam size k: ``beam_size``, ``log_likelihood`` (Σ beam sums) and ``ppl_upper_bound``.
    smc_rows : list of dict or None
        One SMC row per proposal (``smc_row``); None where SMC did not run.
    exact_perplexity : float or None
        The corpus's exact perplexity where known, and ``exact_source`` where it comes from.
    config : dict or None
        What the numbers depend on (the command line's options), set by ``lm-latent-eval sweep``.
    interrupted : bool or None
        True when Ctrl-C stopped the sweep: the rows are those finished before it.
    """

    num_documents: int
    num_tokens: int
    is_rows: list[dict] = field(metadata=json_key(IS_RUN.estimator))
    beam_rows: list[dict] = field(metadata=json_key(BEAM_RUN.estimator))
    smc_rows: list[dict] | None = field(default=None, metadata=json_key(SMC_RUN.estimator))
    exact_perplexity: float | None = field(default=None, metadata=json_key("exact_ppl"))
    exact_source: str | None = None
    config: dict | None = None
    interrupted: bool | None = None

    def to_json(self) -> dict:
        """The JSON record of ``sweep.json``: the fields that are set, in order, under their JSON keys.

        Examples
        --------
        >>> SweepResult(2, 9, [], [{"beam_size": 1, "log_likelihood": -20.0, "ppl_upper_bound": 9.2}]).to_json()
        {'num_documents': 2, 'num_tokens': 9, 'is': [], 'beam': [{'beam_size': 1, 'log_likelihood': -20.0, 'ppl_upper_bound': 9.2}]}
        """
        return as_json(self, skip_none=True)

    @classmethod
    def from_json(cls, record: dict) -> SweepResult:
        """The result ``to_json`` wrote (``sweep.json``).

        Examples
        --------
        >>> result = SweepResult(2, 9, [], [], exact_perplexity=8.5)
        >>> SweepResult.from_json(result.to_json()) == result
        True
        """
        return from_json(cls, record)


def exact_estimates(model, documents: list[str], device) -> list | None:
    """The exact row where the model gives it.

    Parameters
    ----------
    model : LatentLM
        The model, with or without an exact marginal or an enumeration.
    documents : list of str
        The corpus.
    device : str or torch.device
        Where the model runs.

    Returns
    -------
    list of DocumentEstimate or None
        One exact estimate per document where the model has a tractable marginal, or an enumeration (short texts
        only: the RNNG's trees, the tokenization LM's segmentations) that manages every document; None otherwise.
    """
    if not has(model, "exact_marginal"):
        return None
    try:
        exact = resolve(EstimatorSettings(estimator="exact"), model)
        return [exact.estimate(d, device=device) for d in documents]
    except ValueError:
        if has(model, "tractable_marginal"):
            raise
        # a document too long to enumerate
        return None


def run_sweep(
    model,
    documents: list[str],
    temperatures=DEFAULT_TEMPERATURES,
    peek_modes=(True, False),
    beam_sizes=DEFAULT_BEAM_SIZES,
    num_samples: int = 100,
    seed: int = 1234,
    batch_size: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    smc: bool | None = None,
    resample_threshold: float = DEFAULT_RESAMPLE_THRESHOLD,
    smc_runs: int = DEFAULT_SMC_RUNS,
    workers: int = 1,
) -> SweepResult:
    """Every row of Table 1 (IS, and SMC when ``smc``) and Table 2 with the convergence curves.

    Parameters
    ----------
    model : LatentLM
        The model.
    documents : list of str
        The corpus.
    temperatures : sequence of float
        The proposal temperatures τ.
    peek_modes : sequence of bool
        Peeking and / or no-peeking proposals.
    beam_sizes : sequence of int
        The k of the beam bounds.
    num_samples : int
        K, samples (IS) or particles (SMC) per document.
    seed : int
        With each document's text, seeds its random streams.
    batch_size : int, optional
        Particles per ``log_joint`` call (memory only).
    device : str
        Where the model runs.
    progress : bool
        Show a progress bar.
    smc : bool, optional
        SMC rows beside the IS rows (default: whenever the model has the stepwise part).
    resample_threshold, smc_runs
        SMC's settings.
    workers : int
        Processes that estimate each setting's documents (``estimators.workers``: the same numbers as one).

    Returns
    -------
    SweepResult
        With ``interrupted`` set where Ctrl-C stopped it after a row was finished (a KeyboardInterrupt before).
    """
    smc = has(model, "stepwise") if smc is None else smc
    settings = [(peek, t) for peek in peek_modes for t in temperatures]
    common = {"num_samples": num_samples, "seed": seed, "batch_size": batch_size}
    smc_only = {"resample_threshold": resample_threshold, "smc_runs": smc_runs}
    # a bad K, τ or SMC option: one error before any work
    for peek, t in settings[:1] + settings[-1:]:
        (SMC_RUN if smc else IS_RUN).replace(temperature=t, peek=peek, **common, **smc_only)
    for t in temperatures:
        IS_RUN.replace(temperature=t, **common)
    total = len(documents) * ((1 + smc) * len(settings) + len(beam_sizes) + 1)
    bar = tqdm(total=total, desc="sweep", unit="doc", disable=not progress)
    exact = exact_estimates(model, documents, device)
    bar.update(len(documents))
    result = SweepResult(len(documents), 0, [], [], [] if smc else None)
    try:
        _add_rows(result, model, documents, settings, beam_sizes, common, smc_only, device, workers, bar)
    except KeyboardInterrupt:
        if not result.is_rows:
            raise
        result.interrupted = True
    bar.close()
    if exact is not None:
        result.exact_perplexity = math.exp(-sum(e.log_likelihood for e in exact) / result.num_tokens)
        result.exact_source = "the model's log_marginal"
    return result


def _add_rows(
    result: SweepResult, model, documents, settings, beam_sizes, common, smc_only, device, workers, bar
):
    """``run_sweep``'s rows, each added to ``result`` as it is finished (IS, SMC where ``result.smc_rows`` is a list,
    beam)."""
    rows, smc_rows, beam_rows = result.is_rows, result.smc_rows, result.beam_rows
    with DocumentWorkers(model, device, workers) as pool:
        for peek, temperature in settings:
            s = IS_RUN.replace(temperature=temperature, peek=peek, **common)
            estimates = _estimates(pool, documents, s, bar)
            result.num_tokens = num_tokens = sum(e.num_tokens for e in estimates)
            if num_tokens == 0:
                raise InputError("every document is empty: perplexity is undefined")
            rows.append(is_row(estimates, peek, temperature, common["num_samples"]))
        for peek, temperature in settings if smc_rows is not None else ():
            s = SMC_RUN.replace(temperature=temperature, peek=peek, **common, **smc_only)
            smc_rows.append(smc_row(_estimates(pool, documents, s, bar), s))
        for k in beam_sizes:
            # summed in the documents' order
            total_ll = 0.0
            for e in _estimates(pool, documents, BEAM_RUN.replace(beam_size=k), bar):
                total_ll += e.log_likelihood
            beam_rows.append(
                {
                    "beam_size": k,
                    "log_likelihood": total_ll,
                    "ppl_upper_bound": math.exp(-total_ll / num_tokens),
                }
            )


def _estimates(pool: DocumentWorkers, documents: list[str], settings: EstimatorSettings, bar):
    """Every document's estimate under ``settings`` (estimated by ``pool``) with its diagnostics
    (``DocumentEstimate.summarized``), in the documents' order; a repeated text is estimated once (its random streams
    are seeded by its text: the same estimate)."""
    times = Counter(documents)
    found = {}
    run = resolve(settings, pool.model)
    for text, estimate in pool.estimate(run, [(t, run.settings.num_samples) for t in times], 0, "", False):
        found[text] = estimate.summarized()
        bar.update(times[text])
    return [found[d] for d in documents]


def is_row(estimates, peek: bool, temperature: float, num_samples: int) -> dict:
    """One IS row of Table 1.

    Parameters
    ----------
    estimates : list of ISEstimate
        One per document, with diagnostics.
    peek, temperature, num_samples
        The proposal and K that made them.

    Returns
    -------
    dict
        Corpus and instance perplexity at K and along K (``convergence_*``), the perplexity with its statement
        (``perplexity_interval``, ``perplexity_upper_bound``), Pareto k̂ per document and the mean ESS.
    """
    lws = [e.log_weights for e in estimates]
    curve = corpus_convergence_curve(lws, [e.num_tokens for e in estimates])
    corp_curve = curve["corpus_perplexity"]
    corpus = corpus_estimate(estimates)
    above, _, _ = pareto_k_shares(estimates)
    return {
        "peek": peek,
        "temperature": temperature,
        "num_samples": num_samples,
        "corpus_ppl": corp_curve[-1],
        "instance_ppl": curve["instance_perplexity"][-1],
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "num_pareto_k_above_threshold": above,
        "mean_ess": float(np.mean([e.diagnostics.ess for e in estimates if e.diagnostics])),
        "pareto_k": [e.diagnostics.pareto_k if e.diagnostics else float("nan") for e in estimates],
        "convergence_k": curve["num_samples"],
        "convergence_instance_ppl": curve["instance_perplexity"],
        "convergence_corpus_ppl": corp_curve,
    }


def smc_row(estimates, settings: EstimatorSettings) -> dict:
    """One SMC row for a proposal of Table 1.

    Parameters
    ----------
    estimates : list of SMCEstimate
        One per document.
    settings : EstimatorSettings
        The SMC settings that made them.

    Returns
    -------
    dict
        The perplexity with its honest statement (``estimators.intervals``), the certified bound, instance and corpus
        PPL (run r of every document is one corpus sample), ESS over tokens and resampling steps.
    """
    corpus = corpus_estimate(estimates)
    informative = [e.diagnostics for e in estimates if e.sampled]
    return {
        "peek": settings.peek,
        "temperature": settings.temperature,
        "num_samples": settings.num_samples,
        "resample_threshold": settings.resample_threshold,
        "smc_runs": settings.smc_runs,
        "perplexity": corpus.perplexity,
        "perplexity_interval": list(corpus.perplexity_interval),
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "instance_ppl": corpus.instance_perplexity,
        "corpus_ppl": corpus.corpus_perplexity,
        "mean_ess": float(np.mean([d.ess_mean for d in informative])),
        "min_ess": float(np.min([d.ess_min for d in informative])),
        "mean_resampling_steps": float(np.mean([d.resampling_steps for d in informative])),
        "log_likelihoods": [e.log_likelihood for e in estimates],
    }
