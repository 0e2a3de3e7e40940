"""A document whose p̂ hides a rare latent path: how often SMC's runs all miss it, and what their v̂ then says.

One document of ``bench/interval_coverage.py``'s HMM corpus (``--document``, default 4: its exact log p from the
forward algorithm), SMC with peeking in R runs at several K, ``--seeds`` seeded estimates each. Per K: the mean error
of log p̂, the seeds whose bias-corrected estimate lies more than 1.96 of its own standard errors below the truth
(z = (log p̂ + v̂/2 − log p) / √v̂ < −1.96) with their median error and median v̂, and the seeds in which one run
carries over 80% of p̂ (``UncertaintyPolicy.max_run_share``). Runs that all miss the path agree with one another, so
their v̂ is near 0 and nothing in that estimate shows the miss: only another estimate that found the path does, which
is why the precision target sizes a document by the largest variance per sample any stage has shown.

    python bench/smc_rare_path.py        # writes bench/smc_runs_coverage/rare_path.md
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
from interval_coverage import benchmark_corpus
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.estimators.policy import DEFAULT_POLICY

MAX_RUN_SHARE = DEFAULT_POLICY.max_run_share
from lm_latent_eval.models import load_model

OUTPUT = Path(__file__).resolve().parent / "smc_runs_coverage" / "rare_path.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--document", type=int, default=4, help="index into the benchmark corpus")
    parser.add_argument("--ks", default="100,400,1600", help="K, particles per document (comma-separated)")
    parser.add_argument("--runs", type=int, default=4, help="SMC runs per document")
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("hmm")
    doc = benchmark_corpus(args.document + 1)[args.document]
    x = model.tokenize(doc)
    exact = float(model.log_marginal(x))
    lines = [
        (
            f"HMM document {args.document} ({x.numel()} tokens, exact log p = {exact:.3f}), SMC with peeking in "
            f"{args.runs} runs, seeds 0-{args.seeds - 1} (load average {os.getloadavg()[0]:.1f} at the start)"
        ),
        "",
        (
            "| K | mean of log p̂ − log p | seeds with z < −1.96 | their median error (nats) | their median v̂ | "
            f"seeds with one run over {MAX_RUN_SHARE:.0%} of p̂ |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for k in (int(k) for k in args.ks.split(",")):
        err, v, share = np.zeros(args.seeds), np.zeros(args.seeds), np.zeros(args.seeds)
        for seed in tqdm(range(args.seeds), desc=f"K = {k}"):
            est = estimate_document(
                model, doc, EstimatorSettings("smc", k, peek=True, seed=seed, smc_runs=args.runs)
            )
            d = est.diagnostics
            err[seed], v[seed], share[seed] = (
                est.log_likelihood - exact,
                d.relative_variance,
                d.largest_run_share,
            )
        z = (err + v / 2) / np.sqrt(v)
        low = z < -1.96
        lines.append(
            f"| {k} | {err.mean():.3f} | {low.sum()} of {args.seeds} | "
            + (f"{np.median(err[low]):.2f} | {np.median(v[low]):.4f}" if low.any() else "– | –")
            + f" | {int((share > MAX_RUN_SHARE).sum())} of {args.seeds} |"
        )
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
