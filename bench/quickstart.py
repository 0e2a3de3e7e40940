"""The README's first command, run as written after the install (``lm_eval --model latent_kglm ...``): the table it
prints, any warning it logs, its wall time, and the estimate card ``lm-latent-eval report`` writes from its output,
written to bench/quickstart/output.md for the README and docs to quote.

    python bench/quickstart.py
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = Path(__file__).resolve().parent / "quickstart"


def readme_command() -> str:
    """The lm_eval part of the README's first command (after the installs)."""
    first_block = (REPO / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    line = first_block.splitlines()[0]
    return line[line.index("lm_eval ") :]


def run_readme_command(cwd: str, checkout: Path = REPO) -> tuple[subprocess.CompletedProcess, float, Path]:
    """The README's ``lm_eval`` command run in ``cwd`` with the package and tasks of ``checkout``: the finished
    process, its wall seconds and its output folder (exits with lm-eval's error where it fails)."""
    argv = shlex.split(readme_command().replace('"$(lm-latent-eval tasks-path)"', str(checkout / "tasks")))
    argv[argv.index("lm_eval") : argv.index("lm_eval") + 1] = ["-m", "lm_eval"]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"the README's command failed from {checkout}:\n{proc.stderr[-3000:]}")
    return proc, seconds, Path(cwd) / argv[argv.index("--output_path") + 1]


def main() -> None:
    command = readme_command()
    with tempfile.TemporaryDirectory() as tmp:
        proc, seconds, out = run_readme_command(tmp)
        report = subprocess.run(
            [sys.executable, "-m", "lm_latent_eval.cli", "report", str(out)],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        if report.returncode != 0:
            sys.exit(f"lm-latent-eval report failed:\n{report.stderr[-3000:]}")
        (card,) = (out / "cards").glob("*.md")
        card_text = card.read_text(encoding="utf-8").strip()
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    warnings = [
        line
        for line in proc.stderr.splitlines()
        if re.search(r"WARNING|Warning", line) and "Custom kwargs" not in line
    ]
    load = os.getloadavg()[0]
    text = "\n".join(
        [
            f"`{command}` ({seconds:.0f} s wall time on {platform.machine()} with load {load:.1f}, including start-up)",
            "",
            *table,
            "",
            f"warnings: {len(warnings)}",
            *warnings,
            "",
            f"`lm-latent-eval report {out.name}` writes this card:",
            "",
            card_text,
        ]
    )
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "output.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
