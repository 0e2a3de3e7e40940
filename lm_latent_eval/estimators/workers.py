"""Documents estimated side by side: a stage's documents shared out to forked CPU processes.

Every document's estimate is a function of (model, text, settings, stage) alone: its random streams are seeded from
(seed, text, stage) (``seeding``), never from the order documents are estimated in or the process that draws them.
So estimating a stage's documents in W processes gives the same numbers, bit for bit, as estimating them one after
another with the same torch threads per process; only the wall time changes. (The thread count itself can move the
last float32 digits of a network whose matrix products torch splits over threads, W processes or one: the bundled
transformer's log weights moved by 9e-6 nats between one thread and two; the KGLM's, the HMM's and LDA's not at
all.)

The bundled models step thousands of small tensors per token, where torch's intra-op threads find nothing to share:
the README's first command took 28 s with two threads in one process and 18 s with one thread in each of two
processes (bench/threads/output.md). Documents, in contrast, are independent work of seconds each. The processes are
forked from this one (Linux and other POSIX systems with ``fork``), so they share the loaded model's memory until one
writes it, and none is started for a model that runs on an accelerator (W = 1 there).

Each process takes its share of this one's torch threads (at least one). A stage's documents go out largest first
(samples × characters, a proxy for samples × tokens), each to the next free process, so one long document does not
start last and leave the other processes idle while it runs.

Within a process, documents are also estimated side by side: a chunk of documents of similar length (up to
``side_by_side_particles`` particles, more for short documents on an accelerator) goes to
``Estimator.estimate_documents`` at once, which for SMC on a model with ``protocol.DocumentBatchLM`` advances all their
particles in one step per token (one kernel launch and one host synchronisation shared by the chunk instead of paid
per document). Again only the wall time changes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Self

import torch
from tqdm.auto import tqdm

from .record import DocumentEstimate
from .run import ResolvedEstimator
from .seeding import side_by_side_particles

logger = logging.getLogger(__name__)
# what a forked process estimates with: set in the parent before the pool forks, read (inherited) by the children
_INHERITED: dict[str, object] = {}


def fork_available() -> bool:
    """Whether this platform can fork processes (``multiprocessing``'s ``fork`` start method).

    Examples
    --------
    >>> isinstance(fork_available(), bool)
    True
    """
    return "fork" in multiprocessing.get_all_start_methods()


def usable_workers(requested: int, device) -> int:
    """How many processes estimate documents side by side: ``requested``, or 1 where the model runs on an
    accelerator (a forked process cannot share its context), the platform cannot fork, or this process is a
    daemon (a ``multiprocessing.Pool`` worker, which may not start processes).

    Examples
    --------
    >>> usable_workers(2, "cpu") == (2 if fork_available() else 1)
    True
    >>> usable_workers(4, "cuda")
    1
    """
    # a daemonic process (a multiprocessing.Pool's worker) may not start processes of its own
    if torch.device(device).type != "cpu" or not fork_available() or multiprocessing.current_process().daemon:
        return 1
    return max(1, int(requested))


def worker_threads(workers: int) -> int:
    """Each of ``workers`` processes' share of this process's torch threads, at least one.

    Examples
    --------
    >>> worker_threads(1) == torch.get_num_threads()
    True
    """
    return max(1, torch.get_num_threads() // workers)


def _start_worker(threads: int) -> None:
    """A worker's start: its share of this process's torch threads (W workers share the cores they would use), and
    Ctrl-C left to this process (which stops the workers: ``DocumentWorkers.__exit__``)."""
    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def estimate_together(
    run: ResolvedEstimator, jobs: Sequence[tuple[str, int]], device, stage: int
) -> list[tuple[str, DocumentEstimate]]:
    """(text, estimate) of every job (text, K), in the jobs' order, by one ``run.estimate_documents`` call: side by
    side where the estimator can; each estimate is the one ``run.sized(K).estimate`` gives alone.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> hmm, _ = load_model("hmm")
    >>> run = resolve(EstimatorSettings("smc", 40, seed=1), hmm)
    >>> out = dict(estimate_together(run, [("the cat sat", 40), ("", 40), ("a dog", 60)], "cpu", 0))
    >>> bool((out["a dog"].log_weights == run.sized(60).estimate("a dog").log_weights).all()), out[""].num_tokens
    (True, 0)
    """
    texts = [text for text, _ in jobs]
    estimates = run.estimate_documents(texts, [k for _, k in jobs], device=device, stage=stage)
    return list(zip(texts, estimates))


def chunks(
    run: ResolvedEstimator,
    jobs: Sequence[tuple[str, int]],
    particles: Callable[[int], int],
    longest_first: bool = True,
) -> list[list]:
    """The jobs cut into chunks of at most ``particles(n)`` samples, n the characters of the chunk's longest job (a
    job larger than that alone), where the estimator advances documents side by side
    (``Estimator.batches_documents``), else one job per chunk.

    Side by side, a chunk steps as many times as its longest document: the documents go longest first (characters,
    a proxy for tokens) each into the first chunk with room for its samples (first-fit decreasing), so documents of
    similar length share a chunk and the chunks are few; the precision target's later stages, whose documents have
    other sample sizes, then take as few passes over their tokens as their samples allow. Otherwise one job per chunk.
    With ``longest_first`` the chunks go largest first (samples × characters: no long one left for last among
    processes), else in the order found (one job per chunk: the jobs' order).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(estimator=SimpleNamespace(batches_documents=lambda model: True), model=None)
    >>> [[t for t, _ in c] for c in chunks(run, [("a", 10), ("bbb", 10), ("cc", 30)], lambda n: 25)]
    [['cc'], ['bbb', 'a']]
    >>> [[t for t, _ in c] for c in chunks(run, [("aaaa", 30), ("bb", 30), ("c", 30)], lambda n: 120 // n)]
    [['aaaa'], ['bb', 'c']]
    """
    side_by_side = bool(jobs) and run.estimator.batches_documents(run.model)

    def work(job):
        return job[1] * max(len(job[0]), 1)

    if not side_by_side:
        return [[job] for job in (sorted(jobs, key=lambda job: -work(job)) if longest_first else jobs)]
    found: list[list] = []
    room: list[int] = []
    for job in sorted(jobs, key=lambda job: (-len(job[0]), -job[1])):
        i = next((i for i, left in enumerate(room) if job[1] <= left), None)
        if i is None:
            found.append([])
            room.append(particles(max(len(job[0]), 1)))
            i = len(found) - 1
        found[i].append(job)
        room[i] -= job[1]
    return sorted(found, key=lambda chunk: -sum(map(work, chunk))) if longest_first else found


def _estimate_inherited(
    run: ResolvedEstimator, jobs: list[tuple[str, int]], stage: int
) -> list[tuple[str, DocumentEstimate]]:
    """A forked worker's estimates: the estimator (sent without its model) on the model and device it inherited."""
    bound = dataclasses.replace(run, model=_INHERITED["model"])
    return estimate_together(bound, jobs, _INHERITED["device"], stage)


class DocumentWorkers:
    """Estimates documents in ``workers`` forked processes (or in this one, for ``workers`` = 1); a context manager
    that starts the processes on entry and stops them on exit.

    Parameters
    ----------
    model : LatentLM
        The model (shared with the processes by fork, never pickled).
    device : torch.device or str
        Where the model runs; anything but the CPU estimates in this process.
    workers : int
        Processes (``usable_workers`` decides how many can be used).
    documents : int, optional
        The documents to estimate: no more processes than these are started (an info line says so).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> from lm_latent_eval.estimators import EstimatorSettings, resolve
    >>> run = resolve(EstimatorSettings("is", 50, seed=1), hmm)
    >>> jobs = [("the cat sat", 50), ("a dog ran", 80)]
    >>> with DocumentWorkers(hmm, "cpu", 2) as pool:
    ...     side_by_side = dict(pool.estimate(run, jobs, stage=0, desc="", progress=False))
    >>> with DocumentWorkers(hmm, "cpu", 1) as pool:
    ...     in_turn = dict(pool.estimate(run, jobs, stage=0, desc="", progress=False))
    >>> all((side_by_side[t].log_weights == in_turn[t].log_weights).all() for t, _ in jobs)
    True
    """

    def __init__(self, model, device="cpu", workers: int = 1, documents: int | None = None) -> None:
        self.model, self.device = model, device
        self.workers = usable_workers(workers, device)
        if documents is not None and 0 < documents < self.workers:
            message = "%d documents: %d process(es), not the %d workers planned (one per document at most)"
            logger.info(message, documents, documents, self.workers)
            self.workers = documents
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Self:
        if self.workers > 1:
            _INHERITED.update(model=self.model, device=self.device)
            self._others = set(multiprocessing.active_children())
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(worker_threads(self.workers),),
            )
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        """Stop the processes: after their last document, or at once when an error (or Ctrl-C) ends the stage."""
        if self._pool is None:
            return
        if error_type is not None:
            # the pool then finds its processes gone and stops without waiting for their documents
            for process in set(multiprocessing.active_children()) - self._others:
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None
        _INHERITED.clear()

    def estimate(
        self, run: ResolvedEstimator, jobs: Sequence[tuple[str, int]], stage: int, desc: str, progress: bool
    ) -> Iterator[tuple[str, DocumentEstimate]]:
        """(text, estimate) of every job (text, K) at ``stage`` by ``run`` at each job's K, in the order they finish.

        Parameters
        ----------
        run : ResolvedEstimator
            The estimator, resolved once for this pool's model.
        jobs : sequence of (str, int)
            The documents and each one's number of samples (``ResolvedEstimator.sized``).
        stage : int
            The precision target's stage (seeds fresh random streams for stage > 0).
        desc : str
            The progress bar's label.
        progress : bool
            Show a progress bar.

        Returns
        -------
        iterator of (str, DocumentEstimate)
        """
        if run.model is not self.model:
            raise ValueError("the estimator must be resolved for this pool's model (ResolvedEstimator.on)")
        bar = tqdm(total=len(jobs), desc=desc, disable=not progress)
        try:
            for text, estimate in self._estimates(run, jobs, stage):
                yield text, estimate
                bar.update(1)
        finally:
            bar.close()

    def _estimates(self, run, jobs, stage: int) -> Iterator[tuple[str, DocumentEstimate]]:
        """``estimate``'s work: chunks of the jobs estimated in this process, in the jobs' order, or handed to the
        forked processes, each of which gets several chunks (none waits while another runs the last long one)."""
        if self._pool is None:
            budget = functools.partial(side_by_side_particles, self.device)
            for chunk in chunks(run, jobs, budget, longest_first=False):
                yield from estimate_together(run, chunk, self.device, stage)
            return
        total = sum(k for _, k in jobs)
        per_chunk = min(side_by_side_particles(self.device), max(1, total // (2 * self.workers)))
        # the estimator travels without its model: every process has the model already (forked)
        travelling = dataclasses.replace(run, model=None)
        pending = {
            self._pool.submit(_estimate_inherited, travelling, chunk, stage)
            for chunk in chunks(run, jobs, lambda length: per_chunk)
        }
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield from future.result()
