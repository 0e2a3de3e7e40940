"""Reference latent LM: a word-level HMM with an exact forward marginal and a mismatched proposal."""

from .model import HMMLanguageModel
from .proposal import HMMProposal
from .tokenizer import UNK, WordTokenizer, build_vocab, split_words

__all__ = ["UNK", "HMMLanguageModel", "HMMProposal", "WordTokenizer", "build_vocab", "split_words"]
