"""A reference perplexity for the README's first command: the bundled KGLM on linked_wikitext2_tiny with SMC at
K = 102,400 particles per document (16 independent runs of 6,400), with its own 95% statement.
``bench/kglm_default_seeds.py`` checks the README command's figure against it.

    python bench/kglm_reference.py   # writes bench/kglm_reference/reference.json and reference.md
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.models import load_model
from lm_latent_eval.models.kglm.linked_wikitext import load_linked_tiny

OUTPUT = Path(__file__).resolve().parent / "kglm_reference"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=102_400)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("kglm")
    texts = [row["text"] for row in load_linked_tiny()["test"]]
    settings = EstimatorSettings("smc", args.num_samples, smc_runs=args.runs, seed=2024)
    start = time.perf_counter()
    reference = corpus_estimate(
        [estimate_document(model, t, settings) for t in tqdm(texts, desc="reference")]
    )
    reference_seconds = time.perf_counter() - start
    ref_lo, ref_hi = reference.perplexity_interval
    result = {
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread",
        "documents": len(texts),
        "tokens": reference.num_tokens,
        "reference": {
            "num_samples": args.num_samples,
            "runs": args.runs,
            "perplexity": reference.perplexity,
            "interval": [ref_lo, ref_hi],
            "two_sided": reference.interval.two_sided,
            "seconds": reference_seconds,
        },
    }
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference.json").write_text(json.dumps(result, indent=1))
    table = "\n".join(
        [
            "| run | perplexity | 95% interval | certified upper bound | samples per document | seconds |",
            "|---|---|---|---|---|---|",
            (
                f"| reference (SMC, K = {args.num_samples:,}, {args.runs} runs) | {reference.perplexity:.3f} | "
                f"[{ref_lo:.3f}, {ref_hi:.3f}] | {reference.perplexity_upper_bound:.3f} | {args.num_samples:,} | "
                f"{reference_seconds:.1f} |"
            ),
        ]
    )
    (out / "reference.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
