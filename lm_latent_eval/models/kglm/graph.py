"""The knowledge graph a KGLM talks about: entities, relations, edges (head -> [(relation, tail)]) and aliases.

Entities and relations are numbered 0..N-1 and 0..R-1 in the order they were first seen; names are the strings
of the source data (Wikidata ids such as ``Q42`` / ``P31`` in Linked WikiText-2). Aliases are token lists (the
surface forms a mention may copy), e.g. ``{"Q42": [["Douglas", "Adams"], ["Adams"]]}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError, MissingFileError


@dataclass
class KnowledgeGraph:
    """Entities ⟷ ids, relations ⟷ ids, ``edges[e] = [(relation_id, tail_id), ...]``, ``aliases[e] = [[tok, ...], ...]``."""

    entities: list[str] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    edges: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    aliases: dict[int, list[list[str]]] = field(default_factory=dict)

    def __post_init__(self):
        self.entity_to_id = {name: i for i, name in enumerate(self.entities)}
        self.relation_to_id = {name: i for i, name in enumerate(self.relations)}
        if len(self.entity_to_id) != len(self.entities):
            raise InputError("knowledge graph: duplicate entity names")
        if len(self.relation_to_id) != len(self.relations):
            raise InputError("knowledge graph: duplicate relation names")
        n, r = len(self.entities), len(self.relations)
        for head, out in self.edges.items():
            for rel, tail in out:
                if not (0 <= head < n and 0 <= tail < n and 0 <= rel < r):
                    raise InputError(f"knowledge graph: edge ({head}, {rel}, {tail}) refers to an unknown id")
        for e, forms in self.aliases.items():
            if not 0 <= e < n:
                raise InputError(f"knowledge graph: aliases given for unknown entity id {e}")
            for form in forms:
                if not isinstance(form, list) or not all(isinstance(t, str) for t in form):
                    raise InputError(
                        f"knowledge graph: alias of {self.entities[e]!r} must be a list of strings"
                    )

    # --- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_dicts(
        cls,
        edges: Mapping[str, Iterable[Sequence[str]]] | None = None,
        aliases: Mapping[str, Iterable[Sequence[str]]] | None = None,
        entities: Iterable[str] | None = None,
        relations: Iterable[str] | None = None,
    ) -> KnowledgeGraph:
        """Build from ``edges = {head: [(relation, tail), ...]}`` and ``aliases = {entity: [[tok, ...], ...]}``.

        ``entities`` / ``relations`` fix the numbering (listed names first); names only seen in edges or aliases are
        appended in the order met. A single string alias is split on whitespace.
        """
        # name -> id, in the order first met (dicts keep it)
        ent_ids: dict[str, int] = {}
        rel_ids: dict[str, int] = {}

        def number(ids: dict[str, int], kind: str, name: str) -> int:
            """The id of ``name`` among the ``kind`` names, the next free one when it is new."""
            if not isinstance(name, str):
                raise TypeError(f"{kind} names must be strings, got {name!r}")
            return ids.setdefault(name, len(ids))

        def ent(name: str) -> int:
            return number(ent_ids, "entity", name)

        def rel(name: str) -> int:
            return number(rel_ids, "relation", name)

        for name in entities or ():
            ent(name)
        for name in relations or ():
            rel(name)
        edge_ids: dict[int, list[tuple[int, int]]] = {}
        for head, out in (edges or {}).items():
            h = ent(head)
            lst = edge_ids.setdefault(h, [])
            for pair in out:
                if len(pair) != 2:
                    raise InputError(f"edge of {head!r} must be (relation, tail), got {pair!r}")
                r_name, tail = pair
                lst.append((rel(r_name), ent(tail)))
        alias_ids: dict[int, list[list[str]]] = {}
        for name, forms in (aliases or {}).items():
            e = ent(name)
            lst = alias_ids.setdefault(e, [])
            for form in forms:
                lst.append(form.split() if isinstance(form, str) else [str(t) for t in form])
        return cls(list(ent_ids), list(rel_ids), edge_ids, alias_ids)

    # --- queries ------------------------------------------------------------------------------------------------
    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def out_edges(self, entity: int) -> list[tuple[int, int]]:
        """[(relation_id, tail_id), ...] leaving ``entity`` (empty when it has none)."""
        return self.edges.get(int(entity), [])

    def entity_aliases(self, entity: int) -> list[list[str]]:
        """The alias token lists of ``entity`` (empty when it has none)."""
        return self.aliases.get(int(entity), [])

    def entity_id(self, name: str) -> int:
        try:
            return self.entity_to_id[name]
        except KeyError:
            raise KeyError(f"entity {name!r} is not in the knowledge graph") from None

    def relation_id(self, name: str) -> int:
        try:
            return self.relation_to_id[name]
        except KeyError:
            raise KeyError(f"relation {name!r} is not in the knowledge graph") from None

    # --- serialization ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain JSON-able form keyed by names: {entities, relations, edges: {head: [[rel, tail]]}, aliases}."""
        return {
            "entities": list(self.entities),
            "relations": list(self.relations),
            "edges": {
                self.entities[h]: [[self.relations[r], self.entities[t]] for r, t in out]
                for h, out in self.edges.items()
            },
            "aliases": {self.entities[e]: [list(f) for f in forms] for e, forms in self.aliases.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> KnowledgeGraph:
        """Inverse of ``to_dict`` (the numbering is preserved)."""
        return cls.from_dicts(
            edges=data.get("edges", {}),
            aliases=data.get("aliases", {}),
            entities=data.get("entities", ()),
            relations=data.get("relations", ()),
        )

    def to_json(self, path: str | Path | None = None) -> str:
        """The JSON text of ``to_dict``; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), ensure_ascii=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, source: str | Path) -> KnowledgeGraph:
        """Read from a JSON file path, or from JSON text (a string starting with ``{``)."""
        if isinstance(source, str) and source.lstrip().startswith("{"):
            text = source
        else:
            path = Path(source)
            if not path.is_file():
                raise MissingFileError(f"knowledge graph file not found: {path}")
            text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"knowledge graph JSON is malformed: {err}") from err
        if not isinstance(data, dict):
            raise InputError("knowledge graph JSON must be an object with entities/relations/edges/aliases")
        return cls.from_dict(data)

    def __repr__(self) -> str:
        n_edges = sum(len(v) for v in self.edges.values())
        return (
            f"KnowledgeGraph({self.num_entities} entities, {self.num_relations} relations, {n_edges} edges)"
        )
