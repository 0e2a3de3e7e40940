"""SMC against exact values on the tiny enumerable models of the tests: `python bench/smc_unbiasedness.py`.

RNNG: sentences of 1 to 8 words, p(x) by listing every binary tree (``models/rnng/enumerate.py``), with and without
``</s>``, both proposals. latent_tokenization: texts whose segmentations are listed (p(x) = Σ over all of them; the
tests check that sum against a brute force over every split of the bytes), with and without the canonical mixture.
For each case, ``--seeds`` independent SMC estimates with K particles, one run, resampling after every step
(threshold 1) or when ESS < K/2; prints mean p̂/p with its standard error, (mean − 1)/SE, and the mean resampling
steps per run. For the tokenization LM the canonical segmentation's log p(x, z*) (a lower bound on log p(x)) is
printed beside the exact value and the mean log p̂.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "contract")]

from cases import tokenization_view  # the contract table's tiny byte-level BPE GPT-2
from rnng_tiny import tiny_rnng

from lm_latent_eval.estimators import log_mean_exp, smc_log_weights
from lm_latent_eval.models.rnng.enumerate import catalan, exact_log_marginal

RNNG_SENTENCES = ["dog", "the dog", "a cat saw", "the dog saw a", "the dog saw a cat", "the dog saw a cat with",
                  "the dog saw a cat with a", "the dog saw a cat with a cat"]  # fmt: skip
TOKENIZATION_TEXTS = ["the cat", "a dog,", "théo sat.", "the mat."]


def estimates(model, text: str, k: int, peek: bool, threshold: float, seeds: int) -> tuple[np.ndarray, float]:
    """log p̂ of ``seeds`` SMC runs, and the mean resampling steps per run."""
    x = model.tokenize(text)
    out, steps = [], []
    for s in range(seeds):
        lw, diag = smc_log_weights(model, x, num_samples=k, peek=peek, seed=s, document=text,
                                   resample_threshold=threshold, smc_runs=1)  # fmt: skip
        out.append(log_mean_exp(lw))
        steps.append(diag.resampling_steps)
    return np.array(out), float(np.mean(steps))


def line(label: str, log_p_hat: np.ndarray, log_p: float, steps: float, extra: str = "") -> str:
    ratio = np.exp(log_p_hat - log_p)
    se = ratio.std(ddof=1) / math.sqrt(ratio.size)
    if np.abs(log_p_hat - log_p).max() < 1e-6:  # one configuration: every estimate is exact
        return f"| {label} | {ratio.mean():.4f} | 0 (exact) | – | {steps:.2f} |{extra}"
    return (
        f"| {label} | {ratio.mean():.4f} | {se:.4f} | {(ratio.mean() - 1) / se:+.2f} | {steps:.2f} |{extra}"
    )


def rnng_rows(k: int, seeds: int, thresholds: list[float]) -> None:
    print("\n## RNNG (tiny, tests/rnng_tiny.py): p(x) from every tree\n")
    print(
        "| sentence (words, trees) | </s> | proposal | threshold | mean p̂/p | SE | (mean − 1)/SE | resampling steps |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for count_eos in (True, False):
        model = tiny_rnng(count_eos=count_eos)
        for text in RNNG_SENTENCES:
            words = len(text.split())
            log_p = exact_log_marginal(model, model.tokenize(text))
            for peek in (True, False):
                for threshold in thresholds:
                    ll, steps = estimates(model, text, k, peek, threshold, seeds)
                    label = (f"{text} ({words}, {catalan(words - 1)}) | {'yes' if count_eos else 'no'} | "
                             f"{'CRF, peek' if peek else 'p, no peek'} | {threshold:g}")  # fmt: skip
                    print(line(label, ll, log_p, steps), flush=True)


def tokenization_rows(k: int, seeds: int, thresholds: list[float]) -> None:
    print("\n## latent_tokenization (tiny byte-level BPE GPT-2 of the tests): p(x) from every segmentation\n")
    print("| text (bytes, segmentations) | ε | threshold | mean p̂/p | SE | (mean − 1)/SE | resampling steps "
          "| log p(x, z*) canonical | log p(x) exact | mean log p̂ |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mix in (0.0, 0.9):
        model = tokenization_view(cover_end=False, canonical_mix=mix)
        for text in TOKENIZATION_TEXTS:
            x = model.tokenize(text)
            log_p = model.log_marginal(x)
            canonical = float(model.log_joint(x, x[None])[0])
            for threshold in thresholds:
                ll, steps = estimates(model, text, k, True, threshold, seeds)
                label = f"{text} ({len(text.encode())}, {model.lattice(x).count()}) | {mix:g} | {threshold:g}"
                print(
                    line(label, ll, log_p, steps, f" {canonical:.4f} | {log_p:.4f} | {ll.mean():.4f} |"),
                    flush=True,
                )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="rnng,tokenization")
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--thresholds", default="1,0.5")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    thresholds = [float(v) for v in args.thresholds.split(",")]
    print(f"# SMC unbiasedness: K = {args.k}, {args.seeds} seeds per case, one run, systematic resampling; "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}, load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    if "rnng" in args.models:
        rnng_rows(args.k, args.seeds, thresholds)
    if "tokenization" in args.models:
        tokenization_rows(args.k, args.seeds, thresholds)


if __name__ == "__main__":
    main()
