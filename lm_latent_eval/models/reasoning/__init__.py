"""Chain of thought as a latent: any Hugging Face causal LM's p(answer | question) marginalized over its own
reasoning chains."""

from .model import LatentReasoningLM
from .template import ReasoningTemplate

__all__ = ["LatentReasoningLM", "ReasoningTemplate"]
