"""Distortion error: log p_M(x) − log p_L(x) per sequence, by rarity of x (LeBrun et al., ICLR 2022)."""

import datasets
import evaluate

from lm_latent_eval.distortion.error_curves import (
    CONFIDENCE_LEVEL,
    MIN_COUNT,
    NUM_EQUAL_SIZE_BINS,
    NUM_EQUAL_WIDTH_BINS,
    NUM_RARITY_BINS,
    NUM_RESAMPLES,
    distortion_report,
)
from lm_latent_eval.metric_info import metric_info

_CITATION = """\
@inproceedings{lebrun2022evaluating,
  title     = {Evaluating Distributional Distortion in Neural Language Modeling},
  author    = {LeBrun, Benjamin and Sordoni, Alessandro and O'Donnell, Timothy J.},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2022},
  url       = {https://arxiv.org/abs/2203.12788}
}
"""

_URL = "https://arxiv.org/abs/2203.12788"

_DESCRIPTION = """\
Compares a language model p_M with a reference language p_L whose sequence probabilities are known (for
example an artificial language sampled from a causal LM), one sequence at a time:

    error(x) = log p_M(x) − log p_L(x)       (nats; < 0: the model underestimates x)

It returns the mean error and the share of underestimated sequences, the error curve over equal-width bins of
log p_L(x) (bins with more than `min_count` sequences, with percentile bootstrap confidence intervals), the
same curve over `num_equal_size_bins` bins holding equally many sequences, and optionally the grid of mean
error by rarity × number of perturbation steps and the observed error by length n against the expected n · ē,
where ē = Σ error / Σ n is the mean per-token error.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of float): log p_M(x) of each sequence under the evaluated model (EOS included).
    references (list of float): log p_L(x) of the same sequences under the reference language.
    num_perturbations (list of int, optional): perturbation steps behind each sequence (0 = unperturbed);
        adds the rarity × steps grid.
    lengths (list of int, optional): tokens scored per sequence (EOS included); adds the length curve.
    token_errors (list of list of float, optional): per-token log p_M(x_t | x_<t) − log p_L(x_t | x_<t);
        must sum to each sequence's error; gives the lengths of the length curve.
    num_bins (int): equal-width bins of log p_L. Defaults to 20.
    num_equal_size_bins (int): bins of the equal-size curve (skipped, with a warning, for fewer sequences).
        Defaults to 50.
    num_rarity_bins (int): log p_L bins (rows) of the perturbation grid. Defaults to 10.
    min_count (int): a bin (length, grid cell) is kept only with more sequences than this. Defaults to 10.
    num_resamples (int): bootstrap resamples per bin. Defaults to 10000.
    confidence_level (float): of the bootstrap intervals. Defaults to 0.95.
    tolerance (float): |error| ≤ tolerance counts as neither under- nor overestimated. Defaults to 0.
    seed (int): seed of the bootstrap. Defaults to 0.
Returns:
    num_sequences, mean_error, share_underestimated, share_overestimated, tolerance: overall numbers.
    equal_width_curve, equal_size_curve: dicts of lists (bin_left, bin_right, count, mean_log_p_ref,
        mean_error, ci_low, ci_high) plus dropped_bins and dropped_sequences.
    perturbation_grid: None, or steps, bin_left, bin_right, mean_error [bins][steps] (None where too few),
        count [bins][steps], mean_error_by_steps, share_underestimated_by_steps, count_by_steps.
    length_curve: None, or length, expected_error, count, mean_error, ci_low, ci_high, mean_per_token_error.
Examples:

    >>> import evaluate
    >>> import lm_latent_eval
    >>> distortion = evaluate.load(lm_latent_eval.metrics_path("distortion_error"))
    >>> results = distortion.compute(
    ...     predictions=[-3.0, -6.0, -9.5, -10.0], references=[-2.0, -6.0, -9.0, -12.0],
    ...     num_bins=2, num_equal_size_bins=2, min_count=1, num_resamples=1000)
    >>> results["mean_error"], results["share_underestimated"], results["share_overestimated"]
    (0.125, 0.5, 0.25)
    >>> curve = results["equal_width_curve"]
    >>> curve["bin_left"], curve["bin_right"], curve["count"], curve["mean_error"]
    ([-12.0, -7.0], [-7.0, -2.0], [2, 2], [0.75, -0.5])

    With the perturbation steps and the lengths of each sequence:

    >>> results = distortion.compute(
    ...     predictions=[-3.0, -6.0, -9.5, -10.0], references=[-2.0, -6.0, -9.0, -12.0],
    ...     num_perturbations=[0, 0, 1, 1], lengths=[2, 2, 4, 4],
    ...     num_bins=1, num_equal_size_bins=1, num_rarity_bins=1, min_count=1, num_resamples=1000)
    >>> results["perturbation_grid"]["steps"], results["perturbation_grid"]["mean_error"]
    ([0, 1], [[-0.5, 0.75]])
    >>> lengths = results["length_curve"]
    >>> lengths["mean_per_token_error"], lengths["expected_error"], lengths["mean_error"]
    (0.041666666666666664, [0.08333333333333333, 0.16666666666666666], [-0.5, 0.75])
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class DistortionError(evaluate.Metric):
    def _info(self):
        features = {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, features, _URL)

    def _compute(
        self,
        predictions,
        references,
        num_perturbations=None,
        lengths=None,
        token_errors=None,
        num_bins=NUM_EQUAL_WIDTH_BINS,
        num_equal_size_bins=NUM_EQUAL_SIZE_BINS,
        num_rarity_bins=NUM_RARITY_BINS,
        min_count=MIN_COUNT,
        num_resamples=NUM_RESAMPLES,
        confidence_level=CONFIDENCE_LEVEL,
        tolerance=0.0,
        seed=0,
    ):
        return distortion_report(
            predictions,
            references,
            num_perturbations=num_perturbations,
            lengths=lengths,
            token_errors=token_errors,
            num_bins=num_bins,
            num_equal_size_bins=num_equal_size_bins,
            num_rarity_bins=num_rarity_bins,
            min_count=min_count,
            num_resamples=num_resamples,
            confidence_level=confidence_level,
            tolerance=tolerance,
            seed=seed,
        )
