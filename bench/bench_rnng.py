"""Benchmark of the bundled RNNG on its tiny synthetic treebank: `python bench/bench_rnng.py [--device cuda]` (see particles.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from limit import rnng_arithmetic
from particles import main

from lm_latent_eval.paths import DATA_DIR

if __name__ == "__main__":
    main(
        [
            "--data",
            str(DATA_DIR / "ptb_tiny" / "test.txt"),
            "--pretrained",
            str(DATA_DIR / "rnng"),
            *sys.argv[1:],
        ],
        default_model="rnng",
        arithmetic=rnng_arithmetic,
    )
