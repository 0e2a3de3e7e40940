"""SMC vs IS on a bundled corpus: spread of log p̂ over seeds at equal K, the K IS needs to match SMC, time per document.

`python bench/bench_smc.py --model hmm` (or kglm, entitynlm, rnng, tokenization). For every document and seed, IS
and SMC run back to back with the same K (side by side, so contention hits both alike); the table reports the
across-seed standard deviation of log p̂ per document (mean and median over documents), the mean log p̂ (minus the
exact value where the model has one: the HMM's forward algorithm, the RNNG's enumeration of every tree; otherwise
relative to IS at the largest K: since E log p̂ ≤ log p for both estimators, a higher mean is a smaller gap, which
the SD alone does not show for heavy-tailed weights), and seconds per document. For latent_tokenization it also
prints the mean log p̂ above the canonical segmentation's log p(x, z*), a lower bound on log p(x). IS is also run
at larger K (``--is-ks``) to find the K at which IS matches SMC's spread at K = 100: interpolated in log-log between
measured K, or extrapolated from the largest measured K with the 1/√K law when IS never gets there (marked "≈").
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lm_latent_eval.estimators import importance_log_weights, log_mean_exp, smc_log_weights
from lm_latent_eval.models import bundled_corpus, load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.protocol import has


def exact_values(model, xs) -> list[float] | None:
    """log p(x) of every document where it can be computed (a tractable marginal, or every RNNG tree when every
    sentence has ≤ 12 words), else None."""
    if has(model, "tractable_marginal"):
        return [model.log_marginal(x) for x in xs]
    if type(model).__name__ == "RNNG":
        from lm_latent_eval.models.rnng.enumerate import MAX_WORDS, exact_log_marginal

        if max(model.proposal.words(x).numel() for x in xs) > MAX_WORDS:
            return None  # too many trees: relative to IS at the largest K instead
        return [exact_log_marginal(model, x) for x in xs]
    return None


def run_is(model, x, k, tau, peek, seed, doc, device):
    return importance_log_weights(model, x, num_samples=k, temperature=tau, peek=peek, seed=seed, document=doc,
                                  device=device)  # fmt: skip


def run_smc(model, x, k, tau, peek, seed, doc, threshold, runs, device):
    return smc_log_weights(model, x, num_samples=k, temperature=tau, peek=peek, seed=seed, document=doc,
                           resample_threshold=threshold, smc_runs=runs, device=device)  # fmt: skip


def timed(fn, *args):
    """(fn(*args), seconds)."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def spread(values: np.ndarray) -> np.ndarray:
    """Across-seed standard deviation of log p̂ per document: values [docs, seeds] -> [docs]."""
    return values.std(axis=1, ddof=1)


def k_to_match(ks: list[int], sds: list[float], target: float) -> tuple[float, bool]:
    """K at which the IS spread (measured at ks) falls to ``target``: log-log interpolation, else 1/√K extrapolation."""
    for (k0, s0), (k1, s1) in zip(zip(ks, sds), zip(ks[1:], sds[1:])):
        if s0 >= target >= s1 and s0 > s1:
            slope = (math.log(s1) - math.log(s0)) / (math.log(k1) - math.log(k0))
            return math.exp(math.log(k0) + (math.log(target) - math.log(s0)) / slope), True
    if target >= sds[0]:
        return float(ks[0]), True
    return ks[-1] * (sds[-1] / target) ** 2, False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="hmm")
    p.add_argument("--data", default=None, help="default: the model's bundled corpus")
    p.add_argument("--num-docs", type=int, default=None)
    p.add_argument(
        "--concat", type=int, default=1, help="join every N consecutive documents into one (longer texts)"
    )
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--ks", default="100,1000", help="K at which IS and SMC run side by side")
    p.add_argument(
        "--is-ks", default="10000", help="extra K for IS alone (the K that matches SMC at the first K)"
    )
    p.add_argument("--is-seeds", type=int, default=None, help="seeds at the extra IS K (default: --seeds)")
    p.add_argument("--peek", default="true", help="true, false or both")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--resample-threshold", type=float, default=0.5)
    p.add_argument("--smc-runs", type=int, default=1)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    model, _ = load_model(args.model, device=args.device)
    docs = read_documents(args.data or bundled_corpus(args.model))
    docs = [" ".join(docs[i : i + args.concat]) for i in range(0, len(docs), args.concat)][: args.num_docs]
    xs = [model.tokenize(d).to(args.device) for d in docs]
    keep = [i for i, x in enumerate(xs) if x.numel()]
    docs, xs = [docs[i] for i in keep], [xs[i] for i in keep]
    exact = exact_values(model, xs)
    canonical = (
        [float(model.log_joint(x, x[None])[0]) for x in xs]
        if type(model).__name__ == "TokenizationLM"
        else None
    )
    ks = [int(k) for k in args.ks.split(",")]
    is_ks = [int(k) for k in args.is_ks.split(",") if k]
    peeks = {"true": [True], "false": [False], "both": [True, False]}[args.peek]
    tau = args.temperature
    for peek in peeks:  # warm-up: first calls pay for lazy initialization
        run_is(model, xs[0], 4, tau, peek, 0, docs[0], args.device)
        run_smc(model, xs[0], 4, tau, peek, 0, docs[0], args.resample_threshold, args.smc_runs, args.device)
    print(
        f"# SMC vs IS, {args.model} on {args.device} ({platform.processor() or platform.machine()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads), {len(docs)} documents, "
        f"{sum(x.numel() for x in xs)} tokens{f' (every {args.concat} joined)' if args.concat > 1 else ''}, {args.seeds} seeds, τ = {tau:g}, SMC resamples when ESS < "
        f"{args.resample_threshold:g}·K ({args.smc_runs} run(s), systematic), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.2f}"
    )
    for peek in peeks:
        print(f"\n## peek = {str(peek).lower()}\n")
        print(
            "| estimator | K | mean SD of log p̂ over seeds | median SD | mean log p̂ − log p | s / document | "
            "SMC s / IS s | resampling steps / document |"
        )
        print("|---|---|---|---|---|---|---|---|")
        sd_is, sd_smc, time_ratio, means = {}, {}, {}, {}  # means[(estimator, K)]: mean log p̂ per document
        for k in ks:
            ll = {"is": np.empty((len(docs), args.seeds)), "smc": np.empty((len(docs), args.seeds))}
            secs = {"is": 0.0, "smc": 0.0}
            resampled = []
            for n, (x, doc) in enumerate(zip(xs, docs)):
                for s in range(args.seeds):
                    lw, t = timed(run_is, model, x, k, tau, peek, s, doc, args.device)
                    ll["is"][n, s], secs["is"] = log_mean_exp(lw), secs["is"] + t
                    (lw, d), t = timed(run_smc, model, x, k, tau, peek, s, doc, args.resample_threshold,
                                       args.smc_runs, args.device)  # fmt: skip
                    ll["smc"][n, s], secs["smc"] = log_mean_exp(lw), secs["smc"] + t
                    resampled.append(d.resampling_steps)
            sd_is[k], sd_smc[k] = spread(ll["is"]), spread(ll["smc"])
            means["IS", k], means["SMC", k] = ll["is"].mean(1), ll["smc"].mean(1)
            per_doc = {e: secs[e] / (len(docs) * args.seeds) for e in secs}
            time_ratio[k] = per_doc["smc"] / per_doc["is"]
            for e, sd in (("IS", sd_is[k]), ("SMC", sd_smc[k])):
                bias = (
                    f"{np.mean(ll[e.lower()].mean(1) - np.array(exact)):+.4f}" if exact is not None else "-"
                )
                ratio = f"{per_doc['smc'] / per_doc['is']:.2f}" if e == "SMC" else ""
                steps = f"{np.mean(resampled):.2f}" if e == "SMC" else ""
                print(
                    f"| {e} | {k:,} | {sd.mean():.4f} | {np.median(sd):.4f} | {bias} | {per_doc[e.lower()]:.4f} | "
                    f"{ratio} | {steps} |",
                    flush=True,
                )
        for k in is_ks:
            seeds = args.is_seeds or args.seeds
            ll = np.empty((len(docs), seeds))
            total = 0.0
            for n, (x, doc) in enumerate(zip(xs, docs)):
                for s in range(seeds):
                    lw, t = timed(run_is, model, x, k, tau, peek, s, doc, args.device)
                    ll[n, s], total = log_mean_exp(lw), total + t
            sd_is[k] = spread(ll)
            means[f"IS ({seeds} seeds)", k] = ll.mean(1)
            bias = f"{np.mean(ll.mean(1) - np.array(exact)):+.4f}" if exact is not None else "-"
            print(
                f"| IS ({seeds} seeds) | {k:,} | {sd_is[k].mean():.4f} | {np.median(sd_is[k]):.4f} | {bias} | "
                f"{total / (len(docs) * seeds):.4f} | | |",
                flush=True,
            )
        # E[log p̂] ≤ log p for both estimators: the higher the mean log p̂, the smaller the gap (what SD alone misses)
        if exact is None:
            ref_name = max(means, key=lambda key: key[1])  # IS at the largest K
            ref = means[ref_name]
            print(
                f"\nMean log p̂ per document relative to {ref_name[0]} at K = {ref_name[1]:,} (higher = closer to "
                "log p, since E log p̂ ≤ log p for both estimators), mean over documents: "
                + ", ".join(f"{e} K={k:,}: {np.mean(v - ref):+.3f}" for (e, k), v in means.items())
            )
        if canonical is not None:
            print(
                "Mean log p̂ per document minus the canonical segmentation's log p(x, z*) (a lower bound on log p): "
                + ", ".join(
                    f"{e} K={k:,}: {np.mean(v - np.array(canonical)):+.4f}" for (e, k), v in means.items()
                )
                + f"; documents where SMC K={ks[0]}'s mean is below it: "
                + f"{int((means['SMC', ks[0]] < np.array(canonical) - 1e-9).sum())} of {len(docs)}"
            )
        k0 = ks[0]
        measured = sorted(sd_is)
        target = float(sd_smc[k0].mean())
        k_match, inside = k_to_match(measured, [float(sd_is[k].mean()) for k in measured], target)
        already = target >= float(sd_is[measured[0]].mean())
        print(
            f"\nIS {'at K = ' + str(measured[0]) + ' is already as tight as' if already else 'needs K '}"
            f"{'' if already else ('= ' if inside else '≈ ') + f'{k_match:,.0f} to match'} the mean SD of SMC at "
            f"K = {k0} ({target:.4f}){'' if inside else ' (extrapolated from the largest K with SD ∝ 1/√K)'}; "
            "per document "
            f"(1/√K law from K = {measured[-1]:,}): median "
            f"{np.median(measured[-1] * (sd_is[measured[-1]] / sd_smc[k0]) ** 2):,.0f}."
        )
        k_eq = k0 * time_ratio[k0]  # IS at the K it can afford in SMC's time at K = k0
        log_ks, log_sd = np.log(measured), np.log([float(sd_is[k].mean()) for k in measured])
        sd_eq = float(np.exp(np.interp(math.log(k_eq), log_ks, log_sd)))
        clamped = not measured[0] <= k_eq <= measured[-1]
        print(
            f"Equal wall time: SMC at K = {k0} costs IS at K ≈ {k_eq:,.0f}, whose mean SD "
            f"({'nearest measured K: outside the measured range' if clamped else 'log-log interpolation'}) "
            f"is {sd_eq:.4f} vs SMC's {target:.4f}."
        )
        print(
            f"SMC at K = {k0} is tighter than IS at K = {k0} on "
            f"{int((sd_smc[k0] < sd_is[k0]).sum())} of {len(docs)} documents."
        )
    print(f"\n(load average at the end: {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
