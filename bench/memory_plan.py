"""KGLM's memory plan at full size and the paper's K: what one ``log_joint`` call and one sampler step hold.

    python bench/memory_plan.py [--output bench/memory_plan/README.md]

Builds the full-size KGLM (``full_size.kglm``: 41,059 entity rows, out-degrees up to 1,000, cutoff 30, De = 256) and,
for the longest document of the synthetic Linked-WikiText-2 test set (10,561 tokens) at K = 10,000, prints
``KGLM.memory_plan`` at the default 8 GiB budget and at 1 GiB: particles per ``log_joint`` call, the bytes its
chunked computations hold at once, and its planned temporaries, largest first. Then the parent head on the meta
device (shapes only, no memory): the largest temporary ``LatentHeads.parent_logits`` makes over the related pairs of
one worst-case call (every token of its particles related, at most a million), unchunked (main before issue 45:
one einsum) and chunked by the budget, recorded by ``TemporaryRecorder``.
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

from lm_latent_eval.models.kglm.latents import LatentHeads
from lm_latent_eval.models.memory import GIB, TemporaryRecorder

PAPER_K = 10_000


def gib(n: int) -> str:
    return f"{n / GIB:,.3f} GiB" if n >= GIB // 100 else f"{n / 2**20:,.2f} MiB"


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


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    model = full_size.kglm()
    T = max(full_size.document_lengths(full_size.WT2_TEST_ARTICLES, full_size.WT2_TEST_TOKENS, 0.6))
    lines = [
        (
            f"# KGLM's memory plan at full size (dev CPU: {platform.machine()}, torch {torch.__version__},"
            f" {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)"
        ),
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
            "| temporary | shape | bytes |",
            "|---|---|---|",
        ]
        for tmp in sorted(plan.temporaries, key=lambda t: -t.nbytes):
            lines.append(f"| {tmp.name} | {list(tmp.shape)} | {gib(tmp.nbytes)} |")
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
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
