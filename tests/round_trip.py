"""Checkpoint round trips in the models' tests: save a model, load it back, draw from both with one seed."""

from __future__ import annotations

from pathlib import Path

import torch


def reloaded(model, folder: Path, **options):
    """``model`` written to ``folder`` by ``save_pretrained`` and read back by its class's ``from_pretrained`` (with
    ``options``), in eval mode."""
    model.save_pretrained(folder)
    return type(model).from_pretrained(str(folder), **options).eval()


def draws_with_one_seed(
    models: list, x: torch.Tensor, num_samples: int, temperature: float, peek: bool, seed: int
):
    """(z, log q) of each model's ``proposal.sample`` of x, every one from a generator seeded with ``seed``."""
    return [
        m.proposal.sample(x, num_samples, temperature, peek, torch.Generator().manual_seed(seed))
        for m in models
    ]
