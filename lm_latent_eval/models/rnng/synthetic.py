"""A synthetic treebank from a small probabilistic context-free grammar with real structural ambiguity.

Prepositional phrases attach to a noun phrase (NP -> NP PP) or to the verb phrase (VP -> VBD NP PP, VP -> VP PP), and
noun phrases coordinate (NP -> NP CC NP), so one word string has several trees under the grammar: the latent tree
matters for p(x). Sentences end with ``(. .)``. Trees are written in PTB bracketed form with POS tags (n-ary
constituents included) and read back by ``treebank.py`` like a real treebank. Deterministic given the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

RULES = {
    "S": [(("NP", "VP", "."), 1.0)],
    "NP": [
        (("DT", "NN"), 0.42),
        (("DT", "JJ", "NN"), 0.16),
        (("NNP",), 0.2),
        (("NP", "PP"), 0.16),
        (("NP", "CC", "NP"), 0.06),
    ],
    "VP": [(("VBD", "NP"), 0.42), (("VBD", "NP", "PP"), 0.2), (("VBD",), 0.18), (("VP", "PP"), 0.2)],
    "PP": [(("IN", "NP"), 1.0)],
}
WORDS = {
    "DT": ["the", "a"],
    "NN": ["dog", "cat", "man", "telescope", "park", "hat", "boy", "girl", "garden", "letter"],
    "JJ": ["old", "small", "red", "happy"],
    "NNP": ["anna", "bob", "lucy"],
    "VBD": ["saw", "liked", "found", "watched", "slept"],
    "IN": ["with", "in", "near", "from"],
    "CC": ["and"],
    ".": ["."],
}


@dataclass(frozen=True)
class SyntheticConfig:
    num_sentences: int = 1500
    min_words: int = 3
    max_words: int = 12


def _expand(symbol: str, rng: random.Random) -> str:
    if symbol in WORDS:
        return f"({symbol} {rng.choice(WORDS[symbol])})"
    rhs = rng.choices([r for r, _ in RULES[symbol]], weights=[w for _, w in RULES[symbol]])[0]
    return f"({symbol} " + " ".join(_expand(s, rng) for s in rhs) + ")"


def generate_treebank(config: SyntheticConfig = SyntheticConfig(), seed: int = 0) -> list[str]:
    """``config.num_sentences`` bracketed trees whose word count lies in [min_words, max_words] (rejection)."""
    rng = random.Random(seed)
    trees = []
    while len(trees) < config.num_sentences:
        tree = _expand("S", rng)
        words = tree.count("(") - sum(tree.count(f"({nt} ") for nt in RULES)
        if config.min_words <= words <= config.max_words:
            trees.append(tree)
    return trees
