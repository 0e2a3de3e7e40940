"""Benchmark of the bundled EntityNLM on its tiny coreference test set: `python bench/bench_entitynlm.py [--device cuda]` (see particles.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from particles import main

from lm_latent_eval.models import MODELS
from lm_latent_eval.paths import DATA_DIR

if __name__ == "__main__":
    model = "entitynlm" if "entitynlm" in MODELS else "lm_latent_eval.models.entitynlm:EntityNLM"
    main(["--data", str(DATA_DIR / "coref_tiny" / "test.jsonl"), "--pretrained", str(DATA_DIR / "entitynlm"),
          *sys.argv[1:]], default_model=model)
