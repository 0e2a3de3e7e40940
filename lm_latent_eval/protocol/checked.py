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
        """``Proposal.sample``: ``_sample``'s draws once the arguments passed ``check_proposal_args`` and
        ``check_tempering``.

        Parameters
        ----------
        x, num_samples, temperature, peek, generator
            As ``Proposal.sample``'s: x [T], K > 0, τ > 0 (τ ≠ 1 refused where the class declares
            ``tempers = False``).

        Returns
        -------
        tuple of Latents and torch.Tensor
            As ``Proposal.sample``: z [K, ...] and log q_τ(z_k | x), float64 [K].

        Raises
        ------
        lm_latent_eval.errors.InputError
            For a K or τ out of range (a ValueError; x not 1-d: a ValueError too).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> isinstance(hmm.proposal, CheckedSampler)
        True
        >>> hmm.proposal.sample(hmm.tokenize("the cat"), 0)
        Traceback (most recent call last):
        ...
        lm_latent_eval.errors.InputError: num_samples must be a positive integer, got 0
        """
        check_proposal_args(x, num_samples, temperature)
        check_tempering(self, temperature)
        return self._sample(x, num_samples, temperature, peek, generator)

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[Latents, torch.Tensor]:
        """The subclass's sampler, called without autograd with checked arguments.

        Parameters
        ----------
        x, num_samples, temperature, peek, generator
            As ``sample``'s, already checked.

        Returns
        -------
        tuple of Latents and torch.Tensor
            z [K, ...] and log q_τ(z_k | x), float64 [K].
        """
        raise NotImplementedError


class CheckedProposal(CheckedSampler):
    """Base of the bundled proposals (discrete latents): ``CheckedSampler``'s ``sample`` and ``beam`` as the contract
    states it (``BeamProposal``), checking its arguments (``check_beam_args``) and running without autograd, then
    handing over to the subclass's ``_beam``, which takes the same arguments and returns the same values."""

    @torch.no_grad()
    def beam(self, x, beam_size) -> Latents:
        """``BeamProposal.beam``: ``_beam``'s configurations once the arguments passed ``check_beam_args``.

        Parameters
        ----------
        x, beam_size
            As ``BeamProposal.beam``'s: x [T], k > 0.

        Returns
        -------
        Latents
            As ``BeamProposal.beam``: up to k distinct configurations, [k', ...] with k' ≤ k.

        Raises
        ------
        lm_latent_eval.errors.InputError
            For a ``beam_size`` that is not a positive integer.

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
        """The subclass's beam, called without autograd with checked arguments.

        Parameters
        ----------
        x, beam_size
            As ``beam``'s, already checked.

        Returns
        -------
        Latents
            Up to ``beam_size`` distinct configurations, best first.
        """
        raise NotImplementedError


class CheckedStepwise:
    """Base of the bundled models' stepwise part (``StepwiseLatentLM``): ``smc_init`` as the contract states it,
    checking its arguments once (``check_proposal_args``: x [T], K, τ; τ ≠ 1 refused where the model's proposal
    declares ``tempers = False``) and running without autograd, then handing over to the subclass's ``_smc_init``,
    which takes the same arguments and returns the same state. ``smc_step``, ``smc_reorder`` and ``smc_latents`` are
    the subclass's own: their arguments come from the estimator, not from the user."""

    @torch.no_grad()
    def smc_init(self, x, num_particles, temperature=1.0, peek=True):
        """``StepwiseLatentLM.smc_init``: ``_smc_init``'s particles once the arguments passed ``check_proposal_args``
        and ``check_tempering`` (the messages of ``proposal.sample``).

        Parameters
        ----------
        x, num_particles, temperature, peek
            As ``StepwiseLatentLM.smc_init``'s: x [T], K > 0, τ > 0 (τ ≠ 1 refused where the model's proposal
            declares ``tempers = False``).

        Returns
        -------
        Any
            As ``StepwiseLatentLM.smc_init``: the particles' state, for ``smc_step``.

        Raises
        ------
        lm_latent_eval.errors.InputError
            With ``proposal.sample``'s message for the same K or τ (``check_proposal_args``).

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
        """The subclass's particles, built without autograd from checked arguments.

        Parameters
        ----------
        x, num_particles, temperature, peek
            As ``smc_init``'s, already checked.

        Returns
        -------
        Any
            The particles' state.
        """
        raise NotImplementedError
