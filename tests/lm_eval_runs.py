"""Real ``lm_eval`` command lines run in this process, as a user types them (whichever lm-eval release is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import lm_latent_eval
from lm_latent_eval.models import default_checkpoint

HMM = default_checkpoint("hmm")


def run_lm_eval(argv: list[str]) -> None:
    """The real ``lm_eval`` command line, in this process (our backends are registered by importing them)."""
    from lm_eval.__main__ import cli_evaluate

    import lm_latent_eval.harness.backends  # noqa: F401

    saved = sys.argv
    sys.argv = ["lm_eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved


def hmm_run(out: Path, model_args: str, limit: int = 6) -> Path:
    """The bundled HMM on the first ``limit`` documents of latent_ppl_tiny, samples logged under ``out``."""
    run_lm_eval(
        [
            "--model", "latent_hmm", "--model_args", f"pretrained={HMM},{model_args}",
            "--tasks", "latent_ppl_tiny", "--include_path", str(lm_latent_eval.tasks_path()),
            "--limit", str(limit), "--device", "cpu", "--batch_size", "auto",
            "--output_path", str(out), "--log_samples",
        ]
    )  # fmt: skip
    return out
