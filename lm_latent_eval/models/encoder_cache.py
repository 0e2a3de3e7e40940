"""A document's encoder output and tables, reused while K particles (in chunks, in lanes) are drawn and scored for it,
and while the precision target's later stages estimate the same documents again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ..precision import numerics_state

# bytes of tensors one DocumentCache keeps for documents other than the last: the precision target's later stages
# estimate every document of the corpus again, and read its encodings and tables instead of computing them anew (on
# the bundled KGLM 4.8 operations per document·token of each later stage, bench/lm_eval_operations)
KEPT_BYTES = 256 * 2**20


def parameter_versions(module: torch.nn.Module) -> tuple:
    """In-place update counters of every parameter: changes whenever an optimizer step or load touches a weight."""
    return tuple(p._version for p in module.parameters())


def cache_version(module: torch.nn.Module, device: torch.device) -> tuple:
    """What a cached result of ``module`` on ``device`` depends on besides its input: the parameters' in-place update
    counters and the precision of the matrix products in effect (``precision.numerics_state``)."""
    return parameter_versions(module), numerics_state(torch.device(device).type)


def held_bytes(value, seen: set | None = None) -> int:
    """Bytes of the tensors ``value`` holds (through tuples, lists, dicts and dataclasses; a storage counted once;
    parameters and modules, which the model holds anyway, left out).

    Examples
    --------
    >>> a = torch.zeros(4, dtype=torch.float64)
    >>> held_bytes((a, a[:2], {"b": torch.zeros(2, dtype=torch.int32)}, torch.nn.Parameter(torch.zeros(9))))
    40
    """
    seen = set() if seen is None else seen
    if isinstance(value, (torch.nn.Parameter, torch.nn.Module)):
        return 0
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(value, dict):
        value = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    if isinstance(value, (tuple, list)):
        return sum(held_bytes(v, seen) for v in value)
    return 0


class DocumentCache:
    """Results per document keyed by (token ids, parameter versions, precision, device, ``extra``); active only in eval
    mode without grad. The last document's result is always held; earlier documents' are kept while their tensors
    fit ``kept_bytes`` (first come, first kept: the precision target's stages read the corpus in turn, which an
    evict-the-oldest rule would miss every time), and dropped when the parameters, the precision or the device
    change.

    Examples
    --------
    >>> cache, net, calls = DocumentCache(), torch.nn.Linear(1, 1).eval(), []
    >>> compute = lambda x: lambda: calls.append(x) or x * 2
    >>> with torch.no_grad():
    ...     out = [cache.get(net, x, compute(x)) for x in (torch.tensor([1]), torch.tensor([2]), torch.tensor([1]))]
    >>> len(calls), [int(o) for o in out]
    (2, [2, 4, 2])
    """

    def __init__(self, kept_bytes: int = KEPT_BYTES) -> None:
        self.kept_bytes = kept_bytes
        self._entry: tuple | None = None
        self._kept: dict[tuple, object] = {}
        self._held = 0
        self._version: tuple | None = None

    def get(self, module: torch.nn.Module, x: torch.Tensor, compute: Callable[[], object], extra: tuple = ()):
        """``compute()`` once per document: recomputed when x, any parameter (in-place update), the precision of the
        matrix products, the device or the ``extra`` key (e.g. temperature) changes."""
        if module.training or torch.is_grad_enabled():
            return compute()
        version = (cache_version(module, x.device), x.device)
        if version != self._version:
            self.clear()
            self._version = version
        key = (tuple(x.tolist()), extra)
        if self._entry is not None and self._entry[0] == key:
            return self._entry[1]
        value = self._kept.get(key)
        if value is None:
            value = compute()
        self._keep(self._entry)
        self._entry = (key, value)
        return value

    def _keep(self, entry: tuple | None) -> None:
        """The document that was last goes to the kept documents, where it fits."""
        if entry is None or entry[0] in self._kept:
            return
        size = held_bytes(entry[1])
        if self._held + size <= self.kept_bytes:
            self._kept[entry[0]] = entry[1]
            self._held += size

    def clear(self) -> None:
        """Forget every cached document (called when a module switches between train and eval)."""
        self._entry, self._kept, self._held, self._version = None, {}, 0, None
