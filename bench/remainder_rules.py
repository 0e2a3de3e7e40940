"""Does the two-sided statement need the remainder gate G ≤ 0.5 at corpus scale? Coverage on the HMM at fixed K.

    python bench/remainder_rules.py --seeds 100 --workers 2   # about 40 minutes on 2 cores
    # writes bench/remainder_rules/table.md and runs.jsonl (every seed's sums, resumable)

The two-sided statement S̃ ± (t·SE + C) (``estimators.intervals``) allows the bias of Σ log p̂ anywhere from 0 to 2C,
C = Σ v̂ / 2 its first-order estimate, and is printed only when G = Σ v̂^{3/2} / SE ≤ 0.5: what the first-order
correction leaves (terms of order v^{3/2}, summed R = Σ v̂^{3/2}) must be small against the standard error. For
documents of a fixed precision G grows like √N, so at 1,000 documents the precision target buys samples for G, not
for the precision asked (``bench/precision_stages.py``). Another reading of the same remainder: it must be small
against the allowance, R ≤ C/2 (a v-weighted mean of √v̂ at most 1/4), which does not grow with N. This measures both
on the bundled HMM, whose exact log p(x) the forward algorithm gives: SMC (4 runs, peeking) at fixed K over the first
N of ``interval_coverage.benchmark_corpus``, every seed estimating all 1,000 documents once, and per K and N: the
medians of max v̂, G and R / C, then for each rule (G ≤ 0.5, the gate before; R ≤ C/2; either, the gate now:
``UncertaintyPolicy.remainder_acceptable``; no remainder gate) the
share of seeds whose every v̂ was trusted and whose rule allowed a two-sided statement, and the coverage of those
statements; and where the truth fell, (S − Σ log p̂) / C: 1 where v̂ is right on average and the first-order bias
is the whole bias, 2 where the allowance ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interval_coverage import benchmark_corpus
from lda_scale import synthetic

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.intervals import satterthwaite_degrees_of_freedom
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models import load_model
from lm_latent_eval.models.lda import LDA

OUTPUT = Path(__file__).resolve().parent / "remainder_rules"
REFERENCES = Path(__file__).resolve().parent / "lda_scale" / "references"
SIZES = (10, 50, 200, 1000)
# each rule of (Σ v̂, Σ v̂^{3/2}): whether it allows a two-sided statement
RULES = {
    "G ≤ 0.5 (before)": lambda sum_v, sum_v15: sum_v15 / math.sqrt(sum_v) <= DEFAULT_POLICY.max_remainder,
    "R ≤ C/2": lambda sum_v, sum_v15: sum_v15 / (sum_v / 2) <= DEFAULT_POLICY.max_remainder_share,
    "either (the policy now)": DEFAULT_POLICY.remainder_acceptable,
    "no gate": lambda sum_v, sum_v15: True,
}


def _sums(errors: list, sizes) -> dict:
    """Per N of ``sizes``, over the first N errors: Σ log p̂, Σ v̂, Σ v̂^{3/2}, max v̂, the Satterthwaite degrees of
    freedom and whether every v̂ was trusted."""
    sums = {}
    for n in sizes:
        v = np.array([e.relative_variance for e in errors[:n]])
        sums[str(n)] = {
            "log_likelihood": float(sum(e.log_likelihood for e in errors[:n])),
            "sum_v": float(v.sum()),
            "sum_v15": float((v**1.5).sum()),
            "max_v": float(v.max()),
            "dof": float(satterthwaite_degrees_of_freedom(v, [e.degrees_of_freedom for e in errors[:n]])),
            "trusted": all(e.trusted for e in errors[:n]),
        }
    return sums


def _seed(job: tuple[int, int]) -> dict:
    """One seed at one K on the HMM: ``_sums`` of its documents at every N of SIZES."""
    k, seed = job
    torch.set_num_threads(1)
    model, _ = load_model("hmm")
    settings = EstimatorSettings("smc", k, peek=True, seed=seed)
    errors = [estimate_document(model, d, settings).error() for d in benchmark_corpus(max(SIZES))]
    return {"K": k, "seed": seed, "sizes": _sums(errors, SIZES)}


def _lda_runs(topics: int, documents: int, jobs: list[tuple[int, int]], workers: int):
    """Each (K, seed) of ``jobs`` on ``bench/lda_scale.py``'s synthetic LDA: ``_sums`` of the whole corpus, its
    documents estimated by the settings ``estimator=auto`` resolves to at fixed K, in ``workers`` processes."""
    params, texts = synthetic(topics, documents)
    model = LDA.from_parameters(**params, lookahead="cvb0")
    base = resolve(EstimatorSettings("auto"), model).settings
    for k, seed in jobs:
        settings = base.replace(num_samples=k, target_se=None, seed=seed)
        by_text = estimate_corpus(resolve(settings, model), texts, progress=False, workers=workers)
        yield {"K": k, "seed": seed, "sizes": _sums([by_text[t].error() for t in texts], (documents,))}


def table(runs: list[dict], truth: dict[int, float], title: str, sizes=SIZES) -> list[str]:
    """The table of the module docstring."""
    names = list(RULES)
    lines = [
        f"# {title}",
        "",
        "| K | N | seeds | median max v̂ | median G | median R / C | "
        + " | ".join(f"{n}: two-sided, coverage" for n in names)
        + " | (S − Σ log p̂) / C: mean ± sd |",
        "|---" * (7 + len(names)) + "|",
    ]
    for k in sorted({r["K"] for r in runs}):
        for n in sizes:
            rows = [r["sizes"][str(n)] for r in runs if r["K"] == k]
            g = [x["sum_v15"] / math.sqrt(x["sum_v"]) for x in rows]
            r_over_c = [2 * x["sum_v15"] / x["sum_v"] for x in rows]
            cells = []
            for rule in RULES.values():
                two, held = 0, 0
                for x in rows:
                    if not (x["trusted"] and rule(x["sum_v"], x["sum_v15"])):
                        continue
                    two += 1
                    se, c = math.sqrt(x["sum_v"]), x["sum_v"] / 2
                    q = float(stats.t.ppf(0.975, x["dof"])) if math.isfinite(x["dof"]) else 1.96
                    held += abs(truth[n] - (x["log_likelihood"] + c)) <= q * se + c
                cells.append(f"{two / len(rows):.0%}, {held / two:.0%}" if two else "0%, –")
            where = [(truth[n] - x["log_likelihood"]) / (x["sum_v"] / 2) for x in rows]
            lines.append(
                f"| {k:,} | {n:,} | {len(rows)} | {np.median([x['max_v'] for x in rows]):.3f} | "
                f"{np.median(g):.2f} | {np.median(r_over_c):.2f} | "
                + " | ".join(cells)
                + f" | {np.mean(where):.2f} ± {np.std(where):.2f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="300,1000", help="particles per document (SMC, 4 runs, peeking)")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--lda", type=int, default=None, help="topics: bench/lda_scale.py's LDA instead of the HMM"
    )
    parser.add_argument("--documents", type=int, default=1000, help="documents of --lda's corpus")
    parser.add_argument("--table-only", action="store_true", help="the table from the runs file")
    args = parser.parse_args()
    OUTPUT.mkdir(exist_ok=True)
    name = "runs" if args.lda is None else f"lda_{args.lda}x{args.documents}"
    path = OUTPUT / f"{name}.jsonl"
    done = (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    )
    start = time.perf_counter()
    if not args.table_only:
        have = {(r["K"], r["seed"]) for r in done}
        jobs = [(int(k), s) for s in range(args.seeds) for k in args.ks.split(",") if (int(k), s) not in have]
        with contextlib.ExitStack() as stack, open(path, "a") as fh:
            if args.lda is None:
                pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.workers))
                runs = pool.imap_unordered(_seed, jobs)
            else:
                torch.set_num_threads(1)
                runs = _lda_runs(args.lda, args.documents, jobs, args.workers)
            for run in tqdm(runs, total=len(jobs), desc="seeds"):
                fh.write(json.dumps(run) + "\n")
                fh.flush()
                done.append(run)
    when = (
        f"{platform.machine()}, {os.cpu_count()} cores, {args.workers} processes, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        + ("" if args.table_only else f", {time.perf_counter() - start:.0f} s")
    )
    if args.lda is None:
        model, _ = load_model("hmm")
        exact = [float(model.log_marginal(model.tokenize(d))) for d in benchmark_corpus(max(SIZES))]
        truth, sizes = {n: float(sum(exact[:n])) for n in SIZES}, SIZES
        title = (
            "Remainder rules on the bundled HMM: SMC, 4 runs, peeking, fixed K; the first N documents of "
            f"interval_coverage.benchmark_corpus; 95% statements ({when})"
        )
    else:
        references = json.loads((REFERENCES / "references.json").read_text(encoding="utf-8"))
        ref = next(
            r["reference"] for r in references if (r["topics"], r["documents"]) == (args.lda, args.documents)
        )
        truth, sizes = {args.documents: ref["log_likelihood"]}, (args.documents,)
        title = (
            f"Remainder rules on bench/lda_scale.py's LDA ({args.lda} topics, {args.documents:,} documents): the "
            "settings estimator=auto resolves to at fixed K; 95% statements against the long run of "
            f"bench/lda_scale/references (S ± {ref['stderr']:.2f} nats, its SE, taken as the truth) ({when})"
        )
    lines = table(done, truth, title, sizes)
    (OUTPUT / f"{'table' if args.lda is None else name}.md").write_text(
        "\n".join(lines) + "\n", encoding="utf-8"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
