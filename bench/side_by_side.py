"""What one SMC evaluation asks of a device, documents one at a time against side by side: operations dispatched (each
a kernel launch on CUDA) per document·token and host synchronisations per document, counted on the CPU.

Every bundled model with the stepwise part estimates its bundled test corpus with SMC at a fixed K = 1,000 (no
precision target), one torch thread, in this one process, twice: each document alone (``ResolvedEstimator.estimate``,
what every run did before issue 45), then the whole corpus through the estimators' own path (``estimate_corpus``,
which hands the documents to ``Estimator.estimate_documents`` in chunks: side by side where the model offers
``protocol.DocumentBatchLM``). Operations are counted with ``kernel_counts.KernelCounter`` (a ``TorchDispatchMode``:
aten operations that compute; views launch nothing) with the accelerator's code paths (``kernel_counts.
accelerator_paths``: no CPU-only row selection) and an accelerator's chunks of documents and sample blocks
(``accelerator_chunks``: 65,536 particles, up to 131,072 for documents under 1,024 tokens, where the CPU takes
16,384; blocks of 16,384 particles where the CPU draws 1,024), so the counts are those a GPU would launch. Host
synchronisations are the operations that read a device value on the host (``item``, ``_local_scalar_dense``,
``nonzero``) plus the increments' copy to the host once per step. A model's own ``default_settings`` apply (the masked LM's: uniform
orders, no resampling), its row cache (``models/masked/row_cache.py``) is emptied before every run, so that no run
reads the rows of another, and a model with a ``predictor`` network (the masked LM) has its forward calls counted.
The two runs' log weights are compared: side by side must not change a number. Seconds are wall time without the counter, with the device's own chunks, best of two, on this machine (on a
GPU each operation costs a launch of about 5-30 µs, so the counts are the GPU's time for these small models).

    python bench/side_by_side.py                # writes bench/side_by_side/output.md
    python bench/side_by_side.py --device cuda --output cuda.md   # on a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_counts import KernelCounter, accelerator_paths

from lm_latent_eval.estimators import EstimatorSettings, importance, resolve, seeding, smc, workers
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.registry import with_model_defaults
from lm_latent_eval.models import MODELS, load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.protocol import has

OUTPUT = Path(__file__).resolve().parent / "side_by_side"
# the models with a bundled corpus (the model table's), the LDA last
BUNDLED = sorted((name for name, row in MODELS.items() if row.corpus), key=lambda name: name == "lda")


class StepCounter(KernelCounter):
    """``KernelCounter`` plus the copies of a tensor to the host (one per SMC step: the increments)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "to") and (kwargs or {}).get("device") is not None:
            self.syncs += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


DEVICE = torch.device("cpu")


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def accelerator_chunks():
    """Chunks of documents and sample blocks as large as an accelerator's (``side_by_side_particles("cuda", ...)``,
    ``sample_block("cuda")``) while counting: the operations a GPU would launch, whatever device counts them."""
    saved = seeding.side_by_side_particles, seeding.sample_block
    block = saved[1]("cuda")
    chunked, blocked = [smc, importance, workers], [smc, importance]
    for module in chunked:
        module.side_by_side_particles = lambda device="cpu", length=None: saved[0]("cuda", length)
    for module in blocked:
        module.sample_block = lambda device="cpu": block
    try:
        yield
    finally:
        for module in chunked:
            module.side_by_side_particles = saved[0]
        for module in blocked:
            module.sample_block = saved[1]


def fresh(model) -> None:
    """Forget the rows a model's row cache holds (the masked LM's): every run computes its own."""
    cache = getattr(model, "row_cache", None)
    if cache is not None:
        cache.clear()


@contextlib.contextmanager
def forward_calls(model):
    """A list of one int that counts the forward calls of the model's ``predictor`` network (None without one)."""
    network = getattr(model, "predictor", None)
    if not isinstance(network, torch.nn.Module):
        yield None
        return
    calls = [0]
    handle = network.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        yield calls
    finally:
        handle.remove()


def alone(run, texts):
    return {t: run.estimate(t, device=DEVICE) for t in dict.fromkeys(texts)}


def together(run, texts):
    return estimate_corpus(run, texts, device=DEVICE, progress=False)


def measure(name: str, num_samples: int, limit: int | None) -> dict:
    model = load_model(name)[0].to(DEVICE)
    texts = list(dict.fromkeys(bundled_documents(name)))[:limit]
    settings, _ = with_model_defaults(EstimatorSettings("smc", num_samples, seed=1, target_se=None), model)
    run = resolve(settings, model)
    tokens = sum(int(model.tokenize(t).numel()) for t in texts)
    row = {
        "model": name,
        "documents": len(texts),
        "tokens": tokens,
        "side_by_side": has(model, "document_batches"),
    }
    estimates = {}
    for label, fn in (("alone", alone), ("together", together)):
        fn(run, texts[:2])  # per-document caches and first-call work outside the figures
        fresh(model)
        with (
            accelerator_paths(),
            accelerator_chunks(),
            StepCounter() as counter,
            forward_calls(model) as calls,
        ):
            estimates[label] = fn(run, texts)
        seconds = []
        for _ in range(2):
            fresh(model)
            synchronize()
            start = time.perf_counter()
            fn(run, texts)
            synchronize()
            seconds.append(time.perf_counter() - start)
        row[label] = {
            "ops_per_doc_token": counter.ops / tokens,
            "syncs_per_doc": counter.syncs / len(texts),
            "seconds": min(seconds),
            "forward_calls": None if calls is None else calls[0],
        }
    a, b = estimates["alone"], estimates["together"]
    row["max_weight_difference"] = max(
        float(np.max(np.abs(a[t].log_weights - b[t].log_weights))) for t in texts
    )
    row["bit_identical"] = all(np.array_equal(a[t].log_weights, b[t].log_weights) for t in texts)
    return row


def markdown(rows: list[dict], num_samples: int) -> str:
    load = os.getloadavg()[0]
    lines = [
        f"# Documents side by side: SMC K = {num_samples:,}, one thread, on {DEVICE}",
        "",
        (
            f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
            f"{os.cpu_count()} cores{gpu_name()}, 1-minute load average {load:.2f} at the end. Operations and host "
            "synchronisations as a GPU issues them (accelerator code paths), counted on the device that ran."
        ),
        "",
        (
            "| model | documents / tokens | side by side | operations per document·token (alone → together) "
            "| ratio | host syncs per document (alone → together) "
            f"| seconds on this {'CPU' if torch.device(DEVICE).type == 'cpu' else 'GPU'} (alone → together) "
            "| network forward calls (alone → together) | same weights |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["alone"], r["together"]
        same = "bit for bit" if r["bit_identical"] else f"to {r['max_weight_difference']:.1e} nats"
        calls = "–" if a.get("forward_calls") is None else f"{a['forward_calls']:,} → {b['forward_calls']:,}"
        lines.append(
            f"| {r['model']} | {r['documents']} / {r['tokens']} | {'yes' if r['side_by_side'] else 'no'} "
            f"| {a['ops_per_doc_token']:.1f} → {b['ops_per_doc_token']:.1f} "
            f"| {a['ops_per_doc_token'] / b['ops_per_doc_token']:.1f}x "
            f"| {a['syncs_per_doc']:.1f} → {b['syncs_per_doc']:.1f} "
            f"| {a['seconds']:.2f} → {b['seconds']:.2f} | {calls} | {same} |"
        )
    return "\n".join(lines) + "\n"


def gpu_name() -> str:
    return f", {torch.cuda.get_device_name(DEVICE)}" if DEVICE.type == "cuda" else ""


def main() -> None:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=BUNDLED)
    parser.add_argument("--num-samples", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=None, help="documents per corpus (default all)")
    parser.add_argument("--output", type=Path, default=OUTPUT / "output.md")
    parser.add_argument("--device", default="cpu", help="cuda: the same on a GPU (seconds there)")
    args = parser.parse_args()
    DEVICE = torch.device(args.device)
    torch.set_num_threads(1)
    rows = []
    for name in args.models:
        if not has(load_model(name)[0], "stepwise"):
            continue
        rows.append(measure(name, args.num_samples, args.limit))
        print(markdown(rows, args.num_samples), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(rows, args.num_samples))


if __name__ == "__main__":
    main()
