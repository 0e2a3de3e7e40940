"""The encoder output of the last document, reused while K particles (in chunks) are drawn and scored for it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..precision import numerics_state


def parameter_versions(module: torch.nn.Module) -> tuple:
    """In-place update counters of every parameter: changes whenever an optimizer step or load touches a weight."""
    return tuple(p._version for p in module.parameters())


def cache_version(module: torch.nn.Module, device: torch.device) -> tuple:
    """What a cached result of ``module`` on ``device`` depends on besides its input: the parameters' in-place update
    counters and the precision of the matrix products in effect (``precision.numerics_state``)."""
    return parameter_versions(module), numerics_state(torch.device(device).type)


class DocumentCache:
    """One-entry cache keyed by (token ids, parameter versions, precision, device); active only in eval mode without
    grad."""

    def __init__(self) -> None:
        self._entry: tuple | None = None

    def get(self, module: torch.nn.Module, x: torch.Tensor, compute: Callable[[], object], extra: tuple = ()):
        """``compute()`` once per document: recomputed when x, any parameter (in-place update), the precision of the
        matrix products, the device or the ``extra`` key (e.g. temperature) changes."""
        if module.training or torch.is_grad_enabled():
            return compute()
        key = (tuple(x.tolist()), cache_version(module, x.device), x.device, extra)
        if self._entry is None or self._entry[0] != key:
            self._entry = (key, compute())
        return self._entry[1]

    def clear(self) -> None:
        """Forget the cached document (called when a module switches between train and eval)."""
        self._entry = None
