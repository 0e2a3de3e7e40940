"""Where a run's model goes when nobody asked: the CPU for a checkpoint too small for a GPU to pay, else the GPU.

A latent LM's estimator steps its particles token by token; with a tiny network each step's operations are kernel
launches and host synchronisations, not arithmetic, so the bundled checkpoints gain little or nothing on a GPU, while
full-size models and large K do (measured: docs/speed.md, "GPU" and "Documents side by side"). So, where the device
was not asked for (no ``device`` in model_args and lm-eval's CLI default ``--device cuda:0``) on a machine with CUDA,
a local checkpoint whose weight files total less than ``SMALL_CHECKPOINT_BYTES`` runs on the CPU, said in one log
line and recorded in the results (``device_choice``); a device that was asked for is always used. The threshold lies
between the largest checkpoint measured no faster on the GPU and the smallest measured faster; rerun the GPU commands
of docs/speed.md to move it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..models import MODELS, default_checkpoint

# weight files below this size run on the CPU unless a device was asked for (the module docstring)
SMALL_CHECKPOINT_BYTES = 4 * 2**20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".npz", ".npy", ".pkl")


@dataclass(frozen=True)
class DeviceChoice:
    """The device a run uses and, where the backend chose it over the one by default, why (one line)."""

    device: torch.device
    reason: str = ""


def weight_bytes(checkpoint: Path | str | None) -> int | None:
    """Bytes of the weight files of a local checkpoint folder or file, None for anything else (a Hub id).

    Examples
    --------
    >>> from lm_latent_eval.models import default_checkpoint
    >>> 0 < weight_bytes(default_checkpoint("hmm")) < SMALL_CHECKPOINT_BYTES
    True
    >>> weight_bytes("someone/some-model") is None
    True
    """
    if checkpoint is None:
        return None
    path = Path(checkpoint)
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES)


def default_location(args) -> Path | str | None:
    """The checkpoint a backend will load (``BackendArgs``): ``pretrained`` as given, else the bundled checkpoint of
    one of our models, else None (a user's class that builds its own).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> default_location(SimpleNamespace(pretrained=None, model="hmm")).name
    'hmm'
    """
    if args.pretrained is not None:
        return args.pretrained
    return default_checkpoint(args.model) if args.model in MODELS else None


def choose_device(device: torch.device, asked: bool, checkpoint: Path | str | None) -> DeviceChoice:
    """The device to run on: ``device`` where it was asked for, is not CUDA, or the checkpoint is not a small local
    one; else the CPU (module docstring).

    Parameters
    ----------
    device : torch.device
        The device by default or as asked for.
    asked : bool
        Whether the user asked for it (model_args ``device``, or a ``--device`` other than lm-eval's default).
    checkpoint : Path or str or None
        The checkpoint to load (a local folder or file; None or a Hub id: not judged).

    Returns
    -------
    DeviceChoice

    Examples
    --------
    >>> from lm_latent_eval.models import default_checkpoint
    >>> small = default_checkpoint("kglm")
    >>> choose_device(torch.device("cuda"), False, small).device
    device(type='cpu')
    >>> choose_device(torch.device("cuda"), True, small).device, choose_device(torch.device("cpu"), False, small).reason
    (device(type='cuda'), '')
    """
    size = weight_bytes(checkpoint)
    if asked or device.type != "cuda" or size is None or size >= SMALL_CHECKPOINT_BYTES:
        return DeviceChoice(device)
    return DeviceChoice(
        torch.device("cpu"),
        f"device=cpu chosen over {device}: the checkpoint's weights ({size / 2**20:.1f} MB) are below "
        f"{SMALL_CHECKPOINT_BYTES // 2**20} MB, where a GPU gains little (the README's job: 4 s of estimation on an "
        "H200, 5 s on its CPU; docs/speed.md); model_args device=cuda runs it on the GPU anyway",
    )
