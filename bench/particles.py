"""Particle-throughput benchmark for any contract model: batched IS vs a one-particle-per-forward loop.

Prints, measured side by side in one run: particles·tokens/s at each K, the speed-up of our batched estimator over
a loop that draws and scores one particle per forward pass (what the original KGLM evaluation does), the cost ratio
cost(K=1000)/cost(K=1), the distance to the limit (our particles·tokens/s at K = 1,000 against plain einsums of the
same arithmetic, ``limit.reference_throughput``, when the model's benchmark passes its ``arithmetic``), and the
peak memory of one K = 100,000 document (run in a child process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date

import torch

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.seeding import document_generator
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.paths import DATA_DIR


def sync(device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device):
    """(seconds, result) of ``fn()`` with the device synchronised before and after."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def batched_seconds(model, xs, docs, k, device, batch_size=1024):
    """Wall-clock of importance_log_weights over the documents (particles in blocks, shared work reused)."""
    return timed(
        lambda: [
            importance_log_weights(
                model, x, num_samples=k, seed=0, document=doc, batch_size=batch_size, device=device
            )
            for x, doc in zip(xs, docs)
        ],
        device,
    )[0]


@torch.no_grad()
def one_particle_seconds(model, xs, docs, k, device):
    """Wall-clock of K separate (sample one z, score it) forward passes per document."""

    def loop():
        for x, doc in zip(xs, docs):
            gen = document_generator(0, doc, device=device)
            for _ in range(k):
                z, log_q = model.proposal.sample(x, 1, generator=gen)
                float(model.log_joint(x, z)[0] - log_q[0])

    return timed(loop, device)[0]


def peak_memory_child(model_name, pretrained, doc, k, device, dtype=None):
    """Peak resident memory (MiB) and seconds of one K-particle document, measured in a fresh process."""
    code = (
        "import json,resource,time,torch,sys\n"
        "from lm_latent_eval.models import load_model\n"
        "from lm_latent_eval.estimators import importance_log_weights\n"
        f"m,_=load_model({model_name!r},{pretrained!r},device={device!r},dtype={dtype and 'torch.' + dtype})\n"
        "base=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"x=m.tokenize({doc!r}).to({device!r}); t=time.perf_counter()\n"
        f"lw=importance_log_weights(m,x,{k},seed=0,document={doc!r},device={device!r})\n"
        "cuda=torch.cuda.max_memory_allocated()/2**20 if torch.cuda.is_available() else None\n"
        "print(json.dumps({'seconds':time.perf_counter()-t,'rss_mib':resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024,"
        "'rss_before_mib':base/1024,'cuda_peak_mib':cuda,'finite':bool(abs(lw.max())<1e300)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def limit_row(model, xs, docs, k, device, arithmetic, ours_seconds):
    """Our particles·tokens/s at K next to the reference arithmetic's (same documents, same device): one table row."""
    from limit import reference_seconds

    ref = 0.0
    for x in xs:
        once, per_token = arithmetic(model, int(x.numel()), k)
        ref += reference_seconds(once, per_token, int(x.numel()), device)
    tokens = sum(int(x.numel()) for x in xs)
    return (
        f"| {k} | {k * tokens / ours_seconds:,.0f} | {k * tokens / ref:,.0f} | {ours_seconds:.3f} | {ref:.3f} |"
        f" {ours_seconds / ref:.1f}x |"
    )


def main(argv=None, default_model="hmm", arithmetic=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=default_model)
    p.add_argument("--pretrained", default=None)
    p.add_argument("--data", default=str(DATA_DIR / "corpus" / "tiny_test.jsonl"))
    p.add_argument("--num-docs", type=int, default=10)
    p.add_argument("--ks", default="1,10,100,1000")
    p.add_argument(
        "--loop-ks", default="10,100,1000", help="K values at which the one-particle loop is also timed"
    )
    p.add_argument(
        "--memory-ks", default="1000,10000,100000", help="K values of the one-document peak-memory runs"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--limit-k",
        type=int,
        default=1000,
        help="K of the distance-to-the-limit row (needs a model arithmetic)",
    )
    p.add_argument(
        "--dtype", default=None, help="network precision (e.g. bfloat16); log weights stay float64"
    )
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    model, _ = load_model(args.model, args.pretrained, device=args.device, dtype=dtype)
    docs = read_documents(args.data)[: args.num_docs]
    xs = [model.tokenize(d).to(args.device) for d in docs]
    tokens = sum(int(x.numel()) for x in xs)
    ks = [int(k) for k in args.ks.split(",")]
    loop_ks = {int(k) for k in args.loop_ks.split(",") if k}
    batched_seconds(model, xs[:1], docs[:1], 2, args.device)  # warm-up
    cuda = args.device.startswith("cuda")
    where = torch.cuda.get_device_name(args.device) if cuda else (platform.processor() or platform.machine())
    print(
        f"# {args.model} {args.dtype or 'float32'} on {args.device} ({where}, torch {torch.__version__},"
        f" {torch.get_num_threads()} threads), {len(docs)} documents, {tokens} tokens, {date.today()},"
        f" load average {os.getloadavg()[0]:.2f}"
    )
    print("| K | batched s | particles·tokens/s | one-particle loop s | speed-up |")
    print("|---|---|---|---|---|")
    cost = {}
    for k in ks:
        t = batched_seconds(model, xs, docs, k, args.device)
        cost[k] = t
        loop = one_particle_seconds(model, xs, docs, k, args.device) if k in loop_ks else None
        speed = f"{loop / t:.1f}x" if loop else "-"
        print(
            f"| {k} | {t:.3f} | {k * tokens / t:,.0f} | {f'{loop:.3f}' if loop else '-'} | {speed} |",
            flush=True,
        )
    if 1 in cost and 1000 in cost:
        print(f"\ncost(K=1000) / cost(K=1) = {cost[1000] / cost[1]:.1f}")
    if arithmetic is not None and args.limit_k:
        k = args.limit_k
        ours = cost[k] if k in cost else batched_seconds(model, xs, docs, k, args.device)
        print(
            "\nDistance to the limit (reference = the same arithmetic as plain einsums, bench/limit.py, same run):\n"
        )
        print(
            "| K | ours particles·tokens/s | reference particles·tokens/s | ours s | reference s | ours / reference |"
        )
        print("|---|---|---|---|---|---|")
        print(limit_row(model, xs, docs, k, args.device, arithmetic, ours), flush=True)
    longest = max(docs, key=lambda d: len(d))
    for k in (
        int(k) for k in args.memory_ks.split(",") if k
    ):  # bounded memory: flat in K (fresh process each)
        mem = peak_memory_child(args.model, args.pretrained, longest, k, args.device, args.dtype)
        print(
            f"K = {k:,} on one {len(model.tokenize(longest))}-token document: {mem['seconds']:.1f} s, "
            f"peak RSS {mem['rss_mib']:.0f} MiB (after loading: {mem['rss_before_mib']:.0f} MiB)"
            + (f", CUDA peak {mem['cuda_peak_mib']:.0f} MiB" if mem["cuda_peak_mib"] is not None else ""),
            flush=True,
        )
    print(f"(load average at the end: {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
