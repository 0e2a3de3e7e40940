"""The segmentation lattice of one text: every way to spell its UTF-8 bytes with vocabulary tokens.

Nodes are byte positions 0..n; an edge i → j is a token whose bytes equal data[i:j]. A segmentation z is a path
0 → n. With ``cover_end`` (the prefix probability of a context) a path may also end with one token whose bytes
strictly extend data[i:] (it covers the end of the text and goes past it). Edges from which n cannot be reached are
dropped, so every partial path can be completed.
"""

from __future__ import annotations

import torch

from .vocab import ByteTrie


class SegmentationLattice:
    """All segmentations of ``data`` into the tokens of ``trie`` (paths 0 → n of token edges)."""

    def __init__(self, data: bytes, trie: ByteTrie, vocab: list[bytes | None], cover_end: bool = False):
        self.data, self.n, self.cover_end, self.vocab = data, len(data), cover_end, vocab
        edges: list[list[tuple[int, int]]] = []
        for i in range(self.n):
            out = trie.matches(data, i)
            if cover_end:
                out = out + [(t, self.n) for t in trie.extending(data, i)]
            edges.append(out)
        reach = [False] * self.n + [True]
        for i in range(self.n - 1, -1, -1):
            reach[i] = any(reach[j] for _, j in edges[i])
        self.edges = [[(t, j) for t, j in out if reach[j]] for out in edges]
        self.reachable = reach
        self._tensors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def spellable(self) -> bool:
        """True when at least one segmentation exists."""
        return self.reachable[0]

    def allowed(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids [M], end positions [M]) of the edges leaving ``position`` (cached)."""
        if position not in self._tensors:
            out = self.edges[position]
            self._tensors[position] = (
                torch.tensor([t for t, _ in out], dtype=torch.long),
                torch.tensor([j for _, j in out], dtype=torch.long),
            )
        return self._tensors[position]

    def contains(self, tokens: list[int]) -> bool:
        """True when ``tokens`` is a path 0 → n of this lattice (spells the text, or covers it with ``cover_end``)."""
        pos = 0
        for k, t in enumerate(tokens):
            spelled = self.vocab[t] if 0 <= t < len(self.vocab) else None
            if not spelled or pos >= self.n:
                return False
            if self.data.startswith(spelled, pos):
                pos += len(spelled)
            elif self.cover_end and k == len(tokens) - 1 and spelled.startswith(self.data[pos:]):
                pos = self.n
            else:
                return False
        return pos == self.n

    def count(self) -> int:
        """Number of segmentations (paths 0 → n), by dynamic programming."""
        paths = [0] * self.n + [1]
        for i in range(self.n - 1, -1, -1):
            paths[i] = sum(paths[j] for _, j in self.edges[i])
        return paths[0] if self.n else 1

    def enumerate(self, limit: int = 100_000) -> list[list[int]]:
        """Every segmentation as a token list (depth first); ValueError when there are more than ``limit``."""
        total = self.count()
        if total > limit:
            raise ValueError(f"{total} segmentations exceed the enumeration limit {limit}")
        out: list[list[int]] = []
        stack: list[tuple[int, list[int]]] = [(0, [])]
        while stack:
            pos, path = stack.pop()
            if pos == self.n:
                out.append(path)
                continue
            for t, j in reversed(self.edges[pos]):
                stack.append((j, [*path, t]))
        return out
