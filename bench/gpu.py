"""GPU figures of issue 13 in one run: `python bench/gpu.py [--device cuda] [--sections sync,bf16,kglm10k,wt2,compile]`.

- sync: host synchronisations per call of ``proposal.sample`` and ``log_joint`` (torch.cuda sync debug mode), for
  documents of two lengths: a count that grows with the length means a sync inside the token loop.
- bf16: log p̂ of the same seed with the network in bfloat16 against float32 (log weights are float64 in both), next to
  float32's Monte Carlo standard error, and both times: bf16 is "safe" where the shift is well inside that error.
- kglm10k: K = 10,000 over the bundled KGLM test corpus: wall time, instance and corpus perplexity, ESS, Pareto k̂.
- wt2: K = 10,000 over a synthetic corpus the size of the Linked WikiText-2 test set (60 articles, 236,062 tokens;
  lengths log-normal with σ = 0.6 rescaled to that total, text = the bundled KGLM test documents repeated), stopped
  after ``--wt2-budget`` seconds; prints the measured tokens/s and the extrapolated wall time of the whole corpus.
- profile: the top operators of one KGLM document at K = 10,000 and the kernel launches per token.
- compile: ``proposal.sample`` with the per-token kernels eager and under ``torch.compile`` (``--compile-modes``;
  ``reduce-overhead`` = CUDA graphs), whether the draws stay the same, and the largest change in log q.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import torch
from particles import sync, timed

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.aggregate import corpus_ppl, instance_ppl
from lm_latent_eval.estimators.diagnostics import (
    effective_sample_size,
    log_mean_exp,
    pareto_khat,
    relative_variance,
)
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents

WT2_TEST_ARTICLES, WT2_TEST_TOKENS = 60, 236_062  # Linked WikiText-2 test split (Logan et al., 2019, Table 1)

GPU_MODELS = ("kglm", "entitynlm", "rnng", "hmm")


def count_syncs(fn) -> int:
    """Host synchronisations that ``fn`` triggers (torch.cuda.set_sync_debug_mode warns on each)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def section_sync(device, K=1000):
    print("\n## Host synchronisations per call (K = 1,000)\n")
    print("| model | tokens | proposal.sample syncs | log_joint syncs |")
    print("|---|---|---|---|")
    for name in GPU_MODELS:
        model, _ = load_model(name, device=device)
        docs = sorted(bundled_documents(name), key=len)
        for doc in (docs[len(docs) // 4], docs[-1]):
            x = model.tokenize(doc).to(device)
            gen = torch.Generator(device=device).manual_seed(0)
            with torch.no_grad():
                z, _ = model.proposal.sample(
                    x, K, generator=gen
                )  # warm-up: one-off caches are not per-token syncs
                model.log_joint(x, z)
                s = count_syncs(lambda: model.proposal.sample(x, K, generator=gen))
                j = count_syncs(lambda: model.log_joint(x, z))
            print(f"| {name} | {x.numel()} | {s} | {j} |", flush=True)


def section_bf16(device, K=1000, num_docs=10):
    print(
        f"\n## bfloat16 network vs float32 (same seed, K = {K:,}, first {num_docs} documents; log weights float64)\n"
    )
    print(
        "| model | float32 s | bfloat16 s | speed-up | max |Δ log p̂| | median MC stderr (fp32) | max |Δ| / stderr |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in GPU_MODELS:
        docs = bundled_documents(name)[:num_docs]
        res = {}
        for dtype in (None, torch.bfloat16):
            model, _ = load_model(name, device=device, dtype=dtype)
            xs = [model.tokenize(d).to(device) for d in docs]
            importance_log_weights(model, xs[0], num_samples=2, document=docs[0], device=device)  # warm-up
            t, lws = timed(
                lambda: [
                    importance_log_weights(model, x, num_samples=K, document=d, device=device)
                    for x, d in zip(xs, docs)
                ],
                device,
            )
            res[dtype] = (t, lws)
        (t32, lw32), (t16, lw16) = res[None], res[torch.bfloat16]
        diff = np.array([abs(log_mean_exp(a) - log_mean_exp(b)) for a, b in zip(lw32, lw16)])
        se = np.sqrt([relative_variance(a) for a in lw32])  # the delta-method standard error of log p̂
        ratio = f"{(diff / se).max():.2f}" if (se > 1e-9).all() else "- (a stderr is 0: all K weights equal)"
        print(
            f"| {name} | {t32:.3f} | {t16:.3f} | {t32 / t16:.2f}x | {diff.max():.4f} | {np.median(se):.4f} |"
            f" {ratio} |",
            flush=True,
        )


def estimate_corpus(model, docs, K, device, budget=math.inf, progress=False):
    """K-sample IS log weights of each document until ``budget`` seconds are spent: (weights, token counts, seconds)."""
    from tqdm import tqdm

    lws, lengths = [], []
    start = time.perf_counter()
    for doc in tqdm(docs, disable=not progress, desc=f"K={K:,}", mininterval=10):
        x = model.tokenize(doc).to(device)
        lws.append(importance_log_weights(model, x, num_samples=K, document=doc, device=device))
        lengths.append(int(x.numel()))
        if time.perf_counter() - start > budget:
            break
    sync(device)
    return lws, lengths, time.perf_counter() - start


def section_kglm10k(device, dtype, K=10_000):
    docs = bundled_documents("kglm")
    model, _ = load_model("kglm", device=device, dtype=dtype)
    estimate_corpus(model, docs[:1], 2, device)  # warm-up
    lws, lengths, seconds = estimate_corpus(model, docs, K, device)
    khat = np.array([pareto_khat(lw) for lw in lws])
    ess = np.array([effective_sample_size(lw) for lw in lws])
    print(
        f"\n## KGLM, K = {K:,} over the bundled test corpus ({len(docs)} documents, {sum(lengths)} tokens),"
        f" {str(dtype or torch.float32).removeprefix('torch.')}\n"
    )
    print(
        f"wall time {seconds:.1f} s ({K * sum(lengths) / seconds:,.0f} particles·tokens/s); instance PPL"
        f" {instance_ppl(lws, lengths):.3f}, corpus PPL {corpus_ppl(lws, lengths):.3f}; mean ESS {ess.mean():.1f};"
        f" Pareto k̂ > 0.7 on {int((khat > 0.7).sum())} of {len(lws)} documents (median k̂ {np.nanmedian(khat):.2f})",
        flush=True,
    )


def wt2_corpus(model, seed=0) -> list[str]:
    """60 documents, 236,062 tokens in all (log-normal lengths), made of the bundled KGLM test documents repeated."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(math.log(WT2_TEST_TOKENS / WT2_TEST_ARTICLES), 0.6, WT2_TEST_ARTICLES)
    lengths = np.floor(raw / raw.sum() * WT2_TEST_TOKENS).astype(int)
    lengths[0] += WT2_TEST_TOKENS - lengths.sum()
    words = " ".join(bundled_documents("kglm")).split()
    docs = []
    for n in lengths:
        start = int(rng.integers(len(words)))
        docs.append(" ".join(words[(start + i) % len(words)] for i in range(n)))
    assert sum(model.tokenize(d).numel() for d in docs) == WT2_TEST_TOKENS
    return docs


def section_wt2(device, dtype, budget, K=10_000):
    model, _ = load_model("kglm", device=device, dtype=dtype)
    docs = wt2_corpus(model)
    estimate_corpus(model, docs[:1], 2, device)  # warm-up
    lws, lengths, seconds = estimate_corpus(model, docs, K, device, budget=budget, progress=True)
    done = sum(lengths)
    rate = K * done / seconds
    print(
        f"\n## KGLM, K = {K:,} over a synthetic Linked-WikiText-2-sized test corpus ({WT2_TEST_ARTICLES} documents,"
        f" {WT2_TEST_TOKENS:,} tokens, lengths {min(len(d.split()) for d in docs)}-{max(len(d.split()) for d in docs)}),"
        f" {str(dtype or torch.float32).removeprefix('torch.')}\n"
    )
    print(
        f"measured {len(lws)} documents, {done:,} tokens in {seconds:.1f} s: {rate:,.0f} particles·tokens/s;"
        f" whole corpus: {K * WT2_TEST_TOKENS / rate / 60:.1f} min"
        + (" (measured)" if len(lws) == len(docs) else " (extrapolated at that rate)"),
        flush=True,
    )


def section_compile(device, K=1024, num_docs=10, modes=("default",), models=("kglm", "entitynlm")):
    """Eager vs torch.compile of each model's per-token sampling kernel. ``fallback_random``: the compiled kernel
    draws eager's random numbers, so "same z" checks the compiled arithmetic."""
    import torch._dynamo
    import torch._inductor.config

    from lm_latent_eval.models.entitynlm import drawing as enlm
    from lm_latent_eval.models.kglm import proposal as kglm_proposal
    from lm_latent_eval.models.kglm import stepwise

    torch._inductor.config.fallback_random = True
    torch._dynamo.config.recompile_limit = 64
    print(f"\n## torch.compile on {device}: proposal.sample, K = {K:,}, first {num_docs} documents\n")
    print("| model | kernel | first pass s (compile) | s | vs eager | same z | max |Δ log q| |")
    print("|---|---|---|---|---|---|---|")
    targets = {
        "kglm": (kglm_proposal, "sample_step", stepwise.sample_step),
        # EntityNLM's per-token draw (issue 51 split latents.py: drawing.draw_step, which sample_latents calls)
        "entitynlm": (enlm, "draw_step", enlm.draw_step),
    }
    for name in models:
        module, attr, eager = targets[name]
        model, _ = load_model(name, device=device)
        docs = bundled_documents(name)[:num_docs]
        xs = [model.tokenize(d).to(device) for d in docs]

        def run():
            return [
                model.proposal.sample(x, K, generator=torch.Generator(device=device).manual_seed(i))
                for i, x in enumerate(xs)
            ]

        with torch.no_grad():
            run()
            t_eager, ref = timed(run, device)
            t_eager = min(t_eager, timed(run, device)[0])
            print(f"| {name} | eager | - | {t_eager:.3f} | 1.00x | True | 0 |", flush=True)
            for mode in modes:
                torch._dynamo.reset()
                setattr(module, attr, torch.compile(eager, dynamic=True, mode=mode))
                try:
                    first, _ = timed(run, device)
                    t, out = timed(run, device)
                    t = min(t, timed(run, device)[0])
                    same = all(torch.equal(a[0][k], b[0][k]) for a, b in zip(ref, out) for k in a[0])
                    dq = max(float((a[1] - b[1]).abs().max()) for a, b in zip(ref, out))
                    print(
                        f"| {name} | {mode} | {first:.1f} | {t:.3f} | {t_eager / t:.2f}x | {same} | {dq:.1e} |",
                        flush=True,
                    )
                except Exception as err:  # report, do not hide: a failed compile is a figure too
                    print(
                        f"| {name} | {mode} | failed: {type(err).__name__}: {str(err).splitlines()[0][:120]} |"
                        " | | | |",
                        flush=True,
                    )
                finally:
                    setattr(module, attr, eager)


def section_profile(device, K=10_000):
    """Where one bundled KGLM document's K-particle estimate spends its time: the top operators by host time."""
    from torch.profiler import ProfilerActivity, profile

    model, _ = load_model("kglm", device=device)
    doc = bundled_documents("kglm")[0]
    x = model.tokenize(doc).to(device)
    importance_log_weights(model, x, num_samples=K, document=doc, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if str(device).startswith("cuda") else [])
    with profile(activities=activities) as prof:
        t, _ = timed(
            lambda: importance_log_weights(model, x, num_samples=K, document=doc, device=device), device
        )
    events = prof.key_averages()
    launches = sum(
        e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
    )
    print(
        f"\n## Profile of one {x.numel()}-token KGLM document, K = {K:,} on {device}: {t:.3f} s,"
        f" {launches:,} kernel launches ({launches / x.numel():.0f} per token)\n"
    )
    print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--sections", default="sync,bf16,kglm10k,wt2,compile,profile")
    p.add_argument(
        "--compile-modes", default="default", help="torch.compile modes, e.g. default,reduce-overhead"
    )
    p.add_argument("--compile-models", default="kglm,entitynlm")
    p.add_argument("--dtype", default="bfloat16", help="precision of the kglm10k and wt2 runs")
    p.add_argument("--wt2-budget", type=float, default=180.0, help="seconds after which the wt2 run stops")
    args = p.parse_args(argv)
    dtype = None if args.dtype == "float32" else getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(
        f"# bench/gpu.py on {name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    sections = args.sections.split(",")
    if "sync" in sections and args.device.startswith("cuda"):
        section_sync(args.device)
    if "bf16" in sections:
        section_bf16(args.device)
    if "kglm10k" in sections:
        section_kglm10k(args.device, dtype)
    if "wt2" in sections:
        section_wt2(args.device, dtype, args.wt2_budget)
    if "profile" in sections:
        section_profile(args.device)
    if "compile" in sections:
        section_compile(
            args.device, modes=args.compile_modes.split(","), models=args.compile_models.split(",")
        )


if __name__ == "__main__":
    main()
