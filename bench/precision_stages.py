"""Why the precision target takes the stages it takes: every document's samples, v̂ and c = v̂·K at every stage.

    python bench/precision_stages.py   # the README command's estimation: KGLM, its 20 test documents, auto's settings

Runs ``estimate_corpus`` with the settings ``estimator=auto`` resolves to on the bundled KGLM (SMC, K = 100, 4 runs,
peeking, target_se 0.002, seed 1234: the README's first command without lm-eval around it) and prints, for each stage
the allocation reads, each document's tokens T, samples K, v̂ (its relative variance), the largest relative variance
per sample c seen so far, the samples the next stage gets, and whether v̂ was trusted; then each stage's seconds and
particle·tokens, and the corpus statement. Writes bench/precision_stages/output.md. If c were a property of the
document, stage 0's c would size every document at once; the table shows how far it moves as K grows.
"""

from __future__ import annotations

import math
import os
import platform
import time
from pathlib import Path

import torch

from lm_latent_eval.estimators import adaptive
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.settings import EstimatorSettings
from lm_latent_eval.models import load_model
from lm_latent_eval.paths import DATA_DIR
from lm_latent_eval.reports.sweep import read_documents

OUTPUT = Path(__file__).resolve().parent / "precision_stages"


def main() -> None:
    torch.set_num_threads(1)
    model, _ = load_model("kglm")
    texts = read_documents(DATA_DIR / "linked_tiny" / "test.jsonl")
    settings = EstimatorSettings("smc", 100, target_se=0.002, seed=1234, peek=True)
    stages: list[dict] = []
    allocation = adaptive._allocation  # wrapped, not changed: the rows below are what it read and decided

    def traced(estimates, earlier, settings, all_reduce, documents, policy=DEFAULT_POLICY):
        out = allocation(estimates, earlier, settings, all_reduce, documents, policy)
        errors = [e.error(policy) for e in estimates]
        stages.append({
            "seconds": time.perf_counter() - clock[0],
            "cap": policy.document_variance_cap(documents),
            "rows": [(e.num_tokens, e.num_samples, err.relative_variance, h.variance_per_sample, k, err.trusted)
                     for e, err, h, k in zip(estimates, errors, earlier, out)],
        })  # fmt: skip
        clock[0] = time.perf_counter()
        return out

    adaptive._allocation = traced
    clock = [time.perf_counter()]
    start = clock[0]
    try:
        final = adaptive.estimate_corpus(model, texts, settings, progress=False)
    finally:
        adaptive._allocation = allocation
    last_seconds = time.perf_counter() - clock[0]
    corpus = corpus_estimate([final[t] for t in texts])
    tokens = sum(e.num_tokens for e in final.values())
    low, high = corpus.perplexity_interval
    lines = [
        f"# The precision target on the README's estimation (bundled KGLM, 20 test documents, {settings})",
        "",
        (
            f"{platform.machine()}, {os.cpu_count()} cores, one thread, load average {os.getloadavg()[0]:.1f}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {time.perf_counter() - start:.1f} s in all."
        ),
        "",
        f"The target allows Σ v̂ ≤ (target_se · T)² = {(settings.target_se * tokens) ** 2:.2f} nats².",
        "",
        "| stage | seconds | particle·tokens | documents growing | Σ v̂ (nats²) |",
        "|---|---|---|---|---|",
    ]
    for s, stage in enumerate(stages):
        kt = sum(t * k for t, k, *_ in stage["rows"])
        grow = sum(k2 > k for _, k, _, _, k2, _ in stage["rows"])
        sum_v = sum(v for _, _, v, *_ in stage["rows"])
        lines.append(f"| {s} | {stage['seconds']:.1f} | {kt / 1e6:.2f} M | {grow} | {sum_v:.2f} |")
    kt = sum(e.num_samples * e.num_tokens for e in final.values())
    sum_v = sum(e.error(DEFAULT_POLICY).relative_variance for e in final.values())
    lines += [f"| {len(stages)} (reported) | {last_seconds:.1f} | {kt / 1e6:.2f} M | – | {sum_v:.2f} |", ""]
    lines += [
        (
            f"Reported: perplexity [{low:.4f}, {high:.4f}] (two-sided: {corpus.interval.two_sided}), certified bound "
            f"{corpus.perplexity_upper_bound:.4f}, remainder {corpus.interval.remainder:.2f} SE."
        ),
        "",
        (
            "Per document, K → K next (v̂, c = the largest v̂·K so far; * where v̂ was not trusted); the per-document cap on "
            f"v̂ is {stages[0]['cap']:.4f} ({DEFAULT_POLICY.allocation_remainder} / √N):"
        ),
        "",
        "| T | " + " | ".join(f"stage {s}" for s in range(len(stages))) + " |",
        "|---" * (len(stages) + 1) + "|",
    ]
    for d in range(len(stages[0]["rows"])):
        cells = []
        for stage in stages:
            _, k, v, c, k2, trusted = stage["rows"][d]
            c_text = "–" if math.isnan(c) else f"{c:,.0f}"
            cells.append(f"{k:,} → {k2:,} ({v:.3f}, {c_text}){'' if trusted else '*'}")
        lines.append(f"| {stages[0]['rows'][d][0]} | " + " | ".join(cells) + " |")
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "output.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
