"""The stepwise part of a model whose particle filter lives in a module of its own (the RNNG, the tokenization LM)."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from ..protocol import CheckedStepwise


class StepwiseFromModule(CheckedStepwise):
    """``smc_init`` (its arguments checked by ``CheckedStepwise``) / ``smc_step`` / ``smc_reorder`` / ``smc_latents``
    (``protocol.StepwiseLatentLM``) handed to ``stepwise_module``'s ``init_particles``, ``step_particles``,
    ``reorder_particles`` and ``particle_latents``; that module's docstring says what one step reads and draws."""

    stepwise_module: ClassVar[ModuleType]

    def _smc_init(self, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
        """K particles for the text x [T], none of it read yet (``CheckedStepwise.smc_init`` checked K and τ)."""
        return self.stepwise_module.init_particles(self, x, num_particles, temperature, peek)

    def smc_step(self, state, t: int, generator: torch.Generator | None):
        """Advance every particle through token t of x: (state, log w_t float64 [K])."""
        return self.stepwise_module.step_particles(self, state, t, generator)

    def smc_reorder(self, state, ancestors: torch.Tensor):
        """Particle k continues the history of particle ``ancestors[k]``."""
        return self.stepwise_module.reorder_particles(state, ancestors)

    def smc_latents(self, state):
        """The configurations drawn so far, in ``log_joint``'s format."""
        return self.stepwise_module.particle_latents(state)
