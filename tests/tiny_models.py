"""Tiny transformers models built on the spot (nothing downloaded) for tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "under",
    "mat",
    "log",
    "and",
    "quickly",
    "slowly",
    ".",
    ",",
]


def make_tiny_gpt2(
    path: str | Path,
    words=WORDS,
    n_positions: int = 64,
    seed: int = 0,
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 2,
    bos: str = "<|endoftext|>",
    eos: str = "<|endoftext|>",
    pad: str | None = None,
    split_punctuation: bool = False,
    sharpness: float = 1.0,
) -> Path:
    """A random GPT-2 with a word-level tokenizer over <unk>, bos, eos[, pad] + words (ids in that order, duplicates
    merged), saved with save_pretrained to ``path``; ``sharpness`` scales the final layer norm (peakier logits)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    path = Path(path)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(["<unk>", bos, eos, *([pad] if pad else []), *words]))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace() if split_punctuation else pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token=bos,
        eos_token=eos,
        **({"pad_token": pad} if pad else {}),
    )
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=vocab[bos],
        eos_token_id=vocab[eos],
    )
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(sharpness)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


BPE_CORPUS = [
    "the cat sat on the mat.",
    "the dog ran under the log.",
    "a cat and a dog sat quickly.",
    "the mat and the log.",
    "slowly the dog sat on a mat, and the cat ran.",
    "théo ran to the café.",
]


def make_tiny_bpe_gpt2(path: str | Path, corpus=BPE_CORPUS, vocab_size: int = 300, n_positions: int = 64,
                       n_embd: int = 32, n_layer: int = 2, seed: int = 0) -> Path:  # fmt: skip
    """A random GPT-2 with a byte-level BPE tokenizer trained here on ``corpus`` (all 256 bytes + merges)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lm_latent_eval.models.tokenization.make_default import train_tokenizer

    path = Path(path)
    fast = train_tokenizer(corpus, vocab_size)
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(fast), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=2,
                        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tiny_bert(
    path: str | Path, words=WORDS, seed: int = 0, hidden_size: int = 16, max_position: int = 24
) -> Path:
    """A random-weight BERT-architecture masked LM (``BertForMaskedLM``, one layer) with a WordPiece tokenizer over
    [PAD], [UNK], [CLS], [SEP], [MASK] + ``words`` (ids in that order), both built here and saved to ``path``."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = list(dict.fromkeys([*BERT_SPECIALS, *words]))
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden_size, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=2 * hidden_size, max_position_embeddings=max_position,
                        pad_token_id=0)  # fmt: skip
    BertForMaskedLM(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
