"""Multi-process runs (``accelerate launch -m lm_eval ...`` or torchrun): the process state, its teardown and the
collectives lm-eval and the precision target call.

lm-eval shards documents by rank and gathers the tasks' items on rank 0; every seed depends on a document's text
only, so a run's numbers do not depend on the number of processes.
"""

from __future__ import annotations

import atexit
import os

import torch
from accelerate import PartialState
from accelerate.utils import gather
from lm_eval.api.model import LM


def distributed_state(device: torch.device) -> PartialState | None:
    """accelerate's process state under ``accelerate launch`` / torchrun (WORLD_SIZE > 1), else None.

    The process group is destroyed when the process exits: neither lm-eval nor accelerate does it, and a gloo group
    left to the interpreter's teardown aborts now and then ("terminate called without an active exception",
    SIGABRT) in a rank that finishes before the others, which fails the whole launch.

    Examples
    --------
    >>> distributed_state(torch.device("cpu")) is None  # one process
    True
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    # a gloo process group on the CPU, one GPU per process otherwise
    state = PartialState(cpu=device.type == "cpu")
    atexit.register(state.destroy_process_group)
    return state


class Processes:
    """The processes of one run: this one's rank, their number, this rank's device and the collectives over them.

    Parameters
    ----------
    device : torch.device
        The device asked for; under a multi-process launch on CUDA each rank gets its own GPU.

    Examples
    --------
    >>> one = Processes(torch.device("cpu"))
    >>> one.rank, one.world_size, one.all_reduce([1.5, 2.0]), one.gather_object("x")
    (0, 1, [1.5, 2.0], ['x'])
    """

    def __init__(self, device: torch.device) -> None:
        self.state = distributed_state(device)
        self.device = self.state.device if self.state is not None and device.type == "cuda" else device

    @property
    def rank(self) -> int:
        return 0 if self.state is None else self.state.process_index

    @property
    def world_size(self) -> int:
        return 1 if self.state is None else self.state.num_processes

    def all_reduce(self, values: list[float]) -> list[float]:
        """Sums of ``values`` over the processes (the precision target's corpus totals)."""
        if self.world_size <= 1:
            return values
        summed = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(summed)
        return summed.tolist()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensors of every process, concatenated (lm-eval's ``LM.all_gather``)."""
        return gather(tensor) if self.world_size > 1 else tensor

    def gather_object(self, obj, dst: int = 0) -> list | None:
        """Every process's ``obj`` on rank ``dst`` (None on the others; lm-eval's ``LM.gather_object``)."""
        if self.world_size <= 1:
            return [obj]
        result = [None] * self.world_size if self.rank == dst else None
        torch.distributed.gather_object(obj=obj, object_gather_list=result, dst=dst)
        return result

    def barrier(self) -> None:
        """Wait for every process (lm-eval's ``LM.barrier``)."""
        if self.state is not None:
            self.state.wait_for_everyone()


class ProcessesLM(LM):
    """lm-eval's collective methods of a backend, answered by its run's ``processes`` (``Processes``); a subclass
    that holds something back per rank until lm-eval's gather says what in ``before_gather``."""

    processes: Processes

    @property
    def rank(self) -> int:
        return self.processes.rank

    @property
    def world_size(self) -> int:
        return self.processes.world_size

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.processes.all_gather(tensor)

    def gather_object(self, obj, dst: int = 0) -> list | None:
        """lm-eval's gather of every rank's samples and metrics after the requests (rank ``dst`` gets them), after
        ``before_gather`` on every rank."""
        self.before_gather(dst)
        return self.processes.gather_object(obj, dst)

    def barrier(self) -> None:
        self.processes.barrier()

    def before_gather(self, dst: int) -> None:
        """What every rank does just before lm-eval's gather (a collective: every rank calls it); nothing here."""
