"""Benchmark of the HMM reference model: `python bench/bench_hmm.py [--device cuda]` (see particles.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from limit import hmm_arithmetic
from particles import main

if __name__ == "__main__":
    main(default_model="hmm", arithmetic=hmm_arithmetic)
