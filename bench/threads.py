"""The README's first command on a quiet and on a loaded machine, with torch's default threads, with the threads the
backend chooses in one process, and with the backend's whole default (``harness/threads.py``: the chosen threads,
and the documents shared out to one process per thread): wall time and the printed perplexity of each, side by side.

    python bench/threads.py            # writes bench/threads/output.md (about 7 minutes on 2 cores)

"Loaded" is the machine with ``--busy`` (default 2) other processes spinning on the CPU, started ``--warm`` seconds
(default 60) before the command, as on a shared node whose other jobs have been running. "torch's default" passes ``threads=<torch's count>,workers=1`` in model_args (one thread per core
in one process: what the backend did before it chose); "chosen, one process" passes ``workers=1``; "default" passes
nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart import REPO, readme_command

OUTPUT = Path(__file__).resolve().parent / "threads"


def spin() -> None:
    while True:
        pass


def run_readme(model_args: str) -> tuple[float, str, str]:
    """(seconds, the perplexity line, the thread line the backend logged) of the README's command, with
    ``model_args`` (none where empty)."""
    command = readme_command().replace('"$(lm-latent-eval tasks-path)"', str(REPO / "tasks"))
    argv = shlex.split(command)
    argv[argv.index("lm_eval") : argv.index("lm_eval") + 1] = ["-m", "lm_eval"]
    if model_args:
        argv += ["--model_args", model_args]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, *argv], cwd=tmp, capture_output=True, text=True, check=False,
            env={**env, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the README's command failed:\n{proc.stderr[-3000:]}")
    row = re.search(r"\|\s*perplexity\s*\|[^\n]*", proc.stdout)
    logged = re.search(r"LatentKGLMEval: ([^\n]*thread[^\n]*)", proc.stderr)
    return seconds, " ".join(row.group(0).split()) if row else "?", logged.group(1) if logged else "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=2)
    parser.add_argument("--warm", type=float, default=60.0)
    args = parser.parse_args(argv)
    default = torch.get_num_threads()
    settings = (
        ("torch's default", f"threads={default},workers=1"),
        ("chosen, one process", "workers=1"),
        ("default", ""),
    )
    rows = []
    for label, model_args in settings:
        rows.append(("quiet", label, *run_readme(model_args), os.getloadavg()[0]))
    procs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in procs:
        p.start()
    time.sleep(args.warm)
    try:
        for label, model_args in settings:
            load = os.getloadavg()[0]
            rows.append((f"{args.busy} busy processes", label, *run_readme(model_args), load))
    finally:
        for p in procs:
            p.terminate()
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    )
    lines = [
        f"# The README's first command, quiet and loaded ({machine}, torch's default {default} threads)",
        "",
        "`python bench/threads.py`",
        "",
        "| machine | threads and processes | wall s | load average at start | what the backend logged | perplexity row |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {m} | {label} | {s:.0f} | {load:.1f} | {log} | `{row}` |" for m, label, s, row, log, load in rows
    ]
    for machine in ("quiet", f"{args.busy} busy processes"):
        before, one_process, after = (r[2] for r in rows if r[0] == machine)
        lines.append(
            f"\n{machine}: torch's default / default = {before / after:.2f}x; "
            f"chosen threads in one process / default = {one_process / after:.2f}x"
        )
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "output.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
