"""A synthetic coreference corpus for the bundled EntityNLM: short stories about a few recurring characters and places.

Each document introduces 2-4 entities, each first mentioned by its name (1-3 tokens, e.g. "the old king") and
later by its name or a pronoun that agrees with it ("she" / "her", "he" / "him", "it"); entity-free noun phrases
("the book") share words with names, so mention boundaries must be inferred from context. Deterministic given the
seed (Python's ``random.Random``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .conll import CorefDocument

# name, subject pronoun, object pronoun
PEOPLE = [
    ("anna", "she", "her"),
    ("bob", "he", "him"),
    ("the old king", "he", "him"),
    ("the young doctor", "she", "her"),
    ("mister green", "he", "him"),
    ("lucy", "she", "her"),
    ("the tall farmer", "he", "him"),
    ("aunt rose", "she", "her"),
]
PLACES = [
    (place, "it", "it")
    for place in ["the red house", "the river", "the old bridge", "the market", "the small boat"]
]
MEET = ["saw", "helped", "called", "met", "followed"]
VISIT = ["visited", "painted", "left", "found"]
ALONE = ["smiled", "slept", "laughed", "waited"]
THINGS = ["the book", "the old coat", "a letter", "the red apple"]


@dataclass(frozen=True)
class SyntheticConfig:
    num_documents: int = 350
    min_entities: int = 2
    max_entities: int = 4
    min_sentences: int = 4
    max_sentences: int = 7
    pronoun_rate: float = 0.5


def _story(rng: random.Random, config: SyntheticConfig, name: str) -> CorefDocument:
    n_people = rng.randint(1, max(1, config.max_entities - 1))
    cast = rng.sample(PEOPLE, n_people) + rng.sample(PLACES, rng.randint(1, 2))
    cast = (
        cast[: rng.randint(config.min_entities, config.max_entities)]
        if len(cast) > config.min_entities
        else cast
    )
    people = [c for c in cast if c in PEOPLE] or [rng.choice(PEOPLE)]
    if people[0] not in cast:
        cast.append(people[0])
    places = [c for c in cast if c in PLACES]
    tokens: list[str] = []
    spans: dict[int, list[list[int]]] = {}
    seen: set[int] = set()

    def say(words: str) -> None:
        tokens.extend(words.split())

    def mention(entity, role: str) -> None:
        idx = cast.index(entity)
        if idx in seen and rng.random() < config.pronoun_rate:
            words = entity[1] if role == "subject" else entity[2]
        else:
            words = entity[0]
        start = len(tokens)
        say(words)
        spans.setdefault(idx, []).append([start, len(tokens)])
        seen.add(idx)

    for _ in range(rng.randint(config.min_sentences, config.max_sentences)):
        a = rng.choice(people)
        kind = rng.random()
        if kind < 0.3 and len(people) > 1:
            b = rng.choice([p for p in people if p != a])
            mention(a, "subject"), say(rng.choice(MEET)), mention(b, "object")
        elif kind < 0.55 and places:
            mention(a, "subject"), say(rng.choice(VISIT)), mention(rng.choice(places), "object")
        elif kind < 0.7 and len(people) > 1:
            b = rng.choice([p for p in people if p != a])
            mention(a, "subject"), say("gave"), mention(b, "object"), say(rng.choice(THINGS))
        elif kind < 0.85:
            if rng.random() < 0.5:
                say("then")
            mention(a, "subject"), say(rng.choice(ALONE))
        else:
            mention(a, "subject"), say("took"), say(rng.choice(THINGS))
            if places:
                say("to"), mention(rng.choice(places), "object")
        say(".")
    # entities renumbered by first mention, as the reader does
    order = sorted(spans, key=lambda i: min(s for s, _ in spans[i]))
    mentions = sorted((s, e, order.index(i)) for i in spans for s, e in spans[i])
    return CorefDocument(tokens, mentions, name)


def generate_corpus(config: SyntheticConfig = SyntheticConfig(), seed: int = 0) -> list[CorefDocument]:
    """``config.num_documents`` synthetic stories with gold coreference."""
    rng = random.Random(seed)
    return [_story(rng, config, f"synthetic story {i}") for i in range(config.num_documents)]
