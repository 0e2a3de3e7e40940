"""How far does a lower precision of the matrix products move log p̂, against the Monte Carlo standard error?

    python bench/precision_shift.py                 # the CPU: float32 and bfloat16 (TF32 has no effect there)
    python bench/precision_shift.py --device cuda --output bench/precision_shift/cuda.md   # adds the TF32 rows

Writes bench/precision_shift/README.md (``--output``). For every bundled model with a sampling estimator (KGLM,
EntityNLM, RNNG by default) on its bundled test corpus, at a fixed K (no precision target), each precision of
``lm_latent_eval.precision`` (model_args ``precision=``) against float32:

1. **The estimators as a run uses them**: IS and SMC (``estimator=auto``'s choice for these models) with the same seed.
   Per document the shift Δ = log p̂(precision) − log p̂(float32) in units of float32's Monte Carlo standard error
   (√v̂, the estimator's own), and over the corpus Σ Δ against the corpus Monte Carlo standard error √(Σ v̂). A draw
   whose inverse-CDF boundary the rounding moves past its uniform changes, and SMC resamples on the changed weights,
   so this shift holds fresh Monte Carlo noise besides the rounding.
2. **The rounding alone**: float32's IS draws z (same seed) scored again at the precision, log w = log p(x, z) −
   log q(z | x) (``proposal.log_prob``, where the proposal has it): the shift of log p̂ at fixed draws per document and
   over the corpus. This part is a bias of every estimate, not noise, and does not shrink with K: summed over N
   documents it grows like N, the Monte Carlo standard error like √N / √K. So it is judged per token, against the
   Monte Carlo standard error per token that ``estimator=auto`` aims at (its precision target, 0.002 nats), and shown
   beside the corpus standard error at this K.

The rule the default follows: a lower precision becomes the default on a device where it is faster than float32 for
every model and its rounding alone moves log p̂ by less than ``--tolerance`` (0.1) of the precision target per token
for every model; float32 otherwise. The verdict at the end applies it to the figures above it.

On the CPU, autocast keeps softmax and log-softmax in bfloat16 where CUDA's autocast computes them in float32, and a
CPU without bfloat16 units gains no time: the CPU's rows say what bfloat16 does to these models' numbers on a CPU, not
what it does on a GPU, where the command above measures it (and TF32).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from lm_latent_eval.estimators import EstimatorSettings, resolve
from lm_latent_eval.estimators.diagnostics import log_mean_exp, relative_variance
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.settings import AUTO_TARGET_SE
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.precision import PRECISIONS, in_effect, matmul_precision

OUTPUT = Path(__file__).resolve().parent / "precision_shift" / "README.md"


def machine(device: str) -> str:
    """The device in words: the GPU's name, or the CPU's model name and cores."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            name = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {torch.get_num_threads()} torch thread(s)"


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def estimate_all(run, texts, precision, device, repeats=2) -> tuple[np.ndarray, np.ndarray, float]:
    """(log p̂ [N], v̂ [N], seconds: the faster of ``repeats`` passes, which must give the same numbers) of every text
    under ``precision``."""
    passes, seconds = [], math.inf
    with matmul_precision(precision, device):
        # warm-up: one-off allocations, and the cached encodings of the other precision replaced
        run.estimate(texts[0][:40], device=device)
        for _ in range(repeats):
            sync(device)
            start = time.perf_counter()
            errors = [run.estimate(t, device=device).error(DEFAULT_POLICY) for t in texts]
            sync(device)
            seconds = min(seconds, time.perf_counter() - start)
            passes.append(np.array([(e.log_likelihood, e.relative_variance) for e in errors]))
    assert all(np.array_equal(passes[0], other) for other in passes[1:]), "a pass gave other numbers"
    return passes[0][:, 0], passes[0][:, 1], seconds


def rescored(model, texts, K, seed, precisions, device) -> dict[str, list[np.ndarray]]:
    """{precision: the log weights [K] per text}: float32's IS draws (one seed per text), scored at each precision."""
    out = {p: [] for p in precisions}
    with torch.no_grad():
        for n, text in enumerate(texts):
            x = model.tokenize(text).to(device)
            generator = torch.Generator(device=device).manual_seed(seed + n)
            with matmul_precision("float32", device):
                z, _ = model.proposal.sample(x, K, generator=generator)
            for p in precisions:
                with matmul_precision(p, device):
                    lw = model.log_joint(x, z) - model.proposal.log_prob(x, z)
                out[p].append(lw.double().cpu().numpy())
    return out


def estimator_rows(name, model, texts, tokens, precisions, args) -> tuple[list[str], dict]:
    """Section 1's rows for one model, and {precision: the slowest time ratio to float32} over its estimators."""
    rows, slowest = [], {}
    for estimator in args.estimators.split(","):
        run = resolve(
            EstimatorSettings(estimator, num_samples=args.num_samples, seed=args.seed, target_se=0), model
        )
        ll32, v32, t32 = estimate_all(run, texts, "float32", args.device)
        se = np.sqrt(v32)
        corpus_se = math.sqrt(v32.sum())
        rows.append(
            f"| {name} | {estimator} | float32 | {len(texts)} | {tokens:,} | {t32:.2f} | 1.00x | 0 | 0 | 0 |"
            f" {corpus_se:.3f} | 0 |"
        )
        for p in precisions:
            ll, _, t = estimate_all(run, texts, p, args.device)
            shift = ll - ll32
            ratio = np.abs(shift[se > 0]) / se[se > 0]
            slowest[p] = max(slowest.get(p, 0.0), t / t32)
            rows.append(
                f"| {name} | {estimator} | {p} | {len(texts)} | {tokens:,} | {t:.2f} | {t / t32:.2f}x |"
                f" {ratio.max():.2f} | {np.median(ratio):.2f} | {shift.sum():+.3f} | {corpus_se:.3f} |"
                f" {abs(shift.sum()) / corpus_se:.2f} |"
            )
            print(rows[-1], flush=True)
    return rows, slowest


def rounding_rows(name, model, texts, tokens, precisions, args) -> tuple[list[str], dict]:
    """Section 2's rows for one model, and {precision: |Σ δ| per token / the default precision target}."""
    if getattr(model.proposal, "log_prob", None) is None:
        return [f"| {name} | (its proposal has no log_prob: not measured) | | | | | | | |"], {}
    lws = rescored(model, texts, args.num_samples, args.seed, ("float32", *precisions), args.device)
    ref = lws["float32"]
    # IS's v̂ = s²_w / (K w̄²) of float32's weights, summed over the documents
    corpus_se = math.sqrt(sum(relative_variance(lw) for lw in ref))
    rows, ratios = [], {}
    for p in precisions:
        delta = np.array([log_mean_exp(a) - log_mean_exp(b) for a, b in zip(lws[p], ref)])
        per_weight = np.mean([np.mean(np.abs(a - b)) for a, b in zip(lws[p], ref)])
        per_token = abs(delta.sum()) / tokens
        ratios[p] = per_token / AUTO_TARGET_SE
        rows.append(
            f"| {name} | {p} | {per_weight:.4f} | {np.abs(delta).max():.4f} | {delta.sum():+.4f} |"
            f" {per_token:.2e} | {ratios[p]:.3f} | {corpus_se:.3f} | {abs(delta.sum()) / corpus_se:.3f} |"
        )
        print(rows[-1], flush=True)
    return rows, ratios


def verdict(precisions, slowest, rounding, tolerance) -> list[str]:
    """The rule applied: which precisions pass, and the default it gives on this device."""
    lines, passing = [], []
    for p in precisions:
        models = sorted(rounding)
        worst = max((rounding[m][p] for m in models if p in rounding[m]), default=math.nan)
        slow = max(slowest[m][p] for m in slowest)
        faster, accurate = slow < 1.0, worst < tolerance
        lines.append(
            f"- {p}: slowest time against float32 {slow:.2f}x ({'faster' if faster else 'not faster'} on every"
            f" model); rounding alone at most {worst:.3f} of the precision target"
            f" ({'within' if accurate else 'not within'} {tolerance}): {'passes' if faster and accurate else 'fails'}"
        )
        if faster and accurate:
            passing.append((slow, p))
    default = min(passing)[1] if passing else "float32"
    lines.append(f"- default on this device by the rule: **{default}**")
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="kglm,entitynlm,rnng")
    p.add_argument("--estimators", default="is,smc")
    p.add_argument("--num-samples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch threads (timings are one process)")
    p.add_argument(
        "--tolerance", type=float, default=0.1, help="the rule's bound on the rounding, in stderrs"
    )
    p.add_argument("--output", type=Path, default=OUTPUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = args.device
    # TF32 has no effect off CUDA (precision.in_effect): its row is measured only where it can differ
    precisions = [q for q in PRECISIONS if q != "float32" and in_effect(q, device) == q]
    start = time.perf_counter()
    head = [
        f"# Precision of the matrix products against the Monte Carlo error, on {device} ({machine(device)})",
        "",
        f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average"
        f" {os.getloadavg()[0]:.2f}; K = {args.num_samples:,}"
        f" fixed (no precision target), seed {args.seed}; precisions measured: float32, {', '.join(precisions)}"
        + ("" if "tf32" in precisions else " (tf32 has no effect on this device: it runs float32)"),
        "",
    ]
    sec1 = [
        "## 1. The estimators, same seed: shift Δ of log p̂ against the Monte Carlo standard error",
        "",
        (
            "| model | estimator | precision | documents | tokens | s | vs float32 | max abs(Δ) / stderr |"
            " median abs(Δ) / stderr | corpus Σ Δ (nats) | corpus MC stderr (nats) | abs(Σ Δ) / corpus stderr |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    sec2 = [
        "## 2. The rounding alone: float32's IS draws scored again",
        "",
        (
            "| model | precision | mean abs(δ log w) (nats) | max abs(δ log p̂) per document | corpus Σ δ log p̂ |"
            f" abs(Σ δ) per token | / target {AUTO_TARGET_SE} | corpus MC stderr (nats) | abs(Σ δ) / corpus stderr |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    slowest, rounding = {}, {}
    for name in args.models.split(","):
        model, _ = load_model(name, device=device)
        texts = bundled_documents(name)
        tokens = sum(model.tokenize(t).numel() for t in texts)
        rows, slowest[name] = estimator_rows(name, model, texts, tokens, precisions, args)
        sec1 += rows
        rows, ratios = rounding_rows(name, model, texts, tokens, precisions, args)
        sec2 += rows
        if ratios:
            rounding[name] = ratios
    tail = [
        "## Verdict",
        "",
        (
            "The rule: a lower precision is the default where it is faster than float32 on every model and its"
            f" rounding alone moves log p̂ by less than {args.tolerance} of the default precision target"
            f" ({AUTO_TARGET_SE} nats per token, the Monte Carlo standard error estimator=auto aims at) on every model."
        ),
        "",
        *verdict(precisions, slowest, rounding, args.tolerance),
        "",
        (
            f"{time.perf_counter() - start:.0f} s in all (times: the faster of two passes; load average at the end"
            f" {os.getloadavg()[0]:.2f})."
        ),
    ]
    text = "\n".join([*head, *sec1, "", *sec2, "", *tail]) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
