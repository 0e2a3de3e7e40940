"""Calibration of SMC's Lee-Whiteley variance estimate against exact values: `python bench/smc_se_calibration.py`.

For each case (bundled HMM documents: forward algorithm; tiny KGLM and EntityNLM of the tests: enumeration), runs SMC
with K particles under ``--seeds`` seeds and prints the variance of p̂/p over the seeds beside the mean of the
per-run estimate Var(p̂)/p̂² (Lee & Whiteley 2018) that SMC reports as ``log_likelihood_stderr``².
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "contract")]

from cases import CASES  # the contract table: the tiny enumerable models of the tests

from lm_latent_eval.estimators import smc_log_weights
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.paths import DATA_DIR


def row(name, model, text, log_p, k, peek, seeds):
    x = model.tokenize(text)
    runs = [
        smc_log_weights(
            model,
            x,
            num_samples=k,
            temperature=1.0,
            peek=peek,
            seed=s,
            document=text,
            resample_threshold=0.5,
            smc_runs=1,
        )[1]
        for s in range(seeds)
    ]
    ratio = np.exp(np.array([d["log_likelihood"] for d in runs]) - log_p)
    estimate = np.mean([d["log_likelihood_stderr"] ** 2 for d in runs])
    steps = np.mean([d["resampling_steps"] for d in runs])
    print(
        f"| {name} | {x.numel()} | {'peek' if peek else 'no peek'} | {k} | {ratio.var(ddof=1):.4f} | {estimate:.4f} "
        f"| {estimate / ratio.var(ddof=1):.2f} | {ratio.mean():.3f} | {steps:.2f} |",
        flush=True,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--k", type=int, default=20)
    args = p.parse_args(argv)
    print(f"# {args.seeds} seeds, resample_threshold 0.5, one run; load average {os.getloadavg()[0]:.2f}")
    print(
        "| case | tokens | proposal | K | Var(p̂/p) over seeds | mean Lee-Whiteley estimate | ratio | mean p̂/p | "
        "resampling steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    hmm, _ = load_model("hmm")
    docs = read_documents(DATA_DIR / "corpus" / "tiny_test.jsonl")
    for n in (0, 3, 7):
        for peek in (True, False):
            row(
                f"HMM document {n}",
                hmm,
                docs[n],
                hmm.log_marginal(hmm.tokenize(docs[n])),
                100,
                peek,
                args.seeds,
            )
    cases = {case.name: case for case in CASES}
    for name, case in (("kglm", cases["kglm-q-features"]), ("entitynlm", cases["entitynlm"])):
        model = case.build()
        log_p = case.exact(model, model.tokenize(case.text))
        for peek in (True, False):
            row(f"tiny {name}", model, case.text, log_p, args.k, peek, args.seeds)


if __name__ == "__main__":
    main()
