"""Any Hugging Face causal LM as a latent LM over its tokenizations (z = token sequences that spell the text)."""

from .lattice import SegmentationLattice
from .model import TokenizationLM, windows
from .proposal import SegmentationProposal
from .vocab import ByteTrie, token_bytes

__all__ = [
    "ByteTrie",
    "SegmentationLattice",
    "SegmentationProposal",
    "TokenizationLM",
    "token_bytes",
    "windows",
]
