"""Benchmark of the bundled EntityNLM on its tiny coreference test set: `python bench/bench_entitynlm.py [--device cuda]` (see particles.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from limit import entitynlm_arithmetic
from particles import main, read_documents

from lm_latent_eval.models import MODELS
from lm_latent_eval.paths import DATA_DIR


def compile_kernels() -> tuple:
    """Opt-in (``--compile``): the per-token kernels through torch.compile (dynamic shapes). ``log_joint`` no longer
    calls ``score_step`` (it scores all tokens at once), so this now compiles the sampler and SMC's scoring only.

    Not the default: the fused float32 kernels round differently, so log p and log q move by ~1e-5 (measured and
    printed), which breaks the 1e-9 agreement with the eager path that tests/models/entitynlm/test_entitynlm_pinned.py holds."""
    import torch

    from lm_latent_eval.models.entitynlm import drawing, scoring

    eager = drawing.draw_step, scoring.score_step
    drawing.draw_step = torch.compile(drawing.draw_step, dynamic=True)
    scoring.score_step = torch.compile(scoring.score_step, dynamic=True)
    return eager


def compiled_difference(eager_kernels: tuple, model_dir, doc: str, k: int = 1000) -> float:
    """max |Δ log w| between eager and compiled kernels on one document (same seed)."""

    from lm_latent_eval.estimators import importance_log_weights
    from lm_latent_eval.models.entitynlm import EntityNLM, drawing, scoring

    model = EntityNLM.from_pretrained(str(model_dir)).eval()
    x = model.tokenize(doc)
    compiled = drawing.draw_step, scoring.score_step
    drawing.draw_step, scoring.score_step = eager_kernels
    eager = importance_log_weights(model, x, num_samples=k, seed=0, document=doc)
    drawing.draw_step, scoring.score_step = compiled
    return float(abs(importance_log_weights(model, x, num_samples=k, seed=0, document=doc) - eager).max())


def use_cpu_clock() -> None:
    """Opt-in (``--cpu-time``): time with the process's CPU clock instead of the wall clock, in particles.py and
    limit.py. The estimator runs single-threaded (OMP_NUM_THREADS=1), so its CPU time is its uncontended wall time;
    other processes on a shared machine then stop inflating either side of a ratio."""
    import time
    from types import SimpleNamespace

    import limit
    import particles

    particles.time = limit.time = SimpleNamespace(perf_counter=time.process_time)


if __name__ == "__main__":
    if "--cpu-time" in sys.argv:
        sys.argv.remove("--cpu-time")
        use_cpu_clock()
        print("# times below are CPU seconds of this process (--cpu-time)")
    if "--compile" in sys.argv:
        sys.argv.remove("--compile")
        eager = compile_kernels()
        first = read_documents(str(DATA_DIR / "coref_tiny" / "test.jsonl"))[0]
        print(
            f"# torch.compile'd kernels: max |log w eager - log w compiled| at K = 1000 on one document = "
            f"{compiled_difference(eager, DATA_DIR / 'entitynlm', first):.2e}",
            flush=True,
        )
    model = "entitynlm" if "entitynlm" in MODELS else "lm_latent_eval.models.entitynlm:EntityNLM"
    main(
        [
            "--data",
            str(DATA_DIR / "coref_tiny" / "test.jsonl"),
            "--pretrained",
            str(DATA_DIR / "entitynlm"),
            *sys.argv[1:],
        ],
        default_model=model,
        arithmetic=entitynlm_arithmetic,
    )
