"""Exact perplexity of the bundled RNNG on its test treebank by enumerating every binary tree of every sentence
(all have ≤ 12 words): `python bench/rnng_exact.py [--no-eos]`. The reference value for the rnng sweep tables."""

import argparse
import math
import time

import torch

from lm_latent_eval.models import load_model
from lm_latent_eval.models.rnng.enumerate import exact_log_marginal
from lm_latent_eval.models.rnng.treebank import read_sentences
from lm_latent_eval.paths import DATA_DIR

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--no-eos", action="store_true", help="do not score or count </s>")
    args = p.parse_args()
    kwargs = {"count_eos": False} if args.no_eos else {}
    model, _ = load_model("rnng", **kwargs)
    sentences = read_sentences(DATA_DIR / "ptb_tiny" / "test.txt")
    start = time.perf_counter()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for s in sentences:
            x = model.tokenize(s)
            total += exact_log_marginal(model, x)
            tokens += x.numel()
    print(
        f"exact PPL (enumeration, count_eos={model.count_eos}): {math.exp(-total / tokens):.4f} over "
        f"{len(sentences)} sentences, {tokens} tokens ({time.perf_counter() - start:.0f} s)"
    )
