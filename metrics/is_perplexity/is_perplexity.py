"""Importance-sampled perplexity of a latent-variable language model (Logan, Gardner & Singh 2020)."""

import datasets
import evaluate

from lm_latent_eval.estimators.report import weights_report
from lm_latent_eval.metric_info import metric_info

_CITATION = """\
@inproceedings{logan-etal-2020-importance,
    title = "On Importance Sampling-Based Evaluation of Latent Language Models",
    author = "Logan IV, Robert L. and Gardner, Matt and Singh, Sameer",
    booktitle = "Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics",
    year = "2020",
    publisher = "Association for Computational Linguistics",
    pages = "2171--2176",
    url = "https://aclanthology.org/2020.acl-main.196",
}
"""

_URL = "https://aclanthology.org/2020.acl-main.196"

_DESCRIPTION = """\
Perplexity of a latent-variable language model p(x) = Σ_z p(x, z) estimated by importance sampling. For document n
with T_n tokens and K samples z_nk ~ q(z | x_n), the log importance weights are log w_nk = log p(x_n, z_nk) −
log q(z_nk | x_n) and log p̂(x_n) = logsumexp_k log w_nk − log K.

Instance-level perplexity (Eq. 5): exp(−Σ_n log p̂(x_n) / Σ_n T_n).
Corpus-level perplexity (Eq. 6): exp(−(logsumexp_k Σ_n log w_nk − log K) / Σ_n T_n); sample k of every document forms
one corpus sample, so every document needs the same K.

Both are stochastic upper bounds on the true perplexity (E[log p̂] ≤ log p), biased by about Var(p̂/p)/2 per
document: over many documents that bias outgrows the Monte Carlo error, so a ± around them would not cover the truth.
The metric therefore reports the perplexity to quote with an honest 95% interval: two-sided around the bias-corrected
estimate Σ_n (log p̂_n + v̂_n/2), wide enough for a bias anywhere from 0 to twice the correction, where every
document's weights allow it (Pareto k̂ defined and below
min(1 − 1/log10 K, 0.7)) and the correction's remainder is small, else one-sided: the certified bound (Markov's
inequality on the unbiased product of the p̂_n) that the true perplexity exceeds with probability at most 5%, for
any proposal and K. It also reports the Monte Carlo error (documents fixed) apart from the sampling error over
documents, ESS and Pareto k̂ per document, the convergence curve over K and, given beam bounds
log Σ_{z ∈ beam} p(x, z) ≤ log p(x), the strict perplexity bound.
"""

_KWARGS_DESCRIPTION = """
Args:
    log_weights (`list` of `list` of `float`): per document, the K log importance weights
        log p(x, z_k) − log q(z_k | x).
    num_tokens (`list` of `int`): per document, the number of tokens T_n.
    beam_log_likelihoods (`list` of `float`, optional): per document, a beam lower bound on log p(x).
    corpus_level (`bool`, default True): also compute corpus-level perplexity (requires equal K; an error otherwise).
        Set False to get instance-level results for documents with different K.
    confidence_level (`float`, default 0.95): level of the interval and of the certified bound.
Returns:
    perplexity (`float`: bias-corrected where the interval is two-sided, else the instance level),
    perplexity_interval (`[lo, hi]`; lo is 0 for a one-sided statement), interval (`"two-sided"` or `"one-sided"`),
    interval_note (`str`: which, and why), perplexity_upper_bound (`float`: certified), monte_carlo_stderr
    (`float`, NaN when one-sided), sampling_stderr (`float`: over documents),
    instance_perplexity (`float`), corpus_perplexity (`float` or None), corpus_perplexity_upper_bound,
    num_tokens (`int`), log_likelihoods (`list`: log p̂ per document), log_likelihood_interval (`list` of `[lo, hi]`,
    same method per document), num_samples (`list`: K per document), ess (`list`), pareto_k (`list`),
    pareto_k_threshold (`list`: min(1 − 1/log10 K, 0.7) per document), share_pareto_k_above_threshold (`float`),
    num_pareto_k_undefined (`int`), convergence (`dict`: num_samples, instance_perplexity and corpus_perplexity over
    K' = 1, 2, 4, ..., K), and with beam bounds: beam_perplexity (`float`, ≥ true PPL), beam_log_likelihoods,
    share_below_beam_bound (`float`: share of documents whose log p̂ is under the bound).
Examples:
    Two documents, two samples each (weights 1/2, 1/4 and 1/8, 1/16), with 1 and 2 tokens:

    >>> import math, evaluate, lm_latent_eval
    >>> is_perplexity = evaluate.load(lm_latent_eval.metrics_path("is_perplexity"))
    >>> lw = [[math.log(1 / 2), math.log(1 / 4)], [math.log(1 / 8), math.log(1 / 16)]]
    >>> results = is_perplexity.compute(log_weights=lw, num_tokens=[1, 2])
    >>> round(results["instance_perplexity"], 6)  # (3/8 * 3/32) ** (-1/3)
    3.052571
    >>> round(results["corpus_perplexity"], 6)  # ((1/2 * 1/8 + 1/4 * 1/16) / 2) ** (-1/3)
    2.947225
    >>> [round(x, 4) for x in results["log_likelihoods"]]  # log 3/8, log 3/32
    [-0.9808, -2.3671]
    >>> [round(x, 4) for x in results["ess"]]  # (Σw)² / Σw²
    [1.8, 1.8]

    Two samples cannot show a weight distribution's tail, so only the certified bound is honest:
    exp(−(log 3/8 + log 3/32 + log 0.05) / 3):

    >>> results["interval"], round(results["perplexity_upper_bound"], 4)
    ('one-sided', 8.286)

    Beam lower bounds on log p(x) give a strict upper bound on perplexity, exp((1.5 + 2.5) / 3):

    >>> results = is_perplexity.compute(log_weights=lw, num_tokens=[1, 2], beam_log_likelihoods=[-1.5, -2.5])
    >>> round(results["beam_perplexity"], 4), results["share_below_beam_bound"]
    (3.7937, 0.0)

    Documents with different K: corpus-level perplexity is undefined, instance-level still works:

    >>> is_perplexity.compute(log_weights=[[-1.0, -2.0], [-1.0]], num_tokens=[1, 1])
    Traceback (most recent call last):
    ...
    ValueError: corpus-level IS pairs sample k of every document, so every document needs the same number of samples; got sample counts [1, 2]
    >>> results = is_perplexity.compute(log_weights=[[-1.0, -2.0], [-1.0]], num_tokens=[1, 1], corpus_level=False)
    >>> results["corpus_perplexity"] is None
    True
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class IsPerplexity(evaluate.Metric):
    def _info(self):
        features = {
            "log_weights": datasets.Sequence(datasets.Value("float64")),
            # float64, not int64: an int64 feature would truncate 2.5 to 2 before _compute could refuse it
            "num_tokens": datasets.Value("float64"),
        }
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, features, _URL)

    def _compute(
        self,
        log_weights,
        num_tokens,
        beam_log_likelihoods=None,
        corpus_level=True,
        confidence_level=0.95,
    ):
        return weights_report(log_weights, num_tokens, beam_log_likelihoods, corpus_level, confidence_level)
