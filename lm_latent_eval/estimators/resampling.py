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
    documents' blocks): every run's statistics in a fixed number of segment reductions, and the runs grouped by
    size, so that each group's resampling takes one batched operation (the numbers of each run alone, however many
    runs and documents share the layout: the HMM and other cheap models are loop-bound, and on a GPU every operation
    is a launch).

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
        self._lengths = torch.tensor(self.sizes)
        self._lengths2 = self._lengths.expand(2, -1)
        self._run_of = torch.repeat_interleave(torch.arange(len(self.sizes)), self._lengths)

    def _index(self, runs: list[int], n: int) -> torch.Tensor:
        return torch.tensor([self.starts[r] for r in runs]).unsqueeze(1) + torch.arange(n)

    def statistics(self, log_w: torch.Tensor) -> tuple[list[float], list[float]]:
        """(log ESS, log mean_k w_k) of every run's weights log_w [Σ N_r] (float64, no NaN or +inf); −inf for both
        where every weight of the run is 0.

        With m_r = max_k log w_k, s_j = Σ_k exp(j (log w_k − m_r)): log ESS = 2 log s_1 − log s_2 and
        log mean = m_r + log s_1 − log N_r. Each run is reduced by itself (``torch.segment_reduce`` over its
        consecutive particles), the logs taken on the host: the numbers of a run alone, beside any other runs, in
        eight operations however many runs and sizes (on a GPU every operation is a launch).
        """
        top = torch.segment_reduce(log_w, "max", lengths=self._lengths)
        # a run whose every weight is 0: m_r = −inf and its sums NaN (−inf − (−inf))
        w = torch.exp(log_w - top.index_select(0, self._run_of))
        sums = torch.segment_reduce(torch.stack([w, w.square()]), "sum", lengths=self._lengths2, axis=1)
        values = torch.cat([top, sums.view(-1)]).tolist()
        R = len(self.sizes)
        log_ess, log_mean = [-math.inf] * R, [-math.inf] * R
        for r, (m, s1, s2, n) in enumerate(zip(values[:R], values[R : 2 * R], values[2 * R :], self.sizes)):
            if m > -math.inf:
                log_ess[r], log_mean[r] = 2 * math.log(s1) - math.log(s2), m + math.log(s1) - math.log(n)
        return log_ess, log_mean

    def resample(
        self, log_w: torch.Tensor, chosen: list[int], generators: list
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(ancestors of every particle [Σ N_r], mask [Σ N_r] of the particles resampled), on the CPU: the runs
        ``chosen`` (in order) resampled systematically among their own particles, each with one u ~ U[0, 1) from
        ``generators[r]`` (its document block's stream: the runs of one stream drawn in one call, in the order of
        ``chosen``, the numbers of one draw per run), the others their own ancestors."""
        ancestors = torch.arange(self.starts[-1])
        resampled = torch.zeros(self.starts[-1], dtype=torch.bool)
        by_stream: dict[int, list[int]] = {}
        for r in chosen:
            by_stream.setdefault(id(generators[r]), []).append(r)
        u = torch.zeros(len(self.sizes), dtype=torch.float64)
        for runs in by_stream.values():
            g = generators[runs[0]]
            u[runs] = torch.rand(len(runs), generator=g, device=_device(g), dtype=torch.float64).cpu()
        wanted = set(chosen)
        for _, runs, index, _ in self.groups:
            picked = [i for i, r in enumerate(runs) if r in wanted]
            if not picked:
                continue
            rows_index = index[picked]
            draws = u[[runs[i] for i in picked]]
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
