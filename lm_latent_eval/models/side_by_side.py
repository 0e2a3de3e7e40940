"""What the models' ``protocol.DocumentBatchLM`` parts share: several documents' particles in one state, each
document's tables stacked positions after positions and its particles a consecutive segment."""

from __future__ import annotations

import torch


def lane_uniforms(sizes, lengths, generators, t: int, width: int, device) -> torch.Tensor:
    """The uniforms [Σ K_d, width] of step t of documents side by side: document d's K_d rows are the
    ``torch.rand(K_d, width)`` of its own generator where t < T_d (one operation each), zeros where it has ended
    (nothing drawn)."""
    u = torch.zeros(sum(sizes), width, dtype=torch.float64, device=device)
    start = 0
    for k, n, g in zip(sizes, lengths, generators):
        if t < n:
            u[start : start + k].uniform_(generator=g)  # torch.rand(k, width)'s numbers
        start += k
    return u


def document_rows(sizes, lengths, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each particle's document's first and last row [Σ K_d] of tables stacked positions after positions."""
    offsets = torch.tensor([0, *lengths[:-1]], device=device).cumsum(0)
    repeats = torch.tensor(list(sizes), device=device)
    last = offsets + torch.tensor(list(lengths), device=device) - 1
    return offsets.repeat_interleave(repeats), last.repeat_interleave(repeats)
