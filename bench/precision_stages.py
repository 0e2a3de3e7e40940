"""Why the precision target takes the stages it takes: every document's samples, v̂ and c = v̂·K at every stage.

    python bench/precision_stages.py   # the README command's estimation: KGLM, its 20 test documents, auto's settings
    python bench/precision_stages.py --lda 100 --documents 200 --workers 2   # bench/lda_scale's synthetic LDA

Runs ``estimate_corpus`` with the settings ``estimator=auto`` resolves to on the bundled KGLM (SMC, K = 100, 4 runs,
peeking, target_se 0.002, seed 1234: the README's first command without lm-eval around it) and prints, for each stage
the allocation reads, each document's tokens T, samples K, v̂ (its relative variance), the largest relative variance
per sample c seen so far, the samples the next stage gets, and whether v̂ was trusted; then each stage's seconds and
particle·tokens, the documents short of the per-document cap by their largest c, the remainder G of the stage's own
v̂, and the corpus statement. Writes bench/precision_stages/output.md. If c were a property of the document, stage 0's
c would size every document at once; the table shows how far it moves as K grows.

``--lda TOPICS --documents N``: the same on ``bench/lda_scale.py``'s synthetic LDA (``estimator=auto``, seed 0, the
documents in ``--workers`` processes), written to bench/precision_stages/lda_TOPICSxN.md, without the per-document
table when N > 30; it adds the samples drawn per document over all stages against those of the reported stage.

``--masked-oracle T --documents N``: the masked LMs' oracle under its value head (``masked_value.oracle_with_head``)
on N of its texts of T tokens, under the defaults a user who names nothing gets (SMC resampling under the head,
peeking through it; seed 1234), written to bench/precision_stages/masked_oracle_TxN.md (issue 52, item 1: where the
rows go at 32 tokens).

    python bench/precision_stages.py --masked-oracle 32 --documents 16
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

from lm_latent_eval.estimators import adaptive
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.settings import EstimatorSettings
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.paths import DATA_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUTPUT = Path(__file__).resolve().parent / "precision_stages"
# the per-document table is printed up to this many documents
TABLE_DOCUMENTS = 30


def stage_remainder(variances) -> str:
    """The remainder test's statistics of a stage's finite v̂, as two table cells: G = Σ v^{3/2} / √Σ v (in standard
    errors) and R / C = Σ v^{3/2} / (Σ v / 2) (against the bias correction)."""
    v = [x for x in variances if math.isfinite(x)]
    if sum(v) == 0:
        return "0.00 | 0.00"
    r = sum(x**1.5 for x in v)
    return f"{r / math.sqrt(sum(v)):.2f} | {r / (sum(v) / 2):.2f}"


def workload(args):
    """(model, texts, settings, title, output file) of the bundled KGLM's README estimation or ``--lda``'s LDA."""
    if args.masked_oracle is not None:
        from masked_length import oracle_texts
        from masked_value import oracle_with_head

        from lm_latent_eval.estimators.registry import with_model_defaults

        model = oracle_with_head()
        settings = resolve(with_model_defaults(EstimatorSettings(seed=1234), model, {})[0], model).settings
        title = (
            f"the masked LMs' oracle under its value head, {args.documents} of its texts of {args.masked_oracle} "
            f"tokens (the defaults: {settings})"
        )
        output = OUTPUT / f"masked_oracle_{args.masked_oracle}x{args.documents}.md"
        return model, oracle_texts(model, args.masked_oracle, args.documents), settings, title, output
    if args.lda is None:
        model, _ = load_model("kglm")
        texts = read_documents(DATA_DIR / "linked_tiny" / "test.jsonl")
        settings = EstimatorSettings("smc", 100, target_se=0.002, seed=1234, peek=True)
        title = f"the README's estimation (bundled KGLM, 20 test documents, {settings})"
        return model, texts, settings, title, OUTPUT / "output.md"
    from lda_scale import ALPHA, TOKENS, WORDS, synthetic

    from lm_latent_eval.models.lda import LDA

    params, texts = synthetic(args.lda, args.documents)
    model = LDA.from_parameters(**params, lookahead="cvb0")
    title = (
        f"bench/lda_scale.py's synthetic LDA ({args.lda} topics, {WORDS:,} words, α = {ALPHA}, {args.documents:,} "
        f"documents of {TOKENS} tokens; estimator=auto, seed 0, {args.workers} process(es))"
    )
    return (
        model,
        texts,
        EstimatorSettings("auto", seed=0),
        title,
        OUTPUT / f"lda_{args.lda}x{args.documents}.md",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--lda", type=int, default=None, help="topics of the synthetic LDA (default: the KGLM)"
    )
    parser.add_argument(
        "--masked-oracle", type=int, metavar="T", help="the masked LMs' oracle on texts of T tokens"
    )
    parser.add_argument(
        "--documents", type=int, default=200, help="documents of the synthetic LDA or the oracle"
    )
    parser.add_argument("--workers", type=int, default=1, help="processes that estimate a stage's documents")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, texts, settings, title, output = workload(args)
    settings = resolve(settings, model).settings
    stages: list[dict] = []
    allocation = adaptive._allocation  # wrapped, not changed: the rows below are what it read and decided

    def traced(estimates, earlier, settings, all_reduce, documents, policy=DEFAULT_POLICY):
        out = allocation(estimates, earlier, settings, all_reduce, documents, policy)
        errors = [e.error(policy) for e in estimates]
        stages.append({
            "seconds": time.perf_counter() - clock[0],
            "cap": policy.document_variance_cap(documents),
            "rows": [(e.num_tokens, e.num_samples, err.relative_variance, h.variance_per_sample, k, err.trusted)
                     for e, err, h, k in zip(estimates, errors, earlier, out.sizes)],
        })  # fmt: skip
        clock[0] = time.perf_counter()
        return out

    adaptive._allocation = traced
    clock = [time.perf_counter()]
    start = clock[0]
    try:
        final = adaptive.estimate_corpus(
            resolve(settings, model), texts, progress=False, workers=args.workers
        )
    finally:
        adaptive._allocation = allocation
    last_seconds = time.perf_counter() - clock[0]
    corpus = corpus_estimate([final[t] for t in texts])
    tokens = sum(e.num_tokens for e in final.values())
    low, high = corpus.perplexity_interval
    rho, share = DEFAULT_POLICY.allocation_remainder, DEFAULT_POLICY.allocation_remainder_share
    cap_rule = (
        f"{rho} / √N"
        if stages[0]["cap"] == rho / math.sqrt(len(texts))
        else f"({share} / 2)², as R ≤ {share} C"
    )
    lines = [
        f"# The precision target on {title}",
        "",
        (
            f"{platform.machine()}, {os.cpu_count()} cores, one thread per process, load average "
            f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"{time.perf_counter() - start:.1f} s in all."
        ),
        "",
        (
            f"The target allows Σ v̂ ≤ (target_se · T)² = {(settings.target_se * tokens) ** 2:,.2f} nats²; a "
            f"document is short when its largest c over K exceeds the per-document cap {stages[0]['cap']:.4f} "
            f"({cap_rule})."
        ),
        "",
        (
            "| stage | seconds | particle·tokens | samples / document | documents growing | short | v̂ not trusted "
            "| Σ v̂ (nats²) | G (SE) | R / C |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, stage in enumerate(stages):
        rows = stage["rows"]
        kt = sum(t * k for t, k, *_ in rows)
        grow = sum(k2 > k for _, k, _, _, k2, _ in rows)
        short = sum(not math.isnan(c) and c / k > stage["cap"] for _, k, _, c, _, _ in rows)
        lines.append(
            f"| {s} | {stage['seconds']:.1f} | {kt / 1e6:.2f} M | {sum(k for _, k, *_ in rows) / len(rows):,.0f} | "
            f"{grow} | {short} | {sum(not r[5] for r in rows)} | {sum(v for _, _, v, *_ in rows):.2f} | "
            f"{stage_remainder(v for _, _, v, *_ in rows)} |"
        )
    kt = sum(e.num_samples * e.num_tokens for e in final.values())
    variances = [e.error(DEFAULT_POLICY).relative_variance for e in final.values()]
    reported = sum(e.num_samples for e in final.values()) / len(final)
    drawn = reported + sum(sum(k for _, k, *_ in stage["rows"]) for stage in stages) / len(final)
    lines += [
        (
            f"| {len(stages)} (reported) | {last_seconds:.1f} | {kt / 1e6:.2f} M | {reported:,.0f} | – | – | – | "
            f"{sum(variances):.2f} | {stage_remainder(variances)} |"
        ),
        "",
        (
            f"Reported: perplexity [{low:.4f}, {high:.4f}] (two-sided: {corpus.interval.two_sided}), certified bound "
            f"{corpus.perplexity_upper_bound:.4f}, remainder {corpus.interval.remainder:.2f} SE, {corpus.interval.remainder_share:.2f} of the correction. Samples per document "
            f"over all stages: {drawn:,.0f}, {drawn / reported:.2f} times the reported stage's {reported:,.0f}."
        ),
    ]
    if len(stages[0]["rows"]) <= TABLE_DOCUMENTS:
        lines += [
            "",
            "Per document, K → K next (v̂, c = the largest v̂·K so far; * where v̂ was not trusted):",
            "",
            "| T | " + " | ".join(f"stage {s}" for s in range(len(stages))) + " |",
            "|---" * (len(stages) + 1) + "|",
        ]
        for d in range(len(stages[0]["rows"])):
            cells = []
            for stage in stages:
                _, k, v, c, k2, trusted = stage["rows"][d]
                c_text = "–" if math.isnan(c) else f"{c:,.0f}"
                cells.append(f"{k:,} → {k2:,} ({v:.3f}, {c_text}){'' if trusted else '*'}")
            lines.append(f"| {stages[0]['rows'][d][0]} | " + " | ".join(cells) + " |")
    OUTPUT.mkdir(exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
