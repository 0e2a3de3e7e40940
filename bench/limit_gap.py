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
    python bench/limit_gap.py --shift-against REV   # adds how far the change since REV moves log p̂

``--shift-against REV``: a change that removes bytes may round differently. Fixed IS draws (seed n for document n:
the bundled model's test documents at K = 100, the full-size model's two synthetic documents of 60 and 120 tokens
at K = 64) are scored by this checkout and by REV's package, log w = log p(x, z) − log q(z | x) (log q rescored, and
as the sampler returned it), and the section it adds gives the largest shift of a log w and of a document's log p̂
per token, and the corpus' mean shift per token, beside the rule a precision must meet to become the default
(``precision_shift.py``: a tenth of the precision target per token); and the seconds of one ``proposal.sample`` at
each revision, side by side (``sample_seconds``, the best of two fresh processes per revision, run in the order
REV, this checkout, this checkout, REV).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import full_size
from kernel_counts import accelerator_paths, count, per_token_costs
from limit import entitynlm_arithmetic, flops, kglm_arithmetic, product_bytes
from paper_workload import PairCounter
from smc_cost import cpu_name, package_revision, run_at_revision, short_commit

from lm_latent_eval.estimators.diagnostics import log_mean_exp
from lm_latent_eval.estimators.settings import AUTO_TARGET_SE
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.models.kglm.latents import RELATED

OUTPUT = Path(__file__).resolve().parent / "limit_gap"
ARITHMETIC = {"kglm": kglm_arithmetic, "entitynlm": entitynlm_arithmetic}
KS = (32, 64)
# the full-size model's two synthetic documents of ``--shift-against``
SHIFT_TOKENS = (60, 120)


def p_reads(name: str, model, x: torch.Tensor, K: int) -> dict:
    """What p reads only where z needs it, in the draw ``per_token_costs`` scores with log_joint on the document x
    at K (seed 0, the GPU's path): ``kglm_arithmetic``'s ``related``, the related (particle, position) pairs and the
    sum of their parents' out-degrees, and its ``word_pairs``, the distinct (position, entity) pairs whose word terms
    log_joint computes (``paper_workload.PairCounter``); ``entitynlm_arithmetic``'s ``starts``, the pairs that start a
    mention."""
    with torch.no_grad(), accelerator_paths():
        z = model.proposal.sample(x, K, generator=torch.Generator().manual_seed(0))[0]
    if name == "kglm":
        with torch.no_grad(), PairCounter(model) as pairs:
            model.log_joint(x, z)
        related = z["mention_type"] == RELATED
        degrees = int(model.tables.degree[z["parent"][related]].sum())
        return {"related": (int(related.sum()), degrees), "word_pairs": pairs.distinct()}
    decide = torch.cat([torch.ones_like(z["length"][:, :1]), z["length"][:, :-1]], 1) == 1
    return {"starts": int((decide & (z["mention"] == 1)).sum())}


def floor_per_particle_token(name: str, model, T: int, reads: dict[int, dict]) -> tuple[float, float]:
    """(FLOPs, bytes) per particle·token of the products of one document of T tokens, their slope in K (the
    per-document tables and encoders cancel; p's reads where z needs them, ``reads`` by K from ``p_reads``, which
    grow with K, count)."""
    (once1, step1), (once2, step2) = (ARITHMETIC[name](model, T, k, **reads[k]) for k in KS)
    slope = (KS[1] - KS[0]) * T

    def total(measure, once, step):
        return measure(once) + T * measure(step)

    return tuple(
        (total(measure, once2, step2) - total(measure, once1, step1)) / slope
        for measure in (flops, product_bytes)
    )


def row(name: str, model, lengths: tuple[int, int], top: int) -> dict:
    x_short, x_long = (model.tokenize(d) for d in full_size.model_documents(name, model, lengths))
    sample, joint = per_token_costs(model, x_short, x_long, ks=KS)
    with torch.no_grad(), accelerator_paths():
        counter = count(
            lambda: model.proposal.sample(x_long, KS[1], generator=torch.Generator().manual_seed(0))
        )
    per_line = collections.Counter(sample.by_line) + collections.Counter(joint.by_line)
    reads = {k: p_reads(name, model, x_long, k) for k in KS}
    floor_flops, floor_bytes = floor_per_particle_token(name, model, int(x_long.numel()), reads)
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
        "p_reads": reads[KS[1]],
        "particle_tokens": KS[1] * int(x_long.numel()),
    }


TIMED_TOKENS, TIMED_K = 120, 256


def sample_seconds(name: str, model, repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds of one ``proposal.sample`` of the full-size model's synthetic document of
    ``TIMED_TOKENS`` tokens at K = ``TIMED_K``, on the GPU's code path, after one warm-up."""
    (text,) = full_size.model_documents(name, model, (TIMED_TOKENS,))
    x, best = model.tokenize(text), math.inf
    with torch.no_grad(), accelerator_paths():
        for repeat in range(repeats + 1):
            start = time.perf_counter()
            model.proposal.sample(x, TIMED_K, generator=torch.Generator().manual_seed(0))
            best = best if repeat == 0 else min(best, time.perf_counter() - start)
    return best


def fixed_draw_log_weights(name: str, full) -> dict[str, np.ndarray]:
    """{"bundled/n" or "full/n": log w [K] of document n's fixed IS draws, "…/drawn": the same with the log q the
    sampler returned with them (what the estimators use), and "…/tokens": its tokens}; ``full``: the full-size
    model."""
    corpora = {
        "bundled": (load_model(name)[0], bundled_documents(name), 100),
        "full": (full, full_size.model_documents(name, full, SHIFT_TOKENS), 64),
    }
    out = {}
    with torch.no_grad():
        for corpus, (model, texts, K) in corpora.items():
            for n, text in enumerate(texts):
                x = model.tokenize(text)
                z, log_q = model.proposal.sample(x, K, generator=torch.Generator().manual_seed(n))
                log_p = model.log_joint(x, z)
                out[f"{corpus}/{n}"] = (log_p - model.proposal.log_prob(x, z)).double().numpy()
                out[f"{corpus}/{n}/drawn"] = (log_p - log_q).double().numpy()
                out[f"{corpus}/{n}/tokens"] = np.array(x.numel())
    return out


def shift_rows(name: str, ours: dict, theirs: dict) -> list[str]:
    """The markdown rows of ``--shift-against`` for one model, bundled and full size."""
    rows = []
    for corpus in ("bundled", "full"):
        docs = [k for k in ours if k.startswith(corpus + "/") and k.count("/") == 1]
        tokens = np.array([int(ours[k + "/tokens"]) for k in docs])
        log_w, drawn = (
            max(
                np.abs(ours[k][f] - theirs[k][f]).max(initial=0.0)
                for k in keys
                for f in [np.isfinite(ours[k]) & np.isfinite(theirs[k])]
            )
            for keys in (docs, [k + "/drawn" for k in docs])
        )
        shift = np.array([log_mean_exp(ours[k]) - log_mean_exp(theirs[k]) for k in docs]) / tokens
        same = sum(np.array_equal(ours[k], theirs[k]) for k in docs)
        rows.append(
            f"| {name} | {corpus} | {len(docs)} ({tokens.sum():,} tokens) | {same} | {log_w:.1e} | {drawn:.1e} |"
            f" {np.abs(shift).max():.1e} | {(shift * tokens).sum() / tokens.sum():+.1e} |"
            f" {0.1 * AUTO_TARGET_SE:.0e} |"
        )
    return rows


def in_child(revision: str | None, name: str, flag: str, path: Path) -> dict:
    """What this script's hidden ``flag`` (``--write-log-weights``, ``--time-sample``) writes to ``path`` for the model
    ``name``, run in a fresh process on ``revision``'s package (None: this checkout's)."""
    argv = ["--models", name, flag, str(path)]
    if revision is None:
        subprocess.run([sys.executable, __file__, *argv], check=True)
    else:
        run_at_revision(revision, argv, script=__file__)
    return dict(np.load(path))


def shift_section(models: list[str], revision: str) -> str:
    """``--shift-against``'s section: this checkout's log w of fixed draws against ``revision``'s, each scored in a
    fresh child process; then each sampler timed in fresh processes in the order revision, this checkout, this
    checkout, revision (the best of each pair), so that a drift of the machine falls on both."""
    revision = short_commit(revision)
    lines = [
        "",
        f"## How far the change since {revision} moves log p̂ (`--shift-against {revision}`)",
        "",
        (
            "Fixed IS draws, log w = log p(x, z) − log q(z | x), scored by this checkout and by the package at "
            f"{revision} (log q rescored by proposal.log_prob, and as the sampler returned it with the draw); the "
            "rule: a tenth of the precision target per token."
        ),
        "",
        (
            "| model | corpus | documents (tokens) | log w the same bit for bit | largest shift of a log w |"
            " the same, the sampler's log q | largest shift of a document's log p̂ per token | mean shift per token"
            " | rule |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.npz"
        for name in models:
            theirs, ours = (in_child(r, name, "--write-log-weights", path) for r in (revision, None))
            lines += shift_rows(name, ours, theirs)
            timed = [
                (r, float(in_child(r, name, "--time-sample", path)["seconds"])) for r in (revision, None) * 2
            ]
            best = {r: min(t for who, t in timed if who == r) for r in (revision, None)}
            seconds.append(f"{name} {best[revision]:.3f} s → {best[None]:.3f} s")
    lines += [
        "",
        (
            f"One proposal.sample of the full-size model (K = {TIMED_K}, {TIMED_TOKENS} tokens, the GPU's code path, "
            f"one thread, best of 3 in each of two fresh processes per revision, run in the order {revision}, this "
            f"checkout, this checkout, {revision}), {revision} → this checkout: " + "; ".join(seconds) + "."
        ),
    ]
    return "\n".join(lines) + "\n"


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
    lines += ["", f"Where z needs p's reads (the longer document, K = {KS[1]}, `p_reads`):", ""]
    for r in rows:
        reads, n = r["p_reads"], r["particle_tokens"]
        if "related" in reads:
            pairs, edges = reads["related"]
            degree = edges / max(pairs, 1)
            said = (
                f"{pairs} related pairs of {n:,} particle·tokens, their parents' out-degree {degree:.1f} on average; "
                f"the word head over {reads['word_pairs']:,} distinct (position, entity) pairs"
            )
        else:
            said = f"{reads['starts']} mention starts in {n:,} particle·tokens"
        lines.append(f"- {r['model']}: {said}")
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
    parser.add_argument("--shift-against", metavar="REV", help="add how far the change since REV moves log p̂")
    parser.add_argument("--write-log-weights", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--time-sample", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.revision:
        return run_at_revision(args.revision, argv if argv is not None else sys.argv[1:], script=__file__)
    torch.set_num_threads(1)
    if args.write_log_weights:
        name = args.models[0]
        return np.savez(args.write_log_weights, **fixed_draw_log_weights(name, full_size.BUILDERS[name][0]()))
    if args.time_sample:
        name = args.models[0]
        return np.savez(args.time_sample, seconds=sample_seconds(name, full_size.BUILDERS[name][0]()))
    rows = []
    for name in args.models:
        model = full_size.BUILDERS[name][0]()
        rows.append(row(name, model, tuple(args.lengths), args.top))
        print(markdown(rows, args), flush=True)
        del model
    text = markdown(rows, args)
    if args.shift_against:
        text += shift_section(args.models, args.shift_against)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
