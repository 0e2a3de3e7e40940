"""Latent Dirichlet allocation as a latent LM: z = the topic of every token, θ integrated out (a Pólya urn)."""

from .model import LDA
from .proposal import LDAProposal
from .tokenizer import DEFAULT_TOKEN_PATTERN, LDATokenizer

__all__ = ["DEFAULT_TOKEN_PATTERN", "LDA", "LDAProposal", "LDATokenizer"]
