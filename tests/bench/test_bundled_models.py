"""bench/bundled_models.py (whose table docs/estimators.md quotes) runs what the lm-eval backend runs with no model_args.

Issue 53 (9): its masked row stated [10.905, 10.905] while `lm_eval --model latent_masked --tasks masked_ppl_tiny`
printed 10.9051 ± 0.0242: the bench resolved the package's settings, not the model's ``default_settings`` (peek=False,
resample_threshold=0) that the backends apply, and aggregated the held-out sentence that occurs twice as two
independent ones (the backend's documents share a key, and its certified bound splits δ accordingly)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from lm_eval_runs import run_lm_eval

import lm_latent_eval
from lm_latent_eval.reports.lm_eval_output import read_runs

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bundled_models import row


def test_the_masked_row_is_what_lm_eval_prints(tmp_path):
    bench = row("masked")
    assert "peek=True, resample_threshold=0.5" in bench["choice"] and bench["documents"] == 44
    run_lm_eval(
        ["--model", "latent_masked", "--tasks", "masked_ppl_tiny", "--include_path", str(lm_latent_eval.tasks_path()),
         "--device", "cpu", "--output_path", str(tmp_path / "out"), "--log_samples"]
    )  # fmt: skip
    (run,) = read_runs(tmp_path / "out")
    lo, hi = bench["interval"]
    assert bench["two_sided"] and lo < bench["perplexity"] < hi
    for metric, figure in [
        ("latent_perplexity", bench["perplexity"]),
        ("instance_perplexity", bench["instance_perplexity"]),
        ("perplexity_upper_bound", bench["certified_upper_bound"]),
        ("perplexity_sampling_se", bench["sampling_stderr"]),
        # lm-eval's Stderr column: the interval's half-width over the normal quantile
        ("latent_perplexity_stderr", (hi - lo) / 2 / 1.959963984540054),
    ]:
        assert math.isclose(run.metrics[f"{metric},none"], figure, rel_tol=1e-9), metric
