"""The same runs under two lm-eval releases, figures side by side: the README's first command and one task per
request type, each environment a Python interpreter with its own lm-eval (tested: 0.4.13 and the 0.5 preview).

    python bench/lm_eval_versions.py --python .venv/bin/python --python ../venv05/bin/python

Runs in each environment, with this checkout's package and tasks (PYTHONPATH), offline, one torch thread:

- the README's ``lm_eval`` command (``latent_kglm`` on ``linked_wikitext2_tiny``: loglikelihood_rolling, SMC with
  the precision target);
- ``latent_hmm`` with ``estimator=exact`` on the bundled ``latent_ppl_tiny`` (loglikelihood_rolling),
  ``contrastive_entropy_tiny`` (multiple_choice) and ``lda_pydoc_completion`` (loglikelihood), and on lm-eval's
  own ``wikitext`` (loglikelihood_rolling), ``arc_easy`` (multiple_choice) and ``gsm8k`` (generate_until) over the
  local copies of their data in tests/data (only the dataset location of each built-in YAML is overridden).

Every figure of every task's results (values and Stderr keys) is compared as float64: ``equal`` is exact equality.
Writes bench/lm_eval_versions/README.md; exits 1 where a figure differs that is not the Stderr of an aggregation
of lm-eval's own (lm-eval 0.5 bootstraps every aggregation but the mean, where 0.4 files "N/A").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = Path(__file__).resolve().parent / "lm_eval_versions" / "README.md"
DATA = REPO / "tests" / "data"
OFFLINE = {
    "OMP_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# lm-eval's built-in tasks over tests/data: (built-in YAML under lm_eval/tasks, local task name, data folder, splits)
BUILTIN = (
    ("wikitext/wikitext.yaml", "wikitext_local", "wikitext_document_level", ("train", "validation", "test")),
    ("arc/arc_easy.yaml", "arc_easy_local", "ai2_arc_easy", ("train", "validation", "test")),
    ("gsm8k/gsm8k.yaml", "gsm8k_local", "gsm8k", ("train", "test")),
)
BUNDLED = ("latent_ppl_tiny", "contrastive_entropy_tiny", "lda_pydoc_completion")
# metrics whose aggregation is ours (lm_eval_versions.own_stderr): their Stderr must agree too
OWN_PREFIXES = (
    "latent_perplexity",
    "perplexity_",
    "instance_perplexity",
    "corpus_perplexity",
    "contrastive_",
)


def readme_command() -> str:
    """The lm_eval part of the README's first command (after the installs)."""
    first_block = (REPO / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    line = first_block.splitlines()[0]
    return line[line.index("lm_eval ") :]


def lm_eval_version(python: str) -> str:
    """The lm-eval version of the interpreter ``python``."""
    code = "import importlib.metadata as m; print(m.version('lm_eval'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def write_builtin_copies(python: str, folder: Path) -> None:
    """Local copies of lm-eval's built-in tasks (``BUILTIN``) for the lm-eval of ``python``, in ``folder``."""
    code = "import lm_eval, pathlib; print(pathlib.Path(lm_eval.__file__).parent / 'tasks')"
    tasks = Path(
        subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    )
    for builtin, task, data_dir, splits in BUILTIN:
        override = {
            "include": str(tasks / builtin),
            "task": task,
            "tag": [],
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {s: str(DATA / data_dir / f"{s}.jsonl") for s in splits}},
        }
        (folder / f"{task}.yaml").write_text(json.dumps(override))  # JSON is YAML


def runs(tasks_folder: Path) -> dict[str, list[str]]:
    """Run name -> lm_eval arguments (after ``-m lm_eval``), with ``tasks_folder`` as the include path."""
    readme = shlex.split(readme_command().replace('"$(lm-latent-eval tasks-path)"', str(tasks_folder)))[1:]
    tasks = ",".join([*BUNDLED, *(task for _, task, _, _ in BUILTIN)])
    hmm = [
        "--model", "latent_hmm", "--model_args", "estimator=exact", "--tasks", tasks, "--include_path",
        str(tasks_folder), "--output_path", "lm_eval_out", "--log_samples", "--seed", "0",
    ]  # fmt: skip
    return {"README command": readme, "latent_hmm, exact": hmm}


def run_environment(python: str) -> tuple[dict[str, dict[str, dict]], dict[str, float]]:
    """Every run in the environment of ``python``: run -> task -> results, and run -> wall seconds."""
    results, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tasks"
        shutil.copytree(REPO / "tasks", folder)
        write_builtin_copies(python, folder)
        for name, args in runs(folder).items():
            cwd = Path(tmp) / name.replace(" ", "_").replace(",", "")
            cwd.mkdir()
            start = time.perf_counter()
            proc = subprocess.run(
                [python, "-m", "lm_eval", *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, **OFFLINE, "PYTHONPATH": str(REPO)},
            )
            seconds[name] = time.perf_counter() - start
            if proc.returncode != 0:
                sys.exit(f"{python}: {name} failed:\n{proc.stderr[-3000:]}")
            (results_file,) = (cwd / "lm_eval_out").glob("*/results_*.json")
            results[name] = json.loads(results_file.read_text(encoding="utf-8"))["results"]
    return results, seconds


def figures(task_results: dict) -> dict[str, object]:
    """The figures of one task's results: every ``metric,filter`` key (values and Stderr)."""
    return {key: value for key, value in task_results.items() if "," in key}


def show(value) -> str:
    return f"{value:.6f}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def explained(metric: str, old, new) -> bool:
    """A difference lm-eval makes, not us: the Stderr of one of lm-eval's own aggregations, which 0.4 files as
    "N/A" and 0.5 bootstraps (every aggregation but the mean)."""
    name = metric.split(",")[0]
    return name.endswith("_stderr") and not name.startswith(OWN_PREFIXES) and old == "N/A" and new != "N/A"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python", action="append", required=True, help="an interpreter with lm-eval (give two)"
    )
    args = parser.parse_args()
    if len(args.python) != 2:
        sys.exit("give two interpreters: --python OLD --python NEW")
    # absolute, not resolved: each run's working directory is a fresh folder, and a venv's python is a link
    args.python = [os.path.abspath(p) for p in args.python]
    versions = [lm_eval_version(p) for p in args.python]
    outcomes = [run_environment(p) for p in args.python]
    (old, old_seconds), (new, new_seconds) = outcomes
    rows, differ, unexplained = [], 0, []
    for run, tasks in old.items():
        for task in sorted(tasks):
            a, b = figures(tasks[task]), figures(new[run].get(task, {}))
            for metric in sorted(set(a) | set(b)):
                x, y = a.get(metric, "missing"), b.get(metric, "missing")
                same = x == y
                if not same:
                    differ += 1
                    if not explained(metric, x, y):
                        unexplained.append(f"{run} {task} {metric}: {x} vs {y}")
                verdict = "yes" if same else ("no (lm-eval's bootstrap)" if explained(metric, x, y) else "NO")
                rows.append(f"| {run} | {task} | {metric} | {show(x)} | {show(y)} | {verdict} |")
    load = os.getloadavg()[0]
    times = ", ".join(f"{run}: {old_seconds[run]:.0f} s and {new_seconds[run]:.0f} s" for run in old_seconds)
    text = "\n".join(
        [
            "# The same runs on two lm-eval releases",
            "",
            (
                f"`python bench/lm_eval_versions.py` on {platform.machine()} with load {load:.1f}: lm-eval "
                f"{versions[0]} and lm-eval {versions[1]}, one environment each, this checkout's package and tasks "
                f"(wall time with start-up, {times})."
            ),
            "",
            (
                f"README command: `{readme_command()}`; latent_hmm, exact: `lm_eval --model latent_hmm --model_args "
                f"estimator=exact --tasks {','.join([*BUNDLED, *(t for _, t, _, _ in BUILTIN)])}` (the `_local` tasks "
                "are lm-eval's own YAMLs over the copies of their data in tests/data)."
            ),
            "",
            f"| run | task | metric | lm-eval {versions[0]} | lm-eval {versions[1]} | equal |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            (
                f"figures: {len(rows)}, equal: {len(rows) - differ}, differing: {differ} "
                f"(not lm-eval's bootstrap of its own aggregations: {len(unexplained)})"
            ),
            "",
        ]
    )
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(text)
    if unexplained:
        sys.exit("figures differ between the lm-eval versions:\n" + "\n".join(unexplained))


if __name__ == "__main__":
    main()
