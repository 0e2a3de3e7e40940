"""Importance sampling: log w_k = log p(x, z_k) − log q_τ(z_k | x), drawn in fixed-size blocks of particles."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import InputError
from ..protocol import LatentLM, has_unknown_word_penalty, num_particles, select_particles
from .seeding import document_generator, stage_block

SAMPLE_BLOCK = (
    1024  # particles drawn per random stream on the CPU; part of the seeding scheme (never batch_size)
)
ACCELERATOR_SAMPLE_BLOCK = (
    16384  # on a GPU: each block is one token loop, and kernel launches, not K, set its time
)


def sample_block(device: torch.device | str = "cpu") -> int:
    """Particles drawn per random stream on ``device`` (1,024 on the CPU, 16,384 on an accelerator). Samples depend on
    the seed, the document and the device (a GPU's generators draw other numbers anyway), never on batch_size."""
    return SAMPLE_BLOCK if torch.device(device).type == "cpu" else ACCELERATOR_SAMPLE_BLOCK


def check_sampling_args(num_samples: int, temperature: float, doc: str = "document") -> None:
    """Reject K ≤ 0 and τ ≤ 0 (or non-finite) with an error naming the document."""
    if not isinstance(num_samples, (int, np.integer)) or isinstance(num_samples, bool) or num_samples <= 0:
        raise InputError(f"{doc}: num_samples must be a positive integer, got {num_samples!r}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise InputError(f"{doc}: temperature must be a finite number > 0, got {temperature!r}")


def _check_log_q(log_q: torch.Tensor, k: int, doc: str) -> torch.Tensor:
    log_q = log_q.detach().to("cpu", torch.float64)
    if log_q.shape != (k,):
        raise ValueError(f"{doc}: proposal returned log_q of shape {tuple(log_q.shape)} for {k} samples")
    bad = ~torch.isfinite(log_q)
    if bad.any():
        raise ValueError(
            f"{doc}: proposal returned {int(bad.sum())} non-finite log q values (e.g. {log_q[bad][0].item()}) "
            "for samples it drew; log q must be finite for every drawn z"
        )
    return log_q


def _check_log_joint(log_p: torch.Tensor, k: int, doc: str) -> torch.Tensor:
    log_p = log_p.detach().to("cpu", torch.float64)
    if log_p.shape != (k,):
        raise ValueError(f"{doc}: log_joint returned shape {tuple(log_p.shape)} for {k} samples")
    if torch.isnan(log_p).any() or torch.isposinf(log_p).any():
        raise ValueError(
            f"{doc}: log_joint returned NaN or +inf for {int((~torch.isfinite(log_p) & ~torch.isneginf(log_p)).sum())} samples"
        )
    return log_p


@torch.no_grad()
def importance_log_weights(
    model: LatentLM,
    x: torch.Tensor,
    *,
    num_samples: int,
    temperature: float = 1.0,
    peek: bool = True,
    seed: int = 0,
    document: str = "",
    batch_size: int | None = None,
    device: torch.device | str = "cpu",
    progress=None,
    unknown_penalty: np.ndarray | None = None,
    stage: int = 0,
) -> np.ndarray:
    """The K log importance weights of one document, float64 [K], in O(block + batch_size) model memory (batch_size
    None: one block per log_joint call).

    ``unknown_penalty`` (float64 [K], optional): filled with each sample's ``model.unknown_word_penalty`` (nats).
    ``stage`` > 0 draws from fresh random streams (the precision target's later stages; ``seeding.stage_block``).
    """
    doc = f"document {document[:60]!r}"
    check_sampling_args(num_samples, temperature, doc)
    block_size = sample_block(device)
    chunk = int(batch_size or block_size)
    if chunk <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size!r}")
    out = np.empty(num_samples, dtype=np.float64)
    for block, start in enumerate(range(0, num_samples, block_size)):
        k = min(block_size, num_samples - start)
        gen = document_generator(seed, document, stage_block(block, stage), device=device)
        z, log_q = model.proposal.sample(x, k, temperature=temperature, peek=peek, generator=gen)
        if num_particles(z) != k:
            raise ValueError(f"{doc}: proposal returned {num_particles(z)} samples, asked for {k}")
        log_q = _check_log_q(log_q, k, doc)
        for s in range(0, k, chunk):
            e = min(k, s + chunk)
            log_p = _check_log_joint(model.log_joint(x, select_particles(z, slice(s, e))), e - s, doc)
            out[start + s : start + e] = (log_p - log_q[s:e]).numpy()
            if unknown_penalty is not None and has_unknown_word_penalty(model):
                penalty = model.unknown_word_penalty(x, select_particles(z, slice(s, e)))
                unknown_penalty[start + s : start + e] = penalty.detach().to("cpu", torch.float64).numpy()
        if progress is not None:
            progress.update(k)
    if np.isneginf(out).all():
        raise ValueError(
            f"{doc}: all {num_samples} samples have p(x, z) = 0: the proposal misses the support of the model"
        )
    return out
