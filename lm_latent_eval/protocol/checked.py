"""The bases of the bundled proposals: the contract's ``sample`` and ``beam`` with their arguments checked once.

A proposal built on ``CheckedSampler`` (a continuous latent) or ``CheckedProposal`` (a discrete one, with a beam)
implements ``_sample`` and ``_beam``; the public methods check the arguments (``lm_latent_eval.checks``; τ ≠ 1 refused
where the proposal declares ``tempers = False``), turn autograd off and hand over. Behind the boundary the model trusts
its arguments.
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
