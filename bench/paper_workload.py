"""The workload that took Logan et al. (2020) a week on 15 GPUs: Figures 3 and 4 for each proposal of their Table 1.

    python bench/paper_workload.py --model entitynlm [--device cuda] [--time-budget 540] [--output out.json]
    accelerate launch --multi_gpu --num_processes N bench/paper_workload.py ...   # documents sharded by rank

For every document of the test set and every proposal setting of Table 1 (τ ∈ {0.5, 0.9, 1.0, 1.1, 2.0, 5.0} with
peeking, τ = 1 without):

- Figure 3 (instance perplexity as K grows): K = ``--max-k`` (10,000) importance weights; the estimate at each K of
  the grid 1, 2, 5, 10, ..., ``--max-k`` is the mean of the first K weights (so every point of one curve costs
  one run of the largest K, as drawing each K apart would not);
- Figure 4 (density of repeated estimates): ``--repeats`` (100) estimates with K = ``--repeat-k`` (100), drawn as one
  batch of repeats · K weights from their own seed and split into ``--repeats`` disjoint groups: independent,
  identically distributed estimates, as separate runs would give (other numbers, the same distribution).

Every document's random streams derive from (seed, document text), so the numbers do not depend on the order, on
``--time-budget`` or on the number of processes. Models: ``--source full`` (default) builds the paper's sizes with
random weights over a synthetic test set of the real size (``full_size.py``: EntityNLM d = 300 over 348
CoNLL-2012-sized documents, KGLM 400 / 1150 × 3 over 60 Linked-WikiText-2-sized articles); ``--source bundled`` the
bundled checkpoint and corpus (tests).

Measured: wall time of each (document, setting), particles·tokens per second, peak memory (CUDA allocator, or the
process's peak RSS on the CPU), and the FLOPs of the arithmetic the estimates need as ``limit.py`` counts it (its
product lists, with KGLM's word head over the distinct (position, entity) pairs that the particles drew), against
the device's dense peak: datasheet figures for known GPUs, and a measured GEMM rate of this device in the same run.

Extrapolation (``--time-budget`` seconds, checked after each document; ``--documents`` to take a random subset):
the documents run in a fixed random order, so the measured ones are a random sample of the test set. The whole
workload's time is the measured seconds × (workload tokens / measured tokens) (cost is linear in tokens at fixed
K); with three or more measured documents a least-squares fit seconds = a + b · tokens per document is summed over
every document as a check. Where the run used smaller K than the paper's (on a CPU), the paper's workload is also
extrapolated at the measured particles·tokens/s: an upper bound on its time, since throughput only grows with K.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import full_size
from limit import document_flops, encoder_products, entitynlm_arithmetic, kglm_arithmetic
from particles import sync

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.aggregate import log_mean_exp
from lm_latent_eval.harness.backends import distributed_state
from lm_latent_eval.reports.sweep import DEFAULT_TEMPERATURES

SETTINGS = [(tau, True) for tau in DEFAULT_TEMPERATURES] + [(1.0, False)]  # Logan et al. (2020), Table 1
PAPER_MAX_K, PAPER_REPEATS, PAPER_REPEAT_K = 10_000, 100, 100
PAPER_GPU_HOURS = 15 * 7 * 24  # "a week on 15 GTX 1080 Ti"
# dense peak TFLOP/s by precision (NVIDIA datasheets; TF32 and bf16 without sparsity), matched in the device's name
DATASHEET_TFLOPS = {
    "H100 PCIe": {"float32": 51.0, "tf32": 378.0, "bfloat16": 756.0},
    "H100": {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4},  # SXM / HBM3
    "H200": {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4},
    "A100": {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0},
    "1080 Ti": {"float32": 11.3},  # the paper's GPU
}


@dataclass
class SettingRecord:
    """One (document, proposal setting): Figure 3's log p̂ at each K of the grid, Figure 4's repeated log p̂."""

    temperature: float
    peek: bool
    seconds: float
    figure3: list[float]  # log p̂ from the first K weights, K in the grid
    figure4: list[float]  # log p̂ of each repeat
    flops: int
    word_pairs: int | None = None  # KGLM: distinct (position, entity) pairs drawn (both figures)


@dataclass
class DocumentRecord:
    index: int  # position in the test set
    tokens: int
    rank: int
    settings: list[SettingRecord] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.settings)


def k_grid(max_k: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to and including ``max_k``."""
    grid = [m * 10**e for e in range(int(math.log10(max(max_k, 1))) + 1) for m in (1, 2, 5)]
    return sorted({k for k in grid if k < max_k} | {max_k})


def setting_label(tau: float, peek: bool) -> str:
    """A proposal setting of Table 1 as the tables name it: ``τ=0.5``, ``τ=1, no peeking``."""
    return f"τ={tau:g}" + ("" if peek else ", no peeking")


def particles_per_setting(args) -> int:
    """Particles drawn per document and setting: Figure 3's ``max_k`` and Figure 4's repeats · ``repeat_k``."""
    return args.max_k + args.repeats * args.repeat_k


def group_log_means(log_weights: np.ndarray, repeats: int) -> list[float]:
    """log p̂ of each of ``repeats`` disjoint consecutive groups of the weights."""
    return [float(v) for v in log_mean_exp(log_weights.reshape(repeats, -1), axis=1)]


class PairCounter:
    """Counts the distinct (position, entity) pairs whose word terms KGLM's ``log_joint`` computes (its word head's
    work), by wrapping ``word_log_prob`` while active."""

    def __init__(self, model):
        self.model, self.keys = model, []

    def __enter__(self):
        real, N = self.model.word_log_prob, self.model.graph.num_entities

        def counted(h_type, x, entity):
            T = entity.shape[1]
            key = torch.arange(T, device=x.device) * (N + 1) + entity.clamp(min=-1) + 1
            self.keys.append(torch.unique(key))
            return real(h_type, x, entity)

        self.model.word_log_prob = counted
        return self

    def __exit__(self, *exc):
        del self.model.word_log_prob  # the class's method again

    def distinct(self) -> int:
        return int(torch.unique(torch.cat(self.keys)).numel()) if self.keys else 0


def setting_flops(model, name: str, T: int, particles: list[int], pairs: int | None) -> int:
    """FLOPs of the IS calls of one (document, setting) as limit.py counts them, encoders left out (they run once
    per document, for every setting: ``encoder_flops``)."""
    total = 0
    for k in particles:
        if name == "kglm":
            once, step = kglm_arithmetic(model, T, k, word_pairs=pairs)
        else:
            once, step = entitynlm_arithmetic(model, T, k)
        enc_once, enc_step = encoder_products(model, T)
        total += document_flops(once[len(enc_once) :], step[len(enc_step) :], T)
    return total


def encoder_flops(model, T: int) -> int:
    """FLOPs of p's and q's encoders over a T-token document."""
    return document_flops(*encoder_products(model, T), T)


def particles_per_call(model, name: str, T: int, budget_gib: float) -> int:
    """Particles per ``log_joint`` call (``batch_size``: memory only) within ``budget_gib``: the model's own plan from
    the shapes of its temporaries (``max_particles_per_call``: KGLM's [k, T] arrays, its heads chunked inside by the
    same budget; EntityNLM's [T, k, D] entity rows, [T, k, M] slot positions and [k, V] word logits, every token
    starting a mention at worst; models/*/memory_plan.py)."""
    return model.max_particles_per_call(T, int(budget_gib * 2**30))


def run_document(model, name, doc, index, rank, args, device) -> DocumentRecord:
    """Every setting's Figure 3 and Figure 4 estimates of one document."""
    x = model.tokenize(doc).to(device)
    T = int(x.numel())
    record = DocumentRecord(index, T, rank)
    grid = k_grid(args.max_k)
    batch_size = particles_per_call(model, name, T, args.memory_budget)
    for tau, peek in args.settings:
        counter = PairCounter(model) if name == "kglm" else None
        sync(device)
        start = time.perf_counter()
        common = {
            "temperature": tau,
            "peek": peek,
            "document": doc,
            "device": device,
            "batch_size": batch_size,
        }
        if counter is not None:
            counter.__enter__()
        try:
            lw3 = importance_log_weights(model, x, num_samples=args.max_k, seed=args.seed, **common)
            lw4 = importance_log_weights(
                model, x, num_samples=args.repeats * args.repeat_k, seed=args.seed + 1, **common
            )
            sync(device)
        finally:
            if counter is not None:
                counter.__exit__()
        seconds = time.perf_counter() - start
        pairs = counter.distinct() if counter is not None else None
        # as it goes (stderr): a run stopped inside a long document still leaves each finished setting's rate
        print(
            f"document {index} ({T:,} tokens), {setting_label(tau, peek)}: {seconds:.2f} s, "
            f"{particles_per_setting(args) * T / seconds:,.0f} particles·tokens/s",
            file=sys.stderr,
            flush=True,
        )
        record.settings.append(
            SettingRecord(
                tau,
                peek,
                seconds,
                [float(log_mean_exp(lw3[:k])) for k in grid],
                group_log_means(lw4, args.repeats),
                setting_flops(model, name, T, [args.max_k, args.repeats * args.repeat_k], pairs),
                pairs,
            )
        )
    return record


def peak_memory_mib(device) -> float:
    """Peak CUDA allocation, or the process's peak resident set on the CPU (MiB)."""
    if str(device).startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured_gemm_tflops(device, dtype=torch.float32, n: int | None = None, repeats: int = 5) -> float:
    """The best rate (TFLOP/s) of an n × n × n matrix product on ``device`` (n: 8192 on a GPU, 1024 on the CPU)."""
    n = n or (8192 if str(device).startswith("cuda") else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def peak_table(device) -> dict[str, dict[str, float]]:
    """{precision: {"datasheet": TFLOP/s, "measured": TFLOP/s}} for this device (datasheet: known GPUs only)."""
    out = {}
    if str(device).startswith("cuda"):
        gpu = torch.cuda.get_device_name(device)
        sheet = next((v for k, v in DATASHEET_TFLOPS.items() if k in gpu), {})
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        measured = {
            "float32": measured_gemm_tflops(device),
            "bfloat16": measured_gemm_tflops(device, torch.bfloat16),
        }
        torch.backends.cuda.matmul.allow_tf32 = True
        measured["tf32"] = measured_gemm_tflops(device)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for precision in ("float32", "tf32", "bfloat16"):
            out[precision] = {"datasheet": sheet.get(precision), "measured": measured[precision]}
    else:
        out["float32"] = {"datasheet": None, "measured": measured_gemm_tflops(device)}
    return out


def build(args, device):
    """(model, documents, one-time seconds) for ``--model`` / ``--source``."""
    start = time.perf_counter()
    dtype = getattr(torch, args.dtype) if args.dtype != "float32" else None
    if args.source == "full":
        make_model, make_corpus = full_size.BUILDERS[args.model]
        model = make_model(device, dtype)
        docs = make_corpus(model)
    else:
        from lm_latent_eval.models import load_model
        from lm_latent_eval.models.corpora import bundled_documents

        model, _ = load_model(args.model, device=device, dtype=dtype)
        docs = bundled_documents(args.model)
    model.cuda_graphs = args.cuda_graphs
    # log_joint's chunks (and KGLM's heads inside) follow the same budget
    model.memory_budget = int(args.memory_budget * 2**30)
    return model, docs, time.perf_counter() - start


def warm_up(model, docs, device) -> float:
    """One short estimate (CUDA context, library handles, KGLM's alias tables): seconds, not counted."""
    start = time.perf_counter()
    doc = min(docs, key=len)
    importance_log_weights(model, model.tokenize(doc).to(device), num_samples=2, document=doc, device=device)
    sync(device)
    return time.perf_counter() - start


def gather_records(records: list[DocumentRecord], state) -> list[DocumentRecord]:
    """Every rank's records on rank 0 (all of them; one process: unchanged), in test-set order."""
    if state is not None:
        parts = [None] * state.num_processes if state.is_main_process else None
        torch.distributed.gather_object(records, parts, dst=0)
        records = [r for part in parts or [] for r in part]
    return sorted(records, key=lambda r: r.index)


# --- the report -------------------------------------------------------------------------------------------------------


def instance_ppl(log_likelihoods, tokens) -> float:
    return math.exp(-float(np.sum(log_likelihoods)) / float(np.sum(tokens)))


def figures(records: list[DocumentRecord], args) -> dict:
    """Figure 3: instance PPL at each K per setting; Figure 4: the repeats' instance PPLs per setting."""
    tokens = [r.tokens for r in records]
    out = {"k": k_grid(args.max_k), "figure3": {}, "figure4": {}}
    for j, (tau, peek) in enumerate(args.settings):
        label = setting_label(tau, peek)
        curve = np.array([r.settings[j].figure3 for r in records])  # [N, grid]
        reps = np.array([r.settings[j].figure4 for r in records])  # [N, repeats]
        out["figure3"][label] = [instance_ppl(curve[:, i], tokens) for i in range(curve.shape[1])]
        out["figure4"][label] = [instance_ppl(reps[:, i], tokens) for i in range(reps.shape[1])]
    return out


def fit_seconds(records: list[DocumentRecord], all_tokens: list[int]) -> float | None:
    """Σ over every document of a + b · tokens, (a, b) fitted to the measured documents (≥ 3), else None."""
    if len(records) < 3 or len({r.tokens for r in records}) < 2:
        return None
    b, a = np.polyfit([r.tokens for r in records], [r.seconds for r in records], 1)
    return float(a * len(all_tokens) + b * sum(all_tokens))


@dataclass
class Run:
    """What one benchmark run measured besides the documents' records."""

    device: torch.device
    processes: int
    one_time: float  # seconds: model and corpus
    warm: float  # seconds: the warm-up estimate
    wall: float  # seconds from the first document to the last record gathered
    memory_mib: list[float]  # peak memory of each process
    peak_tflops: dict  # peak_table()


def report(records: list[DocumentRecord], all_tokens: list[int], args, run: Run, model) -> dict:
    """The measured and extrapolated figures (printed as markdown; returned for --output)."""
    device, processes, peaks = run.device, run.processes, run.memory_mib
    per_setting = particles_per_setting(args)
    settings = len(args.settings)
    done_tokens = sum(r.tokens for r in records)
    seconds = sum(r.seconds for r in records)
    work = per_setting * settings * done_tokens  # particles·tokens measured
    flops = sum(s.flops for r in records for s in r.settings) + sum(
        encoder_flops(model, r.tokens) for r in records
    )
    total_tokens = sum(all_tokens)
    scale = total_tokens / done_tokens
    whole = seconds * scale
    fitted = fit_seconds(records, all_tokens)
    paper_work = (PAPER_MAX_K + PAPER_REPEATS * PAPER_REPEAT_K) * len(SETTINGS) * total_tokens
    rate = work / seconds
    where = (
        torch.cuda.get_device_name(device)
        if str(device).startswith("cuda")
        else platform.processor() or "cpu"
    )
    load = os.getloadavg()[0]
    grid = k_grid(args.max_k)
    print(
        f"# paper workload: {args.model} ({args.source}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M"
        f" parameters), {args.dtype}, cuda_graphs={args.cuda_graphs}, on {device} ({where}, torch {torch.__version__},"
        f" {torch.get_num_threads()} threads), {processes} process(es), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average {load:.2f}\n"
    )
    print(
        f"Workload: {len(all_tokens)} documents, {total_tokens:,} tokens; {settings} proposal settings; Figure 3:"
        f" K = {args.max_k:,} (estimates at K = {', '.join(f'{k:,}' for k in grid)}); Figure 4: {args.repeats}"
        f" repeats of K = {args.repeat_k:,}; {per_setting:,} particles per document and setting:"
        f" {per_setting * settings * total_tokens:.3g} particles·tokens."
    )
    print(
        f"One-time: building the model and corpus {run.one_time:.1f} s, warm-up {run.warm:.1f} s (CUDA context,"
        " KGLM's alias tables); not in the figures below.\n"
    )
    print(
        f"Measured: {len(records)} documents ({done_tokens:,} tokens, {done_tokens / total_tokens:.1%} of the"
        f" workload) in {seconds:.1f} s of estimates ({run.wall:.1f} s wall over {processes} process(es)):"
        f" {rate:,.0f} particles·tokens/s, {flops / seconds / 1e12:.3g} TFLOP/s of limit.py's count;"
        f" peak memory {max(peaks):,.0f} MiB.\n"
    )
    print("| setting | seconds | particles·tokens/s | TFLOP/s | distinct (t, entity) pairs per token |")
    print("|---|---|---|---|---|")
    for j, (tau, peek) in enumerate(args.settings):
        s = [r.settings[j] for r in records]
        sec = sum(v.seconds for v in s)
        pairs = f"{sum(v.word_pairs for v in s) / done_tokens:.1f}" if s[0].word_pairs is not None else "-"
        print(
            f"| {setting_label(tau, peek)} | {sec:.2f} | {per_setting * done_tokens / sec:,.0f} |"
            f" {sum(v.flops for v in s) / sec / 1e12:.3g} | {pairs} |"
        )
    print(
        f"\nWhole workload ({len(all_tokens)} documents): {whole:,.0f} s = {whole / 3600:.2f} h"
        + (
            " (measured)"
            if len(records) == len(all_tokens)
            else f" (measured seconds × {scale:.2f}, tokens ratio)"
        )
        + (f"; per-document fit a + b·T summed: {fitted:,.0f} s" if fitted is not None else "")
        + f"; {whole / processes / 3600:.2f} h on {processes} device(s) in parallel."
    )
    if per_setting * settings * total_tokens != paper_work:
        print(
            f"The paper's workload ({paper_work:.3g} particles·tokens) at the measured {rate:,.0f} particles·tokens/s:"
            f" {paper_work / rate / 3600:,.1f} h (an upper bound: throughput grows with K)."
        )
    whole_flops = flops * scale
    print(
        f"\nDistance to the arithmetic limit (limit.py's FLOPs of the whole workload: {whole_flops:.3g}; the paper"
        f" spent about {PAPER_GPU_HOURS:,} GPU-hours):\n"
    )
    print(
        "| precision | peak TFLOP/s (datasheet) | peak TFLOP/s (measured GEMM) | limit s | ours s | ours / limit |"
    )
    print("|---|---|---|---|---|---|")
    rows = {}
    for precision, peak in run.peak_tflops.items():
        best = peak["datasheet"] or peak["measured"]
        limit_s = whole_flops / (best * 1e12)
        rows[precision] = {**peak, "limit_seconds": limit_s, "ratio": whole / limit_s}
        sheet = f"{peak['datasheet']:g}" if peak["datasheet"] else "-"
        print(
            f"| {precision} | {sheet} | {peak['measured']:.2f} | {limit_s:,.3g} | {whole:,.0f} | {whole / limit_s:.1f}x |"
        )
    floor = gpu_floor(model, args, records, all_tokens, run) if args.gpu_floor else None
    figs = figures(records, args)
    print(f"\nFigure 3 over the {len(records)} measured documents: instance PPL at K\n")
    labels = list(figs["figure3"])
    print("| K | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for i, k in enumerate(figs["k"]):
        print(f"| {k:,} | " + " | ".join(f"{figs['figure3'][lab][i]:.4g}" for lab in labels) + " |")
    print(
        f"\nFigure 4 over the {len(records)} measured documents: instance PPL of {args.repeats} repeats of K = {args.repeat_k}\n"
    )
    print("| setting | mean | sd | min | 5% | median | 95% | max |")
    print("|---|---|---|---|---|---|---|---|")
    for lab, values in figs["figure4"].items():
        v = np.array(values)
        q = np.quantile(v, [0.05, 0.5, 0.95])
        print(
            f"| {lab} | {v.mean():.4g} | {v.std(ddof=1) if v.size > 1 else 0:.3g} | {v.min():.4g} | {q[0]:.4g} |"
            f" {q[1]:.4g} | {q[2]:.4g} | {v.max():.4g} |"
        )
    return {
        "model": args.model,
        "source": args.source,
        "device": where,
        "processes": processes,
        "cuda_graphs": args.cuda_graphs,
        "dtype": args.dtype,
        "load_average": load,
        "documents_measured": len(records),
        "documents_total": len(all_tokens),
        "tokens_measured": done_tokens,
        "tokens_total": total_tokens,
        "seconds_measured": seconds,
        "wall_seconds": run.wall,
        "one_time_seconds": run.one_time,
        "warm_up_seconds": run.warm,
        "particles_tokens_per_second": rate,
        "peak_memory_mib": max(peaks),
        "whole_workload_seconds": whole,
        "whole_workload_fit_seconds": fitted,
        "whole_workload_flops": whole_flops,
        "limits": rows,
        "gpu_floor": floor,
        "figures": figs,
        "records": [asdict(r) for r in records],
    }


def paper_pairs(model, records: list[DocumentRecord], args, K: int) -> float:
    """KGLM: distinct (position, entity) pairs per token of one call of K particles, extrapolated from the measured
    calls: every position has the no-entity pair, and the others grow linearly with the particles (each particle in
    a mention brings a new entity under a flat q) at the measured rate, up to one pair per entity."""
    tokens = sum(r.tokens for r in records)
    measured = sum(s.word_pairs for r in records for s in r.settings) / (tokens * len(args.settings))
    particles = particles_per_setting(args)
    return min(1 + max(measured - 1, 0) * K / particles, model.graph.num_entities + 1)


def gpu_floor(model, args, records, all_tokens, run) -> dict:
    """A floor on one GPU's time for the paper's workload (K = 10,000 and 100 × 100 per document and setting): the
    kernels its host launches, the bytes they move and limit.py's arithmetic, each at the device's datasheet rate,
    eager and with the sampler in a CUDA graph (kernel_counts.py; counts of the code a GPU runs, made here)."""
    from kernel_counts import (
        GRAPH_LAUNCHES_PER_TOKEN,
        H100_LAUNCH_SECONDS,
        HBM_BYTES_PER_SECOND,
        per_token_costs,
    )

    gpu = args.gpu_model if not str(run.device).startswith("cuda") else torch.cuda.get_device_name(run.device)
    sheet = next((v for k, v in DATASHEET_TFLOPS.items() if k in gpu), None)
    bandwidth = next((v for k, v in HBM_BYTES_PER_SECOND.items() if k in gpu), None)
    if sheet is None or bandwidth is None:
        print(f"\n(no datasheet figures for {gpu!r}: GPU floor left out)")
        return None
    cpu_model = model if run.device.type == "cpu" else None
    if cpu_model is None:
        print("\n(GPU floor: counted on the CPU only; run with --device cpu)")
        return None
    short, long = full_size.model_documents(args.model, model, [24, 48])
    sample, joint = per_token_costs(model, model.tokenize(short), model.tokenize(long))
    calls = [PAPER_MAX_K, PAPER_REPEATS * PAPER_REPEAT_K]
    token_calls = sum(all_tokens) * len(SETTINGS) * len(calls)
    pairs = paper_pairs(model, records, args, PAPER_MAX_K) if args.model == "kglm" else None
    total_flops = sum(
        setting_flops(model, args.model, T, calls, None if pairs is None else round(pairs * T))
        for T in all_tokens
    ) * len(SETTINGS) + sum(encoder_flops(model, T) for T in all_tokens)
    bytes_total = sum(all_tokens) * len(SETTINGS) * sum(sample.bytes(k) + joint.bytes(k) for k in calls)
    launch = {
        "eager": token_calls * (sample.ops + max(joint.ops, 0)) * H100_LAUNCH_SECONDS,
        "cuda graphs": token_calls * (GRAPH_LAUNCHES_PER_TOKEN + max(joint.ops, 0)) * H100_LAUNCH_SECONDS,
    }
    memory_s = bytes_total / bandwidth
    print(
        f"\nA floor on one {gpu}'s time for the paper's workload ({len(all_tokens)} documents, K = {PAPER_MAX_K:,} and"
        f" {PAPER_REPEATS} × {PAPER_REPEAT_K} per setting): kernels counted here on the GPU's code path"
        f" (kernel_counts.py): proposal.sample {sample.ops:.0f} per token, log_joint {max(joint.ops, 0):.0f} per token;"
        f" bytes per token at K = {PAPER_MAX_K:,}: {sample.bytes(PAPER_MAX_K) / 2**20:,.0f} MiB (sample),"
        f" {joint.bytes(PAPER_MAX_K) / 2**20:,.0f} MiB (log_joint); launch {H100_LAUNCH_SECONDS * 1e6:.1f} µs"
        f" (issue 13's H100 profile), {bandwidth / 1e12:.2f} TB/s"
        + (
            f"; KGLM's word head over {pairs:,.0f} distinct (position, entity) pairs per token (extrapolated)"
            if pairs
            else ""
        )
        + ":\n"
    )
    print("| floor | seconds |")
    print("|---|---|")
    rows = {f"launches, {mode}": sec for mode, sec in launch.items()}
    rows["bytes moved"] = memory_s
    rows.update({f"arithmetic, {p}": total_flops / (tf * 1e12) for p, tf in sheet.items()})
    for label, sec in rows.items():
        print(f"| {label} | {sec:,.3g} |")
    for mode, sec in launch.items():
        fp32 = max(sec, memory_s, total_flops / (sheet["float32"] * 1e12))
        bf16 = max(sec, memory_s, total_flops / (sheet.get("bfloat16", sheet["float32"]) * 1e12))
        print(
            f"\n{mode}: at least {fp32 / 3600:.2f} h in float32, {bf16 / 3600:.2f} h with bf16 matrix products.",
            end="",
        )
    print()
    return {"gpu": gpu, "sample": asdict(sample), "log_joint": asdict(joint), "floors_seconds": rows,
            "flops": total_flops, "bytes": bytes_total, "word_pairs_per_token": pairs}  # fmt: skip


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("entitynlm", "kglm"), default="entitynlm")
    p.add_argument("--source", choices=("full", "bundled"), default="full")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", help="network precision (log weights stay float64)")
    p.add_argument(
        "--cuda-graphs", default="auto", help="the models' cuda_graphs setting: true, false or auto (default)"
    )
    p.add_argument("--documents", type=int, default=None, help="a random subset of this many documents")
    p.add_argument("--max-k", type=int, default=PAPER_MAX_K, help="Figure 3's largest K")
    p.add_argument("--repeats", type=int, default=PAPER_REPEATS, help="Figure 4's number of estimates")
    p.add_argument("--repeat-k", type=int, default=PAPER_REPEAT_K, help="Figure 4's K")
    p.add_argument("--settings", default="all", help="'all' (Table 1) or e.g. 1.0,2.0,nopeek")
    p.add_argument(
        "--time-budget", type=float, default=math.inf, help="seconds per process, then extrapolate"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--gpu-floor", action="store_true", help="on the CPU: a floor on one GPU's time (kernel_counts.py)"
    )
    p.add_argument("--gpu-model", default="H100", help="the GPU of --gpu-floor (a DATASHEET_TFLOPS key)")
    p.add_argument(
        "--memory-budget",
        type=float,
        default=None,
        help="GiB of log_joint temporaries (default 8 on CUDA, 1 on CPU)",
    )
    p.add_argument("--output", default=None, help="JSON file for the figures and every document's numbers")
    args = p.parse_args(argv)
    if args.memory_budget is None:
        args.memory_budget = 8.0 if args.device.startswith("cuda") else 1.0
    if args.settings == "all":
        args.settings = SETTINGS
    else:
        args.settings = [
            (1.0, False) if s == "nopeek" else (float(s), True) for s in args.settings.split(",")
        ]
    return args


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    state = distributed_state(torch.device(args.device))
    rank, processes = (state.process_index, state.num_processes) if state is not None else (0, 1)
    device = (
        state.device if state is not None and args.device.startswith("cuda") else torch.device(args.device)
    )
    model, docs, one_time = build(args, device)
    all_tokens = [int(model.tokenize(doc).numel()) for doc in docs]  # the whole test set
    order = np.random.default_rng(args.seed).permutation(len(docs))[: args.documents or len(docs)]
    warm = warm_up(model, docs, device)
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    records = []
    for i in order[rank::processes]:
        records.append(run_document(model, args.model, docs[i], int(i), rank, args, device))
        if time.perf_counter() - start > args.time_budget:
            break
    peaks = [peak_memory_mib(device)]
    if state is not None:
        state.wait_for_everyone()
        gathered = [None] * processes if state.is_main_process else None
        torch.distributed.gather_object(peaks[0], gathered, dst=0)
        peaks = gathered or peaks
    wall = time.perf_counter() - start
    records = gather_records(records, state)
    if rank != 0:
        return None
    run = Run(device, processes, one_time, warm, wall, peaks, peak_table(device))
    out = report(records, all_tokens, args, run, model)
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
