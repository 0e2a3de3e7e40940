"""Is the SMC interval's standard error the right size at 1,000 documents? For each seed, SMC at a fixed K in R runs
on the first N documents of ``bench/interval_coverage.py``'s HMM corpus, and the standardized error
z = (truth − centre) / SE of three intervals built from the same estimates:

- ``printed``: the package's, Σ_n (log p̂_n + v̂_n / 2) ± √Σ_n v̂_n, v̂ the larger of the runs' spread and the
  pooled Lee-Whiteley estimate (``estimators.smc``);
- ``jackknife``: per document, the jackknife over the R runs of log p̂ (leave one run out), its bias-corrected value
  R·log p̂ − (R − 1)·mean_r log p̂_(−r) and its variance (R − 1)/R · Σ_r (log p̂_(−r) − mean)², summed over documents;
- ``runs only``: as printed, with v̂ the runs' spread alone.

With calibrated errors z has mean 0 and SD 1 over seeds; no gate is applied (every seed counts). Then, per
document over the seeds, the variance of log p̂ beside the mean of v̂, and the document whose variance is largest.
With R equal runs the runs' spread can never exceed 1 (one run carrying the whole estimate: p̂_r / p̂ = R for it and 0
for the others), whatever the true Var(p̂)/p²; the table counts the seeds where that document's v̂ was at that
ceiling.

    python bench/smc_interval_scale.py --documents 1000 --num-samples 800 --runs 8 --seeds 40
    # writes bench/smc_runs_coverage/interval_scale.md
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np
import torch
from interval_coverage import add_run_arguments, benchmark_corpus
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models import load_model

OUTPUT = Path(__file__).resolve().parent / "smc_runs_coverage" / "interval_scale.md"


def standardized_errors(
    model, docs: list[str], truth: float, settings: EstimatorSettings
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """z of the printed, jackknife and runs-only intervals for one seeded estimate of every document, with every
    document's log p̂ and v̂ (0 and 0 for a document without tokens)."""
    centre = {"printed": 0.0, "jackknife": 0.0, "runs only": 0.0}
    variance = dict.fromkeys(centre, 0.0)
    log_p, v = np.zeros(len(docs)), np.zeros(len(docs))
    for i, doc in enumerate(docs):
        est = estimate_document(model, doc, settings)
        if est.num_tokens == 0:
            continue
        d = est.diagnostics
        log_p[i], v[i] = est.log_likelihood, d.relative_variance
        run_ll, runs = np.asarray(d.run_log_likelihoods), len(d.run_sizes)
        if len(set(d.run_sizes)) != 1:
            raise ValueError(f"runs of sizes {d.run_sizes}: the jackknife below assumes equal runs")
        p = np.exp(run_ll - run_ll.max())
        leave_one_out = np.log((p.sum() - p) / (runs - 1)) + run_ll.max()  # equal run sizes
        centre["printed"] += est.log_likelihood + d.relative_variance / 2
        variance["printed"] += d.relative_variance
        centre["jackknife"] += runs * est.log_likelihood - (runs - 1) * leave_one_out.mean()
        variance["jackknife"] += (runs - 1) / runs * np.sum((leave_one_out - leave_one_out.mean()) ** 2)
        centre["runs only"] += est.log_likelihood + d.runs_relative_variance / 2
        variance["runs only"] += d.runs_relative_variance
    return {k: (truth - centre[k]) / math.sqrt(variance[k]) for k in centre}, log_p, v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, runs=8, num_samples=800, seeds=40, documents=1000)
    parser.add_argument("--first-seed", type=int, default=100, help="(the coverage benchmark uses 0, 1, ...)")
    parser.add_argument("--no-peek", action="store_true")
    args = parser.parse_args()
    if args.num_samples % args.runs:
        parser.error("--num-samples must be a multiple of --runs (the jackknife assumes equal runs)")
    torch.set_num_threads(1)
    model, _ = load_model("hmm")
    docs = benchmark_corpus(args.documents)
    truth = sum(float(model.log_marginal(model.tokenize(d))) for d in docs)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    measured = [
        standardized_errors(
            model,
            docs,
            truth,
            EstimatorSettings("smc", args.num_samples, peek=not args.no_peek, seed=s, smc_runs=args.runs),
        )
        for s in tqdm(seeds, desc="seeds")
    ]
    z = [m[0] for m in measured]
    log_p, v = np.array([m[1] for m in measured]), np.array([m[2] for m in measured])  # [seeds, documents]
    spread, mean_v = log_p.var(axis=0, ddof=1), v.mean(axis=0)
    top = int(np.argmax(spread))
    lines = [
        (
            f"SMC, K = {args.num_samples} in {args.runs} runs, {'no peeking' if args.no_peek else 'peeking'}, "
            f"{args.documents} HMM documents, seeds {seeds.start}-{seeds.stop - 1} "
            f"(load average {os.getloadavg()[0]:.1f} at the end)"
        ),
        "",
        "| interval | mean of z | SD of z | seeds with abs(z) > 1.96 |",
        "|---|---|---|---|",
    ]
    for name in z[0]:
        values = np.array([row[name] for row in z])
        lines.append(
            f"| {name} | {values.mean():.2f} | {values.std(ddof=1):.2f} | {int(np.sum(np.abs(values) > 1.96))} "
            f"of {len(values)} |"
        )
    lines += [
        "",
        "| over the seeds | variance of log p̂ | mean of v̂ | seeds with v̂ ≥ 0.95 |",
        "|---|---|---|---|",
        f"| sum over the documents | {spread.sum():.2f} | {mean_v.sum():.2f} | – |",
        (
            f"| document {top} ({int(model.tokenize(docs[top]).numel())} tokens), the largest variance | "
            f"{spread[top]:.2f} | {mean_v[top]:.2f} | {int(np.sum(v[:, top] >= 0.95))} of {len(v)} |"
        ),
    ]
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
