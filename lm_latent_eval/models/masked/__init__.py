"""Masked and masked-diffusion LMs as latent LMs: z = the order in which the positions are revealed."""

from .diffusion import MASK, MaskedDiffusionLM, tiny_masked_lm
from .model import MaskedOrderLM
from .network import MaskPredictor
from .policy import POLICIES
from .proposal import MaskedOrderProposal

__all__ = [
    "MASK",
    "POLICIES",
    "MaskPredictor",
    "MaskedDiffusionLM",
    "MaskedOrderLM",
    "MaskedOrderProposal",
    "tiny_masked_lm",
]
