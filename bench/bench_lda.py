"""Benchmark of the bundled LDA on its held-out paragraphs: `python bench/bench_lda.py [--device cuda]` (see
particles.py): particles·tokens/s, batched vs a one-particle loop, cost(K=1000)/cost(K=1)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from particles import main

from lm_latent_eval.paths import DATA_DIR

if __name__ == "__main__":
    main(["--data", str(DATA_DIR / "pydoc_topics" / "test.jsonl"), "--num-docs", "20", *sys.argv[1:]],
         default_model="lda")  # fmt: skip
