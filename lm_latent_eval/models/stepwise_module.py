"""The one way a bundled family writes its stepwise part: two modules of plain functions, handed over to by
``StepwiseFromModule``, whose public methods check their arguments once."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from ..checks import check_proposal_args
from ..protocol import CheckedStepwise, check_tempering


class StepwiseFromModule(CheckedStepwise):
    """``smc_init`` / ``smc_step`` / ``smc_reorder`` / ``smc_latents`` (``protocol.StepwiseLatentLM``) and
    ``smc_init_documents`` / ``smc_step_documents`` (``protocol.DocumentBatchLM``) of a family whose particle filter
    lives in ``stepwise_module`` and, for texts side by side, ``documents_module`` (often the same module).

    ``stepwise_module`` defines ``init_particles(model, x, K, τ, peek)`` (it checks the text's ids, as the model's
    ``log_joint`` does), ``step_particles(model, state, t, generator) -> (state, log w_t float64 [K])``,
    ``reorder_particles(state, ancestors)`` and ``particle_latents(model, state)``; its docstring says what one step
    reads and draws. ``documents_module`` defines ``init_documents(model, xs, Ks, τ, peek)`` (None: these texts run
    one at a time) and ``step_documents(model, state, t, generators) -> (state, log w_t float64 [Σ K_d])``; where
    its side-by-side state is a type of its own (``documents_module.DocumentBatch``), ``reorder_documents`` reorders
    it and ``smc_latents`` refuses it.

    Both inits are template methods: the arguments are checked here, once (``check_proposal_args``, and τ ≠ 1
    refused where the proposal declares ``tempers = False``), without autograd, before the module sees them.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> hmm.smc_init_documents([hmm.tokenize("the cat"), hmm.tokenize("a dog")], [4, 0])
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: num_samples must be a positive integer, got 0
    """

    stepwise_module: ClassVar[ModuleType]
    documents_module: ClassVar[ModuleType]

    def _smc_init(self, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
        """K particles for the text x [T], none of it read yet (``CheckedStepwise.smc_init`` checked K and τ)."""
        return self.stepwise_module.init_particles(self, x, num_particles, temperature, peek)

    def smc_step(self, state, t: int, generator: torch.Generator | None = None):
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
        return self.stepwise_module.particle_latents(self, state)

    @torch.no_grad()
    def smc_init_documents(self, xs, num_particles, temperature: float = 1.0, peek: bool = True):
        """The particles of several texts side by side, K_d for text d, each x [T_d] and K_d checked as ``smc_init``
        checks them (``documents_module.init_documents``), or None where the texts run one at a time."""
        if len(xs) != len(num_particles):
            raise ValueError(f"{len(xs)} documents but {len(num_particles)} particle counts")
        for x, k in zip(xs, num_particles):
            check_proposal_args(x, k, temperature)
        check_tempering(getattr(self, "proposal", None), temperature)
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
