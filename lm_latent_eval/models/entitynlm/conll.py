"""CoNLL-2012 coreference in the JSONL form of the original EntityNLM code -> (tokens, gold z).

One document per line: ``{"tokens": [...], "clusters": {cluster_id: [[start, end), ...]}}`` (end exclusive). A
leading ``@@START@@`` is the encoder's start symbol, not a word: it is dropped and spans are shifted. EntityNLM
labels each token with at most one mention, so:

- clusters that share an identical span are merged (as the original reader's ``canonicalize_clusters``);
- a mention nested inside another one is dropped (the outer mention is kept, as the original CoNLL reader does),
  and of two crossing mentions the one starting later is dropped; each drop is reported in a warning naming the
  document (nothing is dropped silently).

Entities are numbered by first mention (0, 1, ...), so E_t = n_{t−1} marks a new entity as in ``latents.py``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...documents import corpus_loader, text_lines
from ...errors import InputError, MissingFileError
from ...paths import DATA_DIR
from .latents import LATENT_KEYS

START = "@@START@@"


@dataclass
class CorefDocument:
    """Tokens and non-overlapping mentions (start, end exclusive, entity index by first mention)."""

    tokens: list[str]
    mentions: list[tuple[int, int, int]] = field(default_factory=list)
    name: str = ""

    @property
    def num_entities(self) -> int:
        return 1 + max((e for _, _, e in self.mentions), default=-1)

    @property
    def longest_mention(self) -> int:
        return max((end - start for start, end, _ in self.mentions), default=0)

    def to_json(self) -> dict:
        """The JSONL record (``tokens`` + ``clusters`` keyed by entity index)."""
        clusters: dict[str, list[list[int]]] = {}
        for start, end, e in self.mentions:
            clusters.setdefault(str(e), []).append([start, end])
        return {"tokens": self.tokens, "clusters": clusters}

    def text(self) -> str:
        """The document as whitespace-joined tokens (what ``EntityNLM.tokenize`` reads back)."""
        return " ".join(self.tokens)


def gold_latents(doc: CorefDocument) -> dict:
    """z of the document's annotation: dict of LongTensor [1, T] (mention R_t, entity E_t, length L_t)."""
    T = len(doc.tokens)
    mention, entity, length = [0] * T, [-1] * T, [1] * T
    for start, end, e in doc.mentions:
        for t in range(start, end):
            mention[t], entity[t], length[t] = 1, e, end - t
    return {k: torch.tensor([v], dtype=torch.long) for k, v in zip(LATENT_KEYS, (mention, entity, length))}


def document_from_record(record: dict, name: str = "document") -> CorefDocument:
    """A CorefDocument from one JSONL record; a clear error naming ``name`` for malformed input."""
    tokens, clusters = record.get("tokens"), record.get("clusters", {})
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise InputError(f"{name}: 'tokens' must be a list of strings")
    # a list of clusters (AllenNLP's coref format) is accepted too
    if isinstance(clusters, list):
        clusters = {str(i): c for i, c in enumerate(clusters)}
    if not isinstance(clusters, dict):
        raise InputError(f"{name}: 'clusters' must be a dict {{id: [[start, end], ...]}}")
    shift = 1 if tokens and tokens[0] == START else 0
    tokens = tokens[shift:]
    merged: list[set[tuple[int, int]]] = []
    for cid, spans in clusters.items():
        spans_set = set()
        for span in spans:
            if not (
                isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(v, int) for v in span)
            ):
                raise InputError(f"{name}: cluster {cid!r} has a span {span!r} that is not [start, end]")
            start, end = span[0] - shift, span[1] - shift
            if not 0 <= start < end <= len(tokens):
                raise InputError(
                    f"{name}: cluster {cid!r} span {list(span)} lies outside the {len(tokens) + shift} tokens"
                    + (" (or covers the leading @@START@@)" if shift else "")
                )
            spans_set.add((start, end))
        same = next((c for c in merged if c & spans_set), None)
        if same is not None:
            warnings.warn(
                f"{name}: cluster {cid!r} shares a span with an earlier cluster; merged", stacklevel=2
            )
            same |= spans_set
        elif spans_set:
            merged.append(spans_set)
    spans = sorted((s, e, i) for i, c in enumerate(merged) for s, e in c)
    # outer mentions first: by start, then longest first
    spans.sort(key=lambda m: (m[0], -(m[1] - m[0])))
    kept, dropped, covered_until = [], 0, 0
    for start, end, cluster in spans:
        if start < covered_until:
            dropped += 1
            continue
        kept.append((start, end, cluster))
        covered_until = end
    if dropped:
        warnings.warn(
            f"{name}: dropped {dropped} of {len(spans)} mentions nested in or crossing another mention "
            "(EntityNLM labels each token with one mention)",
            stacklevel=2,
        )
    order: dict[int, int] = {}
    mentions = [(s, e, order.setdefault(c, len(order))) for s, e, c in kept]
    return CorefDocument(tokens, mentions, name)


def read_coref_jsonl(path: str | Path) -> Iterator[CorefDocument]:
    """Documents of a CoNLL-2012 JSONL file, named ``<file>:<line>``."""
    path = Path(path)
    for i, line in text_lines(path):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{i}: not a JSON record ({err})") from err
            yield document_from_record(record, f"{path.name}:{i}")


def write_coref_jsonl(docs: list[CorefDocument], path: str | Path) -> None:
    """One JSON record per document (``tokens`` + ``clusters``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(doc.to_json()) + "\n" for doc in docs)


# --- datasets for the lm-eval tasks ------------------------------------------------------------------------------
def coref_dataset(path: str | Path, split: str = "test"):
    """datasets.DatasetDict {split: rows {title, text}} of a CoNLL-2012 JSONL file; text = tokens joined by spaces."""
    # kept local (~0.4 s): trainers import this module; `train --help` imports them all (models/training.py)
    import datasets

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"CoNLL-2012 JSONL file not found: {path}")
    rows = [{"title": doc.name, "text": doc.text()} for doc in read_coref_jsonl(path)]
    return datasets.DatasetDict({split: datasets.Dataset.from_list(rows)})


@corpus_loader
def load_conll2012(data_file: str | None = None, **_metadata):
    """lm-eval ``custom_dataset`` of task ``conll2012_ppl``: the user's file, ``--metadata '{"data_file": ...}'``."""
    if not data_file:
        raise InputError(
            'conll2012_ppl: say which file to evaluate: --metadata \'{"data_file": "/path/test.jsonl"}\''
        )
    return coref_dataset(data_file)


@corpus_loader
def load_coref_tiny(**_metadata):
    """lm-eval ``custom_dataset`` of task ``coref_tiny``: the bundled synthetic test stories of the bundled EntityNLM."""
    return coref_dataset(DATA_DIR / "coref_tiny" / "test.jsonl")
