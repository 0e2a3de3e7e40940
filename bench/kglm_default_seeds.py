"""Does the README's first command's 95% interval cover the K = 102,400 reference? The bundled KGLM on
linked_wikitext2_tiny with the defaults (``estimator=auto``: SMC with the precision target) at the default seed 1234
(what the README's command prints) and at seeds 1..N, each interval checked against the reference perplexity that
``bench/kglm_reference.py`` committed.

    python bench/kglm_default_seeds.py --seeds 10   # writes bench/kglm_reference/seeds.md and seeds.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models import load_model
from lm_latent_eval.models.kglm.linked_wikitext import load_linked_tiny

FOLDER = Path(__file__).resolve().parent / "kglm_reference"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    reference = json.loads((FOLDER / "reference.json").read_text())["reference"]["perplexity"]
    model, _ = load_model("kglm")
    texts = [row["text"] for row in load_linked_tiny()["test"]]
    rows = []
    for seed in tqdm([EstimatorSettings().seed, *range(1, args.seeds + 1)], desc="seeds"):
        start = time.perf_counter()
        by_text = estimate_corpus(resolve(EstimatorSettings(seed=seed), model), texts, progress=False)
        corpus = corpus_estimate([by_text[t] for t in texts])
        lo, hi = corpus.perplexity_interval
        rows.append(
            {
                "seed": seed,
                "perplexity": corpus.perplexity,
                "interval": [lo, hi],
                "two_sided": corpus.interval.two_sided,
                "covers_reference": lo <= reference <= hi,
                "certified_upper_bound": corpus.perplexity_upper_bound,
                "certified_bound_holds": reference <= corpus.perplexity_upper_bound,
                "mean_samples": sum(by_text[t].log_weights.size for t in texts) / len(texts),
                "seconds": time.perf_counter() - start,
            }
        )
    covered = sum(r["covers_reference"] for r in rows[1:])
    machine = (
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    (FOLDER / "seeds.json").write_text(
        json.dumps({"machine": machine, "reference": reference, "rows": rows}, indent=1)
    )
    lines = [
        (
            f"| seed | perplexity | 95% interval | covers the reference {reference:.3f} | certified upper bound | "
            "samples per document | seconds |"
        ),
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['seed']} | {r['perplexity']:.3f} | [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}] | "
            f"{'yes' if r['covers_reference'] else 'no'} | {r['certified_upper_bound']:.3f} | "
            f"{r['mean_samples']:.0f} | {r['seconds']:.0f} |"
            for r in rows
        ),
        "",
        (
            f"The README's command (seed {rows[0]['seed']}) "
            f"{'covers' if rows[0]['covers_reference'] else 'misses'} the reference; seeds 1 to {args.seeds}: "
            f"{covered} of {args.seeds} intervals cover it ({machine})."
        ),
    ]
    (FOLDER / "seeds.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
