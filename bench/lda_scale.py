"""LDA at the sizes topic modellers use: the default statement (estimator=auto) with and without the lookahead.

    python bench/lda_scale.py   # writes bench/lda_scale/table.md and results.json (about 40 minutes on 2 cores)

A synthetic LDA per topic count (``--topics``): Φ rows ~ Dirichlet(0.05) over 2,000 words, α = 0.1, and documents of
100 tokens sampled from the model (seed 0). For every topic count, in one process and back to back (so their
seconds compare): the reference for the first 20 documents (twisted SMC with ``--reference-samples`` particles per
document in 16 runs: its bias-corrected Σ log p̂ and standard error), then ``estimator=auto`` (SMC with the
precision target, the defaults) on those 20 documents with ``lookahead=none`` (Wallach et al.'s left-to-right urn,
the proposal before) and ``lookahead=cvb0`` (the default now), and ``--coverage-seeds`` more seeds of the latter.
In a second process at the same time: ``estimator=auto`` with the lookahead on ``--large`` documents (no long-run
reference there: it would take hours). And a 4-topic model whose exact log p(x) the dynamic program gives, as a check
of both references and statements against the truth. Reported: seconds, mean samples per document, the printed 95%
statement about perplexity (two-sided, or the certified bound ≤), and whether it holds for the reference.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from lm_latent_eval.estimators import EstimatorSettings, smc_log_weights
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models.lda import LDA

# --output sets it for this process and the spawned workers (they import this module afresh)
OUTPUT = Path(os.environ.get("LDA_SCALE_OUTPUT", Path(__file__).resolve().parent / "lda_scale"))
WORDS, TOKENS, ALPHA, ETA = 2000, 100, 0.1, 0.05


def synthetic(topics: int, documents: int, seed: int = 0) -> tuple[dict, list[str]]:
    """Φ [topics, WORDS] (rows ~ Dir(η)), α and the vocabulary as LDA.from_parameters arguments, and ``documents``
    texts of TOKENS words drawn from the model (θ ~ Dir(α), z_t ~ θ, x_t ~ Φ[z_t])."""
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(np.full(WORDS, ETA), size=topics)
    vocab = [f"w{i:04d}" for i in range(WORDS)]
    texts = []
    for _ in range(documents):
        z = rng.choice(topics, size=TOKENS, p=rng.dirichlet(np.full(topics, ALPHA)))
        texts.append(" ".join(vocab[int(rng.choice(WORDS, p=phi[k]))] for k in z))
    return {"phi": torch.from_numpy(phi), "alpha": ALPHA, "vocab": vocab}, texts


def reference(model, texts: list[str], samples: int) -> dict:
    """Σ_n (log p̂_n + v̂_n / 2) and √Σ v̂_n from twisted SMC with ``samples`` particles in 16 runs per document."""
    start, total, var = time.perf_counter(), 0.0, 0.0
    for text in texts:
        x = model.tokenize(text)
        _, d = smc_log_weights(model, x, num_samples=samples, seed=10_000, document=text, smc_runs=16)
        total += d.log_likelihood + d.relative_variance / 2
        var += d.relative_variance
    return {"log_likelihood": total, "stderr": math.sqrt(var), "seconds": time.perf_counter() - start}


def auto_row(model, texts: list[str], seed: int, truth: float | None, workers: int = 1) -> dict:
    """estimator=auto on ``texts`` (their documents in ``workers`` processes): seconds, mean samples per document,
    the statement, whether it holds for truth."""
    start = time.perf_counter()
    settings = EstimatorSettings("auto", seed=seed)
    by_text = estimate_corpus(resolve(settings, model), texts, progress=False, workers=workers)
    corpus = corpus_estimate([by_text[t] for t in texts])
    interval, tokens = corpus.interval, sum(e.num_tokens for e in by_text.values())
    low, high = corpus.perplexity_interval
    return {
        "seconds": time.perf_counter() - start,
        "samples": float(np.mean([e.num_samples for e in by_text.values()])),
        "two_sided": interval.two_sided,
        "ppl_lower": low if interval.two_sided else None,
        "ppl_upper": high if interval.two_sided else corpus.perplexity_upper_bound,
        "reason": interval.reason,
        "tokens": tokens,
        "holds": None if truth is None else bool(interval.lower <= truth <= interval.upper),
    }


def small_rows(topics_list, coverage_seeds, reference_samples, urn_max_topics) -> list[dict]:
    """The 20-document rows of every topic count (module docstring), and the exact 4-topic check; the urn proposal
    (``lookahead=none``) only up to ``urn_max_topics`` topics."""
    rows = []
    for topics in topics_list:
        params, texts = synthetic(topics, 20)
        cvb0, urn = (LDA.from_parameters(**params, lookahead=a) for a in ("cvb0", "none"))
        if topics <= 4:
            start = time.perf_counter()
            ref = {"log_likelihood": sum(cvb0.log_marginal(cvb0.tokenize(t)) for t in texts), "stderr": 0.0}
            ref["seconds"], ref["kind"] = time.perf_counter() - start, "exact"
        else:
            ref = reference(cvb0, texts, reference_samples) | {
                "kind": f"SMC, {reference_samples:,} particles"
            }
        truth = ref["log_likelihood"]
        base = {"topics": topics, "documents": 20, "reference": ref}
        for name, model in (("none", urn), ("cvb0", cvb0)):
            if name == "none" and topics > urn_max_topics:
                continue
            rows.append(_keep(base | {"lookahead": name, "seed": 0} | auto_row(model, texts, 0, truth)))
        for seed in range(1, coverage_seeds):
            rows.append(
                _keep(base | {"lookahead": "cvb0", "seed": seed} | auto_row(cvb0, texts, seed, truth))
            )
    return rows


def large_rows(topics_list, documents, workers: int = 1) -> list[dict]:
    """estimator=auto with the lookahead on ``documents`` documents of every topic count, in ``workers`` processes."""
    rows = []
    for topics in topics_list:
        params, texts = synthetic(topics, documents)
        model = LDA.from_parameters(**params, lookahead="cvb0")
        rows.append(_keep({"topics": topics, "documents": documents, "lookahead": "cvb0", "seed": 0,
                           "reference": None, "workers": workers} | auto_row(model, texts, 0, None, workers)))  # fmt: skip
    return rows


def _keep(row: dict) -> dict:
    """Print the row and append it to OUTPUT/rows.jsonl (a long run's finished rows survive an interruption:
    ``--table-only`` writes the table from them)."""
    print(json.dumps(row), flush=True)
    with open(OUTPUT / "rows.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return row


def _worker(job):
    torch.set_num_threads(1)
    kind, args = job
    return small_rows(*args) if kind == "small" else large_rows(*args)


def statement(row: dict) -> str:
    if row["two_sided"]:
        return f"[{row['ppl_lower']:,.1f}, {row['ppl_upper']:,.1f}]"
    return f"≤ {row['ppl_upper']:,.1f} (bound)"


def table(rows: list[dict], header: str) -> list[str]:
    """The markdown table of the seed-0 rows, then the coverage of the lookahead's statement over seeds."""
    columns = ("topics", "documents", "lookahead", "seconds", "samples / document", "95% statement (perplexity)",
               "reference perplexity (± 2 SE; how)", "holds")  # fmt: skip
    lines = [header, "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for r in sorted((r for r in rows if r["seed"] == 0), key=lambda r: (r["documents"], r["topics"])):
        ref = r["reference"]
        if ref is None:
            ref_cell, holds = "– (no long run at this size)", "–"
        else:
            tokens = r["tokens"]
            ppl = math.exp(-ref["log_likelihood"] / tokens)
            spread = ppl * 2 * ref["stderr"] / tokens
            ref_cell = f"{ppl:,.2f} ± {spread:.2f} ({ref['kind']}, {ref['seconds']:.0f} s)"
            holds = "yes" if r["holds"] else "NO"
        lines.append(f"| {r['topics']} | {r['documents']:,} | {r['lookahead']} | {r['seconds']:.1f} | "
                     f"{r['samples']:,.0f} | {statement(r)} | {ref_cell} | {holds} |")  # fmt: skip
    if not any(r["documents"] == 20 for r in rows):
        return lines
    lines += ["", "Coverage of the lookahead's default statement over seeds (20 documents, against the reference):", "",
              "| topics | seeds | two-sided share | holds | mean seconds | mean samples / document |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for topics in sorted({r["topics"] for r in rows if r["documents"] == 20}):
        runs = [
            r for r in rows if r["topics"] == topics and r["documents"] == 20 and r["lookahead"] == "cvb0"
        ]
        lines.append(f"| {topics} | {len(runs)} | {np.mean([r['two_sided'] for r in runs]):.2f} | "
                     f"{np.mean([r['holds'] for r in runs]):.2f} | {np.mean([r['seconds'] for r in runs]):.1f} | "
                     f"{np.mean([r['samples'] for r in runs]):,.0f} |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--topics",
        default="4,50,100,200",
        help="the 20-document rows (4 or fewer: the exact dynamic program's check; empty: none)",
    )
    parser.add_argument("--output", type=Path, default=None, help="folder of table.md and rows.jsonl")
    parser.add_argument("--large", type=int, default=1000, help="documents of the large rows (0: none)")
    parser.add_argument("--large-topics", default="50,100,200")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that estimate the large rows' documents side by side (with --topics '' only: the large "
        "rows then run in this process, which may start them)",
    )
    parser.add_argument("--coverage-seeds", type=int, default=5)
    parser.add_argument("--reference-samples", type=int, default=16_384)
    parser.add_argument(
        "--urn-max-topics",
        type=int,
        default=100,
        help="the urn proposal's rows (the proposal before) only up to this many topics: at 200 it ran > 48 min",
    )
    parser.add_argument("--table-only", action="store_true", help="the table from the rows of rows.jsonl")
    parser.add_argument(
        "--append", action="store_true", help="add to rows.jsonl (another run at the same time)"
    )
    args = parser.parse_args()
    global OUTPUT
    if args.output is not None:
        OUTPUT = args.output.resolve()
        os.environ["LDA_SCALE_OUTPUT"] = str(OUTPUT)
    if args.table_only:
        rows = [json.loads(line) for line in (OUTPUT / "rows.jsonl").read_text(encoding="utf-8").splitlines()]
        # the first row of each setting and seed (two runs at once may both have reached it)
        kept = {(r["topics"], r["documents"], r["lookahead"], r["seed"]): r for r in reversed(rows)}
        return write([r for r in rows if kept[(r["topics"], r["documents"], r["lookahead"], r["seed"])] is r],
                     "(the rows of rows.jsonl)")  # fmt: skip
    OUTPUT.mkdir(exist_ok=True)
    if not args.append:
        (OUTPUT / "rows.jsonl").write_text("", encoding="utf-8")
    topics = [int(t) for t in args.topics.split(",") if t]
    jobs = (
        [("small", (topics, args.coverage_seeds, args.reference_samples, args.urn_max_topics))]
        if topics
        else []
    )
    if args.large:
        jobs.append(("large", ([int(t) for t in args.large_topics.split(",")], args.large, args.workers)))
    start = time.perf_counter()
    if len(jobs) == 1:
        rows = _worker(jobs[0])
    else:
        with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
            rows = [row for part in pool.map(_worker, jobs) for row in part]
    write(rows, f"{time.perf_counter() - start:.0f} s in all")


def write(rows: list[dict], note: str) -> None:
    """table.md and results.json under OUTPUT."""
    header = (
        f"# LDA at scale: synthetic LDA ({WORDS:,} words, α = {ALPHA}, Φ rows ~ Dirichlet({ETA})), documents of "
        f"{TOKENS} tokens sampled from it; estimator=auto (SMC, precision target {0.002} nats/token). "
        f"{platform.machine()}, torch {torch.__version__}, {os.cpu_count()} cores, one thread per process, the "
        f"20-document rows of a topic count in one process (their seconds compare), others beside it; load average "
        f"at the end "
        f"{os.getloadavg()[0]:.2f}; {note}"
    )
    lines = table(rows, header)
    (OUTPUT / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (OUTPUT / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
