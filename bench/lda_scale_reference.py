"""Long-run references for ``bench/lda_scale.py``'s 1,000-document rows: does the default statement hold at scale?

    python bench/lda_scale_reference.py --workers 2   # about 40 minutes on 2 cores
    # writes bench/lda_scale/references/table.md and references.json
    python bench/lda_scale_reference.py --rows NEW/rows.jsonl --reuse bench/lda_scale/references/references.json \
        --output NEW/references   # new rows of the same corpora against the same long runs, in seconds

``bench/lda_scale.py`` prints, for 1,000 documents of its synthetic LDA, the statement of ``estimator=auto`` (its rows
in ``--rows``, by default the current code's: 50 and 100 topics from ``bench/lda_scale/workers``, 200 from
``bench/lda_scale/faster_step``; a later file's row of the same size replaces an earlier one), but no long run to
check it against. This computes one for each row, as the 20-document rows' references are computed
(``lda_scale.reference``: twisted SMC with ``--samples`` particles per document in 16 runs, its bias-corrected Σ log p̂
and standard error), the documents split over ``--workers`` processes (each document's random stream is seeded by its
text, so the split changes no number), and reports whether the statement holds for it: the reference's perplexity
inside the two-sided interval, or under the certified bound.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lda_scale import reference, statement, synthetic

from lm_latent_eval.models.lda import LDA

HERE = Path(__file__).resolve().parent / "lda_scale"
ROWS = [HERE / "faster_step" / "rows.jsonl", HERE / "workers" / "rows.jsonl"]


def _part(job: tuple[int, int, int, int, int]) -> dict:
    """The reference's sums over documents ``start::step`` of the synthetic corpus (topics, documents)."""
    topics, documents, start, step, samples = job
    torch.set_num_threads(1)
    params, texts = synthetic(topics, documents)
    model = LDA.from_parameters(**params, lookahead="cvb0")
    return reference(model, texts[start::step], samples)


def large_reference(topics: int, documents: int, samples: int, workers: int) -> dict:
    """``lda_scale.reference`` of the whole corpus, its documents in ``workers`` processes: bias-corrected Σ log p̂,
    its standard error and the wall seconds."""
    start = time.perf_counter()
    jobs = [(topics, documents, w, workers, samples) for w in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_part, jobs)
    return {
        "log_likelihood": sum(p["log_likelihood"] for p in parts),
        "stderr": math.sqrt(sum(p["stderr"] ** 2 for p in parts)),
        "seconds": time.perf_counter() - start,
        "kind": f"SMC, {samples:,} particles in 16 runs",
    }


def holds(row: dict, ref: dict) -> bool:
    """Whether the row's statement about perplexity holds for the reference's."""
    ppl = math.exp(-ref["log_likelihood"] / row["tokens"])
    return (row["ppl_lower"] <= ppl if row["two_sided"] else True) and ppl <= row["ppl_upper"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=Path, nargs="+", default=ROWS, help="lda_scale.py rows files")
    parser.add_argument("--samples", type=int, default=16_384, help="particles per document")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=HERE / "references")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="an earlier references.json: its long runs of the same topics and documents are taken, not rerun "
        "(to check new rows of the same corpora)",
    )
    args = parser.parse_args()
    reused = {}
    if args.reuse:
        for r in json.loads(args.reuse.read_text(encoding="utf-8")):
            reused[r["topics"], r["documents"]] = r["reference"]
    rows = {}
    for path in args.rows:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["documents"] > 20 and row["seed"] == 0:
                rows[row["topics"], row["documents"]] = row | {
                    "rows": str(path.resolve().relative_to(HERE.parent.parent))
                }
    args.output.mkdir(parents=True, exist_ok=True)
    done = []
    for (topics, documents), row in sorted(rows.items()):
        ref = reused.get((topics, documents)) or large_reference(
            topics, documents, args.samples, args.workers
        )
        done.append(row | {"reference": ref, "holds": holds(row, ref)})
        print(json.dumps(done[-1]), flush=True)
    lines = [
        (
            f"# Long-run references for bench/lda_scale.py's large rows ({platform.machine()}, torch "
            f"{torch.__version__}, {os.cpu_count()} cores, {args.workers} processes of one thread, load average "
            f"{os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
            + (f"; the long runs of {args.reuse} (their seconds are theirs)" if reused else "")
        ),
        "",
        (
            "| topics | documents | 95% statement (perplexity; from) | samples / document | reference perplexity ± 2 "
            "SE (how, seconds) | statement's centre − reference (reference SEs) | holds |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for r in done:
        ref, tokens = r["reference"], r["tokens"]
        ppl = math.exp(-ref["log_likelihood"] / tokens)
        centre = math.sqrt(r["ppl_lower"] * r["ppl_upper"]) if r["two_sided"] else math.nan
        gap = -math.log(centre / ppl) * tokens / ref["stderr"]
        lines.append(
            f"| {r['topics']} | {r['documents']:,} | {statement(r)} ({r['rows']}) | {r['samples']:,.0f} | "
            f"{ppl:,.2f} ± {ppl * 2 * ref['stderr'] / tokens:.2f} ({ref['kind']}, {ref['seconds']:.0f} s) | "
            f"{gap:+.2f} | {'yes' if r['holds'] else 'NO'} |"
        )
    (args.output / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.output / "references.json").write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
