"""Multiple-choice accuracy under Monte Carlo error: lm-eval's own ``arc_easy`` task over the 40 four-choice questions
of tests/data/hmm_choice (the bundled HMM's vocabulary), answered by ``latent_hmm`` with the exact marginal once and
with a sampling estimator at each of 20 seeds: per seed, acc, the questions whose choice differs from the exact
argmax, and what the run itself reports (its expected number of flipped questions, where it reports one).

    python bench/choice_flips.py --model_args estimator=is,num_samples=100 --label "IS, K = 100"

Appends one table to bench/choice_flips/README.md (``--output``); ``--seeds`` sets how many (default 20).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import tempfile
import time
from pathlib import Path

import lm_eval
import torch
from lm_eval.tasks import TaskManager
from lm_eval.utils import simple_parse_args_string

from lm_latent_eval.harness.backends import LatentHMMEval

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "hmm_choice" / "test.jsonl"
BUILTIN = Path(lm_eval.__file__).parent / "tasks" / "arc" / "arc_easy.yaml"
OUTPUT = Path(__file__).resolve().parent / "choice_flips" / "README.md"
TASK = "hmm_choice"


def task_manager(folder: Path) -> TaskManager:
    """lm-eval's arc_easy with only its dataset location overridden (test split only)."""
    override = {
        "include": str(BUILTIN), "task": TASK, "tag": [], "dataset_path": "json", "dataset_name": None,
        "dataset_kwargs": {"data_files": {"test": str(DATA)}}, "training_split": None, "validation_split": None,
    }  # fmt: skip
    (folder / f"{TASK}.yaml").write_text(json.dumps(override))
    return TaskManager(include_path=str(folder), include_defaults=False)


def answers(lm, manager: TaskManager) -> tuple[float, list[int], dict]:
    """acc, each question's chosen index, and the results config's Monte Carlo summary of the task (if any)."""
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[TASK], task_manager=manager, log_samples=True, bootstrap_iters=0
    )
    samples = sorted(out["samples"][TASK], key=lambda s: s["doc_id"])
    chosen = [max(range(len(s["resps"])), key=lambda i: float(s["resps"][i][0][0])) for s in samples]
    summary = out["config"].get("choice_monte_carlo", {}).get(TASK, {})
    return out["results"][TASK]["acc,none"], chosen, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_args", default="estimator=is,num_samples=100")
    parser.add_argument("--label", default=None)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    logging.getLogger("lm-eval").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        manager = task_manager(Path(tmp))
        exact_acc, exact, _ = answers(LatentHMMEval(estimator="exact", device="cpu"), manager)
        rows, start = [], time.perf_counter()
        for seed in range(1, args.seeds + 1):
            lm = LatentHMMEval(**simple_parse_args_string(args.model_args), seed=seed, device="cpu")
            acc, chosen, summary = answers(lm, manager)
            flips = sum(a != b for a, b in zip(chosen, exact))
            rows.append((seed, acc, flips, summary))
        seconds = time.perf_counter() - start
    same = sum(acc == exact_acc for _, acc, _, _ in rows)
    flipped = sum(flips for _, _, flips, _ in rows)
    expected = [s["expected_flips"] for *_, s in rows if "expected_flips" in s]
    reported = f"; the runs report {sum(expected):.1f} expected" if expected else ""
    lines = [
        f"## {args.label or args.model_args}",
        "",
        (
            f"`python bench/choice_flips.py --model_args {args.model_args}` ({platform.machine()}, "
            f"{torch.get_num_threads()} torch thread, {seconds:.0f} s for {args.seeds} seeds): exact acc "
            f"{exact_acc:.3f}; acc equal to it in {same} of {args.seeds} seeds; {flipped} answers flipped in all{reported}."
        ),
        "",
        (
            "| seed | acc | questions flipped against the exact argmax | expected flips the run reports | questions the run "
            "calls unsettled (flip probability > 5% or unknown) | samples per choice (mean) |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for seed, acc, flips, s in rows:
        expected = f"{s['expected_flips']:.3f}" if "expected_flips" in s else "–"
        unsettled = str(s["unsettled"]) if "unsettled" in s else "–"
        samples = f"{s['mean_samples']:.0f}" if "mean_samples" in s else "–"
        lines.append(f"| {seed} | {acc:.3f} | {flips} | {expected} | {unsettled} | {samples} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
