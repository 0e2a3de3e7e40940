"""EntityNLM (Ji et al., 2017): p(x, z) with mention / entity / length latents and dynamic entity embeddings,
and its discriminative proposal q(z | x)."""

from .latents import LATENT_KEYS
from .model import EntityNLM, build_vocabulary
from .proposal import EntityNLMProposal

__all__ = ["LATENT_KEYS", "EntityNLM", "EntityNLMProposal", "build_vocabulary"]
