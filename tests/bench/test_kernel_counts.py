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
