"""Word-level tokenizer of the HMM: lower-cased words and punctuation marks; unknown words -> ``<unk>``."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import torch

UNK = "<unk>"
# the literal "<unk>" (as in WikiText), a word (letters/digits/underscore, inner apostrophes kept: "don't"),
# or any single non-space, non-word character
WORD_RE = re.compile(r"<unk>|\w+(?:['’]\w+)*|[^\w\s]")
_NO_SPACE_BEFORE = set(".,;:!?%)]}'\"")
_NO_SPACE_AFTER = set("([{$")


def split_words(text: str) -> list[str]:
    """'Question: Who?' -> ['question', ':', 'who', '?'] (lower-cased; any whitespace separates)."""
    return WORD_RE.findall(text.lower())


def build_vocab(texts: Iterable[str], min_count: int = 2) -> list[str]:
    """``<unk>``, then every word seen ≥ ``min_count`` times, most frequent first (ties alphabetical)."""
    counts = Counter(w for text in texts for w in split_words(text))
    counts.pop(UNK, None)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [UNK, *kept]


class WordTokenizer:
    """Maps text to ids of a fixed word list; every word outside it becomes the id of ``<unk>``."""

    def __init__(self, vocab: list[str]):
        if len(set(vocab)) != len(vocab):
            raise ValueError("vocabulary contains duplicate words")
        if UNK not in vocab:
            raise ValueError(f"vocabulary must contain {UNK!r}")
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.unk_id = self.index[UNK]

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        """LongTensor[T] of word ids; "" (or only whitespace) gives T = 0."""
        return torch.tensor([self.index.get(w, self.unk_id) for w in split_words(text)], dtype=torch.long)

    def decode(self, ids) -> str:
        """Words joined by spaces, with no space before closing punctuation or after opening brackets."""
        words = [self.vocab[int(i)] for i in ids]
        out = ""
        for w in words:
            if out and not (w in _NO_SPACE_BEFORE or out[-1] in _NO_SPACE_AFTER):
                out += " "
            out += w
        return out
