"""How noisy is what the precision target sizes documents by? Each document's c = v̂·K, at fixed K over seeds.

    python bench/precision_noise.py --lda 100 --documents 200 --seeds 4 --workers 2   # about 7 minutes on 2 cores
    # writes bench/precision_noise/lda_100x200.md and lda_100x200.jsonl (every document's v̂ and log p̂ at every K and seed)

The precision target (``estimators.adaptive``) sizes every document by c_n = v̂_n K_n, the largest seen over its
stages, and calls a document short when c_n / K_n is above the cap ρ / √N. ``bench/precision_stages.py`` shows that
on 1,000 LDA documents every one of the six stages finds hundreds of documents short, so that the samples drawn over
the stages are 3.5 times the reported stage's. This separates what c is from how it is measured: ``bench/lda_scale.py``'s
synthetic LDA with the lookahead, every document estimated by the settings ``estimator=auto`` resolves to (SMC, 4
runs) at K = 100, 200, …, 6,400, each with ``--seeds`` seeds, and prints

- ĉ / c̄ by K: the quantiles, over documents and seeds, of a document's ĉ at K over its c̄ (the mean of its ĉ at K ≥
  1,600 over the seeds), beside those of χ²₃ / 3, which v̂ would follow if it were the sample variance of 4 normal
  runs. If c̄ is a property of the document and the ratio follows χ²₃ / 3 at every K, the stages chase noise, not
  tails that more samples reveal.
- The disagreement test (``_History.disagrees``: |z| of two stages' bias-corrected log p̂ against the normal
  quantile of ``UncertaintyPolicy.agreement_level`` / N) between two seeds at the same K, where both estimates are
  unbiased and any alarm is a false one: alarms per corpus, against the policy's 0.05, and with Student's t at the
  Welch–Satterthwaite degrees of freedom of the two v̂ (``DocumentError.degrees_of_freedom``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lda_scale import synthetic

from lm_latent_eval.estimators import adaptive
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.settings import EstimatorSettings
from lm_latent_eval.models.lda import LDA

OUTPUT = Path(__file__).resolve().parent / "precision_noise"
SIZES = (100, 200, 400, 800, 1600, 3200, 6400)
# a document's c̄: the mean of its ĉ at these sizes and above, over the seeds
REFERENCE_SIZE = 1600
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


def gather(topics: int, documents: int, seeds: int, workers: int, path: Path) -> list[dict]:
    """Every document's (tokens, v̂, degrees of freedom, trusted, bias-corrected log p̂) at every K and seed."""
    params, texts = synthetic(topics, documents)
    model = LDA.from_parameters(**params, lookahead="cvb0")
    base = resolve(EstimatorSettings("auto", seed=0), model).settings
    records = []
    with open(path, "w", encoding="utf-8") as fh:
        for seed, k in itertools.product(range(seeds), SIZES):
            start = time.perf_counter()
            settings = base.replace(num_samples=k, target_se=None, seed=1000 + seed)
            estimates = adaptive.estimate_corpus(
                resolve(settings, model), texts, progress=False, workers=workers
            )
            errors = [estimates[t].error(DEFAULT_POLICY) for t in texts]
            record = {"seed": seed, "K": k, "seconds": time.perf_counter() - start,
                      "v": [e.relative_variance for e in errors], "dof": [e.degrees_of_freedom for e in errors],
                      "trusted": [e.trusted for e in errors], "corrected": [e.corrected for e in errors]}  # fmt: skip
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            records.append(record)
            print(f"seed {seed}, K = {k}: {record['seconds']:.1f} s", flush=True)
    return records


def report(records: list[dict], title: str) -> list[str]:
    """The two tables of the module docstring."""
    v = {(r["seed"], r["K"]): np.array(r["v"]) for r in records}
    seeds = sorted({r["seed"] for r in records})
    documents = len(records[0]["v"])
    c_bar = np.mean([v[s, k] * k for s in seeds for k in SIZES if k >= REFERENCE_SIZE], axis=0)
    chi2 = stats.chi2(3).ppf(QUANTILES) / 3
    lines = [
        f"# {title}",
        "",
        (
            f"c̄ over documents: median {np.median(c_bar):.1f}, 10% {np.quantile(c_bar, 0.1):.1f}, 90% "
            f"{np.quantile(c_bar, 0.9):.1f} (relative variance per sample)."
        ),
        "",
        "| K | " + " | ".join(f"ĉ / c̄ {q:.0%}" for q in QUANTILES) + " | mean |",
        "|---" * (len(QUANTILES) + 2) + "|",
    ]
    for k in SIZES:
        ratio = np.concatenate([v[s, k] * k / c_bar for s in seeds])
        lines.append(
            f"| {k:,} | "
            + " | ".join(f"{x:.2f}" for x in np.quantile(ratio, QUANTILES))
            + f" | {ratio.mean():.2f} |"
        )
    lines.append("| χ²₃ / 3 | " + " | ".join(f"{x:.2f}" for x in chi2) + " | 1.00 |")
    level = DEFAULT_POLICY.agreement_level
    normal = DEFAULT_POLICY.disagreement_quantile(documents)
    lines += [
        "",
        (
            f"The disagreement test between two seeds at the same K ({len(seeds) * (len(seeds) - 1) // 2} pairs per "
            f"K): documents called in disagreement per corpus of {documents}, nominally {level} (|z| > {normal:.2f}, "
            "the normal quantile), and with Student's t at the Welch–Satterthwaite degrees of freedom."
        ),
        "",
        "| K | alarms per corpus (normal quantile) | alarms per corpus (Student's t) |",
        "|---|---|---|",
    ]
    by = {(r["seed"], r["K"]): r for r in records}
    for k in SIZES:
        normal_alarms, t_alarms = [], []
        for a, b in itertools.combinations(seeds, 2):
            ra, rb = by[a, k], by[b, k]
            va, vb = np.array(ra["v"]), np.array(rb["v"])
            da, db = np.array(ra["dof"], dtype=float), np.array(rb["dof"], dtype=float)
            z = np.abs(np.array(ra["corrected"]) - np.array(rb["corrected"])) / np.sqrt(va + vb)
            dof = (va + vb) ** 2 / (va**2 / da + vb**2 / db)
            normal_alarms.append(int((z > normal).sum()))
            t_alarms.append(int((z > stats.t.isf(level / (2 * documents), dof)).sum()))
        lines.append(f"| {k:,} | {np.mean(normal_alarms):.2f} | {np.mean(t_alarms):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lda", type=int, default=100, help="topics of bench/lda_scale.py's synthetic LDA")
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="processes that estimate the documents")
    parser.add_argument("--table-only", action="store_true", help="the tables from estimates.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / f"lda_{args.lda}x{args.documents}.jsonl"
    start = time.perf_counter()
    if args.table_only:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    else:
        records = gather(args.lda, args.documents, args.seeds, args.workers, path)
    title = (
        f"ĉ = v̂·K over seeds on bench/lda_scale.py's synthetic LDA ({args.lda} topics, {args.documents} documents; "
        f"the settings estimator=auto resolves to, without the target; seeds 1000 to {999 + args.seeds}); "
        f"{platform.machine()}, {os.cpu_count()} cores, {args.workers} processes of one thread, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{sum(r['seconds'] for r in records) if args.table_only else time.perf_counter() - start:.0f} s"
    )
    lines = report(records, title)
    (OUTPUT / f"lda_{args.lda}x{args.documents}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
