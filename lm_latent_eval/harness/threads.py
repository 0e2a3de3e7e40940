"""How many CPU threads torch uses for a run: model_args ``threads``, or a count the machine can give now.

torch starts one intra-op thread per physical core. On a shared machine whose cores other processes keep busy, those
threads wait on each other and spin: the README's first command took 165 s with torch's default on a 2-core machine
running two other busy processes, and 68 s with the count chosen here (37 s and 36 s on the quieter machine;
``python bench/threads.py``, bench/threads/output.md). By default (``threads`` not given) a CPU run therefore takes torch's count, lowered to
the cores the 1-minute load average leaves free (at least one); an environment that sets ``OMP_NUM_THREADS`` or
``MKL_NUM_THREADS`` has chosen already and is left alone, as is a CUDA run (its kernels do not use them).
"""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def free_cores() -> int:
    """The cores this process may use (its CPU affinity) minus the 1-minute load average, at least 1.

    Examples
    --------
    >>> free_cores() >= 1
    True
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        # no load average on this platform: assume a quiet machine
        load = 0.0
    return max(1, cores - round(load))


def choose_threads(requested: int | None, device: torch.device) -> tuple[int | None, str]:
    """The thread count to set (None: leave torch as it is) and why, in words.

    Parameters
    ----------
    requested : int or None
        model_args ``threads``; None for the default.
    device : torch.device
        Where the model runs.

    Returns
    -------
    (int or None, str)

    Examples
    --------
    >>> choose_threads(3, torch.device("cpu"))
    (3, 'threads=3 (model_args)')
    >>> choose_threads(None, torch.device("cuda"))[0] is None
    True
    """
    if requested is not None:
        return requested, f"threads={requested} (model_args)"
    if device.type != "cpu":
        return None, f"torch's {torch.get_num_threads()} CPU threads (the model runs on {device.type})"
    chosen = next((v for v in THREAD_VARIABLES if os.environ.get(v)), None)
    if chosen is not None:
        return None, f"torch's {torch.get_num_threads()} CPU threads ({chosen}={os.environ[chosen]})"
    count = min(torch.get_num_threads(), free_cores())
    return (
        count,
        f"{count} CPU thread(s): torch's {torch.get_num_threads()}, fewer where the load average "
        + ("keeps cores busy (model_args threads=N sets it)"),
    )


def use_threads(requested: int | None, device: torch.device, owner: str) -> None:
    """Set torch's intra-op thread count for the run (``choose_threads``) and log it once."""
    count, why = choose_threads(requested, device)
    if count is not None:
        torch.set_num_threads(count)
    logger.info("%s: %s", owner, why)
