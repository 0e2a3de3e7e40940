"""The stepwise part of a model whose particle filter lives in a module of its own (the RNNG, the masked LMs, the
tokenization LM), and its texts side by side (``protocol.DocumentBatchLM``) in another (or the same) module."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from ..protocol import CheckedStepwise


class StepwiseFromModule(CheckedStepwise):
    """``smc_init`` (its arguments checked by ``CheckedStepwise``) / ``smc_step`` / ``smc_reorder`` / ``smc_latents``
    (``protocol.StepwiseLatentLM``) handed to ``stepwise_module``'s ``init_particles``, ``step_particles``,
    ``reorder_particles`` and ``particle_latents``; that module's docstring says what one step reads and draws.

    ``smc_init_documents`` / ``smc_step_documents`` (``protocol.DocumentBatchLM``) are handed to
    ``documents_module``'s ``init_documents`` (None: the texts run one at a time) and ``step_documents``; where its
    side-by-side state is a type of its own (``documents_module.DocumentBatch``), ``smc_reorder`` hands that state
    to its ``reorder_documents`` and ``smc_latents`` refuses it."""

    stepwise_module: ClassVar[ModuleType]
    documents_module: ClassVar[ModuleType]

    def _smc_init(self, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
        """K particles for the text x [T], none of it read yet (``CheckedStepwise.smc_init`` checked K and τ)."""
        return self.stepwise_module.init_particles(self, x, num_particles, temperature, peek)

    def smc_step(self, state, t: int, generator: torch.Generator | None):
        """Advance every particle through token t of x: (state, log w_t float64 [K])."""
        return self.stepwise_module.step_particles(self, state, t, generator)

    def smc_reorder(self, state, ancestors: torch.Tensor):
        """Particle k continues the history of particle ``ancestors[k]`` (of a side-by-side batch: global indices)."""
        if self._side_by_side(state):
            return self.documents_module.reorder_documents(state, ancestors)
        return self.stepwise_module.reorder_particles(state, ancestors)

    def smc_latents(self, state):
        """The configurations drawn so far, in ``log_joint``'s format (one text's particles: ``smc_init``'s state)."""
        if self._side_by_side(state):
            raise TypeError("smc_latents reads one text's particles (smc_init), not a side-by-side batch")
        return self.stepwise_module.particle_latents(state)

    def smc_init_documents(self, xs, num_particles, temperature: float = 1.0, peek: bool = True):
        """The particles of several texts side by side, K_d for text d (``documents_module.init_documents``), or
        None where the module runs the texts one at a time."""
        self.check_documents(xs, num_particles, temperature)
        return self.documents_module.init_documents(
            self, xs, [int(k) for k in num_particles], temperature, peek
        )

    def smc_step_documents(self, state, t: int, generators):
        """Step t of every text with t < T_d, each drawing from its own generator as ``smc_step`` does
        (``documents_module.step_documents``): (state, log w_t float64 [Σ K_d])."""
        return self.documents_module.step_documents(self, state, t, generators)

    def _side_by_side(self, state) -> bool:
        """Whether ``state`` is a side-by-side batch of a type of its own (not one text's particles)."""
        return isinstance(state, getattr(self.documents_module, "DocumentBatch", ()))
