"""bench/kernel_counts.py: the bytes an operation touches are attributed to the package line that asked for them."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from kernel_counts import count

from lm_latent_eval.tensors import inverse_cdf


def test_bytes_by_line_names_the_package_line_and_adds_up():
    weights, u = torch.rand(4, 8), torch.rand(4)
    counter = count(lambda: inverse_cdf(weights, u))
    assert counter.bytes > 0 and sum(counter.bytes_by_line.values()) == counter.bytes
    assert counter.bytes_by_line and all(line.startswith("tensors.py:") for line in counter.bytes_by_line)
    outside = count(lambda: weights * 2)
    assert set(outside.bytes_by_line) == {"outside"}


def test_a_binary_search_counts_the_entries_it_probes():
    """searchsorted reads ⌈log2(n + 1)⌉ entries of its sorted row of n per value, not the row: 10 of 1,000."""
    rows, values = torch.rand(3, 1000, dtype=torch.float64).cumsum(-1), torch.rand(3, 1, dtype=torch.float64)
    counter = count(lambda: torch.searchsorted(rows, values))
    assert counter.ops == 1 and counter.bytes == 3 * 8 + 3 * 8 + 3 * 10 * 8
