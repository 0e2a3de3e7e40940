"""Knowledge-graph language model (Logan et al., 2019): p(x, z) with entity-mention latents, and its proposal q(z | x)."""

from .graph import KnowledgeGraph
from .latents import CONTINUING, LATENT_KEYS, NEW, NONE, RELATED
from .model import KGLM, build_vocabulary
from .proposal import KGLMProposal

__all__ = [
    "CONTINUING",
    "KGLM",
    "LATENT_KEYS",
    "NEW",
    "NONE",
    "RELATED",
    "KGLMProposal",
    "KnowledgeGraph",
    "build_vocabulary",
]
