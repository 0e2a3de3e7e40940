"""CUDA graphs around a sampler's per-token step: one graph launch per token instead of ~150 kernel launches.

A sampler's token loop does three things per token: draw its uniforms from the caller's generator, run the step
kernel on them (draw z_t by inverse CDF, score it, update the particles' state), and write z_t and log q. With
``cuda_graphs`` in effect (``true`` or ``auto`` on a CUDA device) the step is written over static buffers (the
uniforms u, the position t as a one-element tensor, the particles' state, z and log q) and captured once per call
into a ``torch.cuda.CUDAGraph``, then replayed at each token after the uniforms are drawn into u by the same
``torch.rand`` call as the eager loop. No random number is drawn inside the graph, so the generator advances exactly
as in eager mode; the graph replays the kernels eager mode launches, on the same shapes, so z and log q are meant to
be eager's bit for bit (tests/models/test_cuda_graphs.py checks it on a GPU). On any other device the eager loop
runs: numbers on the CPU never depend on the setting.

``TokenLoop(step, reset, capture)`` runs ``step()`` (which reads and writes only static buffers) once per call:
captured and replayed when ``capture``, else eagerly (the CPU tests run the static-buffer step this way against the
eager loop). Capturing needs one warm-up step (lazy per-document tables, cuBLAS handles); ``reset()`` then restores
the buffers it changed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

CUDA_GRAPHS_SETTINGS = ("false", "true", "auto")
# eager until a GPU run shows the graph path faster with eager's draws (bench/RESULTS.md)
DEFAULT_CUDA_GRAPHS = "false"
CUDA_GRAPHS_HELP = (
    "capture the sampler's per-token step in a CUDA graph: true, false or auto (= true on a CUDA device); "
    "no effect on the CPU"
)


def parse_cuda_graphs(value) -> str:
    """The ``cuda_graphs`` setting as ``"true"``, ``"false"`` or ``"auto"`` (bools and 1/0/yes/no accepted)."""
    if value is None:
        return DEFAULT_CUDA_GRAPHS
    text = str(value).strip().lower()
    text = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(
        text, text
    )
    if text not in CUDA_GRAPHS_SETTINGS:
        raise ValueError(f"cuda_graphs must be one of {', '.join(CUDA_GRAPHS_SETTINGS)}, got {value!r}")
    return text


def graphs_in_effect(setting: str, device: torch.device | str) -> bool:
    """Whether a sampler with this setting captures its step on ``device``: ``true`` / ``auto`` on CUDA only."""
    return parse_cuda_graphs(setting) != "false" and torch.device(device).type == "cuda"


class GraphsOfProposal:
    """Mixin of a model whose ``proposal`` samples: the model's ``cuda_graphs`` setting is its proposal's."""

    @property
    def cuda_graphs(self) -> str:
        """Whether q's sampler replays its per-token step from a CUDA graph: "true", "false" or "auto"."""
        return self.proposal.cuda_graphs

    @cuda_graphs.setter
    def cuda_graphs(self, value) -> None:
        self.proposal.cuda_graphs = parse_cuda_graphs(value)


class TokenLoop:
    """``step()`` once per call, replayed from a CUDA graph captured here when ``capture``, else run eagerly."""

    def __init__(self, step: Callable[[], None], reset: Callable[[], None], capture: bool):
        self.step, self.graph = step, None
        if capture:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                # warm-up, outside the capture: lazy tables, library handles, allocator pools
                step()
            torch.cuda.current_stream().wait_stream(side)
            reset()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                step()

    def __call__(self) -> None:
        if self.graph is None:
            self.step()
        else:
            self.graph.replay()


def copy_fields(target, source) -> None:
    """Copy every tensor field of dataclass ``source`` into the same field of ``target`` in place (static buffers);
    fields that are the same tensor are left alone."""
    for name in target.__dataclass_fields__:
        dst, src = getattr(target, name), getattr(source, name)
        if isinstance(dst, torch.Tensor) and dst is not src:
            dst.copy_(src)
