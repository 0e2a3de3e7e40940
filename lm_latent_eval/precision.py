"""The precision of a run's matrix products: model_args ``precision=float32|tf32|bfloat16``, applied around estimation.

- ``float32`` (the default): IEEE float32 matrix products. On a CUDA device TF32 is switched off for cuBLAS and cuDNN
  while the run estimates (torch's own default lets cuDNN's LSTMs use TF32); on the CPU nothing changes.
- ``tf32``: float32 tensors, matrix products on a GPU's TF32 units (10 mantissa bits instead of 23): cuBLAS and cuDNN
  allowed TF32. It has no effect off CUDA: the precision in effect there is ``float32`` (``in_effect``).
- ``bfloat16``: ``torch.autocast`` to bfloat16 (8 mantissa bits): matrix products, and the operations autocast keeps in
  bfloat16 after them, run in bfloat16; parameters stay float32. On the CPU oneDNN is switched off while it runs (its
  bfloat16 LSTM needs AVX512-BF16, which many CPUs lack), and CPU autocast keeps softmax and log-softmax in bfloat16
  where CUDA's computes them in float32: the CPU's shift of log p̂ is not a GPU's (``bench/precision_shift.py``).

Whatever the precision, each document's log weights are summed and combined in float64 (``log_joint`` returns float64,
the estimators accumulate in it): a lower precision moves the terms, not the accumulation. What it moves is measured
against the Monte Carlo standard error by ``bench/precision_shift.py`` (bench/precision_shift/README.md); the default
stays ``float32`` until a GPU's measurement says a lower precision's shift is far inside that error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .errors import InputError

PRECISIONS = ("float32", "tf32", "bfloat16")
DEFAULT_PRECISION = "float32"
PRECISION_HELP = (
    "precision of the matrix products: float32 (default), tf32 (a GPU's TF32 units; no effect off CUDA) or bfloat16 "
    "(torch.autocast); log weights are summed in float64 whatever it is"
)


def check_precision(value) -> str:
    """``value`` as one of ``PRECISIONS`` (None: the default); an InputError in one line otherwise.

    Examples
    --------
    >>> check_precision(None), check_precision("TF32"), check_precision("torch.bfloat16")
    ('float32', 'tf32', 'bfloat16')
    >>> check_precision("float16")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: precision must be one of float32, tf32, bfloat16, got 'float16'
    """
    if value is None:
        return DEFAULT_PRECISION
    name = str(value).strip().lower().removeprefix("torch.")
    if name not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return name


def in_effect(precision: str, device: torch.device | str) -> str:
    """The precision that changes the numbers on ``device``: ``tf32`` is ``float32`` off CUDA.

    Examples
    --------
    >>> in_effect("tf32", "cpu"), in_effect("tf32", "cuda:0"), in_effect("bfloat16", "cpu")
    ('float32', 'tf32', 'bfloat16')
    """
    precision = check_precision(precision)
    if precision == "tf32" and torch.device(device).type != "cuda":
        return "float32"
    return precision


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device | str) -> Iterator[None]:
    """Run the block's matrix products on ``device`` at ``precision`` (see the module docstring); torch's settings
    are restored after it.

    Parameters
    ----------
    precision : str
        One of ``PRECISIONS``.
    device : torch.device or str
        Where the model runs.

    Examples
    --------
    >>> a = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    >>> with matmul_precision("bfloat16", "cpu"):
    ...     (a @ a.T).dtype
    torch.bfloat16
    >>> with matmul_precision("tf32", "cpu"):
    ...     torch.equal(a @ a.T, a @ a.T), (a @ a.T).dtype
    (True, torch.float32)
    """
    device_type = torch.device(device).type
    precision = check_precision(precision)
    with contextlib.ExitStack() as stack:
        if device_type == "cuda":
            stack.enter_context(_cuda_tf32(precision == "tf32"))
        if precision == "bfloat16":
            if device_type == "cpu":
                stack.enter_context(_onednn_off())
            stack.enter_context(torch.autocast(device_type, dtype=torch.bfloat16))
        yield


@contextlib.contextmanager
def _cuda_tf32(allow: bool) -> Iterator[None]:
    """cuBLAS's and cuDNN's TF32 switches set to ``allow`` for the block, then restored."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@contextlib.contextmanager
def _onednn_off() -> Iterator[None]:
    """oneDNN off for the block (torch's own CPU kernels instead), then restored."""
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def numerics_state(device_type: str) -> tuple:
    """What torch's current settings change in a float32 network's numbers on ``device_type`` (autocast and its
    dtype, the TF32 switches on CUDA): part of the key of every cached intermediate result, so that an encoding
    computed at one precision is never reused at another.

    Examples
    --------
    >>> numerics_state("cpu") == numerics_state("cpu")
    True
    >>> with matmul_precision("bfloat16", "cpu"):
    ...     numerics_state("cpu") != numerics_state("cuda")
    True
    """
    state = (torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))
    if device_type == "cuda":
        state += (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    return state
