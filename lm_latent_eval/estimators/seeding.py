"""Per-document random streams: a document's samples depend only on (seed, document text, block index)."""

from __future__ import annotations

import hashlib

import torch


def document_seed(seed: int, document: str, block: int = 0) -> int:
    """A 63-bit seed from sha256(seed, document, block): independent of batch size, order and process count."""
    digest = hashlib.sha256(f"{int(seed)}\x00{block}\x00{document}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def document_generator(seed: int, document: str, block: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator on ``device`` seeded by ``document_seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(document_seed(seed, document, block))
    return gen
