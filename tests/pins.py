"""Comparison with numbers pinned on the machine that recorded them (tests/models/*/test_*_pinned.py).

Float32 kernels round differently on other CPUs and torch builds: on an Intel Xeon with torch 2.11 the pinned
log p of the bundled EntityNLM, KGLM and RNNG moved by up to 2e-6 (1.5e-8 relative) with the same code. So a pin
holds to its own tolerance (1e-9 for most) on the recording platform, and to float32 rounding (1e-6 relative to
max(1, |value|)) elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

RECORDED_ON = ("2.13.0+cpu", "AVX512", "AMD EPYC")  # torch build, CPU vector ISA, CPU model of the recording
FLOAT32_REL = 1e-6


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def recorded_here() -> bool:
    """Same torch build, vector ISA and CPU model as the recording: float32 kernels then round identically."""
    return (torch.__version__, torch.backends.cpu.get_cpu_capability(), cpu_model()) == RECORDED_ON


def pinned(values, abs: float, rel: float = 0.0):
    """pytest.approx of pinned values: to (abs, rel) on the recording platform, to float32 rounding elsewhere."""
    if recorded_here():
        return pytest.approx(values, abs=abs, rel=rel)
    return pytest.approx(values, abs=max(abs, FLOAT32_REL), rel=max(rel, FLOAT32_REL))
