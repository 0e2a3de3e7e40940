"""Contrastive entropy of a (possibly unnormalized) language model (Arora & Rangarajan 2016)."""

import datasets
import evaluate

from lm_latent_eval.contrastive.entropy import report_from_sentence_scores
from lm_latent_eval.metric_info import metric_info

_CITATION = """\
@inproceedings{arora-rangarajan-2016-contrastive,
    title = "Contrastive Entropy: A new evaluation metric for unnormalized language models",
    author = "Arora, Kushal and Rangarajan, Anand",
    booktitle = "Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing",
    year = "2016",
    publisher = "Association for Computational Linguistics",
    pages = "1--6",
    url = "https://arxiv.org/abs/1601.00248",
}
"""

_URL = "https://arxiv.org/abs/1601.00248"

_DESCRIPTION = """\
Contrastive entropy measures how much more probable a model finds a test set T than the same test set passed
through a noisy channel at distortion level d:

    H_C(T; d) = (1/N) (log p̃(T) − log p̃(T_d)),   R(d) = H_C(d) / H_C(d_base)  (d_base = 0.1 by default)

with log p̃(T) the sum of the sentence scores and N the number of words (or of sentences, unit="sentence"). The
channel (``lm_latent_eval.contrastive.channel``) keeps each word with probability 1 − d, replaces it by a random vocabulary
word with probability d/2 or swaps it with a random word of the same sentence with probability d/2, so the word count
is preserved and per-word (or per-sentence) normalization constants cancel: the scores may be unnormalized. Each level
is averaged over R independent distortions; the spread is their standard deviation.
"""

_KWARGS_DESCRIPTION = """
Args:
    original_score (`list` of `float`): per sentence, log p̃ of the undistorted sentence.
    distorted_scores (`list` of `list` of `list` of `float`): per sentence, [levels][distortions] log p̃ of its
        distorted copies (distortion r of every sentence forms the r-th distorted test set).
    num_words (`list` of `int`): per sentence, its number of words.
    levels (`list` of `float`, default [0.1, 0.3, 0.5]): the distortion level of each row of distorted_scores.
    base_level (`float`, default 0.1): d_base of the ratios; must be one of the levels.
    unit (`str`, default "word"): "word" (N = total words) or "sentence" (N = number of sentences).
Returns:
    contrastive_entropy (`dict` level -> `float`): mean H_C over the distortions,
    contrastive_entropy_std (`dict`): sample standard deviation over the distortions,
    contrastive_entropy_per_distortion (`dict` level -> `list`), ratio (`dict`: mean H_C(d) / mean H_C(d_base)),
    ratio_std (`dict`: standard deviation of the per-distortion ratios), levels, base_level, num_units,
    num_distortions, unit.
Examples:
    Two sentences of 5 words, two levels, two distortions per level:

    >>> import evaluate, lm_latent_eval
    >>> contrastive_entropy = evaluate.load(lm_latent_eval.metrics_path("contrastive_entropy"))
    >>> results = contrastive_entropy.compute(
    ...     original_score=[-10.0, -20.0],
    ...     distorted_scores=[[[-11.0, -12.0], [-15.0, -14.0]], [[-20.0, -21.0], [-26.0, -24.0]]],
    ...     num_words=[5, 5],
    ...     levels=[0.1, 0.3],
    ... )
    >>> [round(x, 4) for x in results["contrastive_entropy_per_distortion"][0.1]]  # (-30 + 31) / 10, (-30 + 33) / 10
    [0.1, 0.3]
    >>> round(results["contrastive_entropy"][0.1], 4), round(results["contrastive_entropy"][0.3], 4)
    (0.2, 0.95)
    >>> round(results["ratio"][0.3], 4)  # 0.95 / 0.2
    4.75

    Adding a constant per word to every score (an unnormalized model) changes nothing:

    >>> shifted = contrastive_entropy.compute(
    ...     original_score=[-10.0 + 5 * 3.0, -20.0 + 5 * 3.0],
    ...     distorted_scores=[[[-11.0 + 15, -12.0 + 15], [-15.0 + 15, -14.0 + 15]],
    ...                       [[-20.0 + 15, -21.0 + 15], [-26.0 + 15, -24.0 + 15]]],
    ...     num_words=[5, 5],
    ...     levels=[0.1, 0.3],
    ... )
    >>> round(shifted["contrastive_entropy"][0.3], 4)
    0.95
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ContrastiveEntropy(evaluate.Metric):
    def _info(self):
        features = {
            "original_score": datasets.Value("float64"),
            "distorted_scores": datasets.Sequence(datasets.Sequence(datasets.Value("float64"))),
            "num_words": datasets.Value("int64"),
        }
        return metric_info(_DESCRIPTION, _CITATION, _KWARGS_DESCRIPTION, features, _URL)

    def _compute(
        self, original_score, distorted_scores, num_words, levels=(0.1, 0.3, 0.5), base_level=0.1, unit="word"
    ):
        return report_from_sentence_scores(
            original_score, distorted_scores, num_words, levels, base_level, unit
        )
