"""A tiny random causal LM over a few symbols whose chains of thought can all be listed: the reasoning model's
reference (tests/models/reasoning, the contract table)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from tiny_models import make_tiny_gpt2

# the symbols: <unk>, <|endoftext|> (BOS, EOS: a stop token), a, b, ";" (the end marker)
SYMBOLS = ["a", "b", ";"]
TEMPLATE = {"trigger": "", "end_marker": ";", "answer_prefix": "", "max_chain_tokens": 4, "hint": " {answer}"}


def make_tiny_reasoning(
    path: str | Path, architecture: str = "gpt2", seed: int = 0, sharpness: float = 6.0
) -> Path:
    """A random GPT-2 (or Llama) over ``SYMBOLS`` with a word-level tokenizer, saved to ``path``; ``sharpness``
    scales the final norm so that the next-token distributions are far from uniform."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = make_tiny_gpt2(path, words=SYMBOLS, seed=seed, sharpness=sharpness, n_embd=16)
    if architecture == "llama":
        torch.manual_seed(seed)
        config = LlamaConfig(vocab_size=5, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                             bos_token_id=1, eos_token_id=1)  # fmt: skip
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            model.model.norm.weight.mul_(sharpness)
        model.save_pretrained(path)
    return path


@functools.cache
def tiny_reasoning(architecture: str = "gpt2", seed: int = 0, **template):
    """The tiny reasoning model (``LatentReasoningLM``, float32), built once per process and arguments."""
    from lm_latent_eval.models import load_model

    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_reasoning(Path(tmp) / "lm", architecture, seed)
        return load_model("reasoning", str(path), **(TEMPLATE | template))[0]
