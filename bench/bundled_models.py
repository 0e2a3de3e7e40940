"""Every bundled model on its bundled test corpus with the defaults (``estimator=auto``): which estimator auto picks,
the perplexity to quote with its 95% statement, the certified upper bound beside it, the Monte Carlo and sampling
errors, samples per document and the time.

    python bench/bundled_models.py   # writes bench/bundled_models/table.md and results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.harness.advice import choose_estimator
from lm_latent_eval.harness.model_args import parse_backend_args
from lm_latent_eval.models import MODELS, load_model
from lm_latent_eval.models.corpora import bundled_documents

OUTPUT = Path(__file__).resolve().parent / "bundled_models"


def row(name: str) -> dict:
    model, _ = load_model(name)
    texts = bundled_documents(name)
    # what `lm_eval --model latent_<name>` runs with no model_args: the model's own default_settings (the bundled
    # masked LM's, under its value head: peek=True, resample_threshold=0.5), then estimator=auto
    run, why = choose_estimator(name, parse_backend_args(name, name, {}), model, announce=False)
    start = time.perf_counter()
    estimates = estimate_corpus(run, texts, progress=False)
    seconds = time.perf_counter() - start
    # keys: a repeated text shares one random stream, as in the backend (its documents' ``key``)
    corpus = corpus_estimate([estimates[t] for t in texts], keys=texts)
    sizes = [e.log_weights.size for e in estimates.values() if e.log_weights is not None]
    return {
        "model": name,
        "choice": why,
        "estimator": corpus.estimator,
        "documents": len(texts),
        "tokens": corpus.num_tokens,
        "perplexity": corpus.perplexity,
        "interval": list(corpus.perplexity_interval),
        "two_sided": corpus.interval.two_sided,
        "reason": corpus.interval.reason,
        "certified_upper_bound": corpus.perplexity_upper_bound,
        "instance_perplexity": corpus.instance_perplexity,
        "monte_carlo_stderr": corpus.monte_carlo_stderr,
        "sampling_stderr": corpus.sampling_stderr,
        "mean_samples": sum(sizes) / len(sizes) if sizes else None,
        "seconds": seconds,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        (
            "| model | estimator (auto) | documents / tokens | perplexity | 95% statement | certified upper bound "
            "| Monte Carlo SE | sampling SE | samples per document | seconds |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["interval"]
        statement = f"[{lo:.3f}, {hi:.3f}]" if r["two_sided"] else f"≤ {hi:.3f} (one-sided)"
        samples = "–" if r["mean_samples"] is None else f"{r['mean_samples']:.0f}"
        mc = "–" if r["monte_carlo_stderr"] != r["monte_carlo_stderr"] else f"{r['monte_carlo_stderr']:.4f}"
        lines.append(
            f"| {r['model']} | {r['estimator']} | {r['documents']} / {r['tokens']} | {r['perplexity']:.3f} "
            f"| {statement} | {r['certified_upper_bound']:.3f} | {mc} | {r['sampling_stderr']:.3f} "
            f"| {samples} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(name for name, row in MODELS.items() if row.corpus))
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [row(name) for name in args.models.split(",")]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread"
    (out / "results.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
    table = markdown(rows)
    (out / "table.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
