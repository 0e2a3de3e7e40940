"""Regenerate the bundled tiny causal LM for ``latent_tokenization``: a byte-level BPE and a GPT-2 trained on it.

    python -m lm_latent_eval.models.tokenization.make_default --output-dir lm_latent_eval/data   # tokenization/

Tokenizer: byte-level BPE (all 256 bytes + merges, vocabulary 512, ``<|endoftext|>``) trained with the
``tokenizers`` library on the bundled training corpus (data/corpus/tiny_train.jsonl). Model: GPT-2, 2 layers,
width 64, context 128, trained by next-token prediction on ``<|endoftext|>`` ⊕ canonical tokens of each document
(AdamW, seeded), so, like every real LM, it has only seen canonical segmentations. About 0.6 MB.
"""

from __future__ import annotations

import json
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from lm_latent_eval.models.training import make_default_arguments
from lm_latent_eval.paths import DATA_DIR

# read only
TRAIN_FILE = DATA_DIR / "corpus" / "tiny_train.jsonl"


def train_tokenizer(texts: list[str], vocab_size: int = 512):
    """A byte-level BPE tokenizer (transformers fast tokenizer) trained on ``texts``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def train_model(tokenizer, texts: list[str], steps: int = 1500, batch: int = 16, seed: int = 0):
    """GPT-2 (2 layers, width 64, context 128) trained on the canonical tokens of ``texts``."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    model = GPT2LMHeadModel(config)
    docs = [
        [tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"]][:128] for t in texts
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    model.train()
    for step in range(steps):
        chosen = rng.sample(docs, batch)
        width = max(len(d) for d in chosen)
        ids = torch.full((batch, width), tokenizer.eos_token_id)
        labels = torch.full((batch, width), -100)
        for b, d in enumerate(chosen):
            ids[b, : len(d)] = torch.tensor(d)
            labels[b, 1 : len(d)] = torch.tensor(d[1:])
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == steps - 1:
            print(f"step {step}: loss {loss.item():.3f}")
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    args = make_default_arguments(__doc__, None, argv)
    texts = [json.loads(line)["text"] for line in TRAIN_FILE.read_text().splitlines() if line.strip()]
    tokenizer = train_tokenizer(texts)
    model = train_model(tokenizer, texts, seed=args.seed)
    out = args.output_dir / "tokenization"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
