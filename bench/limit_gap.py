"""``bench/limit.py``'s floor per particle·token against what the code launches and moves today, full-size KGLM and
EntityNLM (the paper's sizes, random weights: ``full_size.py``), on the GPU's code path.

Today: ``kernel_counts.per_token_costs`` of one IS estimate (``proposal.sample`` then ``log_joint``): operations per
token (independent of K: on a GPU, launches) and bytes per particle·token (the slope in K of the a + b · K fit over two
document lengths and K = 32, 64; every operand of every operation, gathers and in-place scatters by the rows they
touch). Floor: ``limit.py``'s products of the same estimate (``kglm_arithmetic``, ``entitynlm_arithmetic``) per
particle·token, FLOPs (``flops``) and bytes (``product_bytes``: each operand read once and each result written once,
float32): the slope in K, so the per-document products (encoders, tables), amortised over K, are not in it. Bytes
today / floor is what a fused implementation could still remove; the shares of today's bytes by operation (one
``proposal.sample`` at K = 64 on the longer document), and the per-particle·token bytes by the package's source line
that asked for them (``KernelCounter.bytes_by_line``), say where.

    python bench/limit_gap.py                       # writes bench/limit_gap/output.md
    python bench/limit_gap.py --revision REV --output bench/limit_gap/before.md
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import full_size
from kernel_counts import accelerator_paths, count, per_token_costs
from limit import entitynlm_arithmetic, flops, kglm_arithmetic, product_bytes
from smc_cost import cpu_name, package_revision, run_at_revision

OUTPUT = Path(__file__).resolve().parent / "limit_gap"
ARITHMETIC = {"kglm": kglm_arithmetic, "entitynlm": entitynlm_arithmetic}
KS = (32, 64)


def floor_per_particle_token(name: str, model, T: int) -> tuple[float, float]:
    """(FLOPs, bytes) per particle·token of the per-token products (their slope in K)."""
    (_, step1), (_, step2) = (ARITHMETIC[name](model, T, k) for k in KS)
    slope = KS[1] - KS[0]
    return (flops(step2) - flops(step1)) / slope, (product_bytes(step2) - product_bytes(step1)) / slope


def row(name: str, lengths: tuple[int, int], top: int) -> dict:
    model = full_size.BUILDERS[name][0]()
    words = model.vocab[3:] if name == "kglm" else model.vocab[2:]
    docs = full_size.zipf_documents(words, list(lengths), seed=1)
    x_short, x_long = (model.tokenize(d) for d in docs)
    sample, joint = per_token_costs(model, x_short, x_long, ks=KS)
    with torch.no_grad(), accelerator_paths():
        counter = count(
            lambda: model.proposal.sample(x_long, KS[1], generator=torch.Generator().manual_seed(0))
        )
    per_line = collections.Counter(sample.by_line) + collections.Counter(joint.by_line)
    floor_flops, floor_bytes = floor_per_particle_token(name, model, int(x_long.numel()))
    return {
        "model": name,
        "ops": sample.ops + joint.ops,
        "bytes": sample.per_particle_bytes + joint.per_particle_bytes,
        "sample_bytes": sample.per_particle_bytes,
        "joint_bytes": joint.per_particle_bytes,
        "floor_flops": floor_flops,
        "floor_bytes": floor_bytes,
        "shares": [(op, b / counter.bytes) for op, b in counter.bytes_by_op.most_common(top)],
        "lines": sorted(per_line.items(), key=lambda item: -item[1])[:top],
    }


def markdown(rows: list[dict], args) -> str:
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        f"# limit.py's floor against today, per particle·token ({args.label or 'this checkout'})",
        "",
        (
            f"lm_latent_eval {package_revision()}; {cpu_name()}, torch {torch.__version__}, one thread; full-size "
            f"models (full_size.py), synthetic documents of {args.lengths[0]} and {args.lengths[1]} tokens, K = "
            f"{KS[0]} and {KS[1]}, the GPU's code path (kernel_counts.accelerator_paths); load average {load}."
        ),
        "",
        (
            "| model | operations per token today (sample + log_joint) | bytes per particle·token today "
            "(sample + log_joint) | floor: bytes per particle·token | today / floor | floor: FLOPs per "
            "particle·token | floor's FLOPs per byte |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ops']:.0f} | {r['bytes'] / 1024:,.1f} KiB ({r['sample_bytes'] / 1024:,.1f} + "
            f"{r['joint_bytes'] / 1024:,.1f}) | {r['floor_bytes'] / 1024:,.1f} KiB | {r['bytes'] / r['floor_bytes']:.1f}x "
            f"| {r['floor_flops']:,.0f} | {r['floor_flops'] / r['floor_bytes']:.2f} |"
        )
    lines += ["", "Shares of today's bytes by operation (one proposal.sample):", ""]
    for r in rows:
        lines.append(f"- {r['model']}: " + ", ".join(f"{op} {share:.1%}" for op, share in r["shares"]))
    lines += [
        "",
        (
            f"Where the bytes per particle·token are made, by source line (proposal.sample and log_joint, the slope "
            f"from K = {KS[0]} to {KS[1]} on the longer document):"
        ),
        "",
    ]
    for r in rows:
        lines.append(f"- {r['model']}: " + ", ".join(f"{line} {b / 1024:,.1f} KiB" for line, b in r["lines"]))
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(ARITHMETIC), choices=list(ARITHMETIC))
    parser.add_argument("--lengths", type=int, nargs=2, default=(12, 24), help="the two documents' tokens")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--label", default="")
    parser.add_argument("--output", type=Path, default=OUTPUT / "output.md")
    parser.add_argument(
        "--revision", default=None, help="count lm_latent_eval as it was at this git revision"
    )
    args = parser.parse_args(argv)
    if args.revision:
        return run_at_revision(args.revision, argv if argv is not None else sys.argv[1:], script=__file__)
    torch.set_num_threads(1)
    rows = []
    for name in args.models:
        rows.append(row(name, tuple(args.lengths), args.top))
        print(markdown(rows, args), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(rows, args))


if __name__ == "__main__":
    main()
