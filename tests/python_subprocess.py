"""Run Python code or a command in a fresh process, as a user's shell would (lm_eval's command line, a tutorial's
blocks, an installed wheel, ``accelerate launch``), and fail with the end of its stderr when it does not exit 0."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def run_checked(
    cmd: list[str], *, env: dict, timeout: int, cwd: Path | None = None, tail: int = 3000
) -> subprocess.CompletedProcess:
    """``cmd`` run to its end with stdout and stderr captured as text; it must exit 0 (the assertion shows the last
    ``tail`` characters of its stderr)."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-tail:]
    return proc


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(num_processes: int = 2) -> list[str]:
    """``accelerate launch`` of ``num_processes`` CPU processes (``--multi_gpu`` starts N processes through
    torch.distributed.run; the backend opens a gloo group with ``--device cpu``), on a free port."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
    ]  # fmt: skip


def run_python(
    code: str, *args: str, cwd: Path, pythonpath: list[Path], env: dict | None = None, timeout: int = 600
) -> str:
    """stdout of ``python -c code args`` with PYTHONPATH = ``pythonpath`` and one thread, in ``env`` (default: this
    process's environment)."""
    env = {**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    env.setdefault("OMP_NUM_THREADS", "1")
    return run_checked([sys.executable, "-c", code, *args], env=env, timeout=timeout, cwd=cwd).stdout
