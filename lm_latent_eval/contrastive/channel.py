"""The seeded noisy channel of contrastive entropy (Arora & Rangarajan 2016): keep, replace or swap each word.

Every word of a sentence independently draws one operation: *keep* with probability 1 − d, *replace* by a word drawn
uniformly from the vocabulary with probability d/2, or *swap* with a uniformly chosen other word of the same sentence
with probability d/2. Swaps are applied first (left to right), then replacements at their positions, so a replaced
word is never moved again and the number of replaced positions is exactly the number of *replace* draws. The word
count is preserved; a swap in a one-word sentence has no partner and leaves the word in place.

Words are whitespace-separated tokens and a distorted sentence is written back with single spaces, so the matching
undistorted text is ``normalize_whitespace(text)``. Randomness of one sentence depends only on (seed, level, repeat,
sentence text), never on the corpus order or batch size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..estimators.seeding import document_seed

KEEP, REPLACE, SWAP = 0, 1, 2
DEFAULT_LEVELS = (0.1, 0.3, 0.5)


@dataclass(frozen=True)
class Distortion:
    """One pass of the channel over one sentence: the output words and what happened at each position."""

    words: list[str]
    # int8 [n]: KEEP / REPLACE / SWAP drawn for each input position
    operations: np.ndarray
    # int64 [n]: swap partner of each SWAP position (−1 elsewhere or when there is none)
    partners: np.ndarray

    @property
    def text(self) -> str:
        return " ".join(self.words)


def normalize_whitespace(text: str) -> str:
    """The undistorted sentence as the channel writes it: its words joined by single spaces."""
    return " ".join(text.split())


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WIKI_HEADING = re.compile(r"^\s*=+ .* =+\s*$")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph: split after . ! or ? followed by whitespace; headings (= x =) and blanks dropped."""
    if _WIKI_HEADING.match(text):
        return []
    return [normalize_whitespace(s) for s in _SENTENCE_END.split(text) if s.strip()]


def check_level(level: float) -> float:
    """A distortion level d must be a number in [0, 1]."""
    if (
        isinstance(level, bool)
        or not isinstance(level, (int, float, np.floating))
        or not 0.0 <= float(level) <= 1.0
    ):
        raise ValueError(f"distortion level must be a number in [0, 1], got {level!r}")
    return float(level)


def corpus_vocabulary(texts: Sequence[str]) -> list[str]:
    """The sorted word types of a corpus: the default replacement vocabulary."""
    return sorted({w for t in texts for w in t.split()})


def distort_words(
    words: Sequence[str], level: float, vocabulary: Sequence[str], rng: np.random.Generator
) -> Distortion:
    """Pass one sentence (list of n words) through the channel at level d, drawing from ``rng``."""
    d = check_level(level)
    out = list(words)
    n = len(out)
    ops = rng.choice(3, size=n, p=[1.0 - d, d / 2.0, d / 2.0]).astype(np.int8)
    partners = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(ops == SWAP):
        if n < 2:
            continue
        j = int(rng.integers(n - 1))
        # uniform over the other n − 1 positions
        j += j >= i
        partners[i] = j
        out[i], out[j] = out[j], out[i]
    replaced = np.flatnonzero(ops == REPLACE)
    if replaced.size:
        if len(vocabulary) == 0:
            raise ValueError("the replacement vocabulary is empty")
        for i, v in zip(replaced, rng.integers(len(vocabulary), size=replaced.size)):
            out[i] = vocabulary[v]
    return Distortion(out, ops, partners)


def sentence_rng(text: str, level: float, seed: int = 0, repeat: int = 0) -> np.random.Generator:
    """The random stream of one (sentence, level, repeat): numpy Generator seeded by sha256(seed, level, text, repeat)."""
    return np.random.default_rng(document_seed(seed, f"{check_level(level)!r}\x00{text}", repeat))


def distort(
    texts: Sequence[str],
    level: float,
    seed: int = 0,
    repeat: int = 0,
    vocabulary: Sequence[str] | None = None,
) -> list[str]:
    """Distort each sentence of ``texts`` at level d (vocabulary: the corpus word types unless given)."""
    if isinstance(texts, str):
        raise TypeError("distort expects a list of sentences, got a single string")
    vocab = list(vocabulary) if vocabulary is not None else corpus_vocabulary(texts)
    return [distort_words(t.split(), level, vocab, sentence_rng(t, level, seed, repeat)).text for t in texts]


def distortion_set(
    texts: Sequence[str],
    levels: Sequence[float] = DEFAULT_LEVELS,
    num_distortions: int = 10,
    seed: int = 0,
    vocabulary: Sequence[str] | None = None,
) -> dict[float, list[list[str]]]:
    """{d: [R][S] distorted corpora}: ``num_distortions`` independent passes of the S sentences at every level."""
    if isinstance(num_distortions, bool) or not isinstance(num_distortions, int) or num_distortions <= 0:
        raise ValueError(f"num_distortions must be a positive integer, got {num_distortions!r}")
    levels = [check_level(d) for d in levels]
    if len(set(levels)) != len(levels):
        raise ValueError(f"distortion levels must be distinct, got {levels}")
    vocab = list(vocabulary) if vocabulary is not None else corpus_vocabulary(texts)
    return {d: [distort(texts, d, seed, r, vocab) for r in range(num_distortions)] for d in levels}
