"""How many CPU threads torch uses for a run (model_args ``threads``, or a count the machine can give now), and in how
many processes the documents are estimated (model_args ``workers``, by default one per thread).

torch starts one intra-op thread per physical core. On a shared machine whose cores other processes keep busy, those
threads wait on each other and spin: the README's first command took 159 s with torch's default on a 2-core machine
running two other busy processes, and 41 s with the count chosen here (``python bench/threads.py``,
bench/threads/output.md). By default (``threads`` not given) a CPU run therefore takes torch's count, lowered to the
cores other processes leave free now (``busy_cores``; at least one); an environment that sets ``OMP_NUM_THREADS`` or
``MKL_NUM_THREADS`` has chosen already and is left alone, as is a CUDA run (its kernels do not use them). The count
is chosen when the backend is built (``plan_cores``, one line in the log) and set only while the backend estimates
(``torch_threads``), then restored: a user's script keeps its own torch settings.

Those threads gain little inside one document: the bundled models run thousands of small operations per token,
where torch finds nothing to share among threads (on the quiet machine 28 s with two threads in one process).
Documents, in contrast, are independent, and their estimates do not depend on who computes them
(``estimators.workers``). So on the CPU of a one-process run the documents are by default estimated in one forked
process per thread, each with one thread (18 s); ``workers=1`` keeps every thread in one process (a large network
whose matrix products do use threads), and under several processes (``accelerate launch``) each rank is one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..estimators.workers import usable_workers

logger = logging.getLogger(__name__)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


# what /proc/stat counts as busy: user, nice, system (idle and iowait are not), irq, softirq, steal
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
SAMPLE_SECONDS = 0.25


def _cpu_ticks(stat: str = "/proc/stat") -> tuple[int, int, int]:
    """(busy, total) clock ticks of every CPU since boot (the first line of /proc/stat), and the CPUs it counts."""
    with open(stat, encoding="ascii") as fh:
        lines = fh.read().splitlines()
    fields = [int(v) for v in lines[0].split()[1:9]]
    cpus = sum(line.startswith("cpu") and line[3:4].isdigit() for line in lines)
    return sum(fields[i] for i in _BUSY_FIELDS), sum(fields), cpus


def busy_cores(seconds: float = SAMPLE_SECONDS, stat: str = "/proc/stat") -> float:
    """How many cores other processes keep busy now.

    Where /proc/stat exists (Linux): the busy share of every CPU's clock ticks over ``seconds`` while this process
    sleeps, times the CPUs, so that neither this process's own start-up (lm-eval's task index is 6 s of one core)
    nor a run that ended a moment ago counts, as both did in the 1-minute load average; elsewhere that load average
    (0 where the platform has none either).

    Examples
    --------
    >>> 0.0 <= busy_cores(0.05) <= (os.cpu_count() or 1)
    True
    """
    try:
        busy0, total0, _ = _cpu_ticks(stat)
        time.sleep(seconds)
        busy1, total1, cpus = _cpu_ticks(stat)
        return cpus * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except OSError:
        # no load average on this platform either: assume a quiet machine
        return 0.0


def free_cores() -> int:
    """The cores this process may use (its CPU affinity) minus those other processes keep busy now
    (``busy_cores``), at least 1.

    Examples
    --------
    >>> free_cores() >= 1
    True
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - round(busy_cores()))


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
    why = f"torch's {torch.get_num_threads()}, fewer where other processes keep cores busy"
    return count, f"{count} CPU thread(s): {why} (model_args threads=N sets it)"


def choose_workers(
    requested: int | None, device: torch.device, world_size: int = 1, threads: int | None = None
) -> tuple[int, str]:
    """Processes that estimate documents side by side (``estimators.workers.DocumentWorkers``), and why, in words:
    model_args ``workers``, else one per torch thread (``threads``, default torch's count) on the CPU of a
    one-process run, else 1.

    Parameters
    ----------
    requested : int or None
        model_args ``workers``; None for the default.
    device : torch.device
        Where the model runs (processes are forked on the CPU only).
    world_size : int
        The run's processes (``accelerate launch``): each rank is one already.
    threads : int or None
        The run's torch threads (``choose_threads``); None: torch's count now.

    Returns
    -------
    (int, str)

    Examples
    --------
    >>> choose_workers(3, torch.device("cpu"))[0] == usable_workers(3, "cpu")
    True
    >>> choose_workers(None, torch.device("cpu"), world_size=2)
    (1, 'one process per rank')
    """
    if requested is not None:
        count = usable_workers(requested, device)
        return count, f"workers={requested} (model_args)" + (" can only be 1 here" * (count < requested))
    if world_size > 1:
        return 1, "one process per rank"
    count = usable_workers(threads or torch.get_num_threads(), device)
    return count, "one per thread (model_args workers=N sets it)" if count > 1 else "one process"


@dataclass(frozen=True)
class Cores:
    """What a backend's run uses of this machine's CPU: torch's intra-op ``threads`` while it estimates (None:
    torch's count, left as it is) and the ``workers`` that estimate documents side by side."""

    threads: int | None
    workers: int


def plan_cores(
    threads: int | None, workers: int | None, device: torch.device, owner: str, world_size: int = 1
) -> Cores:
    """torch's thread count for the run (``choose_threads``) and the processes that estimate documents
    (``choose_workers``), logged in one line; nothing is set here (``torch_threads`` sets the count while the backend
    estimates).

    Examples
    --------
    >>> plan_cores(3, 1, torch.device("cpu"), "doctest")
    Cores(threads=3, workers=1)
    """
    count, why = choose_threads(threads, device)
    processes, how = choose_workers(workers, device, world_size, count)
    each = max(1, (count or torch.get_num_threads()) // processes)
    logger.info(
        "%s: %s; documents estimated in %d process(es) of %d thread(s): %s", owner, why, processes, each, how
    )
    return Cores(count, processes)


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` inside the block and restored after it (None: unchanged).

    Examples
    --------
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
