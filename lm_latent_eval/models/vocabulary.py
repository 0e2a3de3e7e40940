"""The whitespace word vocabulary of KGLM, EntityNLM and RNNG: words ↔ ids, the unknown word, special tokens.

Ids are positions in the word list (``vocab``), specials first: KGLM's (@@PADDING@@, @@UNKNOWN@@, @@START@@),
EntityNLM's (@@UNKNOWN@@, @@START@@), RNNG's (<unk>, <s>, </s>). A checkpoint stores the list in config.json as the
model's ``vocab`` argument, with ``lowercase`` where the model has it; ``WordVocabulary(vocab, ...)`` rebuilds the
same ids. Text is split on whitespace; a word outside the list gets the unknown word's id, and so does a *reserved*
token (RNNG's <unk>, <s>, </s>: read from text they are words, not the model's own events). Extended words (KGLM: alias
words outside the list, which can be copied) get the ids len(vocab), len(vocab) + 1, ... after the list.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch


def build_word_list(
    documents: Iterable[Iterable[str]],
    specials: Sequence[str],
    min_count: int = 1,
    max_size: int | None = None,
) -> list[str]:
    """[*specials, words seen ≥ min_count times, most frequent first (ties alphabetical)], ≤ max_size words in all."""
    counts = Counter(word for doc in documents for word in doc)
    words = [
        w
        for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if c >= min_count and w not in specials
    ]
    if max_size is not None:
        words = words[: max(0, max_size - len(specials))]
    return [*specials, *words]


def check_word_ids(x: torch.Tensor, num_ids: int) -> None:
    """A ValueError unless x is a 1-d LongTensor of ids in [0, ``num_ids``), as ``tokenize`` returns them."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype != torch.long:
        raise ValueError(f"x must be a LongTensor [T], got {getattr(x, 'shape', type(x))}")
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= num_ids):
        raise ValueError(f"x holds ids outside [0, {num_ids}); use model.tokenize(text)")


def check_id_range(ids: torch.Tensor, size: int, what: str) -> None:
    """A ValueError unless every one of ``ids`` lies in [0, ``size``), naming ``what`` (token ids, states, topics)
    and the range the ids span."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
        raise ValueError(f"{what} must lie in [0, {size}), got range [{int(ids.min())}, {int(ids.max())}]")


class WordVocabulary:
    """Words ↔ ids of a whitespace-tokenized LM: id i is ``words[i]``; ``extended_words`` follow the list.

    words: the list, in id order; unknown: the word unknown words map to; specials: tokens the list must hold;
    reserved: tokens that map to the unknown id when read from text; lowercase: words are lower-cased before lookup;
    extended_words: words outside the list that still get ids (sorted; those in the list are dropped).
    """

    def __init__(
        self,
        words: Sequence[str],
        unknown: str,
        specials: Sequence[str] = (),
        lowercase: bool = False,
        reserved: Sequence[str] = (),
        extended_words: Iterable[str] = (),
    ):
        required = (unknown, *specials)
        if not isinstance(words, (list, tuple)) or any(s not in words for s in required):
            raise ValueError(
                f"vocab must be a list of words containing {', '.join(map(repr, dict.fromkeys(required)))}"
            )
        if len(set(words)) != len(words):
            raise ValueError("vocab has duplicate words")
        self.words = list(words)
        self.word_to_id = {w: i for i, w in enumerate(self.words)}
        self.unk_id = self.word_to_id[unknown]
        self.lowercase = bool(lowercase)
        self.reserved = frozenset(reserved)
        self.extended_words = sorted(set(extended_words) - set(self.word_to_id))
        self.extended_to_id = {w: len(self.words) + i for i, w in enumerate(self.extended_words)}

    def __len__(self) -> int:
        """V, the number of words in the list (the rows of an embedding table; extended words excluded)."""
        return len(self.words)

    @property
    def num_ids(self) -> int:
        """V + the number of extended words: ids are 0 .. num_ids − 1."""
        return len(self.words) + len(self.extended_words)

    def id(self, word: str) -> int:
        """The id of one word: its position in the list or among the extended words, else the unknown word's id."""
        if self.lowercase:
            word = word.lower()
        if word in self.reserved:
            return self.unk_id
        return self.word_to_id.get(word, self.extended_to_id.get(word, self.unk_id))

    def ids(self, words: Iterable[str]) -> list[int]:
        """The ids of already-split words: [T]."""
        return [self.id(w) for w in words]

    @staticmethod
    def split(text: str) -> list[str]:
        """The whitespace-separated words of ``text`` ("" → [])."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize expects a string, got {type(text).__name__}")
        return text.split()

    def tokenize(self, text: str) -> list[int]:
        """The ids of the whitespace-separated words of ``text`` ("" → [])."""
        return self.ids(self.split(text))

    def detokenize(self, ids: Iterable[int], skip: Iterable[int] = ()) -> str:
        """The words of ``ids`` (list and extended words) joined by single spaces, leaving out the ids in ``skip``."""
        skip = set(skip)
        return " ".join(self.word(i) for i in ids if i not in skip)

    def word(self, index: int) -> str:
        """The word of one id (list or extended word)."""
        return self.words[index] if index < len(self.words) else self.extended_words[index - len(self.words)]
