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
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

START_TOKEN = "@@START@@"
END_TOKEN = "@@END@@"
NEW_RELATION = "@@NEW@@"
REFLEXIVE_RELATION = "@@REFLEXIVE@@"
DATE_ENTITY = "@@DATE@@"
QUANTITY_ENTITY = "@@QUANTITY@@"
MAX_PARENTS = 10  # the original reader keeps at most 10 (parent, relation) explanations per mention

# mention types, as in the original model's 4-way mention-type softmax
NONE, NEW, RELATED, CONTINUING = 0, 1, 2, 3
MENTION_TYPES = ("none", "new", "related", "continuing")


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
                raise ValueError(f"document {self.title!r}: {name} has {len(getattr(self, name))} entries for {T} tokens")

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


def _annotation_error(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


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
            raise _annotation_error(where, f"annotation {k} lacks id/relation/parent_id/span ({err})") from err
        if normalize_entity_id(raw_id) is None:
            skipped.append(raw_id)
            continue
        if not (offset <= start < end <= len(raw_tokens)):
            raise _annotation_error(where, f"annotation {k} ({raw_id}) has span [{start}, {end}) outside the "
                                    f"{len(raw_tokens)} tokens" + (" or covering @@START@@" if has_start else ""))
        if len(relation) != len(parent_ids) or not relation:
            raise _annotation_error(where, f"annotation {k} ({raw_id}) lists {len(relation)} relations for "
                                    f"{len(parent_ids)} parents")
        new = relation == [NEW_RELATION]
        if not new and NEW_RELATION in relation:
            raise _annotation_error(where, f"annotation {k} ({raw_id}) mixes @@NEW@@ with relations {relation}")
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
        warnings.warn(f"{where}: skipped {len(skipped)} annotation(s) whose id is not a P/Q/T/V id: {skipped[:5]}",
                      stacklevel=2)
    # an overriding annotation may leave a 'continuing' token whose mention start was overwritten: make it start a
    # mention of its own (the original reader leaves such tokens inconsistent; no model can generate them)
    repaired = []
    for t in range(T):
        if doc.mention_type[t] == CONTINUING and (t == 0 or doc.entity[t - 1] != doc.entity[t]
                                                  or doc.mention_type[t - 1] == NONE):
            doc.mention_type[t] = RELATED if doc.relations[t] else NEW
            repaired.append(t)
    if repaired:
        warnings.warn(f"{where}: overlapping annotations cut {len(repaired)} mention(s); the remaining tokens at "
                      f"positions {repaired[:5]} now start mentions of their own", stacklevel=2)
    return doc


def read_linked_jsonl(path: str | Path, max_parents: int = MAX_PARENTS) -> Iterator[LinkedDocument]:
    """Yield the articles of a Linked WikiText-2 JSONL file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Linked WikiText-2 file not found: {path}")
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err})") from err
            yield parse_document(data, where, max_parents)


def document_to_json(doc: LinkedDocument) -> dict:
    """Inverse of ``parse_document``: {title, tokens (with @@START@@), annotations [{source, id, relation, parent_id, span}]}."""
    offset = 1 if doc.has_start else 0
    annotations = []
    for start, end, entity in doc.mentions():
        new = doc.mention_type[start] == NEW
        annotations.append({
            "source": "WIKI" if new else "KG",
            "id": entity,
            "relation": [NEW_RELATION] if new else list(doc.relations[start]),
            "parent_id": [entity] if new else list(doc.parents[start]),
            "span": [start + offset, end + offset],
        })
    tokens = ([START_TOKEN] if doc.has_start else []) + list(doc.tokens)
    return {"title": doc.title, "tokens": tokens, "annotations": annotations}


def write_linked_jsonl(docs: Iterable[LinkedDocument], path: str | Path) -> None:
    """Write articles in the Linked WikiText-2 JSONL format (one JSON object per line)."""
    with open(path, "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(document_to_json(doc), ensure_ascii=False) + "\n")


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
