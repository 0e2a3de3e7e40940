"""Where the README's first command spends its time, before and after a change, side by side in one run.

    python bench/readme_profile.py --before 8ec3122   # writes bench/readme_profile/output.md

Runs the README's ``lm_eval`` command (as ``bench/quickstart.py`` reads it) from this checkout ("after") and, with
``--before REV``, from a git worktree of REV ("before"), alternating ``--repeats`` times so that the machine's load
hits both alike. For each run: the wall time; the start-up (everything before the first estimate: Python, torch and
lm-eval imports, lm-eval's task index, the model) and what is left after the last stage (scoring, tables, files);
the seconds of each stage of the precision target and how many documents it grew; the samples per document of the
reported stage (mean and largest) and its particle·tokens; the printed ``perplexity`` and its bound. It also times
lm-eval's task index alone in a fresh process, with its built-in tasks (what ``lm_eval`` always builds) and with only
``--include_path`` (``TaskManager(include_defaults=False)``, which lm-eval's command line cannot ask for).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart import REPO, readme_command, run_readme_command

OUTPUT = Path(__file__).resolve().parent / "readme_profile"
# a finished tqdm bar: "<desc>: 100%|...| 20/20 [00:07<00:00, ...]"
BAR = re.compile(r"^(?P<desc>[^\r\n]*?): 100%\|[^|]*\| *(?P<n>\d+)/(?P=n) \[(?P<elapsed>[\d:]+)<")


def _seconds(clock: str) -> int:
    seconds = 0
    for part in clock.split(":"):
        seconds = 60 * seconds + int(part)
    return seconds


def stages(stderr: str) -> list[tuple[str, int]]:
    """(description, seconds) of every estimation bar, in order, each once (tqdm redraws a finished bar)."""
    found: dict[str, int] = {}
    for chunk in re.split(r"[\r\n]", stderr):
        match = BAR.match(chunk.strip())
        if match and ("log p(x)" in match["desc"] or "precision target" in match["desc"]):
            found[match["desc"]] = _seconds(match["elapsed"])
    return list(found.items())


def run_once(checkout: Path) -> dict:
    """The README command from ``checkout``: wall time, stages, samples per document, printed figures."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, wall, _ = run_readme_command(tmp, checkout)
        (samples_file,) = Path(tmp).glob("**/samples_*.jsonl")
        samples = [
            json.loads(line)["perplexity"] for line in samples_file.read_text(encoding="utf-8").splitlines()
        ]
    sizes = [s["diagnostics"]["num_samples"] for s in samples]
    figures = {
        name: re.search(rf"\|{name} *\|.\s*\|(?P<v>[\d.]+) *\|.\s*\|\s*(?P<se>[\d.N/A]+)\|", proc.stdout)
        for name in ("perplexity", "perplexity_upper_bound")
    }
    estimation = stages(proc.stderr)
    return {
        "wall": wall,
        "stages": estimation,
        "estimation": sum(s for _, s in estimation),
        "samples_mean": float(np.mean(sizes)),
        "samples_max": max(sizes),
        "particle_tokens": sum(k * s["num_tokens"] for k, s in zip(sizes, samples)),
        "perplexity": f"{figures['perplexity']['v']} ± {figures['perplexity']['se']}",
        "bound": figures["perplexity_upper_bound"]["v"],
        "load": os.getloadavg()[0],
    }


def task_index_seconds(include_path: Path) -> dict:
    """lm-eval's task index in a fresh process: with its built-in tasks, and with only ``include_path``."""
    code = (
        "import sys, time\nfrom lm_eval.tasks import TaskManager\n"
        "for defaults in (True, False):\n"
        "    start = time.perf_counter(); TaskManager(include_path=sys.argv[1], include_defaults=defaults)\n"
        "    print(time.perf_counter() - start)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(include_path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return {"with_builtin_tasks": float(out[0]), "include_path_only": float(out[1])}


def _row(label: str, r: dict) -> str:
    stage_cells = ", ".join(f"{s}" for _, s in r["stages"])
    startup = r["wall"] - r["estimation"]
    return (
        f"| {label} | {r['wall']:.0f} | {startup:.0f} | {r['estimation']} | {len(r['stages'])} ({stage_cells}) | "
        f"{r['samples_mean']:,.0f} / {r['samples_max']:,} | {r['particle_tokens'] / 1e6:.2f} M | {r['perplexity']} | "
        f"{r['bound']} | {r['load']:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="a git revision to run beside this checkout")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    checkouts = {"after (this checkout)": REPO}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            worktree = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.before],
                           check=True, capture_output=True)  # fmt: skip
            checkouts = {f"before ({args.before})": worktree, **checkouts}
        try:
            runs = [(label, run_once(path)) for _ in range(args.repeats) for label, path in checkouts.items()]
        finally:
            if args.before:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False
                )
    index = task_index_seconds(REPO / "tasks")
    lines = [
        (
            f"`{readme_command()}` on {platform.machine()} ({os.cpu_count()} cores), "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; runs alternate, load average at each run's end."
        ),
        "",
        (
            "| code | wall s | start-up and finish s | estimation s | stages (s each) | samples / document (mean / max) "
            "| particle·tokens (reported stage) | perplexity | upper bound | load |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(label, r) for label, r in runs),
        "",
        (
            f"lm-eval's task index alone, in a fresh process: {index['with_builtin_tasks']:.1f} s with its built-in "
            f"tasks (what `lm_eval` builds before it loads any model), {index['include_path_only']:.2f} s with only "
            "the include path."
        ),
    ]
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "output.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
