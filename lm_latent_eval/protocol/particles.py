"""The particle dimension of latent configurations, the one thing the estimators know about z.

Latent configurations ``z`` are opaque to the estimators except for one rule: ``z`` is a tensor, or a (nested)
tuple/list/dict of tensors, whose leading dimension is the particle dimension ``K``. The estimators count it
(``num_particles``), slice along it (``select_particles``) and never look inside; ``enumerated_log_marginal`` sums
``log_joint`` over a listed support, a block of configurations at a time.
"""

from __future__ import annotations

import math

import torch

from .contract import LatentLM, Latents


def num_particles(z: Latents) -> int:
    """K, the leading dimension shared by every tensor in z.

    Parameters
    ----------
    z : Latents
        A tensor, or a nested tuple/list/dict of tensors, of K configurations.

    Returns
    -------
    int
        K.

    Raises
    ------
    TypeError
        When z holds no tensor.
    ValueError
        When its tensors disagree on the leading dimension (or one is 0-d).

    Examples
    --------
    >>> num_particles({"entity": torch.zeros(3, 5), "type": (torch.ones(3),)})
    3
    >>> num_particles(torch.zeros(4, 0))  # 4 configurations of the empty text
    4
    """
    leaves = [t for t in _leaves(z) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise TypeError(f"latent configurations must contain at least one tensor, got {type(z).__name__}")
    sizes = {int(t.shape[0]) if t.dim() else -1 for t in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            f"every tensor in z must share the leading particle dimension K; got sizes {sorted(sizes)}"
        )
    return sizes.pop()


def select_particles(z: Latents, index: slice | torch.Tensor) -> Latents:
    """z restricted to the particles ``index`` along the leading dimension.

    Parameters
    ----------
    z : Latents
        K configurations (a tensor or a nested tuple/list/dict of tensors).
    index : slice or torch.Tensor
        The particles to keep (a slice, or a LongTensor of indices, repeats allowed).

    Returns
    -------
    Latents
        The same nesting as z, every tensor indexed along dimension 0.

    Examples
    --------
    >>> select_particles({"z": torch.tensor([[1, 2], [3, 4], [5, 6]])}, torch.tensor([2, 0]))
    {'z': tensor([[5, 6],
            [1, 2]])}
    """
    if isinstance(z, torch.Tensor):
        return z[index]
    if isinstance(z, dict):
        return {k: select_particles(v, index) for k, v in z.items()}
    if isinstance(z, (tuple, list)):
        return type(z)(select_particles(v, index) for v in z)
    return z


def enumerated_log_marginal(model: LatentLM, x: torch.Tensor, z: Latents, batch_size: int = 4096) -> float:
    """log p(x) = log Σ_z p(x, z) over a listed support, scored ``batch_size`` configurations at a time.

    Parameters
    ----------
    model : LatentLM
        The model whose ``log_joint`` is summed.
    x : torch.Tensor
        The text, LongTensor [T].
    z : Latents
        Every configuration of the support, each once, [M, ...].
    batch_size : int
        Configurations per ``log_joint`` call.

    Returns
    -------
    float
        log p(x) in float64; 0.0 for the empty text.

    Raises
    ------
    ValueError
        When ``log_joint`` returns NaN.

    Examples
    --------
    A coin z ∈ {0, 1} with p(z) = 1/2; each token equals z with probability 0.9:

    >>> class Coin:
    ...     def log_joint(self, x, z):
    ...         same = (x[None, :] == z[:, None]).double()
    ...         return math.log(0.5) + (same * math.log(0.9) + (1 - same) * math.log(0.1)).sum(-1)
    >>> x = torch.tensor([1, 1])
    >>> round(math.exp(enumerated_log_marginal(Coin(), x, torch.tensor([0, 1]))), 12)  # (0.01 + 0.81) / 2
    0.41
    """
    if x.numel() == 0:
        return 0.0
    n = num_particles(z)
    parts = [
        model.log_joint(x, select_particles(z, slice(s, s + batch_size))) for s in range(0, n, batch_size)
    ]
    value = float(torch.logsumexp(torch.cat(parts), 0))
    if math.isnan(value):
        raise ValueError("exact_log_marginal: log_joint returned NaN")
    return value


def _leaves(z: Latents):
    if isinstance(z, dict):
        for v in z.values():
            yield from _leaves(v)
    elif isinstance(z, (tuple, list)):
        for v in z:
            yield from _leaves(v)
    else:
        yield z
