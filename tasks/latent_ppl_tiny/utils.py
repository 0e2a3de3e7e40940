"""latent_ppl_tiny: the bundled corpus and the text of each document; every metric's per-document items and their
aggregations come from ``lm_latent_eval.harness.perplexity_task`` (named in the YAML), all from the same estimate the
backend made of each document."""

from __future__ import annotations

from pathlib import Path

TEXT_FIELD = "text"


def load(data_file: str | None = None, **_metadata):
    """DatasetDict with a ``test`` split from the bundled tiny corpus (or ``--metadata '{"data_file": ...}'``: .jsonl
    with a ``text`` field, or one document per line); an unusable line is an error naming the file and line.

    lm-eval passes the task metadata and model_args as keyword arguments; they do not affect the data.
    """
    import datasets

    from lm_latent_eval.documents import read_texts
    from lm_latent_eval.paths import DATA_DIR

    path = Path(data_file) if data_file else DATA_DIR / "corpus" / "tiny_test.jsonl"
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict({TEXT_FIELD: read_texts(path)})})


def doc_to_target(doc: dict) -> str:
    """The document text scored by loglikelihood_rolling."""
    return doc[TEXT_FIELD]


def process_results(doc: dict, results: list) -> dict:
    """Per-document items of every metric, all from the backend's estimate of this very document."""
    from lm_eval.api.task import ConfigurableTask

    from lm_latent_eval.harness.perplexity_task import document_items

    text = doc_to_target(doc)
    (log_likelihood,) = results
    return document_items(text, log_likelihood, ConfigurableTask.count_words(text))
