"""Per-document random streams: a document's samples depend only on (seed, document text, block index), drawn in
blocks of a fixed number of particles per device."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def document_seed(seed: int, document: str, block: int = 0) -> int:
    """A 63-bit seed from sha256(seed, document, block): independent of batch size, order and process count.

    Examples
    --------
    >>> document_seed(1234, "the cat sat") == document_seed(1234, "the cat sat") != document_seed(1234, "a dog")
    True
    """
    digest = hashlib.sha256(f"{int(seed)}\x00{block}\x00{document}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# blocks of stage s of the precision target are numbered from s · STAGE_STRIDE: fresh streams
STAGE_STRIDE = 2**32


def stage_block(block: int, stage: int = 0) -> int:
    """The stream index of sample block ``block`` of stage ``stage`` (stage 0: the block itself)."""
    return block + stage * STAGE_STRIDE


def document_generator(
    seed: int, document: str, block: int = 0, device: torch.device | str = "cpu"
) -> torch.Generator:
    """A torch.Generator on ``device`` seeded by ``document_seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(document_seed(seed, document, block))
    return gen


def stream_text(model, document: str) -> str:
    """The text a document's random streams are seeded from: the document itself, or what the model's optional
    ``random_stream_text(document)`` names (the reasoning model's views: the question, so that its answers are scored
    on the same chains, common random numbers; such documents' estimates are not independent of each other).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> stream_text(None, "Q: a"), stream_text(SimpleNamespace(random_stream_text=lambda d: d[:2]), "Q: a")
    ('Q: a', 'Q:')
    """
    named = getattr(model, "random_stream_text", None)
    return named(document) if callable(named) else document


# particles drawn per random stream on the CPU; part of the seeding scheme (never batch_size)
SAMPLE_BLOCK = 1024
# on a GPU: each block is one token loop, and kernel launches, not K, set its time
ACCELERATOR_SAMPLE_BLOCK = 16384


def sample_block(device: torch.device | str = "cpu") -> int:
    """Particles drawn per random stream on ``device`` (1,024 on the CPU, 16,384 on an accelerator). Samples depend on
    the seed, the document and the device (a GPU's generators draw other numbers anyway), never on batch_size.

    Examples
    --------
    >>> sample_block("cpu"), sample_block("cuda")
    (1024, 16384)
    """
    return SAMPLE_BLOCK if torch.device(device).type == "cpu" else ACCELERATOR_SAMPLE_BLOCK


# particles advanced side by side in one batch of lanes (``draw_smc_documents``): 16 documents of 1,024 particles on
# the CPU; an accelerator takes lanes of ``sample_block`` particles, 4 of its blocks, up to 8 for short documents
SIDE_BY_SIDE_PARTICLES = 16 * SAMPLE_BLOCK
# below this length (tokens, or characters: more) an accelerator's batch holds the particles·length of 4 blocks
SIDE_BY_SIDE_LENGTH = 1024


def side_by_side_particles(device: torch.device | str = "cpu", length: int | None = None) -> int:
    """Particles one batch of documents advanced side by side may hold on ``device``, its longest document ``length``
    tokens (or characters, of which there are more) long; None: any length.

    16,384 on the CPU. On an accelerator 4 sample blocks (65,536), and for documents shorter than 1,024 the
    particles·length of 4 blocks of 1,024, at most 8 blocks: the samplers' histories grow with K·T, every particle's
    state with K, and on an accelerator a batch's kernel launches, not its particles, set the time of a step.

    Examples
    --------
    >>> side_by_side_particles("cpu"), side_by_side_particles("cuda"), side_by_side_particles("cuda", 768)
    (16384, 65536, 87381)
    >>> side_by_side_particles("cuda", 86), side_by_side_particles("cuda", 5000)
    (131072, 65536)
    """
    if torch.device(device).type == "cpu":
        return SIDE_BY_SIDE_PARTICLES
    blocks = 4 * sample_block(device)
    if not length or length >= SIDE_BY_SIDE_LENGTH:
        return blocks
    return min(2 * blocks, blocks * SIDE_BY_SIDE_LENGTH // length)


def side_by_side_chunks(sizes: Sequence[int], budget: int) -> list[list[int]]:
    """The indices of consecutive items of ``sizes`` particles each, cut into chunks of at most ``budget`` particles
    (an item larger than that alone).

    Examples
    --------
    >>> side_by_side_chunks([3, 3, 5, 1, 9], 6)
    [[0, 1], [2, 3], [4]]
    """
    chunks: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if not chunks or total + n > budget:
            chunks.append([])
            total = 0
        chunks[-1].append(i)
        total += n
    return chunks
