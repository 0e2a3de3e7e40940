"""The bases of the bundled models: ``sample``, ``beam`` and ``smc_init`` with their arguments checked once.

A proposal built on ``CheckedSampler`` (a continuous latent) or ``CheckedProposal`` (a discrete one, with a beam)
implements ``_sample`` and ``_beam``; a model built on ``CheckedStepwise`` implements ``_smc_init`` (the families do
so through ``models.stepwise_module.StepwiseFromModule``). The public methods check the arguments
(``lm_latent_eval.checks``; τ ≠ 1 refused where the proposal declares ``tempers = False``), turn autograd off and
hand over, each private method taking the same arguments and returning what the contract states (``contract.py``).
Behind the boundary the model trusts its arguments. The bases are a convenience, not part of the contract: a model
of one's own may implement ``sample`` or ``smc_init`` directly.
"""

from __future__ import annotations

import torch

from ..checks import check_beam_args, check_proposal_args
from .capabilities import check_tempering
from .contract import Latents


class CheckedSampler:
    """Base of a proposal without a beam (a continuous latent): ``Proposal.sample`` checked, then ``_sample``."""

    @torch.no_grad()
    def sample(
        self, x, num_samples, temperature=1.0, peek=True, generator=None
    ) -> tuple[Latents, torch.Tensor]:
        """``Proposal.sample``: z [K, ...] and log q_τ(z_k | x) float64 [K], once x [T], K > 0 and τ > 0 passed
        ``check_proposal_args`` and ``check_tempering`` (an ``InputError`` names the bad one).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> hmm.proposal.sample(hmm.tokenize("the cat"), 0)
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.InputError: num_samples must be a positive integer, got 0
        """
        check_proposal_args(x, num_samples, temperature)
        check_tempering(self, temperature)
        return self._sample(x, num_samples, temperature, peek, generator)

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[Latents, torch.Tensor]:
        """The subclass's sampler, called without autograd with ``sample``'s checked arguments."""
        raise NotImplementedError


class CheckedProposal(CheckedSampler):
    """Base of the bundled proposals (discrete latents): ``CheckedSampler``'s ``sample`` and ``BeamProposal.beam``
    checked, then ``_beam``."""

    @torch.no_grad()
    def beam(self, x, beam_size) -> Latents:
        """``BeamProposal.beam``: up to k distinct configurations [k', ...], best first, once k passed
        ``check_beam_args``.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> hmm.proposal.beam(hmm.tokenize("the cat"), 2.5)
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.InputError: beam_size must be a positive integer, got 2.5
        """
        check_beam_args(x, beam_size)
        return self._beam(x, beam_size)

    def _beam(self, x, beam_size) -> Latents:
        """The subclass's beam, called without autograd with ``beam``'s checked arguments."""
        raise NotImplementedError


class CheckedStepwise:
    """Base of the bundled models' stepwise part (``StepwiseLatentLM``): ``smc_init`` checked once, then
    ``_smc_init``. ``smc_step``, ``smc_reorder`` and ``smc_latents`` are the subclass's own: their arguments come
    from the estimator, not from the user."""

    @torch.no_grad()
    def smc_init(self, x, num_particles, temperature=1.0, peek=True):
        """``StepwiseLatentLM.smc_init``: the particles' state, once x [T], K > 0 and τ > 0 passed
        ``check_proposal_args`` and ``check_tempering`` (the messages of ``proposal.sample``).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> hmm.smc_init(hmm.tokenize("the cat"), 4, temperature=float("nan"))
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.InputError: temperature must be a finite number > 0, got nan
        """
        check_proposal_args(x, num_particles, temperature)
        check_tempering(getattr(self, "proposal", None), temperature)
        return self._smc_init(x, num_particles, temperature, peek)

    def _smc_init(self, x, num_particles, temperature, peek):
        """The subclass's particles, built without autograd from ``smc_init``'s checked arguments."""
        raise NotImplementedError
