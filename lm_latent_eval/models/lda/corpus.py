"""The bundled corpus of the bundled LDA: paragraphs of Python's own documentation (``pydoc_data.topics``, in every
Python install), split once into train and held-out files under ``lm_latent_eval/data/pydoc_topics``.

The split is written by ``make_default.py`` and then read from the bundled files (never from this interpreter's
``pydoc_data``, whose text changes between Python versions), so results do not depend on the Python that runs them.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from pydoc_data.topics import topics

from ...documents import corpus_loader, read_texts
from ...paths import DATA_DIR

CORPUS_DIR = DATA_DIR / "pydoc_topics"
NUM_HELD_OUT = 20
# held-out paragraphs have this many pattern tokens: the exact DP stays in seconds
HELD_OUT_TOKENS = (20, 100)


def pydoc_paragraphs() -> list[str]:
    """Every paragraph (blank-line separated, whitespace collapsed) of every topic of ``pydoc_data.topics``, in the
    order of the sorted topic names."""
    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            text = " ".join(block.split())
            if text:
                paragraphs.append(text)
    return paragraphs


def split_paragraphs(paragraphs: list[str], token_pattern: str, seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, held-out): ``NUM_HELD_OUT`` paragraphs drawn at random (``seed``) among those with
    ``HELD_OUT_TOKENS`` tokens of ``token_pattern`` (lower-cased), the rest in their original order for training."""
    pattern = re.compile(token_pattern)
    lo, hi = HELD_OUT_TOKENS
    eligible = [i for i, p in enumerate(paragraphs) if lo <= len(pattern.findall(p.lower())) <= hi]
    held_out = sorted(random.Random(seed).sample(eligible, NUM_HELD_OUT))
    chosen = set(held_out)
    return [p for i, p in enumerate(paragraphs) if i not in chosen], [paragraphs[i] for i in held_out]


def write_jsonl(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8"
    )


def completion_halves(text: str) -> tuple[str, str]:
    """(first half, second half) of a document's whitespace words, the second led by a space: Wallach et al.'s (2009)
    document completion scores p(second half | first half)."""
    words = text.split()
    half = len(words) // 2
    return " ".join(words[:half]), " " + " ".join(words[half:])


@corpus_loader
def load_pydoc_topics(data_file: str | None = None, **_metadata):
    """lm-eval ``custom_dataset``: the bundled held-out paragraphs (or ``data_file``) as a ``test`` split."""
    # kept local (~0.4 s): trainers import this module; `train --help` imports them all (models/training.py)
    import datasets

    path = Path(data_file) if data_file else CORPUS_DIR / "test.jsonl"
    return datasets.DatasetDict({"test": datasets.Dataset.from_list([{"text": t} for t in read_texts(path)])})


@corpus_loader
def load_pydoc_completion(data_file: str | None = None, **_metadata):
    """lm-eval ``custom_dataset``: each held-out paragraph as {text, context (first half), continuation}."""
    # kept local (~0.4 s): trainers import this module; `train --help` imports them all (models/training.py)
    import datasets

    path = Path(data_file) if data_file else CORPUS_DIR / "test.jsonl"
    rows = []
    for text in read_texts(path):
        context, continuation = completion_halves(text)
        rows.append({"text": text, "context": context, "continuation": continuation})
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
