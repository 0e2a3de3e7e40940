"""The memory budget: how many rows of a computation one call may hold, planned from the shapes of its temporaries.

A model's scorers (KGLM's and EntityNLM's ``log_joint``, KGLM's parent head) hold temporaries whose size grows with
the number of particles K, the document's length T and the model's widths (KGLM's [P, C, De] window embeddings of
P related pairs, EntityNLM's [T, K, M] slot tables, ...). Each such computation states the bytes one of its rows
needs (a particle, a (particle, position) pair, a position: the sum of its temporaries' row sizes, read from their
shapes and dtypes) and runs ``rows_per_chunk(bytes_per_row, budget)`` rows at a time, so that everything it holds at
once stays within the model's ``memory_budget`` (bytes; ``DEFAULT_MEMORY_BUDGET`` unless set). Chunking never
changes a number beyond float32 rounding (each model's tests compare chunked with unchunked).

``MemoryPlan`` is a model's answer to "what does one call hold at K particles of a T-token document": the particles
per ``log_joint`` call and the planned temporaries (name, shape, bytes), largest first (``KGLM.memory_plan``,
``EntityNLM.memory_plan``; ``bench/memory_plan.py`` prints them at full size). ``TemporaryRecorder`` measures what a
call really allocates (every ATen operation's outputs, and the bytes alive at once), so the tests check the plans
against the code they describe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GIB = 2**30
# a model's memory_budget unless set: what bench/paper_workload.py's --memory-budget defaults to on a GPU
DEFAULT_MEMORY_BUDGET = 8 * GIB


def check_memory_budget(budget) -> int:
    """A memory budget in bytes (an int ≥ 1 MiB), or a ValueError naming the bad value."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget):
        raise ValueError(f"memory_budget must be a number of bytes, got {budget!r}")
    if budget < 2**20:
        raise ValueError(f"memory_budget must be at least 1 MiB (1048576 bytes), got {budget!r}")
    return int(budget)


def rows_per_chunk(bytes_per_row: int, budget: int) -> int:
    """How many rows of ``bytes_per_row`` bytes fit in ``budget`` bytes (at least one).

    Examples
    --------
    >>> rows_per_chunk(30 * 256 * 4, 2**30), rows_per_chunk(10, 5)
    (34952, 1)
    """
    return max(1, int(budget) // max(1, int(bytes_per_row)))


@dataclass(frozen=True)
class Temporary:
    """One planned temporary: what it is, its shape and its element size (bytes)."""

    name: str
    shape: tuple[int, ...]
    itemsize: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass
class MemoryPlan:
    """What one call holds at ``num_particles`` particles of a ``num_tokens``-token document under ``budget`` bytes.

    ``particles_per_call`` particles go through ``log_joint`` at once; ``temporaries`` are the planned temporaries of
    one chunk (of ``log_joint``, and of one step of the sampler), ``held`` the bytes the chunked computations hold
    at once (the largest of their planned sums)."""

    model: str
    num_tokens: int
    num_particles: int
    budget: int
    particles_per_call: int
    temporaries: list[Temporary] = field(default_factory=list)
    held: int = 0

    @property
    def largest(self) -> Temporary:
        return max(self.temporaries, key=lambda t: t.nbytes)

    def fits(self) -> bool:
        """Every planned temporary, and what the chunked computations hold at once, within the budget."""
        return self.held <= self.budget and all(t.nbytes <= self.budget for t in self.temporaries)


def _storage_key(tensor: torch.Tensor):
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


class TemporaryRecorder(TorchDispatchMode):
    """Records every storage an ATen operation returns inside the ``with`` block (views of a storage seen before do not
    count again): the largest (``largest``, bytes, and ``largest_op``) and the most bytes alive at once among them
    (``peak``, with the largest of them in ``at_peak``; a storage counts until it is freed).

    Examples
    --------
    >>> with TemporaryRecorder() as rec:
    ...     a = torch.zeros(1000)
    ...     b = (a + 1).sum()
    >>> rec.largest, rec.largest_op
    (4000, 'aten.zeros.default')
    """

    def __init__(self):
        super().__init__()
        self.largest, self.largest_op, self.peak, self.live = 0, None, 0, 0
        self._alive: dict = {}
        # the largest storages alive at the peak: (bytes, operation), largest first
        self.at_peak: list[tuple[int, str]] = []

    def _track(self, out, op, inputs: set) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef

        if not isinstance(out, torch.Tensor):
            return
        key = _storage_key(out)
        # a view or an in-place result of an input holds no new memory
        if key is None or key in self._alive or key in inputs:
            return
        storage = out.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes > self.largest:
            self.largest, self.largest_op = nbytes, str(op)
        self._alive[key] = (StorageWeakRef(storage), nbytes, str(op))
        self.live += nbytes

    def _collect(self) -> None:
        for key, (ref, nbytes, _) in list(self._alive.items()):
            if ref.expired():
                del self._alive[key]
                self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._collect()
        flat, _ = tree_flatten((args, kwargs or {}))
        inputs = {_storage_key(a) for a in flat if isinstance(a, torch.Tensor)}
        for item in out if isinstance(out, (tuple, list)) else (out,):
            self._track(item, func, inputs)
        if self.live > self.peak:
            self.peak = self.live
            self.at_peak = sorted(((n, op) for _, n, op in self._alive.values()), reverse=True)[:8]
        return out
