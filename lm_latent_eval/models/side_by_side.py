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


def document_rows(sizes, lengths, device, which=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each particle's document's first and last row [Σ K_d] of tables stacked positions after positions: document d
    reads table ``which[d]`` (default d), ``lengths`` are the tables'."""
    offsets = torch.tensor([0, *lengths[:-1]], device=device).cumsum(0)
    repeats = torch.tensor(list(sizes), device=device)
    last = offsets + torch.tensor(list(lengths), device=device) - 1
    if which is not None:
        index = torch.tensor(list(which), device=device)
        offsets, last = offsets[index], last[index]
    return offsets.repeat_interleave(repeats), last.repeat_interleave(repeats)


def same_texts(xs) -> tuple[list[torch.Tensor], list[int]]:
    """The distinct texts among xs [T_d] and the index of each x among them. The sample blocks of one document
    (``estimators.smc.Lane``) share its tensor: texts are told apart by their memory (storage address, length,
    stride, dtype, device), never by a device read, so two equal texts in different tensors stay two."""
    index: dict[tuple, int] = {}
    texts, which = [], []
    for x in xs:
        key = (x.data_ptr(), x.numel(), x.stride(), x.dtype, x.device)
        if key not in index:
            index[key] = len(texts)
            texts.append(x)
        which.append(index[key])
    return texts, which
