"""The bundled masked LM's documents: the sentences of the bundled tiny corpus (short enough for the exact marginal).

Training: the sentences of ``data/corpus/tiny_train.jsonl``; the held-out task ``masked_ppl_tiny``: the 44 sentences
of ``data/corpus/tiny_test.jsonl`` (at most 14 words each), written to ``data/masked_tiny/test.jsonl`` by
``make_default``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...documents import TEXT_FIELD, corpus_loader, read_texts
from ...paths import DATA_DIR

TRAIN_FILE = DATA_DIR / "corpus" / "tiny_train.jsonl"
HELD_OUT_FILE = DATA_DIR / "corpus" / "tiny_test.jsonl"
TEST_FILE = DATA_DIR / "masked_tiny" / "test.jsonl"
SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


def split_sentences(texts: list[str]) -> list[str]:
    """Every sentence of every text, split after '.', '?' or '!' followed by whitespace; empty pieces dropped.

    Examples
    --------
    >>> split_sentences(["The dog slept. Did anna see it?  ", "Maria found anna."])
    ['The dog slept.', 'Did anna see it?', 'Maria found anna.']
    """
    return [s.strip() for text in texts for s in SENTENCE_END.split(text) if s.strip()]


def read_sentences(path: str | Path) -> list[str]:
    """The sentences of a documents file (``.jsonl`` with a ``text`` field, or one document per line)."""
    return split_sentences(read_texts(path))


def write_sentences(sentences: list[str], path: Path) -> Path:
    """``path`` as JSON lines ``{"text": sentence}``, its folder created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({TEXT_FIELD: s}) + "\n" for s in sentences), encoding="utf-8")
    return path


@corpus_loader
def load_masked_tiny(data_file: str | None = None, **_metadata):
    """lm-eval ``custom_dataset`` of task ``masked_ppl_tiny``: a DatasetDict whose ``test`` split is the held-out
    sentences (or ``--metadata '{"data_file": ...}'``); other metadata and model_args are ignored."""
    texts = read_texts(Path(data_file) if data_file else TEST_FILE)
    import datasets  # here: reading the held-out texts needs no datasets (nor its huggingface_hub)

    return datasets.DatasetDict({"test": datasets.Dataset.from_dict({TEXT_FIELD: texts})})
