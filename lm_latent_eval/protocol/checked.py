"""The bases of the bundled models: ``sample``, ``beam`` and ``smc_init`` with their arguments checked once.

A proposal built on ``CheckedSampler`` (a continuous latent) or ``CheckedProposal`` (a discrete one, with a beam)
implements ``_sample`` and ``_beam``; a model built on ``CheckedStepwise`` implements ``_smc_init`` (and the other
stepwise methods as the contract states them). The public methods check the arguments (``lm_latent_eval.checks``;
τ ≠ 1 refused where the proposal declares ``tempers = False``), turn autograd off and hand over. Behind the boundary
the model trusts its arguments. The bases are a convenience, not part of the contract: a model of one's own may
implement ``sample`` or ``smc_init`` directly.
"""

from __future__ import annotations

import torch

from ..checks import check_beam_args, check_proposal_args
from .capabilities import check_tempering
from .contract import Latents


class CheckedSampler:
    """Base of a proposal without a beam (a continuous latent): ``sample`` as the contract states it (``Proposal``),
    checking its arguments (``check_proposal_args``; τ ≠ 1 refused where the class declares ``tempers = False``)
    and running without autograd, then handing over to the subclass's ``_sample``, which takes the same arguments
    and returns the same values."""

    @torch.no_grad()
    def sample(
        self, x, num_samples, temperature=1.0, peek=True, generator=None
    ) -> tuple[Latents, torch.Tensor]:
        """``Proposal.sample`` (types there): (z [K, ...], log q_τ(z_k | x) [K]) from ``_sample`` once the arguments
        passed ``check_proposal_args`` and ``check_tempering``."""
        check_proposal_args(x, num_samples, temperature)
        check_tempering(self, temperature)
        return self._sample(x, num_samples, temperature, peek, generator)

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[Latents, torch.Tensor]:
        raise NotImplementedError


class CheckedProposal(CheckedSampler):
    """Base of the bundled proposals (discrete latents): ``CheckedSampler``'s ``sample`` and ``beam`` as the contract
    states it (``BeamProposal``), checking its arguments (``check_beam_args``) and running without autograd, then
    handing over to the subclass's ``_beam``, which takes the same arguments and returns the same values."""

    @torch.no_grad()
    def beam(self, x, beam_size) -> Latents:
        """``BeamProposal.beam``: up to ``beam_size`` distinct configurations from ``_beam`` once the arguments passed
        ``check_beam_args``."""
        check_beam_args(x, beam_size)
        return self._beam(x, beam_size)

    def _beam(self, x, beam_size) -> Latents:
        raise NotImplementedError


class CheckedStepwise:
    """Base of the bundled models' stepwise part (``StepwiseLatentLM``): ``smc_init`` as the contract states it,
    checking its arguments once (``check_proposal_args``: x [T], K, τ; τ ≠ 1 refused where the model's proposal
    declares ``tempers = False``) and running without autograd, then handing over to the subclass's ``_smc_init``,
    which takes the same arguments and returns the same state. ``smc_step``, ``smc_reorder`` and ``smc_latents`` are
    the subclass's own: their arguments come from the estimator, not from the user."""

    @torch.no_grad()
    def smc_init(self, x, num_particles, temperature=1.0, peek=True):
        """``StepwiseLatentLM.smc_init``: the state of K particles from ``_smc_init`` once the arguments passed
        ``check_proposal_args`` and ``check_tempering``."""
        check_proposal_args(x, num_particles, temperature)
        check_tempering(getattr(self, "proposal", None), temperature)
        return self._smc_init(x, num_particles, temperature, peek)

    def _smc_init(self, x, num_particles, temperature, peek):
        raise NotImplementedError
