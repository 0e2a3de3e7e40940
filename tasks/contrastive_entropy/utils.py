"""lm-eval hooks of the contrastive_entropy tasks: sentences -> seeded distortions -> one loglikelihood per text.

Each document is one sentence; its choices are [original, then for each level d the R distorted copies]. The task
asks the backend for log p(choice | "") with an empty context (the ``hf`` backend conditions on BOS/EOS, ours on
nothing), and the aggregations compute H_C(d), its spread and R(d) = H_C(d) / H_C(d_base) over the whole test set.
To change the levels, the number of distortions or the seed, copy this folder and edit the constants below.
"""

from __future__ import annotations

import datasets

from lm_latent_eval.contrastive.channel import corpus_vocabulary, distortion_set, split_sentences
from lm_latent_eval.contrastive.entropy import report_from_sentence_scores
from lm_latent_eval.documents import corpus_loader
from lm_latent_eval.harness.lm_eval_versions import own_stderr

LEVELS = (0.1, 0.3, 0.5)
BASE_LEVEL = 0.1
NUM_DISTORTIONS = 10
SEED = 1234
UNIT = "word"


@corpus_loader
def load_sentences(data_files: str | None = None, **_metadata) -> datasets.DatasetDict:
    """The test split: ``data_files`` (from --metadata; .txt one text per line, or .json/.jsonl with "text"), else
    the bundled tiny corpus ``lm_latent_eval/data/corpus/tiny_test.jsonl``."""
    from lm_latent_eval.paths import DATA_DIR

    path = str(data_files or DATA_DIR / "corpus" / "tiny_test.jsonl")
    if path.endswith(".txt"):
        with open(path, encoding="utf-8") as fh:
            return datasets.DatasetDict(
                {"test": datasets.Dataset.from_dict({"text": fh.read().splitlines()})}
            )
    return datasets.load_dataset("json", data_files={"test": path})


def process_docs(dataset: datasets.Dataset) -> datasets.Dataset:
    """Split every text into sentences and attach their distortions (vocabulary: the word types of the split)."""
    sentences = [s for text in dataset["text"] for s in split_sentences(text)]
    if not sentences:
        raise ValueError("the contrastive_entropy test split has no sentences")
    corpora = distortion_set(sentences, LEVELS, NUM_DISTORTIONS, SEED, corpus_vocabulary(sentences))
    return datasets.Dataset.from_dict(
        {
            "sentence": sentences,
            "num_words": [len(s.split()) for s in sentences],
            "distorted": [
                [corpora[d][r][i] for d in LEVELS for r in range(NUM_DISTORTIONS)]
                for i in range(len(sentences))
            ],
        }
    )


def doc_to_choice(doc: dict) -> list[str]:
    """[original sentence, its distortions level by level] (1 + L·R texts)."""
    return [doc["sentence"], *doc["distorted"]]


def process_results(doc: dict, results) -> dict:
    """One item per sentence for every metric: (num_words, log p(original), [L][R] log p(distorted))."""
    lls = [float(r[0]) if isinstance(r, (tuple, list)) else float(r) for r in results]
    expected = 1 + len(LEVELS) * NUM_DISTORTIONS
    if len(lls) != expected:
        raise ValueError(
            f"sentence {doc['sentence'][:60]!r}: got {len(lls)} log-likelihoods, expected {expected}"
        )
    grid = [lls[1 + j * NUM_DISTORTIONS : 1 + (j + 1) * NUM_DISTORTIONS] for j in range(len(LEVELS))]
    item = (int(doc["num_words"]), lls[0], grid)
    return {name: item for name in METRICS}


def _report(items) -> dict:
    num_words, original, distorted = zip(*items)
    return report_from_sentence_scores(original, distorted, num_words, LEVELS, BASE_LEVEL, UNIT)


def _metric(key: str, level: float):
    def aggregate(items) -> float:
        return _report(items)[key][level]

    aggregate.__name__ = f"{key}_{level}"
    # the spread is a metric of its own (contrastive_entropy_std_*): lm-eval 0.5 would bootstrap the whole report
    return own_stderr(aggregate)


# metric name -> aggregation; the names are listed in _contrastive_entropy_template_yaml
METRICS = {}
for _d in LEVELS:
    METRICS[f"contrastive_entropy_d{_d}"] = _metric("contrastive_entropy", _d)
    METRICS[f"contrastive_entropy_std_d{_d}"] = _metric("contrastive_entropy_std", _d)
for _d in LEVELS:
    if _d != BASE_LEVEL:
        METRICS[f"ratio_d{_d}"] = _metric("ratio", _d)
        METRICS[f"ratio_std_d{_d}"] = _metric("ratio_std", _d)

hc_d01, hc_std_d01 = METRICS["contrastive_entropy_d0.1"], METRICS["contrastive_entropy_std_d0.1"]
hc_d03, hc_std_d03 = METRICS["contrastive_entropy_d0.3"], METRICS["contrastive_entropy_std_d0.3"]
hc_d05, hc_std_d05 = METRICS["contrastive_entropy_d0.5"], METRICS["contrastive_entropy_std_d0.5"]
ratio_d03, ratio_std_d03 = METRICS["ratio_d0.3"], METRICS["ratio_std_d0.3"]
ratio_d05, ratio_std_d05 = METRICS["ratio_d0.5"], METRICS["ratio_std_d0.5"]
