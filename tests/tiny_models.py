"""Tiny transformers models built on the spot (nothing downloaded) for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "log", "and", "quickly", "slowly", ".", ","]


def make_tiny_gpt2(path: str | Path, words=WORDS, n_positions: int = 64, seed: int = 0) -> Path:
    """A randomly initialised 2-layer GPT-2 with a word-level tokenizer, saved with save_pretrained to ``path``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    path = Path(path)
    vocab = {w: i for i, w in enumerate(["<unk>", "<|endoftext|>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(vocab), n_positions=n_positions, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=1, eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path
