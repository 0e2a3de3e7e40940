"""Reliability of IS and SMC on the bundled LDA's held-out paragraphs, against the exact values, and MALLET's
left-to-right evaluator as its particles grow.

    python bench/lda_reliability.py   # writes bench/lda_reliability/table.md and results.json

For K in ``--ks``, every document and seed: IS and SMC (peeking, τ = 1, one SMC run of K particles so both use K
samples; then the default 4 runs) back to back. Reported: the across-seed standard deviation of log p̂ per document
(mean over documents), the mean of log p̂ − log p (Jensen: ≤ 0), the corpus perplexity's mean and spread over seeds
against the exact one, IS's ESS and share of documents with Pareto k̂ ≥ its threshold, SMC's smallest ESS, and the
seconds per document. Then the coverage of the printed 95% statement: for ``--coverage-seeds`` seeds, the corpus
statement of a default run (``estimate_document`` + ``corpus_estimate``: SMC with its 4 runs, IS) against the exact
Σ_n log p(x_n): how often it is two-sided, how often it holds, and how often the certified bound holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from lm_latent_eval.estimators import (
    EstimatorSettings,
    estimate_document,
    importance_log_weights,
    log_mean_exp,
    smc_log_weights,
)
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.diagnostics import effective_sample_size, pareto_k_threshold, pareto_khat
from lm_latent_eval.models import load_model
from lm_latent_eval.models.lda import peers
from lm_latent_eval.models.lda.corpus import CORPUS_DIR, read_texts
from lm_latent_eval.models.lda.stepwise import document_stream

OUTPUT = Path(__file__).resolve().parent / "lda_reliability"


def run_estimator(name, model, x, text, k, seed, runs):
    start = time.perf_counter()
    if name == "IS":
        lw = importance_log_weights(model, x, num_samples=k, seed=seed, document=text)
        diag = {
            "ess": effective_sample_size(lw),
            "khat_high": float(pareto_khat(lw) >= pareto_k_threshold(k)),
        }
    else:
        lw, d = smc_log_weights(model, x, num_samples=k, seed=seed, document=text, smc_runs=runs)
        diag = {"ess_min": d.ess_min, "resampling_steps": d.resampling_steps}
    return float(log_mean_exp(lw)), time.perf_counter() - start, diag


def coverage_rows(model, texts, exact_total, tokens, ks, seeds) -> tuple[list[str], list[dict]]:
    """Over ``seeds`` default runs per (estimator, K): shares two-sided, covering S, certified bound holding."""
    lines = [
        "| estimator | K | seeds | two-sided share | 95% statement holds | certified bound holds | mean PPL statement |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for k in ks:
        for name in ("smc", "is"):
            two_sided = holds = certified = 0
            ends = []
            for seed in range(seeds):
                settings = EstimatorSettings(name, num_samples=k, seed=seed)
                corpus = corpus_estimate([estimate_document(model, t, settings) for t in texts])
                interval = corpus.interval
                two_sided += interval.two_sided
                holds += interval.lower <= exact_total <= interval.upper
                certified += corpus.perplexity_upper_bound >= math.exp(-exact_total / tokens)
                ends.append(corpus.perplexity_interval)
            row = {"estimator": name, "K": k, "seeds": seeds, "two_sided": two_sided / seeds,
                   "coverage": holds / seeds, "certified": certified / seeds, "ppl_lower": float(np.mean([lo for lo, _ in ends])),
                   "ppl_upper": float(np.mean([hi for _, hi in ends]))}  # fmt: skip
            rows.append(row)
            cells = [name.upper(), f"{k:,}", str(seeds), f"{row['two_sided']:.2f}", f"{row['coverage']:.2f}",
                     f"{row['certified']:.2f}", statement(row)]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    return lines, rows


def statement(row: dict) -> str:
    """The statement about perplexity averaged over runs: [mean lower, mean upper] where every run's is two-sided,
    else ≤ the mean upper end."""
    if row["two_sided"] == 1.0:
        return f"[{row['ppl_lower']:.2f}, {row['ppl_upper']:.2f}]"
    return f"≤ {row['ppl_upper']:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="100,1000")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--coverage-seeds", type=int, default=50, help="default runs per coverage row")
    parser.add_argument("--particles", default="10,100,1000,10000", help="MALLET-style particle counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("lda")
    texts = read_texts(CORPUS_DIR / "test.jsonl")
    xs = [model.tokenize(t) for t in texts]
    exact = np.array([model.log_marginal(x) for x in xs])
    tokens = sum(int(x.numel()) for x in xs)
    ppl = math.exp(-exact.sum() / tokens)
    lines = [
        (
            f"# LDA reliability: bundled model ({model.num_topics} topics, {len(model.vocab)} words), {len(texts)} "
            f"held-out paragraphs, {tokens} tokens; exact perplexity {ppl:.2f}; {args.seeds} seeds; "
            f"{platform.machine()}, torch {torch.__version__}, 1 thread, load average {os.getloadavg()[0]:.2f}"
        ),
        "",
        (
            "| estimator | K | mean SD of log p̂ over seeds | mean log p̂ − log p | corpus perplexity: mean ± SD over "
            "seeds | IS ESS mean / min | IS share k̂ ≥ threshold | SMC min ESS | s / document |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    results = {"exact_perplexity": ppl, "tokens": tokens, "rows": []}
    for k in (int(v) for v in args.ks.split(",")):
        for name, runs in (("IS", 1), ("SMC", 1), ("SMC", 4)):
            ll = np.empty((len(texts), args.seeds))
            seconds, diags = 0.0, []
            for n, (x, text) in enumerate(zip(xs, texts)):
                for s in range(args.seeds):
                    ll[n, s], sec, diag = run_estimator(name, model, x, text, k, s, runs)
                    seconds += sec
                    diags.append(diag)
            corpus = np.exp(-ll.sum(0) / tokens)
            label = name if name == "IS" else f"SMC ({runs} run{'s' * (runs > 1)})"
            ess = [d["ess"] for d in diags if "ess" in d]
            row = {
                "estimator": label, "K": k, "sd": float(ll.std(1, ddof=1).mean()),
                "bias": float((ll.mean(1) - exact).mean()), "ppl_mean": float(corpus.mean()),
                "ppl_sd": float(corpus.std(ddof=1)), "seconds_per_document": seconds / ll.size,
                "is_ess_mean": float(np.mean(ess)) if ess else None, "is_ess_min": float(np.min(ess)) if ess else None,
                "is_khat_share": float(np.mean([d["khat_high"] for d in diags])) if ess else None,
                "smc_ess_min": float(np.min([d["ess_min"] for d in diags])) if not ess else None,
            }  # fmt: skip
            results["rows"].append(row)
            is_cells = (
                [f"{row['is_ess_mean']:.1f} / {row['is_ess_min']:.1f}", f"{row['is_khat_share']:.2f}", "–"]
                if ess
                else ["–", "–", f"{row['smc_ess_min']:.1f}"]
            )
            cells = [label, f"{k:,}", f"{row['sd']:.4f}", f"{row['bias']:+.4f}",
                     f"{row['ppl_mean']:.2f} ± {row['ppl_sd']:.2f}", *is_cells, f"{row['seconds_per_document']:.4f}"]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    ks = [int(v) for v in args.ks.split(",")]
    lines += [
        "",
        f"Coverage of the printed 95% statement about the exact Σ log p = {exact.sum():.3f} nats:",
        "",
    ]
    coverage_lines, results["coverage"] = coverage_rows(model, texts, float(exact.sum()), tokens, ks,
                                                        args.coverage_seeds)  # fmt: skip
    lines += coverage_lines
    lines += ["", f"MALLET-style left-to-right (no resampling) vs the exact {ppl:.2f}:", ""]
    lines += ["| particles | perplexity | gap to exact |", "|---|---|---|"]
    for r in (int(v) for v in args.particles.split(",")):
        total = sum(peers.left_to_right(model, x, r, document_stream(0, t)) for x, t in zip(xs, texts))
        value = math.exp(-total / tokens)
        results.setdefault("mallet", []).append({"particles": r, "perplexity": value})
        lines.append(f"| {r:,} | {value:.2f} | {value - ppl:+.2f} |")
        print(lines[-1], flush=True)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (OUTPUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
