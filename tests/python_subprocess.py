"""Run Python code in a fresh interpreter, as a user's shell would (lm_eval's command line, a tutorial's blocks, an
installed wheel), and fail with the end of its stderr when it does not exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_python(
    code: str, *args: str, cwd: Path, pythonpath: list[Path], env: dict | None = None, timeout: int = 600
) -> str:
    """stdout of ``python -c code args`` with PYTHONPATH = ``pythonpath`` and one thread, in ``env`` (default: this
    process's environment)."""
    env = {**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
