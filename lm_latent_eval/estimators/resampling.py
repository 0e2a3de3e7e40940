"""SMC's resampling scheme: particles split into independent runs, the runs packed into sample blocks, each run's
effective sample size, and systematic resampling of the runs chosen, each among its own particles.

``smc`` runs the particle filter over these; every function here is deterministic given its random stream.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..tensors import inverse_cdf
from .seeding import SAMPLE_BLOCK


def run_sizes(num_samples: int, smc_runs: int) -> list[int]:
    """Particles per independent run: R = max(smc_runs, ⌈K / SAMPLE_BLOCK⌉) near-equal sizes summing to K.

    Examples
    --------
    >>> run_sizes(10, 3)
    [4, 3, 3]
    """
    runs = max(int(smc_runs), -(-int(num_samples) // SAMPLE_BLOCK))
    base, extra = divmod(int(num_samples), runs)
    return [base + (r < extra) for r in range(runs)]


def blocks_of_runs(sizes: list[int], block: int = SAMPLE_BLOCK) -> list[list[int]]:
    """Consecutive runs packed into blocks of at most ``block`` particles (a run larger than a block is alone).

    Examples
    --------
    >>> blocks_of_runs([3, 3, 3, 5], block=6)
    [[3, 3], [3], [5]]
    """
    blocks, current = [], []
    for n in sizes:
        if current and sum(current) + n > block:
            blocks.append(current)
            current = []
        current.append(n)
    return blocks + [current]


def runs_log_ess(log_w: torch.Tensor, sizes: list[int]) -> list[float]:
    """log ESS of each run's weights, the runs' particles consecutive in log_w [Σ N_r]; −inf for a run whose every
    weight is 0. The runs of each size in one batched reduction (row by row the same numbers, however many runs and
    documents share it: the HMM and other cheap models are loop-bound).

    Examples
    --------
    >>> lw = torch.log(torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 2.0], dtype=torch.float64))
    >>> [round(math.exp(v), 6) for v in runs_log_ess(lw, [2, 2, 3])]
    [2.0, 1.0, 3.0]
    """
    out = [0.0] * len(sizes)
    starts = np.cumsum([0, *sizes[:-1]])
    by_size: dict[int, list[int]] = {}
    for r, n in enumerate(sizes):
        by_size.setdefault(n, []).append(r)
    for n, runs in by_size.items():
        if len(runs) == len(sizes):
            rows = log_w.view(len(sizes), n)
        else:
            index = torch.as_tensor(starts[runs], dtype=torch.long).unsqueeze(1) + torch.arange(n)
            rows = log_w[index]
        normalised = torch.softmax(rows, 1)
        values = (-torch.log(torch.linalg.vecdot(normalised, normalised))).tolist()
        # NaN (softmax of −inf only) exactly where every weight is 0: log_w holds no NaN or +inf (smc's increments
        # are checked)
        for r, v in zip(runs, values):
            out[r] = -math.inf if math.isnan(v) else v
    return out


def systematic_resample(log_w: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N ancestors: a_k = min{i : Σ_{j≤i} W_j > (u + k) / N}, one u ~ U[0, 1); E[#children of i] = N W_i. [N] CPU.

    log_w [..., N]: each row resampled on its own (row by row the numbers of resampling it alone), its u drawn from
    the generator in row order: [..., N]."""
    n = log_w.shape[-1]
    device = generator.device if generator is not None else "cpu"
    u = torch.tensor(
        [
            float(torch.rand((), generator=generator, device=device, dtype=torch.float64))
            for _ in range(log_w.shape[:-1].numel())
        ],
        dtype=torch.float64,
    ).view(*log_w.shape[:-1], 1)
    cdf = torch.cumsum(torch.softmax(log_w.to("cpu", torch.float64), -1), -1)
    # rounding: the last particle closes the interval
    cdf[..., -1] = 1.0
    return inverse_cdf(None, (u + torch.arange(n, dtype=torch.float64)) / n, cumulative=cdf, per_row=True)


def resample_runs(
    log_w: torch.Tensor, starts: list[int], sizes: list[int], chosen: list[int], generator
) -> torch.Tensor:
    """Ancestors of every particle of the block [Σ N_r]: runs ``chosen`` resampled systematically among their own
    particles (in run order, one u each), the others their own ancestors; runs of equal size in one batch."""
    ancestors = torch.arange(starts[-1])
    if len(set(sizes)) == 1:
        rows = torch.tensor(chosen)
        picked = systematic_resample(log_w.view(len(sizes), sizes[0]).index_select(0, rows), generator)
        ancestors.view(len(sizes), sizes[0])[rows] = picked + (rows * sizes[0]).unsqueeze(1)
        return ancestors
    for r in chosen:
        run = slice(starts[r], starts[r + 1])
        ancestors[run] = systematic_resample(log_w[run], generator) + run.start
    return ancestors
