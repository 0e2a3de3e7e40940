"""The byte string each vocabulary entry spells, for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, ...).

A token's bytes are its surface string mapped back through the byte-to-unicode table of byte-level BPE. Special
tokens (``<|endoftext|>``, added tokens) spell nothing and get ``None``: they never occur inside a segmentation.
"""

from __future__ import annotations

import json

from transformers.convert_slow_tokenizer import bytes_to_unicode


def _byte_decoder() -> dict[str, int]:
    """The inverse of byte-level BPE's printable-unicode alphabet (one character per byte value)."""
    return {char: byte for byte, char in bytes_to_unicode().items()}


def is_byte_level(tokenizer) -> bool:
    """True when the fast tokenizer decodes with the ByteLevel decoder (tokens are byte strings)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    kinds = [decoder.get("type")] + [d.get("type") for d in decoder.get("decoders", []) or []]
    return "ByteLevel" in kinds


def token_bytes(tokenizer, vocab_size: int | None = None) -> list[bytes | None]:
    """bytes(t) for t = 0 .. vocab_size − 1: the byte string token t spells, None for special / unused ids."""
    if not is_byte_level(tokenizer):
        raise NotImplementedError(
            f"{type(tokenizer).__name__}: only byte-level BPE tokenizers (ByteLevel decoder: GPT-2, Llama 3, Qwen, "
            "...) are supported; a segmentation is a sequence of tokens whose bytes concatenate to the text's UTF-8 bytes"
        )
    decoder = _byte_decoder()
    size = max(len(tokenizer), vocab_size or 0)
    special = set(tokenizer.all_special_ids) | {
        i for i, tok in tokenizer.added_tokens_decoder.items() if getattr(tok, "special", False)
    }
    out: list[bytes | None] = [None] * size
    for token, index in tokenizer.get_vocab().items():
        if index >= size or index in special or index in tokenizer.added_tokens_decoder:
            continue
        try:
            out[index] = bytes(decoder[ch] for ch in token)
        except KeyError:
            # a character outside the byte alphabet: not a byte-level token
            out[index] = None
    if vocab_size is not None:
        out = out[:vocab_size]
    return out


class ByteTrie:
    """Trie over the vocabulary's byte strings: which tokens start a byte string, which extend past its end."""

    def __init__(self, vocab: list[bytes | None]):
        self.children: list[dict[int, int]] = [{}]
        # token id whose bytes end exactly at this node (−1: none)
        self.token_at: list[int] = [-1]
        for token, spelled in enumerate(vocab):
            if not spelled:
                continue
            node = 0
            for byte in spelled:
                nxt = self.children[node].get(byte)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][byte] = nxt
                    self.children.append({})
                    self.token_at.append(-1)
                node = nxt
            self.token_at[node] = token
        self._below: dict[int, list[int]] = {}

    def matches(self, data: bytes, start: int) -> list[tuple[int, int]]:
        """(token, end) for every token whose bytes equal data[start:end], end ≤ len(data), by increasing end."""
        out, node = [], 0
        for end in range(start, len(data)):
            node = self.children[node].get(data[end])
            if node is None:
                break
            if self.token_at[node] >= 0:
                out.append((self.token_at[node], end + 1))
        return out

    def extending(self, data: bytes, start: int) -> list[int]:
        """Tokens whose bytes strictly extend data[start:] (they cover the end of data and go past it)."""
        node = 0
        for end in range(start, len(data)):
            node = self.children[node].get(data[end])
            if node is None:
                return []
        if node not in self._below:
            found, stack = [], list(self.children[node].values())
            while stack:
                n = stack.pop()
                if self.token_at[n] >= 0:
                    found.append(self.token_at[n])
                stack.extend(self.children[n].values())
            self._below[node] = sorted(found)
        return self._below[node]
