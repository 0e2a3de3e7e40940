"""Benchmark of the bundled KGLM on its tiny linked test set: `python bench/bench_kglm.py [--device cuda]` (see particles.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from limit import kglm_arithmetic
from particles import main

from lm_latent_eval.paths import DATA_DIR

if __name__ == "__main__":
    main(
        ["--data", str(DATA_DIR / "linked_tiny" / "test.jsonl"), *sys.argv[1:]],
        default_model="kglm",
        arithmetic=kglm_arithmetic,
    )
