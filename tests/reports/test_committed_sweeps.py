"""The committed sweeps (bench/<model>_sweep) are what their recorded command writes today.

tests/docs/test_docs_figures.py checks that the docs quote these files; this checks the files against the command. A
change to a sampler or an estimator that moves a figure fails here until the sweep is rerun and the docs follow (the
README's HMM tables once drifted from `lm-latent-eval sweep --model hmm --num-samples 100` this way)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lm_latent_eval.cli import main

REPO = Path(__file__).resolve().parents[2]
OPTIONS = ["model", "pretrained", "data", "num_samples", "temperatures", "peek", "beam_sizes", "seed",
           "batch_size", "device", "smc", "resample_threshold", "smc_runs", "exact_ppl"]  # fmt: skip


def sweep_argv(config: dict, output_dir: Path) -> list[str]:
    """The `lm-latent-eval sweep` command line that sweep.json's ``config`` records (run from the repository root)."""
    argv = ["sweep", "--output", str(output_dir)]
    for key in OPTIONS:
        value = config[key]
        option = "--" + key.replace("_", "-")
        if value is None:
            continue  # the default
        if isinstance(value, bool):
            argv.append(option if value else f"--no-{option[2:]}")
        elif isinstance(value, list):
            argv += [option, ",".join(str(v) for v in value)]
        else:
            argv += [option, str(REPO / value) if key == "data" else str(value)]
    return argv


# float32 kernels round differently on another CPU (the committed RNNG and KGLM sweeps move by up to 3e-8 relative
# between an Intel Xeon and an AMD EPYC with the same code, tests/pins.py); a Pareto k̂ (a tail fit) and SMC's
# smallest ESS over tokens (after resampling) amplify that rounding (up to 1e-5 relative there). A change to a sampler
# or an estimator moves figures by far more.
FLOAT32_REL = 1e-6
TAIL_FIT_REL = 1e-4


def differences(fresh, committed, where: str = "sweep.json") -> list[str]:
    """Where two JSON values differ beyond float32 round-off (another CPU rounds the models' float32 kernels
    differently; ``TAIL_FIT_REL`` for Pareto k̂ and ESS)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        if fresh.keys() != committed.keys():
            return [f"{where}: keys {sorted(fresh)} != {sorted(committed)}"]
        return [d for k in committed for d in differences(fresh[k], committed[k], f"{where}.{k}")]
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(fresh) != len(committed):
            return [f"{where}: {len(fresh)} items != {len(committed)}"]
        return [
            d for i, (f, c) in enumerate(zip(fresh, committed)) for d in differences(f, c, f"{where}[{i}]")
        ]
    both_numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (fresh, committed))
    rel = TAIL_FIT_REL if "pareto_k" in where or "ess" in where.rsplit(".", 1)[-1] else FLOAT32_REL
    if both_numbers and math.isclose(fresh, committed, rel_tol=rel, abs_tol=1e-12):
        return []
    if both_numbers and math.isnan(fresh) and math.isnan(committed):
        return []
    return [] if fresh == committed else [f"{where}: {fresh!r} != committed {committed!r}"]


def test_sweep_argv_round_trips_the_recorded_options():
    config = {"model": "rnng", "pretrained": None, "data": "lm_latent_eval/data/ptb_tiny/test.txt",
              "num_samples": 1000, "temperatures": [0.5, 1.0], "peek": "both", "beam_sizes": [1, 10], "seed": 1,
              "batch_size": None, "device": "cpu", "smc": False, "resample_threshold": 0.5, "smc_runs": 4,
              "exact_ppl": 5.2234}  # fmt: skip
    argv = sweep_argv(config, Path("out"))
    assert argv[argv.index("--temperatures") + 1] == "0.5,1.0" and "--no-smc" in argv
    assert "--pretrained" not in argv and argv[argv.index("--exact-ppl") + 1] == "5.2234"
    assert differences({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-7]}) == []
    assert differences({"a": [1.0, 2.001]}, {"a": [1.0, 2.0]}) == ["sweep.json.a[1]: 2.001 != committed 2.0"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hmm", "rnng", "kglm"])  # 21 s, 18 s and 4 min on a busy 2-core machine
def test_committed_sweep_is_what_its_command_writes_today(name, tmp_path, capsys):
    folder = REPO / "bench" / f"{name}_sweep"
    committed = json.loads((folder / "sweep.json").read_text())
    assert main(sweep_argv(committed["config"], tmp_path / "out")) == 0
    fresh = json.loads((tmp_path / "out" / "sweep.json").read_text())
    fresh["config"]["output_dir"] = committed["config"]["output_dir"]
    assert (tmp_path / "out" / "tables.md").read_text() == (folder / "tables.md").read_text()
    found = differences(fresh, committed)
    assert not found, "\n".join(found[:20])
