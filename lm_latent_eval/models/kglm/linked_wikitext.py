"""Linked WikiText-2 JSONL (one article per line: ``tokens`` + ``annotations``) read into text and gold latents.

Each annotation ``{source, id, relation, parent_id, span}`` marks the tokens ``span = [start, end)`` (indices into
``tokens``, whose first entry is ``@@START@@``) as a mention of entity ``id``. ``relation == ["@@NEW@@"]`` means a
new entity; otherwise the entity is reached from ``parent_id[i]`` by ``relation[i]`` (several explanations may be
listed). Reading follows the original KGLM reader (``EnhancedWikitextKglmReader``):

* the first token of a mention gets mention type ``new`` (1) or ``related`` (2), its other tokens ``continuing`` (3),
  all other tokens ``none`` (0); tokens of a related mention keep its (parent, relation) list, cut to 10 entries;
* a later annotation overrides an earlier one on the tokens they share;
* ids starting with ``T`` (dates) / ``V`` (quantities) are entities whose embedding is shared
  (``normalize_entity_id``); an annotation whose id is none of P/Q/T/V is skipped, with a warning naming the article.

``@@START@@`` is the conditioning context, never predicted: ``LinkedDocument.tokens`` are the tokens after it,
and every per-token list is aligned with them.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...documents import corpus_loader, text_lines
from ...errors import InputError, MissingFileError
from ...paths import DATA_DIR
from .latents import canonical_relation

START_TOKEN = "@@START@@"
END_TOKEN = "@@END@@"
NEW_RELATION = "@@NEW@@"
REFLEXIVE_RELATION = "@@REFLEXIVE@@"
DATE_ENTITY = "@@DATE@@"
QUANTITY_ENTITY = "@@QUANTITY@@"
# the original reader keeps at most 10 (parent, relation) explanations per mention
MAX_PARENTS = 10

# mention types, as in the original model's 4-way mention-type softmax
NONE, NEW, RELATED, CONTINUING = 0, 1, 2, 3


def normalize_entity_id(raw_id: str) -> str | None:
    """Entity-embedding id of a raw id: dates ``T…`` -> ``@@DATE@@``, quantities ``V…`` -> ``@@QUANTITY@@``,
    Wikidata ``P…``/``Q…`` unchanged, anything else None."""
    if not raw_id:
        return None
    if raw_id[0] == "T":
        return DATE_ENTITY
    if raw_id[0] == "V":
        return QUANTITY_ENTITY
    if raw_id[0] in "PQ":
        return raw_id
    return None


@dataclass
class LinkedDocument:
    """One article: T predicted tokens and, per token, the gold mention type, entity and (parent, relation) list.

    ``entity[t]`` is the raw annotated id (None off mentions); ``parents[t]`` / ``relations[t]`` are equal-length
    tuples (empty unless token t belongs to a related mention).
    """

    title: str
    tokens: list[str]
    mention_type: list[int] = field(default_factory=list)
    entity: list[str | None] = field(default_factory=list)
    parents: list[tuple[str, ...]] = field(default_factory=list)
    relations: list[tuple[str, ...]] = field(default_factory=list)
    has_start: bool = True

    def __post_init__(self):
        T = len(self.tokens)
        if not self.mention_type:
            self.mention_type = [NONE] * T
            self.entity = [None] * T
            self.parents = [()] * T
            self.relations = [()] * T
        for name in ("mention_type", "entity", "parents", "relations"):
            if len(getattr(self, name)) != T:
                raise InputError(
                    f"document {self.title!r}: {name} has {len(getattr(self, name))} entries for {T} tokens"
                )

    @property
    def text(self) -> str:
        """The article as one string: tokens joined by single spaces (``@@START@@`` excluded)."""
        return " ".join(self.tokens)

    def mentions(self) -> list[tuple[int, int, str]]:
        """[(start, end, entity)] of the gold mentions, spans into ``tokens``."""
        out = []
        t = 0
        T = len(self.tokens)
        while t < T:
            if self.mention_type[t] in (NEW, RELATED):
                end = t + 1
                while end < T and self.mention_type[end] == CONTINUING and self.entity[end] == self.entity[t]:
                    end += 1
                out.append((t, end, self.entity[t]))
                t = end
            else:
                t += 1
        return out


def _annotation_error(where: str, message: str) -> InputError:
    return InputError(f"{where}: {message}")


def parse_document(data: dict, where: str = "document", max_parents: int = MAX_PARENTS) -> LinkedDocument:
    """One JSON object (``tokens``, optional ``title`` and ``annotations``) -> LinkedDocument (see module doc)."""
    if not isinstance(data, dict) or "tokens" not in data:
        raise _annotation_error(where, "expected an object with a 'tokens' list")
    raw_tokens = data["tokens"]
    if not isinstance(raw_tokens, list) or not all(isinstance(t, str) for t in raw_tokens):
        raise _annotation_error(where, "'tokens' must be a list of strings")
    title = str(data.get("title", where))
    where = f"{where} ({title!r})" if "title" in data else where
    has_start = bool(raw_tokens) and raw_tokens[0] == START_TOKEN
    offset = 1 if has_start else 0
    doc = LinkedDocument(title, raw_tokens[offset:], has_start=has_start)
    T = len(doc.tokens)
    skipped = []
    for k, ann in enumerate(data.get("annotations") or []):
        try:
            raw_id = ann["id"]
            relation = list(ann["relation"])
            parent_ids = list(ann["parent_id"])
            start, end = (int(i) for i in ann["span"])
        except (KeyError, TypeError, ValueError) as err:
            raise _annotation_error(
                where, f"annotation {k} lacks id/relation/parent_id/span ({err})"
            ) from err
        if normalize_entity_id(raw_id) is None:
            skipped.append(raw_id)
            continue
        if not (offset <= start < end <= len(raw_tokens)):
            raise _annotation_error(
                where,
                f"annotation {k} ({raw_id}) has span [{start}, {end}) outside the "
                f"{len(raw_tokens)} tokens" + (" or covering @@START@@" if has_start else ""),
            )
        if len(relation) != len(parent_ids) or not relation:
            raise _annotation_error(
                where,
                f"annotation {k} ({raw_id}) lists {len(relation)} relations for {len(parent_ids)} parents",
            )
        new = relation == [NEW_RELATION]
        if not new and NEW_RELATION in relation:
            raise _annotation_error(
                where, f"annotation {k} ({raw_id}) mixes @@NEW@@ with relations {relation}"
            )
        if not new:
            bad = [p for p in parent_ids if normalize_entity_id(p) is None]
            if bad:
                raise _annotation_error(where, f"annotation {k} ({raw_id}) has unusable parent ids {bad}")
        pairs = () if new else tuple(parent_ids[:max_parents])
        rels = () if new else tuple(relation[:max_parents])
        s, e = start - offset, end - offset
        for t in range(s, e):
            doc.mention_type[t] = (NEW if new else RELATED) if t == s else CONTINUING
            doc.entity[t] = raw_id
            doc.parents[t] = pairs
            doc.relations[t] = rels
    if skipped:
        warnings.warn(
            f"{where}: skipped {len(skipped)} annotation(s) whose id is not a P/Q/T/V id: {skipped[:5]}",
            stacklevel=2,
        )
    # an overriding annotation may leave a 'continuing' token whose mention start was overwritten: make it start a
    # mention of its own (the original reader leaves such tokens inconsistent; no model can generate them)
    repaired = []
    for t in range(T):
        if doc.mention_type[t] == CONTINUING and (
            t == 0 or doc.entity[t - 1] != doc.entity[t] or doc.mention_type[t - 1] == NONE
        ):
            doc.mention_type[t] = RELATED if doc.relations[t] else NEW
            repaired.append(t)
    if repaired:
        warnings.warn(
            f"{where}: overlapping annotations cut {len(repaired)} mention(s); the remaining tokens at "
            f"positions {repaired[:5]} now start mentions of their own",
            stacklevel=2,
        )
    return doc


def read_linked_jsonl(path: str | Path, max_parents: int = MAX_PARENTS) -> Iterator[LinkedDocument]:
    """Yield the articles of a Linked WikiText-2 JSONL file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"Linked WikiText-2 file not found: {path}")
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: not valid JSON ({err})") from err
        yield parse_document(data, where, max_parents)


def document_to_json(doc: LinkedDocument) -> dict:
    """Inverse of ``parse_document``: {title, tokens (with @@START@@), annotations [{source, id, relation, parent_id, span}]}."""
    offset = 1 if doc.has_start else 0
    annotations = []
    for start, end, entity in doc.mentions():
        new = doc.mention_type[start] == NEW
        annotations.append(
            {
                "source": "WIKI" if new else "KG",
                "id": entity,
                "relation": [NEW_RELATION] if new else list(doc.relations[start]),
                "parent_id": [entity] if new else list(doc.parents[start]),
                "span": [start + offset, end + offset],
            }
        )
    tokens = ([START_TOKEN] if doc.has_start else []) + list(doc.tokens)
    return {"title": doc.title, "tokens": tokens, "annotations": annotations}


def write_linked_jsonl(docs: Iterable[LinkedDocument], path: str | Path) -> None:
    """Write articles in the Linked WikiText-2 JSONL format (one JSON object per line)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(document_to_json(doc), ensure_ascii=False) + "\n" for doc in docs)


# --- alias strings -> tokens -------------------------------------------------------------------------------------
# The original alias database tokenizes alias strings with spaCy's English tokenizer; the corpus itself is already
# tokenized. This regex tokenizer reproduces spaCy's behaviour on the kinds of strings aliases contain: it splits
# on whitespace, peels off opening/closing punctuation, splits clitics ('s, n't) and hyphens between letters, and
# keeps abbreviations with inner periods (U.S., U.S.A.) and numbers (27.05, 1,000) whole.
_OPEN = "([{\"'“‘«"
_CLOSE = ")]}\"'”’»,;:!?…"
_CLITIC = re.compile(r"^(.+?)('s|'S|’s|n't|N'T|'re|'ve|'ll|'d|'m)$")
_INFIX = re.compile(r"(?<=[^\W\d_])(-|–|—|/)(?=[^\W\d_])")
_ABBREVIATION = re.compile(r"^([^\W\d_]\.)+[^\W\d_]?\.?$|^(Mr|Mrs|Ms|Dr|St|Jr|Sr|Co|Inc|Ltd|vs|Mt|Ft)\.$")


def tokenize_alias(text: str) -> list[str]:
    """Split an alias string into tokens the way the Linked WikiText-2 corpus is tokenized (spaCy-like)."""
    tokens: list[str] = []
    for chunk in text.split():
        prefix: list[str] = []
        suffix: list[str] = []
        while len(chunk) > 1 and chunk[0] in _OPEN:
            prefix.append(chunk[0])
            chunk = chunk[1:]
        while len(chunk) > 1:
            if chunk[-1] in _CLOSE:
                suffix.insert(0, chunk[-1])
                chunk = chunk[:-1]
            elif chunk[-1] == "." and not _ABBREVIATION.match(chunk):
                suffix.insert(0, ".")
                chunk = chunk[:-1]
            else:
                break
        body: list[str] = []
        clitic = _CLITIC.match(chunk)
        if clitic and len(chunk) > len(clitic.group(2)):
            chunk, tail = clitic.group(1), clitic.group(2)
            body = _split_infix(chunk) + [tail]
        else:
            body = _split_infix(chunk)
        tokens.extend(prefix + body + suffix)
    return tokens


def _split_infix(chunk: str) -> list[str]:
    parts = [p for p in _INFIX.split(chunk) if p]
    return parts or ([chunk] if chunk else [])


# --- gold annotations -> the model's latent encoding -------------------------------------------------------------
UNKNOWN_ENTITY = "@@UNKNOWN@@"


def gold_latents(doc: LinkedDocument, model, where: str | None = None) -> tuple[dict, Counter]:
    """The gold z of ``doc`` in the encoding of ``model`` (a KGLM): dict of LongTensor [1, T], plus a Counter of
    the annotations that had to be changed to lie in the model's support (each change is also warned about).

    Entities are matched by name; a name missing from the graph becomes ``@@UNKNOWN@@`` when the graph has it (the
    original archives' unknown entity). A new mention of an entity that shares its embedding row must name the
    row's owner (only owners can be drawn new). A related mention takes the first annotated parent that is a
    parent candidate (mentioned within the model's ``cutoff`` tokens, with an edge to the entity); failing that,
    any candidate with such an edge; failing that, it becomes a new mention. The relation is the model's
    canonical label for (parent, entity).
    """
    where = where or repr(doc.title)
    graph, tables, cutoff = model.graph, model.tables, model.cutoff
    entity_row = tables.entity_row.tolist()
    row_entity = tables.row_entity.tolist()
    row_has_edges = tables.row_has_edges.tolist()
    # parent id -> set of tails
    edges_to = {}

    def tails(p: int) -> set[int]:
        if p not in edges_to:
            edges_to[p] = {tail for _, tail in graph.out_edges(p)}
        return edges_to[p]

    def resolve(name: str | None) -> int | None:
        if name is None:
            return None
        e = graph.entity_to_id.get(name)
        if e is None:
            e = graph.entity_to_id.get(normalize_entity_id(name) or name)
        if e is None:
            e = graph.entity_to_id.get(UNKNOWN_ENTITY)
        return e

    def owner(e: int) -> int:
        return row_entity[entity_row[e]]

    T = len(doc.tokens)
    types, ents, pars = [NONE] * T, [-1] * T, [-1] * T
    changes: Counter = Counter()
    for t in range(T):
        kind = doc.mention_type[t]
        if kind == NONE:
            continue
        e = resolve(doc.entity[t])
        if e is None:
            changes["entity not in graph (dropped)"] += 1
            continue
        if kind == CONTINUING:
            if t > 0 and types[t - 1] != NONE and doc.entity[t - 1] == doc.entity[t]:
                types[t], ents[t], pars[t] = CONTINUING, ents[t - 1], pars[t - 1]
                continue
            # its mention start was dropped
            kind = RELATED if doc.parents[t] else NEW
        if kind == RELATED:
            window = [entity_row[ents[s]] for s in range(max(0, t - cutoff), t) if types[s] != NONE]
            candidates = [row_entity[r] for r in dict.fromkeys(window) if r > 0 and row_has_edges[r]]
            listed = [resolve(p) for p in doc.parents[t]]
            listed = [owner(p) for p in listed if p is not None]
            parent = next((p for p in listed if p in candidates and e in tails(p)), None)
            if parent is None:
                parent = next((p for p in candidates if e in tails(p)), None)
                if parent is not None:
                    changes["related: annotated parent unusable, another candidate used"] += 1
            if parent is not None:
                types[t], ents[t], pars[t] = RELATED, e, parent
                continue
            changes["related: no candidate parent reaches the entity (made new)"] += 1
        if owner(e) != e:
            changes["new: entity shares an embedding row (row owner used)"] += 1
            e = owner(e)
        types[t], ents[t] = NEW, e
    if changes:
        warnings.warn(
            f"{where}: gold annotations adjusted to the model's support: {dict(changes)}", stacklevel=2
        )
    device = tables.entity_row.device
    z = {
        "mention_type": torch.tensor([types], dtype=torch.long, device=device),
        "entity": torch.tensor([ents], dtype=torch.long, device=device),
        "parent": torch.tensor([pars], dtype=torch.long, device=device),
    }
    z["relation"] = canonical_relation(tables, z["parent"], z["entity"])
    return z, changes


def document_tensors(doc: LinkedDocument, model, where: str | None = None) -> tuple:
    """(x LongTensor [T], gold z dict of [1, T], changes) for ``doc`` under ``model``; x = model.tokenize(doc.text)."""
    x = model.tokenize(doc.text)
    if x.numel() != len(doc.tokens):
        raise InputError(
            f"{where or repr(doc.title)}: the model tokenizes the article into {x.numel()} tokens, "
            f"the corpus has {len(doc.tokens)} (tokens must not contain whitespace)"
        )
    z, changes = gold_latents(doc, model, where)
    return x, z, changes


# --- datasets for the lm-eval tasks ------------------------------------------------------------------------------
DATA_DIR_VARIABLE = "LINKED_WIKITEXT2_DIR"
SPLIT_FILES = {"train": "train.jsonl", "validation": "valid.jsonl", "test": "test.jsonl"}


def linked_dataset(data_dir: str | Path, splits: Iterable[str] = ("validation", "test")):
    """datasets.DatasetDict {split: rows {title, text}} from ``<data_dir>/{train,valid,test}.jsonl``; text is the
    article's tokens after ``@@START@@`` joined by spaces (what a KGLM tokenizes back into the same tokens)."""
    # kept local (~0.4 s): trainers import this module; `train --help` imports them all (models/training.py)
    import datasets

    data_dir = Path(data_dir)
    out = {}
    for split in splits:
        path = data_dir / SPLIT_FILES[split]
        if not path.is_file():
            raise MissingFileError(f"Linked WikiText-2 split {split!r} not found: {path}")
        rows = [{"title": doc.title, "text": doc.text} for doc in read_linked_jsonl(path)]
        out[split] = datasets.Dataset.from_list(rows)
    return datasets.DatasetDict(out)


@corpus_loader
def load_linked_wikitext2(data_dir: str | None = None, **_metadata):
    """lm-eval ``custom_dataset`` of task ``linked_wikitext2``: the user's Linked WikiText-2 folder, given as
    ``--metadata '{"data_dir": "..."}'`` or the ``LINKED_WIKITEXT2_DIR`` environment variable."""
    data_dir = data_dir or os.environ.get(DATA_DIR_VARIABLE)
    if not data_dir:
        raise InputError(
            'linked_wikitext2: say where Linked WikiText-2 is: --metadata \'{"data_dir": '
            f'"/path/to/linked-wikitext-2"}}\' or export {DATA_DIR_VARIABLE}=/path/to/linked-wikitext-2'
        )
    return linked_dataset(data_dir)


@corpus_loader
def load_linked_tiny(**_metadata):
    """lm-eval ``custom_dataset`` of task ``linked_wikitext2_tiny``: the bundled synthetic test articles."""
    return linked_dataset(DATA_DIR / "linked_tiny", splits=("test",))
