"""What one IS estimate asks of a GPU, counted on any device: kernels (aten operations) and bytes per token.

``count(fn)`` runs ``fn`` under a ``TorchDispatchMode`` that counts every aten operation that computes (views and
other aliasing operations launch no kernel and are left out) and the bytes its tensors occupy (inputs and outputs;
for gathers and in-place scatters only the rows they read and write, for a binary search the entries it probes),
plus host synchronisations (``item``). On the
CPU the models take their CPU-only shortcuts (only the particles that start a mention go through some heads);
``accelerator_paths()`` switches those off, so the counts are those of the code a GPU runs.

``per_token_costs`` fits, for ``proposal.sample`` and for ``log_joint``, operations per token (independent of K) and
bytes = (a + b · K) per token from two document lengths and two particle counts. With a device's launch cost
(issue 13 measured 5.2 µs per kernel launch on the H100: 48.6 ms for 9,389 launches), memory bandwidth and peak
FLOP/s this gives a floor on a GPU's time for a workload: it cannot beat the launches its host issues one by one,
the bytes its kernels move, or the arithmetic; under a CUDA graph the sampler's launches become three per token (the
uniforms, the position, the replay).

    python bench/kernel_counts.py --model entitynlm [--k 256 --tokens 24]   # full size: where the sampler's bytes go
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GATHERS = {"index_select", "index", "gather", "embedding", "take"}  # read and write only what they select
SCATTERS = {"index_copy", "index_add", "index_put", "scatter", "scatter_add", "scatter_reduce", "index_fill"}
SEARCHES = {"searchsorted"}  # read ⌈log2(n + 1)⌉ entries of a sorted row of n per value searched
SYNCS = {"_local_scalar_dense", "nonzero", "item"}
H100_LAUNCH_SECONDS = (
    48.562e-3 / 9389
)  # issue 13's profile: cudaLaunchKernel time / launches (bench/RESULTS.md)
GRAPH_LAUNCHES_PER_TOKEN = 3  # torch.rand into u, t.fill_, graph.replay
HBM_BYTES_PER_SECOND = {"H100 PCIe": 2.0e12, "H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12}  # datasheets


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _package_line() -> str:
    """The innermost package frame on the stack as "path:line", the path below lm_latent_eval/ ("outside": none)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/lm_latent_eval/" in path:
            return f"{path.rsplit('/lm_latent_eval/', 1)[1]}:{frame.f_lineno}"
        frame = frame.f_back
    return "outside"


class KernelCounter(TorchDispatchMode):
    """Counts computing aten operations, the bytes they touch and host synchronisations while active."""

    def __init__(self):
        super().__init__()
        self.ops = self.bytes = self.syncs = 0
        self.bytes_by_op: collections.Counter = collections.Counter()  # aten operation name -> bytes
        # "models/kglm/latents.py:172" (the innermost package line that asked) -> bytes
        self.bytes_by_line: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__.rstrip("_")
        returns = func._schema.returns
        aliasing = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        if name in SYNCS:
            self.syncs += 1
        if aliasing:  # a view: no kernel
            return out
        self.ops += 1
        before = self.bytes
        if name in GATHERS:
            outs = _tensors(out)
            index = [t for t in _tensors((args, kwargs)) if not t.is_floating_point() and t.dim() <= 2]
            self.bytes += 2 * sum(map(_nbytes, outs)) + sum(map(_nbytes, index[-1:]))
        elif name in SEARCHES:  # the values, the indices found and the entries the search probes
            rows, values = args[0], args[1]
            probes = values.numel() * math.ceil(math.log2(rows.shape[-1] + 1)) * rows.element_size()
            self.bytes += _nbytes(values) + sum(map(_nbytes, _tensors(out))) + probes
        elif name in SCATTERS:  # the rows they write (read and written), their sources and indices
            target, rest = args[0], _tensors((args[1:], kwargs))
            self.bytes += 2 * sum(map(_nbytes, rest))
            if not func.overloadpacket.__name__.endswith("_"):  # out of place: copies the whole target first
                self.bytes += 2 * _nbytes(target)
            if name == "index_fill":
                dim = args[1] % max(target.dim(), 1)
                self.bytes += 2 * rest[0].numel() * _nbytes(target) // max(target.shape[dim], 1)
        else:
            self.bytes += sum(map(_nbytes, _tensors((args, kwargs)))) + sum(map(_nbytes, _tensors(out)))
        self.bytes_by_op[name] += self.bytes - before
        self.bytes_by_line[_package_line()] += self.bytes - before
        return out


def count(fn) -> KernelCounter:
    """Run ``fn()`` once under a KernelCounter and return it."""
    with KernelCounter() as counter:
        fn()
    return counter


def one_normalizer_pass():
    """``tensors.log_normalizer`` over every row at once on the CPU, as on an accelerator (no cache-sized blocks)."""
    from lm_latent_eval import tensors

    return mock.patch.object(tensors, "CPU_NORMALIZER_ENTRIES", 1 << 62)


@contextlib.contextmanager
def accelerator_paths():
    """The code a GPU runs, on the CPU: KGLM's sampler and scorer send every particle through the parent and edge heads,
    EntityNLM draws every particle's entity and length and moves memory rows for all particles, the RNNG keeps one
    row per particle (``SELECT_ROWS_ON``), not one per distinct history; softmax normalizers run over every row at
    once, not in the CPU's cache-sized blocks (``one_normalizer_pass``)."""
    from lm_latent_eval import tensors
    from lm_latent_eval.models.entitynlm import drawing, heads, latents, model, scoring

    modules = (latents, heads, scoring, drawing, model)
    saved = tensors.SELECT_ROWS_ON, [m.rows_apart for m in modules]
    tensors.SELECT_ROWS_ON = ()
    for m in modules:
        m.rows_apart = lambda *args: False
    try:
        with one_normalizer_pass():
            yield
    finally:
        tensors.SELECT_ROWS_ON = saved[0]
        for m, f in zip(modules, saved[1]):
            m.rows_apart = f


@dataclass
class Costs:
    """Per token of one IS call: kernels (independent of K) and bytes = fixed + per_particle · K; ``by_line``: the
    bytes per particle·token of each package source line on the longer document (``KernelCounter.bytes_by_line``)."""

    ops: float
    fixed_bytes: float
    per_particle_bytes: float
    syncs: float
    by_line: dict

    def bytes(self, K: int) -> float:
        return self.fixed_bytes + self.per_particle_bytes * K


@torch.no_grad()
def per_token_costs(model, x_short, x_long, ks=(32, 64)) -> tuple[Costs, Costs]:
    """(proposal.sample, log_joint) costs per token, from two documents (lengths T1 < T2) and two particle counts."""

    def measure(x, K):
        gen = torch.Generator().manual_seed(0)
        model.proposal.sample(
            x, 2, generator=gen
        )  # per-document caches (encoders, tables) outside the counts
        z, _ = model.proposal.sample(x, K, generator=torch.Generator().manual_seed(0))
        model.log_joint(x, z)
        sample = count(lambda: model.proposal.sample(x, K, generator=torch.Generator().manual_seed(0)))
        joint = count(lambda: model.log_joint(x, z))
        return sample, joint

    with accelerator_paths():
        table = {
            (T, K): measure(x, K)
            for x, T in ((x_short, x_short.numel()), (x_long, x_long.numel()))
            for K in ks
        }
    (t1, t2), (k1, k2) = (x_short.numel(), x_long.numel()), ks
    out = []
    for part in range(2):

        def slope(field, K, part=part):
            return (getattr(table[(t2, K)][part], field) - getattr(table[(t1, K)][part], field)) / (t2 - t1)

        b1, b2 = slope("bytes", k1), slope("bytes", k2)
        per_particle = (b2 - b1) / (k2 - k1)
        lines = [table[(t2, K)][part].bytes_by_line for K in ks]
        by_line = {line: (b - lines[0].get(line, 0)) / (k2 - k1) / t2 for line, b in lines[1].items()}
        out.append(Costs(slope("ops", k1), b1 - per_particle * k1, per_particle, slope("syncs", k1), by_line))
    return out[0], out[1]


def main(argv=None) -> None:
    """Bytes per particle and token of a full-size model's ``proposal.sample`` on the GPU's code path, by operation."""
    p = argparse.ArgumentParser(description="where a full-size sampler's bytes go (the GPU's code path)")
    p.add_argument("--model", choices=("entitynlm", "kglm"), default="entitynlm")
    p.add_argument("--k", type=int, default=256, help="particles")
    p.add_argument("--tokens", type=int, default=24, help="length of the synthetic document")
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import full_size

    model = full_size.BUILDERS[args.model][0]()
    (doc,) = full_size.model_documents(args.model, model, [args.tokens])
    x = model.tokenize(doc)
    with torch.no_grad(), accelerator_paths():
        model.proposal.sample(x, 2, generator=torch.Generator().manual_seed(0))  # per-document caches
        counter = count(lambda: model.proposal.sample(x, args.k, generator=torch.Generator().manual_seed(0)))
    per = counter.bytes / (args.k * x.numel())
    print(
        f"# kernel_counts.py: full-size {args.model} proposal.sample, K = {args.k}, {x.numel()} tokens, torch"
        f" {torch.__version__}: {counter.ops / x.numel():.0f} operations and {per / 1024:,.0f} KiB per particle"
        " and token; share of the bytes by operation:"
    )
    for name, nbytes in counter.bytes_by_op.most_common(args.top):
        print(f"  {name}: {nbytes / counter.bytes:.1%}")


if __name__ == "__main__":
    main()
