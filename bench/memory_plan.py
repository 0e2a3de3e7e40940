"""The memory plans at full size and the paper's K: what one ``log_joint`` call and the sampler hold, per model.

    python bench/memory_plan.py [--output bench/memory_plan/README.md]

Builds the full-size KGLM (``full_size.kglm``: 41,059 entity rows, out-degrees up to 1,000, cutoff 30, De = 256) and,
for the longest document of the synthetic Linked-WikiText-2 test set (10,561 tokens) at K = 10,000, prints
``KGLM.memory_plan`` at the default 8 GiB budget and at 1 GiB: particles per ``log_joint`` call, the bytes its
chunked computations hold at once, and its planned temporaries, largest first. Then the parent head on the meta
device (shapes only, no memory): the largest temporary ``LatentHeads.parent_logits`` makes over the related pairs of
one worst-case call (every token of its particles related, at most a million), unchunked (main before issue 45:
one einsum) and chunked by the budget, recorded by ``TemporaryRecorder``.

EntityNLM (``full_size.entitynlm``: d = 300, M = 100, mentions of ≤ 100 tokens, V = 10,000) on the longest document
of the synthetic CoNLL-2012 test set (4,058 tokens) and a mean-length one (464) at K = 10,000: ``EntityNLM.memory_plan``
at 8 GiB and 1 GiB, and one call over all K particles (main before issue 45: no plan, one call).

The other models (HMM, RNNG, LDA, tokenization, masked), on their bundled checkpoints and the longest document of
their bundled corpus: the bytes one more particle adds to the peak of ``log_joint`` and of the sampler
(``TemporaryRecorder`` at K = 64 and 512), and what bounds each temporary that grows with K.
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import full_size

from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.models.kglm.latents import LatentHeads
from lm_latent_eval.models.memory_plan import GIB, TemporaryRecorder
from lm_latent_eval.paths import DATA_DIR

PAPER_K = 10_000
# the other models: bundled corpus, and what bounds their temporaries that grow with K (read from their code)
OTHER_MODELS = {
    "hmm": (
        "corpus/tiny_test.jsonl",
        "log_joint: [K, T] gathers; the sampler: a [K, S] row per token",
    ),
    "rnng": (
        "ptb_tiny/test.txt",
        "[K, 2T] actions and stack rows; word logits in blocks of WORD_BLOCK rows × V (model.py)",
    ),
    "lda": (
        "pydoc_topics/test.jsonl",
        "[K, T] topics and counts [K, topics]: tens of bytes a particle·token",
    ),
    "tokenization": (
        "corpus/tiny_test.jsonl",
        "log_joint decodes particle_batch (256) particles at a time; the sampler's lattice is [K, positions]",
    ),
    "masked": (
        "masked_tiny/test.jsonl",
        "network rows in blocks of block_tokens // T; orders scored in blocks of ~2^20 entries (model.py)",
    ),
}


def gib(n: int) -> str:
    return f"{n / GIB:,.3f} GiB" if n >= GIB // 100 else f"{n / 2**20:,.2f} MiB"


def temporaries_table(plan) -> list[str]:
    """A plan's temporaries as markdown rows, largest first."""
    rows = ["| temporary | shape | bytes |", "|---|---|---|"]
    return rows + [
        f"| {t.name} | {list(t.shape)} | {gib(t.nbytes)} |"
        for t in sorted(plan.temporaries, key=lambda t: -t.nbytes)
    ]


def meta_parent_head(model, T: int, pairs: int, budget: int, chunked: bool) -> tuple[int, str]:
    """The largest temporary (bytes, operation) of p's parent head over ``pairs`` related pairs, on the meta device."""
    meta = torch.device("meta")
    heads = LatentHeads(
        None,
        torch.empty(T, model.entity_dim, device=meta),
        None,
        None,
        model.entity_embedding.weight.to(meta),
        None,
        None,
        model.tables,
        model.cutoff,
        memory_budget=budget,
    )
    t = torch.empty(pairs, dtype=torch.long, device=meta)
    rows = torch.empty(pairs, model.cutoff, dtype=torch.long, device=meta)
    with TemporaryRecorder() as rec:
        (heads.parent_logits if chunked else heads._parent_logits)(t, rows)
    return rec.largest, rec.largest_op


def entitynlm_lines() -> list[str]:
    """EntityNLM's plan at full size: particles per call, held, largest temporaries; one call over K before."""
    model = full_size.entitynlm()
    lengths = full_size.document_lengths(full_size.CONLL_TEST_DOCUMENTS, full_size.CONLL_TEST_TOKENS, 0.8)
    longest = max(lengths)
    lines = [
        "",
        "## EntityNLM",
        "",
        (
            f"Full-size EntityNLM (d = {model.dim}, M = {model.max_entities}, mentions of ≤"
            f" {model.max_mention_length} tokens, V = {len(model.vocab):,}) at K = {PAPER_K:,}: the longest document"
            f" of the synthetic CoNLL-2012 test set (T = {longest:,}) and a mean-length one (T = 464). Plans from the"
            " shapes (entitynlm/memory_plan.py), every token starting a mention at worst; 'one call' is main before"
            " issue 45 (all K particles in one log_joint call)."
        ),
        "",
        (
            "| T | budget | particles per log_joint call | calls for K | held at once (planned) |"
            " one call over K (planned) | largest temporary of the scorer |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    plans = {}
    for T in (longest, 464):
        for budget in (8 * GIB, GIB):
            plan = model.memory_plan(T, PAPER_K, budget)
            plans[T, budget] = plan
            scorer = max(
                (t for t in plan.temporaries if t.name.startswith("log_joint")), key=lambda t: t.nbytes
            )
            one = model.memory_plan(T, PAPER_K, 2**62)
            lines.append(
                f"| {T:,} | {budget // GIB} GiB | {plan.particles_per_call:,} |"
                f" {-(-PAPER_K // plan.particles_per_call):,} | {gib(plan.held)} | {gib(one.held)} |"
                f" {scorer.name} {list(scorer.shape)}: {gib(scorer.nbytes)} |"
            )
    for budget in (8 * GIB, GIB):
        plan = plans[longest, budget]
        lines += [
            "",
            (
                f"Planned temporaries at T = {longest:,}, {budget // GIB} GiB (largest first; every one within the"
                f" budget: {plan.fits()}):"
            ),
            "",
            *temporaries_table(plan),
        ]
    lines += [
        "",
        (
            "The sampler's entity memory [K, M, D] is its particles' state, drawn side by side (the estimator's sample"
            " block, which the random streams fix: 1,024 on the CPU, 16,384 on CUDA, at most K), so the budget does"
            " not bound it: it fits 8 GiB at K = 10,000, not 1 GiB, where such a K is refused in one line before any"
            " work (estimators.registry.check_sample_memory). Its entity head is one batched product ([K, M] scores),"
            " no second [K, M, D] temporary."
        ),
    ]
    return lines


def other_model_lines() -> list[str]:
    """The other models' growth with K, measured on their bundled checkpoints."""
    lines = [
        "",
        "## The other models",
        "",
        (
            "Bundled checkpoints, the longest document of each bundled corpus; bytes one more particle adds to the peak"
            " (TemporaryRecorder at K = 64 and 512, τ = 1, peeking), and at K = 10,000 by that slope:"
        ),
        "",
        (
            "| model | T | sampler: bytes a particle | log_joint: bytes a particle | log_joint at K = 10,000 |"
            " what bounds it |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, (corpus, bound) in OTHER_MODELS.items():
        model, _ = load_model(name)
        x = model.tokenize(max(read_documents(DATA_DIR / corpus), key=len))
        peaks = {}
        for K in (64, 512):
            with torch.no_grad():
                with TemporaryRecorder() as sampler:
                    z, _ = model.proposal.sample(x, K, 1.0, True, torch.Generator().manual_seed(0))
                with TemporaryRecorder() as scorer:
                    model.log_joint(x, z)
            peaks[K] = (sampler.peak, scorer.peak)
        per_sample = (peaks[512][0] - peaks[64][0]) / 448
        per_score = (peaks[512][1] - peaks[64][1]) / 448
        at_k = peaks[512][1] + per_score * (PAPER_K - 512)
        lines.append(
            f"| {name} | {len(x):,} | {per_sample:,.0f} | {per_score:,.0f} | {gib(int(at_k))} | {bound} |"
        )
    return lines


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    model = full_size.kglm()
    T = max(full_size.document_lengths(full_size.WT2_TEST_ARTICLES, full_size.WT2_TEST_TOKENS, 0.6))
    lines = [
        (
            f"# Memory plans at full size (dev CPU: {platform.machine()}, torch {torch.__version__},"
            f" {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)"
        ),
        "",
        "## KGLM",
        "",
        (
            f"`python bench/memory_plan.py`: full-size KGLM ({model.tables.num_rows:,} entity rows, largest out-degree"
            f" {int(model.tables.degree.max()):,}, cutoff {model.cutoff}, De = {model.entity_dim}), the longest document of"
            f" the synthetic Linked WikiText-2 test set (T = {T:,} tokens), K = {PAPER_K:,}. Plans are computed from the"
            " shapes (no memory is allocated); the parent head runs on the meta device."
        ),
        "",
        "| budget | particles per log_joint call | calls for K | held at once (planned) | largest planned temporary |",
        "|---|---|---|---|---|",
    ]
    plans = {}
    for budget in (8 * GIB, GIB):
        plan = model.memory_plan(T, PAPER_K, budget)
        plans[budget] = plan
        big = plan.largest
        lines.append(
            f"| {budget // GIB} GiB | {plan.particles_per_call:,} | {-(-PAPER_K // plan.particles_per_call):,} |"
            f" {gib(plan.held)} | {big.name} {list(big.shape)}: {gib(big.nbytes)} |"
        )
    for budget, plan in plans.items():
        lines += [
            "",
            f"Planned temporaries at {budget // GIB} GiB (largest first; fits: {plan.fits()}):",
            "",
            *temporaries_table(plan),
        ]
    lines += [
        "",
        (
            "The parent head over the related pairs of one worst-case log_joint call (every token of its particles"
            " related, at most 1,000,000 pairs), on the meta device:"
        ),
        "",
        "| budget | pairs | largest temporary, unchunked (main before issue 45) | largest temporary, chunked |",
        "|---|---|---|---|",
    ]
    for budget, plan in plans.items():
        pairs = min(plan.particles_per_call * T, 1_000_000)
        before = meta_parent_head(model, T, pairs, budget, chunked=False)
        after = meta_parent_head(model, T, pairs, budget, chunked=True)
        lines.append(
            f"| {budget // GIB} GiB | {pairs:,} | {gib(before[0])} ({before[1]}) | {gib(after[0])} ({after[1]}) |"
        )
    lines += entitynlm_lines() + other_model_lines()
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
