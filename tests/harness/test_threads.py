"""model_args threads and workers, and their defaults (harness/threads.py)."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
import torch

from lm_latent_eval.estimators.workers import usable_workers
from lm_latent_eval.harness import threads
from lm_latent_eval.harness.model_args import ModelArgsError, parse_backend_args


@pytest.fixture
def keep_torch_threads(monkeypatch):
    """Restore torch's thread count; no thread variable in the environment unless a test sets one."""
    before = torch.get_num_threads()
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("cores", "load", "expected"), [(2, 0.1, 2), (2, 2.2, 1), (8, 3.4, 5), (4, 9.0, 1)])
def test_the_default_leaves_busy_cores_alone(cores, load, expected, monkeypatch, keep_torch_threads):
    """Issue 33, item 6: torch's one thread per core spins when other processes keep cores busy (158 s against 56 s
    with one thread for the README's command on a loaded 2-core machine). The default lowers torch's count to the
    cores other processes leave free (``busy_cores``)."""
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda: load)
    torch.set_num_threads(cores)
    plan = threads.plan_cores(None, None, torch.device("cpu"), "test")
    assert plan == threads.Cores(expected, usable_workers(expected, "cpu"))
    assert torch.get_num_threads() == cores  # chosen, not set: set only while the backend estimates
    with threads.torch_threads(plan.threads):
        assert torch.get_num_threads() == expected
    assert torch.get_num_threads() == cores


def test_busy_cores_is_the_busy_share_of_the_cpus_ticks_while_this_process_sleeps(tmp_path, monkeypatch):
    """/proc/stat's ticks before and after the sample (user, nice, system, irq, softirq, steal are busy; idle and
    iowait are not): 150 busy of 200 ticks on 2 CPUs is 1.5 cores."""
    stat = tmp_path / "stat"
    cpus = "cpu0 1 2 3 4\ncpu1 1 2 3 4\nintr 5\n"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\n" + cpus)
    monkeypatch.setattr(
        threads.time, "sleep", lambda s: stat.write_text("cpu  200 10 120 850 0 10 10 0 0 0\n" + cpus)
    )
    assert threads.busy_cores(stat=str(stat)) == pytest.approx(1.5)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat on this platform")
def test_busy_cores_sees_a_spinning_process_and_not_this_ones_past():
    """A process spinning on a core counts (about 1 core); this process's own work before the sample does not."""
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # this process, busy until the sample starts
        pass
    spinner = multiprocessing.get_context("fork").Process(target=_spin, daemon=True)
    spinner.start()
    try:
        time.sleep(0.2)
        assert threads.busy_cores(0.5) >= 0.7
    finally:
        spinner.terminate()
        spinner.join()


def _spin() -> None:
    while True:
        pass


def test_explicit_threads_and_a_chosen_environment_win(monkeypatch, keep_torch_threads):
    monkeypatch.setattr(threads, "busy_cores", lambda: 50.0)
    assert threads.plan_cores(3, 1, torch.device("cpu"), "test") == threads.Cores(3, 1)
    torch.set_num_threads(3)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads.choose_threads(None, torch.device("cpu")) == (
        None,
        "torch's 3 CPU threads (OMP_NUM_THREADS=2)",
    )
    assert parse_backend_args("LatentHMMEval", "hmm", {"threads": "2"}).threads == 2
    with pytest.raises(ModelArgsError, match="threads must be a positive integer"):
        parse_backend_args("LatentHMMEval", "hmm", {"threads": 0})


def test_workers_default_to_one_per_thread_on_one_cpu_process(keep_torch_threads):
    """The documents are estimated in one process per thread (each with one thread) on the CPU of a one-process
    run; model_args workers wins; an accelerator or several ranks keep one process."""
    cpu = torch.device("cpu")
    torch.set_num_threads(2)
    assert threads.choose_workers(None, cpu)[0] == usable_workers(2, cpu)
    assert threads.choose_workers(1, cpu) == (1, "workers=1 (model_args)")
    assert threads.choose_workers(None, cpu, world_size=2) == (1, "one process per rank")
    assert threads.choose_workers(None, torch.device("cuda"))[0] == 1
    assert threads.choose_workers(3, torch.device("cuda")) == (1, "workers=3 (model_args) can only be 1 here")
    assert parse_backend_args("LatentHMMEval", "hmm", {"workers": "2"}).workers == 2
    with pytest.raises(ModelArgsError, match="workers must be a positive integer"):
        parse_backend_args("LatentHMMEval", "hmm", {"workers": -1})


def test_the_thread_count_reaches_lm_evals_log(monkeypatch, keep_torch_threads):
    """The backend chose its threads before it attached our logger to lm-eval's handler, so the line never showed
    under `lm_eval` (bench/threads.py's "what the backend logged" column read "?")."""
    import logging

    from lm_latent_eval.harness.backends import LatentHMMEval

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    ours, theirs = logging.getLogger("lm_latent_eval"), logging.getLogger("lm_eval")
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    monkeypatch.setattr(theirs, "handlers", [handler])
    monkeypatch.setattr(theirs, "level", logging.INFO)
    LatentHMMEval(device="cpu")
    assert any("CPU thread" in r.getMessage() and r.name.endswith("threads") for r in records), [
        r.getMessage() for r in records
    ]
