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


class RunLayout:
    """Independent runs whose particles lie consecutively in one vector [Σ N_r] (the runs of one or of several
    documents' blocks): the runs grouped by size, so that each group's statistics and resampling take one batched
    operation (row by row the numbers of each run alone, however many runs and documents share the group: the HMM and
    other cheap models are loop-bound, and on a GPU every operation is a launch).

    Parameters
    ----------
    sizes : list of int
        N_r of every run, in order.

    Examples
    --------
    >>> layout = RunLayout([2, 2, 3])
    >>> lw = torch.log(torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 2.0], dtype=torch.float64))
    >>> log_ess, log_mean = layout.statistics(lw)
    >>> [round(math.exp(v), 6) for v in log_ess], [round(math.exp(v), 6) for v in log_mean]
    ([2.0, 1.0, 3.0], [1.0, 0.5, 2.0])
    """

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = list(sizes)
        self.starts = np.cumsum([0, *self.sizes]).tolist()
        by_size: dict[int, list[int]] = {}
        for r, n in enumerate(self.sizes):
            by_size.setdefault(n, []).append(r)
        # per size: the runs, the [R_n, n] indices of their particles, and whether they are every run (a view)
        self.groups = [
            (n, runs, self._index(runs, n), len(runs) == len(self.sizes)) for n, runs in by_size.items()
        ]
        # the runs group by group, and the gather that lays their particles out so (None: they are so already)
        self._runs = [r for _, runs, _, _ in self.groups for r in runs]
        ordered = self._runs == list(range(len(self.sizes)))
        self._order = None if ordered else torch.cat([index.flatten() for _, _, index, _ in self.groups])
        self._log_n = torch.tensor(
            [math.log(n) for n, runs, _, _ in self.groups for _ in runs], dtype=torch.float64
        )

    def _index(self, runs: list[int], n: int) -> torch.Tensor:
        return torch.tensor([self.starts[r] for r in runs]).unsqueeze(1) + torch.arange(n)

    def statistics(self, log_w: torch.Tensor) -> tuple[list[float], list[float]]:
        """(log ESS, log mean_k w_k) of every run's weights log_w [Σ N_r] (float64, no NaN or +inf); −inf for both
        where every weight of the run is 0."""
        log_ess, log_mean = [0.0] * len(self.sizes), [0.0] * len(self.sizes)
        if len(self.groups) == 1:
            n, runs = self.groups[0][:2]
            rows = log_w.view(len(runs), n)
            normalised = torch.softmax(rows, 1)
            values = torch.stack(
                [
                    -torch.log(torch.linalg.vecdot(normalised, normalised)),
                    torch.logsumexp(rows, 1) - math.log(n),
                ]
            ).tolist()
        else:
            values = self._grouped_statistics(log_w)
        for r, e, m in zip(self._runs, *values):
            # NaN (softmax of −inf only) exactly where every weight is 0
            log_ess[r], log_mean[r] = (-math.inf if math.isnan(e) else e), m
        return log_ess, log_mean

    def _grouped_statistics(self, log_w: torch.Tensor) -> list[list[float]]:
        """``statistics``' [−log Σ W², log mean w] of every run, group after group, for runs of several sizes: the
        particles gathered group by group once, each group's row-wise reductions (softmax, Σ, logsumexp) written into
        one buffer, the element-wise rest over every run at once (the operations, and so the numbers, of each group
        alone: 4 per group and 5 in all instead of 9 per group; on a GPU every operation is a launch)."""
        flat = log_w if self._order is None else log_w.index_select(0, self._order)
        out = torch.empty(2, len(self.sizes), dtype=log_w.dtype)
        start = first = 0
        for n, runs, _, _ in self.groups:
            rows = flat[start : start + len(runs) * n].view(len(runs), n)
            normalised = torch.softmax(rows, 1)
            # torch.linalg.vecdot(normalised, normalised): the product, then the sum over the row
            torch.sum(normalised * normalised, 1, out=out[0, first : first + len(runs)])
            torch.logsumexp(rows, 1, out=out[1, first : first + len(runs)])
            start, first = start + len(runs) * n, first + len(runs)
        out[0].log_().neg_()
        out[1].sub_(self._log_n)
        return out.tolist()

    def resample(
        self, log_w: torch.Tensor, chosen: list[int], generators: list
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(ancestors of every particle [Σ N_r], mask [Σ N_r] of the particles resampled), on the CPU: the runs
        ``chosen`` (in order) resampled systematically among their own particles, each with one u ~ U[0, 1) from
        ``generators[r]`` (its document block's stream, drawn in the order of ``chosen``), the others their own
        ancestors."""
        ancestors = torch.arange(self.starts[-1])
        resampled = torch.zeros(self.starts[-1], dtype=torch.bool)
        u = {
            r: torch.rand((), generator=generators[r], device=_device(generators[r]), dtype=torch.float64)
            for r in chosen
        }
        wanted = set(chosen)
        for _, runs, index, _ in self.groups:
            picked = [i for i, r in enumerate(runs) if r in wanted]
            if not picked:
                continue
            rows_index = index[picked]
            draws = torch.stack([u[runs[i]] for i in picked]).cpu()
            ancestors[rows_index] = _systematic(log_w[rows_index], draws) + rows_index[:, :1]
            resampled[rows_index] = True
        return ancestors, resampled


def _device(generator: torch.Generator | None):
    return generator.device if generator is not None else "cpu"


def runs_log_ess(log_w: torch.Tensor, sizes: list[int]) -> list[float]:
    """log ESS of each run's weights, the runs' particles consecutive in log_w [Σ N_r]; −inf for a run whose every
    weight is 0 (``RunLayout.statistics``).

    Examples
    --------
    >>> lw = torch.log(torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 2.0], dtype=torch.float64))
    >>> [round(math.exp(v), 6) for v in runs_log_ess(lw, [2, 2, 3])]
    [2.0, 1.0, 3.0]
    """
    return RunLayout(sizes).statistics(log_w)[0]


def _systematic(log_w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Systematic resampling of each row of log_w [..., N] with its u [...] (CPU float64): a_k = min{i : Σ_{j≤i} W_j >
    (u + k) / N}, [..., N]."""
    n = log_w.shape[-1]
    cdf = torch.cumsum(torch.softmax(log_w.to("cpu", torch.float64), -1), -1)
    # rounding: the last particle closes the interval
    cdf[..., -1] = 1.0
    return inverse_cdf(
        None, (u.unsqueeze(-1) + torch.arange(n, dtype=torch.float64)) / n, cumulative=cdf, per_row=True
    )


def systematic_resample(log_w: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N ancestors: a_k = min{i : Σ_{j≤i} W_j > (u + k) / N}, one u ~ U[0, 1); E[#children of i] = N W_i. [N] CPU.

    log_w [..., N]: each row resampled on its own (row by row the numbers of resampling it alone), its u drawn from
    the generator in row order: [..., N]."""
    u = torch.stack(
        [
            torch.rand((), generator=generator, device=_device(generator), dtype=torch.float64)
            for _ in range(log_w.shape[:-1].numel())
        ]
    ).cpu()
    return _systematic(log_w, u.view(log_w.shape[:-1]))
