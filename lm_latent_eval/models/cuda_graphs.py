"""CUDA graphs around a sampler's per-token step: one graph launch per token instead of ~150 kernel launches.

A sampler's token loop does three things per token: draw its uniforms from the caller's generator, run the step
kernel on them (draw z_t by inverse CDF, score it, update the particles' state), and write z_t and log q. With
``cuda_graphs`` in effect (``true`` on a CUDA device, or ``auto`` there for a model whose measured figures chose
graphs: ``resolve_cuda_graphs``) the step is written over static buffers (the
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
# each model's proposal says what ``auto`` means for it on a CUDA device (``CUDA_GRAPHS_AUTO``), from its measured
# figures (docs/speed.md, CUDA graphs)
DEFAULT_CUDA_GRAPHS = "auto"
CUDA_GRAPHS_HELP = (
    "capture the sampler's per-token step in a CUDA graph: true, false or auto (the default: the model's measured "
    "choice on a CUDA device, on for KGLM, off for EntityNLM; docs/speed.md); no effect on the CPU"
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


def resolve_cuda_graphs(setting, device: torch.device | str, auto: bool) -> bool:
    """Whether a sampler with this ``cuda_graphs`` setting captures its step on ``device``.

    Parameters
    ----------
    setting : str, bool or None
        ``"true"``, ``"false"`` or ``"auto"`` (anything ``parse_cuda_graphs`` accepts; None: the default, auto).
    device : torch.device or str
        Where the sampler runs: graphs exist on CUDA devices only, so on any other device the answer is False.
    auto : bool
        What ``"auto"`` means on a CUDA device for this model: its proposal's ``CUDA_GRAPHS_AUTO``, chosen from the
        measured figures (True for KGLM, False for EntityNLM).

    Returns
    -------
    bool
        True for ``"true"`` on CUDA, and for ``"auto"`` on CUDA when ``auto``; else False.

    Examples
    --------
    >>> resolve_cuda_graphs("auto", "cuda:0", auto=True), resolve_cuda_graphs("auto", "cuda", auto=False)
    (True, False)
    >>> resolve_cuda_graphs("auto", "cpu", auto=True), resolve_cuda_graphs("true", "cpu", auto=True)
    (False, False)
    """
    text = parse_cuda_graphs(setting)
    on_cuda = torch.device(device).type == "cuda"
    return on_cuda and (text == "true" or (text == "auto" and bool(auto)))


def graphs_in_effect(model, device: torch.device | str) -> bool:
    """Whether ``model``'s sampler (a model with a ``proposal``, or the proposal itself) captures its step on
    ``device``: ``resolve_cuda_graphs`` of its ``cuda_graphs`` setting and its proposal's ``CUDA_GRAPHS_AUTO``; False
    for a model without the setting."""
    proposal = getattr(model, "proposal", model)
    setting = getattr(proposal, "cuda_graphs", None)
    if setting is None:
        return False
    return resolve_cuda_graphs(setting, device, getattr(proposal, "CUDA_GRAPHS_AUTO", False))


class GraphsOfProposal:
    """Mixin of a model whose ``proposal`` samples: the model's ``cuda_graphs`` setting is its proposal's (whose
    ``CUDA_GRAPHS_AUTO`` says what ``auto`` means on a CUDA device)."""

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
