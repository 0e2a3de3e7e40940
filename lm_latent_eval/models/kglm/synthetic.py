"""Synthetic Linked-WikiText-2-style corpus: a knowledge graph with multi-token aliases and articles that mention it.

The generator mimics how Linked WikiText-2 articles use the graph. An article opens with its topic entity
(a *new* mention), and every sentence then either introduces another entity (*new*), states a fact — a cue phrase
of the relation followed by an alias of an entity reached by an edge from an entity mentioned within the last
``cutoff`` tokens (*related*; every recent (parent, relation) pair that reaches the same entity is listed, as the
real annotations do) — or refers back to a recent entity (*related* by ``@@REFLEXIVE@@``). Background words
(a Zipf-distributed vocabulary) fill the rest; paragraphs end with ``@@END@@``. Entity ids are ``Q<n>``,
relation ids ``P<n>`` with inverse relations ``R:P<n>``, as in Wikidata.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from .graph import KnowledgeGraph
from .linked_wikitext import (
    CONTINUING,
    END_TOKEN,
    NEW,
    REFLEXIVE_RELATION,
    RELATED,
    LinkedDocument,
    write_linked_jsonl,
)

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "ten",
    "vor",
    "sel",
    "du",
    "bran",
    "quo",
    "fel",
    "zan",
    "or",
    "pim",
    "ste",
    "gal",
    "nu",
    "hex",
    "tor",
    "via",
    "mar",
    "lin",
    "cas",
    "bel",
]
_KINDS = ["River", "County", "City", "Bridge", "Church", "Lake", "Mountain", "Railway", "School", "Island"]
_BACKGROUND = [
    "the",
    ",",
    "of",
    "and",
    "in",
    "a",
    "was",
    "to",
    "is",
    "by",
    "with",
    "for",
    "as",
    "on",
    "which",
    "its",
    "from",
    "that",
    "at",
    "first",
    "also",
    "been",
    "new",
    "built",
    "over",
    "area",
    "part",
    "during",
    "after",
    "until",
    "local",
    "main",
    "early",
    "known",
    "large",
    "century",
    "several",
]
_CUE_WORDS = [
    "located",
    "near",
    "part",
    "named",
    "after",
    "flows",
    "into",
    "borders",
    "crosses",
    "founded",
    "owned",
    "operated",
    "designed",
    "member",
    "capital",
    "seat",
    "serves",
    "built",
    "carries",
    "within",
]


@dataclass
class SyntheticConfig:
    """Sizes and rates of the synthetic corpus (defaults make a corpus a small KGLM learns in minutes on a CPU)."""

    num_entities: int = 60
    num_relations: int = 8
    edges_per_entity: int = 3
    num_documents: int = 200
    sentences_per_document: tuple[int, int] = (6, 12)
    sentences_per_paragraph: int = 4
    p_new: float = 0.25
    p_related: float = 0.5
    p_reflexive: float = 0.1
    cutoff: int = 30


def make_knowledge_graph(config: SyntheticConfig, rng: random.Random) -> KnowledgeGraph:
    """Entities Q1..QN with 1-3 multi-token aliases; each has ``edges_per_entity`` facts P<r> plus inverses
    R:P<r> and a ``@@REFLEXIVE@@`` self-edge (as the original Linked WikiText-2 graph has)."""
    names: set[str] = set()
    entities = [f"Q{i + 1}" for i in range(config.num_entities)]
    aliases: dict[str, list[list[str]]] = {}
    for e in entities:
        while True:
            word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            if word not in names:
                names.add(word)
                break
        kind = rng.choice(_KINDS)
        # full name, e.g. "Kalovor River"
        forms = [[word, kind]]
        if rng.random() < 0.6:
            # short name
            forms.append([word])
        if rng.random() < 0.3:
            forms.append(["the", word, kind])
        aliases[e] = forms
    relations = [f"P{r + 1}" for r in range(config.num_relations)]
    edges: dict[str, list[tuple[str, str]]] = {e: [(REFLEXIVE_RELATION, e)] for e in entities}
    for e in entities:
        tails = rng.sample([t for t in entities if t != e], k=min(config.edges_per_entity, len(entities) - 1))
        for tail in tails:
            rel = rng.choice(relations)
            edges[e].append((rel, tail))
            edges[tail].append((f"R:{rel}", e))
    all_relations = [REFLEXIVE_RELATION] + relations + [f"R:{r}" for r in relations]
    return KnowledgeGraph.from_dicts(edges=edges, aliases=aliases, entities=entities, relations=all_relations)


def _relation_cues(graph: KnowledgeGraph, rng: random.Random) -> dict[str, list[str]]:
    """Each relation's cue phrase: 1-2 cue words (inverse relations get their own)."""
    return {
        r: rng.sample(_CUE_WORDS, k=rng.randint(1, 2)) for r in graph.relations if r != REFLEXIVE_RELATION
    }


class _Writer:
    """Accumulates tokens and gold annotations of one article."""

    def __init__(self, title: str):
        self.doc = LinkedDocument(title, [])
        # entity -> index of its last mention token
        self.last_seen: dict[str, int] = {}

    def words(self, words: list[str]) -> None:
        for w in words:
            self._append(w, 0, None, (), ())

    def mention(self, entity: str, alias: list[str], parents: tuple = (), relations: tuple = ()) -> None:
        first = RELATED if relations else NEW
        for i, w in enumerate(alias):
            self._append(w, first if i == 0 else CONTINUING, entity, parents, relations)
        self.last_seen[entity] = len(self.doc.tokens) - 1

    def recent(self, cutoff: int) -> list[str]:
        """Entities mentioned within the last ``cutoff`` tokens (candidate parents of the next token)."""
        now = len(self.doc.tokens)
        return [e for e, pos in self.last_seen.items() if now - pos <= cutoff]

    def _append(self, word, mention_type, entity, parents, relations):
        d = self.doc
        d.tokens.append(word)
        d.mention_type.append(mention_type)
        d.entity.append(entity)
        d.parents.append(tuple(parents))
        d.relations.append(tuple(relations))


def _filler(rng: random.Random, lo: int, hi: int) -> list[str]:
    weights = [1.0 / (i + 1) for i in range(len(_BACKGROUND))]
    return rng.choices(_BACKGROUND, weights=weights, k=rng.randint(lo, hi))


def make_document(
    graph: KnowledgeGraph, cues: dict[str, list[str]], config: SyntheticConfig, rng: random.Random, title: str
) -> LinkedDocument:
    """One article about a random topic entity (see module doc for the generative story)."""
    entities = graph.entities
    out = _Writer(title)
    topic = rng.choice(entities)
    out.mention(topic, rng.choice(graph.entity_aliases(graph.entity_id(topic))))
    out.words(_filler(rng, 1, 3))
    n_sentences = rng.randint(*config.sentences_per_document)
    for s in range(n_sentences):
        recent = out.recent(config.cutoff)
        u = rng.random()
        if u < config.p_related and recent:
            # a fact: cue phrase of the relation, then an alias of the tail entity
            parent = rng.choice(recent)
            rel, tail = rng.choice(
                [(r, t) for r, t in _named_edges(graph, parent) if r != REFLEXIVE_RELATION]
            )
            out.words(_filler(rng, 0, 2) + cues[rel])
            # the cue words moved the window
            recent = out.recent(config.cutoff)
            explanations = [(p, r) for p in recent for r, t in _named_edges(graph, p) if t == tail]
            # parent fell out of the window while the cue was written
            if (parent, rel) not in explanations:
                explanations = []
            if explanations:
                parents, rels = zip(*explanations)
                out.mention(tail, rng.choice(graph.entity_aliases(graph.entity_id(tail))), parents, rels)
            else:
                out.mention(tail, rng.choice(graph.entity_aliases(graph.entity_id(tail))))
        elif u < config.p_related + config.p_reflexive and recent:
            out.words(_filler(rng, 1, 3))
            recent = out.recent(config.cutoff)
            # refer back to an entity still inside the window
            if recent:
                entity = rng.choice(recent)
                aliases = graph.entity_aliases(graph.entity_id(entity))
                out.mention(entity, min(aliases, key=len), (entity,), (REFLEXIVE_RELATION,))
        elif u < config.p_related + config.p_reflexive + config.p_new or not recent:
            entity = rng.choice(entities)
            out.words(_filler(rng, 1, 3))
            out.mention(entity, rng.choice(graph.entity_aliases(graph.entity_id(entity))))
        else:
            out.words(_filler(rng, 3, 6))
        out.words(_filler(rng, 0, 2) + ["."])
        if (s + 1) % config.sentences_per_paragraph == 0 or s == n_sentences - 1:
            out.words([END_TOKEN])
    return out.doc


def _named_edges(graph: KnowledgeGraph, entity: str) -> list[tuple[str, str]]:
    return [(graph.relations[r], graph.entities[t]) for r, t in graph.out_edges(graph.entity_id(entity))]


def generate_corpus(
    config: SyntheticConfig | None = None, seed: int = 0
) -> tuple[KnowledgeGraph, list[LinkedDocument]]:
    """(knowledge graph, articles) for ``config``; the same seed always gives the same corpus."""
    config = config or SyntheticConfig()
    rng = random.Random(seed)
    graph = make_knowledge_graph(config, rng)
    cues = _relation_cues(graph, rng)
    docs = [
        make_document(graph, cues, config, rng, f"synthetic article {i}") for i in range(config.num_documents)
    ]
    return graph, docs


def write_corpus(
    directory: str | Path,
    config: SyntheticConfig | None = None,
    seed: int = 0,
    splits: tuple[float, float] = (0.8, 0.1),
) -> dict[str, Path]:
    """Write ``train/valid/test.jsonl`` (Linked WikiText-2 format) and ``knowledge_graph.json`` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    graph, docs = generate_corpus(config, seed)
    n_train = int(len(docs) * splits[0])
    n_valid = int(len(docs) * splits[1])
    parts = {
        "train": docs[:n_train],
        "valid": docs[n_train : n_train + n_valid],
        "test": docs[n_train + n_valid :],
    }
    paths = {}
    for name, part in parts.items():
        paths[name] = directory / f"{name}.jsonl"
        write_linked_jsonl(part, paths[name])
    paths["knowledge_graph"] = directory / "knowledge_graph.json"
    graph.to_json(paths["knowledge_graph"])
    return paths
