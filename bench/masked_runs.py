"""How many SMC runs per document the precision target should ask for, at 32 tokens (issue 52, item 1).

    python bench/masked_runs.py     # writes bench/masked_length/runs.md

The bundled masked LM's defaults (SMC resampling at ESS < K/2 under its value head, peeking through it, the precision
target at 0.002 nats per token) on its joined held-out sentences cut to 32 tokens (4 texts, ``masked_length``), with
K split into ``smc_runs`` = R runs: v̂ of a document comes from its R runs' spread (R − 1 degrees of freedom), and the
precision target sizes every later stage by the largest c = v̂ K seen so far, so a noisy v̂ ratchets K up. Per R and
seed: the stages, the last stage's K per text, the statement, Σ v̂ of the last stage against the target's budget
(τ_se · T)², and the network rows per token from an empty row cache. One seed each is a lead, not a measurement of
coverage: a default of more runs needs its coverage measured first.
"""

from __future__ import annotations

import time

import torch
from masked_length import OUTPUT, joined_texts
from masked_side_by_side import machine

from lm_latent_eval.estimators import EstimatorSettings, resolve
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.models import load_model

LENGTH, RUNS, SEEDS, TARGET = 32, (4, 16), (1234, 1), 0.002


def row(runs: int, seed: int) -> str:
    """One (R, seed) cell of the table, from a freshly loaded model (an empty row cache)."""
    model, _ = load_model("masked")
    texts = joined_texts(model, LENGTH)
    settings = EstimatorSettings(
        "smc", 100, target_se=TARGET, seed=seed, smc_runs=runs, **dict(model.default_settings)
    )
    start, rows = time.perf_counter(), model.network_rows
    out = list(estimate_corpus(resolve(settings, model), texts, progress=False).values())
    seconds = time.perf_counter() - start
    tokens = sum(e.num_tokens for e in out)
    statement = corpus_estimate(out).interval
    lower, upper = statement.perplexity(tokens)
    sum_v = sum(e.error().relative_variance for e in out)
    return (
        f"| {runs} | {seed} | {len(out[0].stage_log_likelihoods)} | {', '.join(f'{e.num_samples:,}' for e in out)} "
        f"| {lower:.3f} to {upper:.3f} | {sum_v:.4f} of {(TARGET * tokens) ** 2:.4f} "
        f"| {(model.network_rows - rows) / tokens:,.1f} | {seconds:.0f} |"
    )


def main() -> None:
    torch.set_num_threads(1)
    rows = [row(runs, seed) for seed in SEEDS for runs in RUNS]
    lines = [
        (
            f"The bundled masked LM's defaults at {LENGTH} tokens with R SMC runs per document (`python "
            f"bench/masked_runs.py`; module docstring). Machine: {machine()}."
        ),
        "",
        (
            "| R (smc_runs) | seed | stages | last stage's K per text | perplexity, 95% interval | Σ v̂ of the last "
            "stage, of the budget (τ_se · T)² | network rows per token | seconds |"
        ),
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    (OUTPUT / "runs.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
