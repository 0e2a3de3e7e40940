"""The LDA's words: a regular expression picks the tokens of a text, the vocabulary maps them to ids.

Unknown words (tokens outside the vocabulary, stop words included) follow an explicit policy: ``drop`` (the
default, what scikit-learn's CountVectorizer, gensim's doc2bow, tomotopy and MALLET do: the model is a distribution
over its vocabulary, so perplexity is per in-vocabulary token) or ``error`` (refuse the text, naming the word).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from ...errors import InputError

# scikit-learn's CountVectorizer default: words of two or more characters
DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
UNKNOWN_WORDS = ("drop", "error")


class LDATokenizer:
    """Text -> LongTensor [T] of vocabulary ids: lower-case (optional), ``token_pattern`` tokens, unknown words
    dropped or refused (``unknown_words``)."""

    def __init__(
        self,
        vocab: Sequence[str],
        token_pattern: str = DEFAULT_TOKEN_PATTERN,
        lowercase: bool = True,
        unknown_words: str = "drop",
    ) -> None:
        if unknown_words not in UNKNOWN_WORDS:
            raise InputError(
                f"unknown_words must be one of {', '.join(UNKNOWN_WORDS)}, got {unknown_words!r}"
            )
        self.vocab = [str(w) for w in vocab]
        self.index = {w: i for i, w in enumerate(self.vocab)}
        if len(self.index) != len(self.vocab):
            seen: set[str] = set()
            twice = next(w for w in self.vocab if w in seen or seen.add(w))
            raise ValueError(f"the LDA vocabulary lists the word {twice!r} twice")
        try:
            self.pattern = re.compile(token_pattern)
        except re.error as err:
            raise ValueError(f"token_pattern {token_pattern!r} is not a regular expression: {err}") from None
        self.token_pattern, self.lowercase, self.unknown_words = token_pattern, bool(lowercase), unknown_words

    def words(self, text: str) -> list[str]:
        """Every token of ``text`` (lower-cased if ``lowercase``), known or not."""
        return self.pattern.findall(text.lower() if self.lowercase else text)

    def unknown(self, text: str) -> list[str]:
        """The tokens of ``text`` outside the vocabulary, in order."""
        return [w for w in self.words(text) if w not in self.index]

    def encode(self, text: str) -> torch.Tensor:
        """Ids of the known tokens, LongTensor [T]; under ``unknown_words="error"`` a ValueError names the first
        unknown one."""
        words = self.words(text)
        ids = [self.index.get(w, -1) for w in words]
        if self.unknown_words == "error" and -1 in ids:
            unknown = [w for w, i in zip(words, ids) if i < 0]
            raise ValueError(
                f"text {text[:60]!r} has {len(unknown)} words outside the LDA vocabulary (first: {unknown[0]!r}) and "
                "unknown_words='error'; use unknown_words='drop' to leave them out, as LDA libraries do"
            )
        return torch.tensor([i for i in ids if i >= 0], dtype=torch.long)

    def decode(self, ids) -> str:
        """The words of ``ids`` joined by spaces."""
        return " ".join(self.vocab[int(i)] for i in ids)
