"""Tensor helpers shared by the models and the estimators: inverse-CDF draws, distinct rows, padded rows.

This module imports torch only (never ``models`` or ``estimators``), since both depend on it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

# devices where a step computes only the rows that need it (selected by a data-dependent index, whose size the host
# must read: free on the CPU, a synchronisation on an accelerator), rather than every row, masked; the same numbers
SELECT_ROWS_ON = ("cpu",)


def selects_rows(device: torch.device | str) -> bool:
    """Whether a step on ``device`` computes only the rows that need it (``SELECT_ROWS_ON``): row by row the same
    numbers as every row, masked, which keeps an accelerator's loop free of host synchronisation.

    Examples
    --------
    >>> selects_rows("cpu"), selects_rows(torch.device("meta"))
    (True, False)
    """
    return torch.device(device).type in SELECT_ROWS_ON


def inverse_cdf(
    weights: torch.Tensor | None,
    u: torch.Tensor,
    cumulative: torch.Tensor | None = None,
    per_row: bool = False,
    total: torch.Tensor | None = None,
) -> torch.Tensor:
    """The inverse-CDF draw i = min{i : Σ_{j≤i} w_j > u · Σ_j w_j} of each row of weights, one uniform u per row.

    weights: w ≥ 0, [..., n], unnormalised, in the dtype the caller chose for the cumulative sum. u: [...] in [0, 1)
    (the batch shape of weights; any shape when weights is one-dimensional, shared by every u); with ``per_row``,
    [..., m]: m uniforms for each row (systematic resampling of several runs at once). ``cumulative``: Σ_{j≤i} w_j
    [..., n] when the caller has it already (a cached table); then ``weights`` may be None. ``total`` [...]: the
    cumulative sum of a row's first n' entries, to draw from those alone (the entries after them, any numbers ≥ 0,
    are never drawn); default the last, Σ_j w_j. Returns LongTensor [...] ([..., m] with ``per_row``). The
    comparison runs in the wider of u's and the cumulative sum's dtypes (a float32 cumulative sum is widened
    exactly). Never an index past the last positive weight: where u times the total does not fall below it (all
    weights zero, or u rounded to 1), the first i whose cumulative sum reaches the total: one search for the smaller
    of u times the total and the largest number below the total, since the first i whose cumulative sum is above
    that number is the first whose cumulative sum reaches the total.

    Examples
    --------
    >>> w, u = torch.tensor([[1.0, 1.0, 8.0]]), torch.tensor([0.6])
    >>> inverse_cdf(w, u)  # from all three weights
    tensor([2])
    >>> inverse_cdf(None, u, w.cumsum(-1), total=torch.tensor([2.0]))  # from the first two alone
    tensor([1])
    """
    cdf = weights.cumsum(-1) if cumulative is None else cumulative
    dtype = torch.promote_types(cdf.dtype, u.dtype)
    cdf = cdf.to(dtype)
    # [..., 1]
    total = cdf[..., -1:] if total is None else total.to(dtype).unsqueeze(-1)
    below = torch.nextafter(total, torch.full_like(total, -math.inf))
    # [..., 1], or [..., m] per row
    target = u.to(dtype) * total if per_row else u.to(dtype).unsqueeze(-1) * total
    drawn = torch.searchsorted(cdf, torch.minimum(target, below), right=True)
    return drawn if per_row else drawn.squeeze(-1)


# entries of one block of ``log_normalizer``: on the CPU 2^18 (1-2 MiB, so that the log-sum-exp's temporaries stay
# in cache); on an accelerator 2^24 where it widens to float64 (128 MiB: a large vocabulary costs no second copy)
# and every row at once where it does not
CPU_NORMALIZER_ENTRIES, WIDENED_NORMALIZER_ENTRIES = 1 << 18, 1 << 24


def normalizer_blocks(rows: int, entries_per_row: int, block_entries: int) -> list[slice]:
    """Consecutive blocks of ``rows`` rows of at most ``block_entries`` entries each, but at least two rows each
    (the last block takes a lone row left over): a multi-threaded CPU reduction splits a lone row across threads,
    which rounds otherwise, while it reduces each row of a block of two or more whole, as one call over all rows does.

    Examples
    --------
    >>> normalizer_blocks(5, 100, 200)
    [slice(0, 2, None), slice(2, 5, None)]
    >>> normalizer_blocks(1, 100, 10)
    [slice(0, 1, None)]
    """
    step = max(2, block_entries // max(entries_per_row, 1))
    starts = list(range(0, rows, step))
    if len(starts) > 1 and rows - starts[-1] == 1:
        starts.pop()
    return [slice(a, b) for a, b in zip(starts, starts[1:] + [rows])]


def log_normalizer(
    logits: torch.Tensor, dtype: torch.dtype = torch.float32, block_entries: int | None = None
) -> torch.Tensor:
    """log Σ_v exp(logits[..., v]) [...], float64, of a softmax's logits [..., V] of any dtype, summed in ``dtype``.

    float32 (the word heads of KGLM and EntityNLM): the float32 logits as they are (bfloat16 ones widened), rounding
    log Σ by about 1e-7; float64 (the masked LMs, whose one-token conditionals sum to 1 to float64 rounding): the
    logits widened block by block. Blocks of rows (``normalizer_blocks``) of at most ``block_entries`` entries
    (default: ``CPU_NORMALIZER_ENTRIES`` on the CPU, ``WIDENED_NORMALIZER_ENTRIES`` where an accelerator widens, else
    every row); on the CPU row by row the same numbers as one call over every row.

    Examples
    --------
    >>> logits = torch.tensor([[0.0, 1e-8, -1e-8]])
    >>> float(log_normalizer(logits, torch.float64) - math.log(3)) < 1e-15
    True
    >>> log_normalizer(torch.zeros(2, 4))
    tensor([1.3863, 1.3863], dtype=torch.float64)
    """
    if block_entries is None:
        widens = dtype == torch.float64 and logits.dtype != torch.float64
        block_entries = CPU_NORMALIZER_ENTRIES if logits.device.type == "cpu" else logits.numel()
        block_entries = min(block_entries, WIDENED_NORMALIZER_ENTRIES) if widens else block_entries
    flat = logits.reshape(-1, logits.shape[-1])
    blocks = normalizer_blocks(flat.shape[0], flat.shape[1], block_entries)
    parts = [flat[block].to(dtype).logsumexp(-1).double() for block in blocks]
    if not parts:
        return flat.new_zeros(logits.shape[:-1], dtype=torch.float64)
    return (parts[0] if len(parts) == 1 else torch.cat(parts)).reshape(logits.shape[:-1])


def tempered_draw(logits: torch.Tensor, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One index per row of softmax(logits / τ) [K, n] by ``inverse_cdf`` with one u ~ U[0, 1) per row, in the logits'
    dtype: (index [K], its log probability under the tempered distribution [K])."""
    log_p = torch.log_softmax(logits / temperature, -1)
    u = torch.rand(log_p.shape[0], generator=generator, dtype=log_p.dtype, device=log_p.device)
    idx = inverse_cdf(log_p.exp(), u)
    return idx, log_p.gather(-1, idx[:, None]).squeeze(-1)


@functools.cache
def _row_codes(width: int) -> torch.Tensor:
    """The fixed random odd multipliers c_1..c_width of ``row_keys`` (seed 0), on the CPU."""
    return torch.randint(-(2**62), 2**62, (width,), generator=torch.Generator().manual_seed(0)) * 2 + 1


def row_keys(rows: torch.Tensor) -> torch.Tensor:
    """Σ_j rows_j c_j mod 2^64 for integer rows [K, A], with fixed random odd c_j: [K] (equal rows, equal keys)."""
    return (rows.long() * _row_codes(rows.shape[1]).to(rows.device)).sum(1)


def first_of_each(inverse: torch.Tensor, num_groups: int) -> torch.Tensor:
    """The first member of each group: for group ids inverse [K] (values 0..num_groups − 1, each taken), the
    smallest k of each group, [num_groups].

    Examples
    --------
    >>> first_of_each(torch.tensor([1, 0, 1, 2, 0]), 3).tolist()
    [1, 0, 3]
    """
    K = inverse.shape[0]
    order = torch.arange(K, device=inverse.device)
    return torch.full((num_groups,), K, device=inverse.device).scatter_reduce(0, inverse, order, "amin")


def distinct_rows(rows: torch.Tensor, min_rows: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of rows [K, A] (integers) in order of first appearance, then copies of the first up to
    ``min_rows`` rows in all, [U, A], and the index of each row among them, [K] (so distinct[index] == rows): a model
    scores each distinct configuration once and copies the value to every draw of it.

    Rows are grouped by ``row_keys`` and each group is checked to hold one row; ``torch.unique(dim=0)`` (exact,
    slower) only if two distinct rows ever share a key."""
    K, dev = rows.shape[0], rows.device
    if K == 0:
        return rows, torch.zeros(0, dtype=torch.long, device=dev)
    keys, inverse = torch.unique(row_keys(rows), return_inverse=True)
    first = first_of_each(inverse, keys.shape[0])
    # a hash collision
    if not torch.equal(rows[first][inverse], rows):
        _, inverse = torch.unique(rows, dim=0, return_inverse=True)
        first = first_of_each(inverse, int(inverse.max()) + 1)
    order = first.argsort()
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=dev))
    distinct = rows[first[order]]
    padding = distinct[:1].expand(max(min_rows - distinct.shape[0], 0), -1)
    return torch.cat([distinct, padding]), rank[inverse]


def pad_rows(rows: Sequence[Sequence[int]], pad: int = -1) -> torch.Tensor:
    """Integer lists of lengths T_k as LongTensor [K, max(max_k T_k, 1)], padded with ``pad`` on the right."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), pad, dtype=torch.long)
    for k, row in enumerate(rows):
        out[k, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """What the process's cgroup (v2) still allows: memory.max − memory.current; None without a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as fh:
            limit = fh.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as fh:
            return max(0, int(limit) - int(fh.read().strip()))
    except (OSError, ValueError):
        return None


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device``: an accelerator's free memory, or the host's available
    memory (``/proc/meminfo``'s MemAvailable, within the cgroup's limit where one is set); None where unknown.

    Examples
    --------
    >>> available = available_memory("cpu")
    >>> available is None or available > 0
    True
    """
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    known = [b for b in (_meminfo_available(), _cgroup_available()) if b is not None]
    return min(known) if known else None
