"""The one definition of each rule on the arguments of the contract's methods: a count K, a temperature τ, a text x.

A leaf of the package: it imports nothing of it but ``errors``, so that ``estimators/settings.py`` (the floor of
``estimators/``) and the models apply the same rules without importing the contract. ``lm_latent_eval.protocol``
re-exports every checker; the bases there (``CheckedSampler``, ``CheckedProposal``, ``CheckedStepwise``) apply them
once, at the boundary, and the models behind them trust their arguments.
"""

from __future__ import annotations

import math
import numbers

import torch

from .errors import InputError


def check_num_samples(num_samples: int, name: str = "num_samples") -> None:
    """Refuse a number of samples or particles that is not a positive integer.

    Parameters
    ----------
    num_samples : int
        K, the number asked for.
    name : str
        The argument's name in the error message.

    Raises
    ------
    lm_latent_eval.errors.InputError
        (a ValueError) naming ``name``, unless ``num_samples`` is an integer > 0 (a bool is refused). The one
        definition of this rule: ``EstimatorSettings`` applies it to every count it holds.

    Examples
    --------
    >>> check_num_samples(4)
    >>> check_num_samples(0, "beam_size")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: beam_size must be a positive integer, got 0
    """
    if not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool) or num_samples <= 0:
        raise InputError(f"{name} must be a positive integer, got {num_samples!r}")


def check_temperature(temperature: float) -> None:
    """Refuse a temperature τ that is not a finite number > 0.

    Parameters
    ----------
    temperature : float
        τ of q_τ(z | x) ∝ q(z | x)^{1/τ}.

    Raises
    ------
    lm_latent_eval.errors.InputError
        (a ValueError) unless τ is a finite int or float > 0 (the one definition of this rule).

    Examples
    --------
    >>> check_temperature(0.5)
    >>> check_temperature(0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: temperature must be a finite number > 0, got 0
    """
    valid = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not (valid and math.isfinite(temperature) and temperature > 0):
        raise InputError(f"temperature must be a finite number > 0, got {temperature!r}")


def check_proposal_args(x: torch.Tensor, num_samples: int, temperature: float) -> None:
    """Refuse bad arguments of ``Proposal.sample``: x a 1-d tensor [T], K a positive integer, τ a finite number > 0.

    Parameters
    ----------
    x : torch.Tensor
        The model's token ids, LongTensor [T].
    num_samples : int
        K.
    temperature : float
        τ.

    Raises
    ------
    ValueError
        Naming the first bad argument: x not a 1-d tensor (``check_text``), else an ``InputError`` for K or τ.

    Examples
    --------
    >>> check_proposal_args(torch.tensor([3, 1]), 8, 1.0)
    >>> check_proposal_args(torch.tensor([3, 1]), 8, -1.0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: temperature must be a finite number > 0, got -1.0
    """
    check_text(x)
    check_num_samples(num_samples)
    check_temperature(temperature)


def check_beam_args(x: torch.Tensor, beam_size: int) -> None:
    """Refuse bad arguments of ``BeamProposal.beam``: x a 1-d tensor [T], ``beam_size`` a positive integer.

    Parameters
    ----------
    x : torch.Tensor
        The model's token ids, LongTensor [T].
    beam_size : int
        k.

    Raises
    ------
    ValueError
        x not a 1-d tensor (``check_text``); an ``InputError`` for a ``beam_size`` that is not a positive integer.

    Examples
    --------
    >>> check_beam_args(torch.tensor([3, 1]), 5)
    >>> check_beam_args(torch.tensor([3, 1]), 2.5)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: beam_size must be a positive integer, got 2.5
    """
    check_text(x)
    check_num_samples(beam_size, "beam_size")


def check_text(x: torch.Tensor) -> None:
    """Refuse a text that is not a 1-d tensor (the model's token ids [T]).

    Parameters
    ----------
    x : torch.Tensor
        The text as token ids.

    Raises
    ------
    ValueError
        When x is not a tensor, or not 1-d.

    Examples
    --------
    >>> check_text(torch.tensor([], dtype=torch.long))
    >>> check_text(torch.zeros(2, 3, dtype=torch.long))
    Traceback (most recent call last):
    ...
    ValueError: x must be a 1-d LongTensor [T], got shape (2, 3)
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a 1-d LongTensor [T], got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"x must be a 1-d LongTensor [T], got shape {tuple(x.shape)}")


def check_fits_memory(
    name: str, value: int, needed: int, available: int | None, what: str, limit: str = "of memory left"
) -> None:
    """Refuse a setting whose work would not fit the memory left (``needed`` bytes, ``available`` bytes; None:
    unknown, nothing refused), in one line naming the setting, the memory it needs and the largest value that fits.

    Parameters
    ----------
    name, value : str, int
        The setting and its value (a count that the memory grows with linearly, as K).
    needed, available : int
        Bytes the work needs at ``value``, and bytes left on its device.
    what : str
        What the bytes hold (the error names it).
    limit : str
        What ``available`` is, after "more than the ... GiB" (the memory left, or a model's ``memory_budget``).

    Examples
    --------
    >>> check_fits_memory("num_samples", 100, 3200, 2**30, "weights")
    >>> check_fits_memory("num_samples", 10**9, 32 * 10**9, 8 * 2**30, "the log weights (32 bytes a sample)")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: num_samples=1000000000 needs 29.8 GiB for the log weights (32 bytes a sample), more than the 8.0 GiB of memory left; use a smaller num_samples (at most about 270,000,000 fit; a precision target, target_se=, adds samples only where a document needs them)
    """
    if available is None or needed <= available:
        return
    fits = max(1, int(float(f"{value * available / needed:.2g}")))  # two significant digits, rounded
    raise InputError(
        f"{name}={value} needs {needed / 2**30:.1f} GiB for {what}, more than the {available / 2**30:.1f} GiB "
        f"{limit}; use a smaller {name} (at most about {fits:,} fit; a precision target, target_se=, adds "
        "samples only where a document needs them)"
    )
