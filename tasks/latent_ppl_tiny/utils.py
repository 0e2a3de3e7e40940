"""latent_ppl_tiny: dataset loading, per-document items and aggregations (instance / corpus IS or SMC perplexity,
diagnostics).

Every metric is computed from the SAME K importance samples per document: ``process_results`` fetches the
document's ``DocumentEstimate`` (with its log weights) from the lm-latent-eval backend that produced the
log-likelihood lm-eval hands it; the aggregations call lm_latent_eval.estimators.
"""

from __future__ import annotations

import math
from pathlib import Path

TEXT_FIELD = "text"
# errors below are raised for every task that includes latent_ppl_tiny.yaml (latent_ppl_tiny, linked_wikitext2, ...)
WHERE = "lm-latent-eval perplexity task"


def load(data_file: str | None = None, **_metadata):
    """DatasetDict with a ``test`` split from the bundled tiny corpus (or ``dataset_kwargs: {data_file: ...}``).

    lm-eval passes the task metadata and model_args as keyword arguments; they do not affect the data.
    """
    import datasets

    from lm_latent_eval.paths import DATA_DIR

    path = Path(data_file) if data_file else DATA_DIR / "corpus" / "tiny_test.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"latent_ppl_tiny: corpus file {path} not found")
    return datasets.load_dataset("json", data_files={"test": str(path)})


def doc_to_target(doc: dict) -> str:
    """The document text scored by loglikelihood_rolling."""
    return doc[TEXT_FIELD]


def process_results(doc: dict, results: list) -> dict:
    """Per-document items of every metric, all from the backend's estimate of this very document."""
    from lm_eval.api.task import ConfigurableTask

    from lm_latent_eval.estimators.diagnostics import effective_sample_size, pareto_khat
    from lm_latent_eval.harness.backends import document_estimate

    text = doc_to_target(doc)
    (log_likelihood,) = results
    est = document_estimate(text)
    if est is None:
        raise RuntimeError(
            f"{WHERE}: no importance-sampling estimate for document {text[:60]!r} in this process. "
            "This task needs an lm-latent-eval backend (--model latent_hmm, latent_kglm, or --model latent model=...) and "
            "cannot use results from --use_cache or from another model."
        )
    if not math.isclose(est.log_likelihood, log_likelihood, rel_tol=1e-12, abs_tol=1e-12):
        raise RuntimeError(
            f"{WHERE}: document {text[:60]!r}: lm-eval received log p = {log_likelihood!r} but the "
            f"lm-latent-eval backend of this process estimated {est.log_likelihood!r}; the result comes from "
            "another model or from a cache, so its samples are not available"
        )
    log_weights = None if est.log_weights is None else [float(w) for w in est.log_weights]
    smc = (est.diagnostics or {}).get("estimator") == "smc"
    informative = (
        log_weights is not None and est.num_tokens > 0 and not smc
    )  # diagnostics of 0-token documents are trivial; ESS and k̂ of final SMC weights are not IS diagnostics
    ess = effective_sample_size(est.log_weights) if informative else None
    khat = pareto_khat(est.log_weights) if informative else None
    item = {"log_likelihood": log_likelihood, "num_tokens": est.num_tokens, "log_weights": log_weights}
    items = {  # each *_stderr key after its metric: lm-eval shows "<metric>_stderr" in the Stderr column
        "word_perplexity": (log_likelihood, ConfigurableTask.count_words(text)),
        "is_instance_perplexity": item,
        "is_instance_perplexity_stderr": item,
        "is_corpus_perplexity": item,
        "is_corpus_perplexity_stderr": item,
        "is_ess_mean": ess,
        "is_ess_min": ess,
        "is_pareto_k_share": khat,
        "is_pareto_k_undefined": khat,
        **_smc_items(est, item, smc),
    }
    return items | _ppl_and_upp(est, item)


def _ppl_and_upp(est, item: dict) -> dict:
    """A model with an unknown-word penalty (KGLM): PPL without it and UPP with it, from the same samples."""
    no_penalty = est.log_weights_without_unk_penalty()
    if no_penalty is None:
        return {}
    from lm_latent_eval.estimators import log_mean_exp

    plain = {"log_likelihood": float(log_mean_exp(no_penalty)), "num_tokens": est.num_tokens,
             "log_weights": no_penalty.tolist()}
    return {"ppl_instance": plain, "ppl_corpus": plain, "upp_instance": item, "upp_corpus": item}


def _smc_items(est, item: dict, smc: bool) -> dict:
    """Per-document items of the smc_* metrics (left out unless the estimate came from estimator=smc).

    Under SMC the perplexity items also carry the document's independent run estimates and the Lee-Whiteley standard
    error of log p̂: corpus level pairs run r of every document (final SMC particle weights are not exchangeable
    samples, so neither the sample-k pairing nor a bootstrap over them applies).
    """
    if not smc:  # no item: lm-eval then reports no smc_* metric for an IS, beam or exact run
        return {}
    d = est.diagnostics if est.num_tokens > 0 else None
    item = {
        **item,
        "run_log_likelihoods": est.diagnostics["run_log_likelihoods"], "run_sizes": est.diagnostics["run_sizes"],
        "run_relative_variances": est.diagnostics["run_relative_variances"],
        "se": est.diagnostics["log_likelihood_se"],  # 0 for a 0-token document (p̂ = 1 exactly)
    }
    return {
        "is_instance_perplexity": item,
        "is_instance_perplexity_stderr": item,
        "is_corpus_perplexity": item,
        "is_corpus_perplexity_stderr": item,
        "smc_resampling_steps": None if d is None else d["resampling_steps"],
        "smc_ess_min": None if d is None else d["ess_min"],
        "smc_ess_mean": None if d is None else d["ess_mean"],
    }


def _is_smc(items) -> bool:
    smc = ["run_log_likelihoods" in item for item in items]
    if any(smc) and not all(smc):
        raise ValueError(f"{WHERE}: some documents have SMC estimates and some do not")
    return bool(smc) and all(smc)


def instance_perplexity(items) -> float:
    """Instance-level PPL = exp(−Σ_n log p̂(x_n) / Σ_n T_n)."""
    from lm_latent_eval.estimators.aggregate import perplexity

    return perplexity([float(item["log_likelihood"]) for item in items], [int(item["num_tokens"]) for item in items])


def corpus_perplexity(items) -> float:
    """Corpus-level PPL = exp(−(logsumexp_k Σ_n log w_nk − log K) / Σ_n T_n); Σ_n log p(x_n) for exact / beam."""
    from lm_latent_eval.estimators import corpus_ppl

    if _is_smc(items):  # SMC: run r of every document is one corpus sample
        from lm_latent_eval.estimators.aggregate import _total_tokens
        from lm_latent_eval.estimators.smc import runs_corpus_log_likelihood

        total = _total_tokens([int(item["num_tokens"]) for item in items], len(items))
        log_p = runs_corpus_log_likelihood([item["run_log_likelihoods"] for item in items],
                                           [item["run_sizes"] for item in items])
        return math.exp(-log_p / total)
    weights = [item["log_weights"] for item in items]
    if all(w is None for w in weights):  # deterministic estimates: the corpus estimate is the product
        return instance_perplexity(items)
    if any(w is None for w in weights):
        raise ValueError(f"{WHERE}: some documents have importance weights and some do not")
    return corpus_ppl(weights, [int(item["num_tokens"]) for item in items])


def _stderr(items, level: str) -> float:
    from lm_latent_eval.estimators.diagnostics import perplexity_stderr

    if _is_smc(items):
        return _smc_stderr(items, level)
    weights = [item["log_weights"] for item in items]
    if all(w is None for w in weights):  # exact or beam: deterministic, no Monte Carlo error
        return 0.0
    if any(w is None for w in weights):
        raise ValueError(f"{WHERE}: some documents have importance weights and some do not")
    return perplexity_stderr(weights, [int(item["num_tokens"]) for item in items], level=level)


def _smc_stderr(items, level: str) -> float:
    """SMC, bootstrap-free (delta method, Lee-Whiteley variances): instance level PPL·√(Σ_n se_n²)/Σ_n T_n; corpus
    level PPL·√(Var(p̂_corpus)/p̂_corpus²)/Σ_n T_n over the paired runs."""
    from lm_latent_eval.estimators.smc import runs_corpus_relative_variance

    total = sum(int(item["num_tokens"]) for item in items)
    if level == "instance":
        return instance_perplexity(items) * math.sqrt(sum(float(item["se"]) ** 2 for item in items)) / total
    rel_var = runs_corpus_relative_variance([item["run_log_likelihoods"] for item in items],
                                            [item["run_sizes"] for item in items],
                                            [item["run_relative_variances"] for item in items])
    return corpus_perplexity(items) * math.sqrt(rel_var) / total


def instance_perplexity_stderr(items) -> float:
    """Monte Carlo standard error of the instance-level PPL: bootstrap over each document's K samples (IS)."""
    return _stderr(items, "instance")


def corpus_perplexity_stderr(items) -> float:
    """Monte Carlo standard error of the corpus-level PPL: bootstrap over the joint corpus samples k."""
    return _stderr(items, "corpus")


def _informative(items) -> list[float]:
    return [float(v) for v in items if v is not None and not math.isnan(v)]


def mean_ess(items) -> float:
    """Mean over documents of ESS = (Σ_k w_k)² / Σ_k w_k² (NaN when the estimator is not IS)."""
    values = _informative(items)
    return sum(values) / len(values) if values else math.nan


def min_ess(items) -> float:
    """Smallest per-document ESS (NaN when the estimator is not IS)."""
    values = _informative(items)
    return min(values) if values else math.nan


def pareto_k_share(items) -> float:
    """Share of documents with Pareto k̂ > 0.7, where PSIS deems the IS estimate unreliable."""
    from lm_latent_eval.estimators.diagnostics import PARETO_K_THRESHOLD

    values = _informative(items)
    return sum(v > PARETO_K_THRESHOLD for v in values) / len(values) if values else math.nan


def smc_mean(items) -> float:
    """Mean over documents of an SMC diagnostic such as resampling steps (NaN when the estimator is not SMC)."""
    return mean_ess(items)


def pareto_k_undefined_share(items) -> float:
    """Share of IS documents whose k̂ is undefined: their largest weights take too few distinct values (see diagnostics)."""
    values = [float(v) for v in items if v is not None]
    return sum(math.isnan(v) for v in values) / len(values) if values else math.nan
