"""latent_tokenization on a Llama-architecture network: characters per second of beam 8 and of the default statement
on 16 documents batched, beside genlm-bytes' published figure (issue 55, item 3).

    python bench/llm_tokenization.py      # CPU, float32, width 128 x 2 layers: bench/llm_tokenization/cpu.md
    python bench/llm_tokenization.py --size 1b --device cuda --dtype bfloat16 --output OUT/llm_tokenization_cuda.md

Network: ``LlamaForCausalLM`` with random weights (seeded; nothing downloaded) and a byte-level BPE of ``--vocab``
tokens trained here on the bundled corpus. ``--size cpu`` is width 128, 2 layers, 2 heads, 1 key/value head, MLP 384;
``--size 1b`` is Llama-3.2-1B's shape (width 2,048, 16 layers, 32 heads, 8 key/value heads, MLP 8,192, its output
layer padded to 128,256 rows as Llama 3's vocabulary is, tied embeddings). Documents: ``--documents`` texts of about
``--chars`` characters (consecutive sentences of the bundled corpus, cut at a word), as genlm-bytes' run reads 16
documents of 1,000 characters.

Rows, all documents in one call each (``estimate_corpus`` as a run makes it; the side-by-side paths batch them):
the canonical tokenization (one pass, lm-eval's ``hf`` number), beam 8 side by side, the default statement
(``auto``: SMC under the precision target, the model's default settings) with its interval, and beam 8 one document
at a time; each row is written to the output as it finishes. genlm-bytes' figure is its beam of 8 on Llama-3.2-1B
with 16 documents of 1,000 characters batched on a GPU (``speed.txt`` in genlm/genlm-bytes: 235.7 characters per
second, read from the table "on 1000"); only the ``--size 1b`` run on a GPU measures the same shape.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lm_latent_eval.estimators import EstimatorSettings, estimate_document, resolve
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import with_model_defaults
from lm_latent_eval.models import load_model
from lm_latent_eval.models.tokenization.make_default import train_tokenizer
from lm_latent_eval.paths import DATA_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from masked_side_by_side import machine
from particles import timed

OUTPUT = Path(__file__).resolve().parent / "llm_tokenization" / "cpu.md"
SIZES = {
    "cpu": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "intermediate_size": 384, "vocab_size": None},
    "1b": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 8192, "vocab_size": 128_256},
}  # fmt: skip
# genlm-bytes' speed.txt, table "on 1000": beam K = 8, 16 documents batched, Llama-3.2-1B
GENLM_BYTES_CHARS_PER_SECOND = 235.7


def sentences() -> list[str]:
    return [
        json.loads(line)["text"]
        for line in (DATA_DIR / "corpus" / "tiny_train.jsonl").read_text().splitlines()
    ]


def documents(count: int, chars: int) -> list[str]:
    """``count`` texts of at most ``chars`` characters: consecutive corpus sentences, cut at the last space."""
    found, current, pool = [], "", sentences()
    for i in range(10**6):
        current = f"{current} {pool[i % len(pool)]}".strip()
        if len(current) >= chars:
            found.append(current[:chars].rsplit(" ", 1)[0])
            current = ""
            if len(found) == count:
                return found
    raise RuntimeError("unreachable")


def build_network(
    path: Path, size: str, vocab: int, max_length: int, device: str, dtype: torch.dtype
) -> Path:
    """A random-weight Llama of ``size``'s shape (seed 0, initialised on ``device``, stored in ``dtype``) with a
    byte-level BPE of ``vocab`` tokens, saved to ``path``."""
    tokenizer = train_tokenizer(sentences(), vocab)
    shape = dict(SIZES[size])
    rows = shape.pop("vocab_size") or len(tokenizer)
    torch.manual_seed(0)
    config = LlamaConfig(**shape, vocab_size=max(rows, len(tokenizer)), max_position_embeddings=max_length,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=True)  # fmt: skip
    with torch.device(device):
        LlamaForCausalLM(config).to(dtype).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def row(name: str, seconds: float, chars: int, estimates: dict, texts: list[str], extra: str = "") -> str:
    corpus = corpus_estimate([estimates[t] for t in texts], keys=texts)
    per_doc = -sum(estimates[t].log_likelihood for t in texts) / len(texts)
    lower, upper = corpus.perplexity_interval
    if corpus.interval.two_sided:
        statement = f"{corpus.perplexity:.3f} in [{lower:.3f}, {upper:.3f}]"
    else:
        statement = f"≤ {upper:.3f} (one-sided)" if math.isfinite(upper) else f"{corpus.perplexity:.3f}"
    return f"| {name} | {seconds:.3g} | {chars / seconds:,.1f} | {per_doc:.2f} | {statement} | {extra} |"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=SIZES, default="cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--vocab", type=int, default=2000, help="BPE tokens trained on the bundled corpus")
    p.add_argument("--documents", type=int, default=16)
    p.add_argument("--chars", type=int, default=1000)
    p.add_argument("--beam", type=int, default=8)
    p.add_argument("--max-length", type=int, default=2048, help="the network's context (positions)")
    p.add_argument(
        "--skip-default", action="store_true", help="leave out the default statement (the slowest row)"
    )
    p.add_argument("--output", type=Path, default=OUTPUT)
    args = p.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(1)
    texts = documents(args.documents, args.chars)
    chars = sum(map(len, texts))
    with tempfile.TemporaryDirectory() as tmp:
        dtype = getattr(torch, args.dtype)
        path = build_network(Path(tmp) / "llama", args.size, args.vocab, args.max_length, args.device, dtype)
        lm, _ = load_model("tokenization", str(path), device=args.device, dtype=dtype)
    tokens = sum(lm.tokenize(t).numel() for t in texts)
    params = sum(t.numel() for t in lm.model.parameters())
    config = lm.model.config
    where = machine() if args.device == "cpu" else torch.cuda.get_device_name()
    lines = [
        (f"latent_tokenization on a random-weight Llama ({args.size}: width {config.hidden_size}, "
         f"{config.num_hidden_layers} layers, {params / 1e6:.1f} M parameters, BPE of {len(lm.tokenizer)} tokens, "
         f"{args.dtype} on {args.device}); {len(texts)} documents, {chars:,} characters, {tokens:,} canonical "
         f"tokens. Machine: {where}."),
        "",
        "| estimator | seconds | characters/s | mean −log p̂ per document (nats) | perplexity (per canonical token) | notes |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)

    def report(line: str) -> None:
        """Print the line and rewrite the output with it (a run stopped midway keeps its rows)."""
        lines.append(line)
        print(line, flush=True)
        args.output.write_text("\n".join(lines) + "\n")

    def run(settings):
        return estimate_corpus(resolve(settings, lm), texts, device=args.device, progress=False)

    seconds, found = timed(lambda: run(EstimatorSettings("canonical")), args.device)
    report(row("canonical (one segmentation, lm-eval's hf)", seconds, chars, found, texts))
    beam = EstimatorSettings("beam", beam_size=args.beam)
    together, found = timed(lambda: run(beam), args.device)
    report(row(f"beam {args.beam}, the {len(texts)} documents side by side", together, chars, found, texts,
               "a lower bound on p: one-sided"))  # fmt: skip
    if not args.skip_default:
        settings, own = with_model_defaults(EstimatorSettings(), lm)
        seconds, found = timed(lambda: run(settings), args.device)
        particles = sorted(found[t].num_samples for t in texts)
        report(row(f"default statement ({resolve(settings, lm).reason}{own})", seconds, chars, found, texts,
                   f"particles per document {particles[0]}–{particles[-1]} (median {particles[len(particles) // 2]})"))  # fmt: skip
    alone, found = timed(
        lambda: {t: estimate_document(lm, t, beam, device=args.device) for t in texts}, args.device
    )
    report(row(f"beam {args.beam}, one document at a time", alone, chars, found, texts,
               f"side by side {alone / together:.2f}x faster"))  # fmt: skip
    report("")
    report(
        "A random-weight network spreads its next-token probability nearly evenly over the vocabulary, so every "
        "token a segmentation adds costs about log V nats: the canonical segmentation (the fewest tokens) carries "
        "nearly all of p, and the figures differ by little. The seconds are what the size's network costs."
    )
    report(f"genlm-bytes' published beam of 8 (Llama-3.2-1B, 16 documents of 1,000 characters batched, a GPU): "
           f"{GENLM_BYTES_CHARS_PER_SECOND} characters/s.")  # fmt: skip


if __name__ == "__main__":
    main()
