"""RNNG (Dyer et al. 2016), unlabeled and binarized as in URNNG (Kim et al. 2019): p(x, z) over sentences x and
binary trees z (SHIFT/REDUCE actions), with a tree-CRF proposal q(z | x), a word-synchronous stepwise part for SMC,
prefix probabilities (``RNNG.prefix_model()``) and ancestral sampling of text."""

from .latents import REDUCE, SHIFT
from .model import RNNG, build_vocabulary
from .prefix import RNNGPrefix
from .proposal import TreeCRFProposal

__all__ = ["REDUCE", "RNNG", "SHIFT", "RNNGPrefix", "TreeCRFProposal", "build_vocabulary"]
