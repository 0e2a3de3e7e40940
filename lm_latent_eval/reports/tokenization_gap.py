"""Canonical vs marginal log-likelihood of a causal LM on a corpus: how much probability other tokenizations carry.

    python -m lm_latent_eval.reports.tokenization_gap [--pretrained DIR_OR_HUB_ID] [--data FILE.jsonl] \
        [--num-samples 100] [--beam-size 8] [--seeds 3] [--temperature 1] [--canonical-mix 0.9] [--device cpu] \
        [--output gap.json]

For every document x (JSONL field ``text``; default: the bundled tiny corpus with the bundled tiny model): canonical
log p(x, z*) (lm-eval's hf number), the beam lower bound log Σ_{z ∈ beam} p(x, z) (≥ canonical), and the IS estimate
log p̂(x) with K samples per seed (unbiased in p, E[log p̂] ≤ log p), with its ESS and Pareto k̂. Prints a markdown
table of corpus totals (nats, bits per byte, and the gap marginal − canonical) and the spread of IS over seeds;
``--output gap.json`` writes the per-document numbers there and the printed table beside them (``gap.md``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from ..documents import read_texts
from ..estimators import EstimatorSettings, resolve, summarize
from ..harness.provenance import package_path
from ..models import load_model
from ..models.tokenization import canonical
from ..paths import DATA_DIR
from .json_files import as_json, json_key, write_json

DEFAULT_DATA = DATA_DIR / "corpus" / "tiny_test.jsonl"
# the estimators the canonical figure is set beside, chosen once: gap.json keys each one's numbers by its name
BEAM_RUN, IS_RUN = EstimatorSettings("beam"), EstimatorSettings("is")


@dataclass
class GapDocument:
    """One document's log-likelihoods (nats): canonical log p(x, z*), the beam bound and one IS estimate per seed, with
    IS's diagnostics (seed 0)."""

    text: str
    bytes: int
    tokens: int
    canonical: float
    beam_log_likelihood: float = field(metadata=json_key(BEAM_RUN.estimator))
    is_log_likelihoods: list[float] = field(metadata=json_key(IS_RUN.estimator))
    ess: float
    pareto_k: float


def measure(
    lm, texts: list[str], num_samples: int, beam_size: int, seeds: int, temperature: float, device
) -> list[GapDocument]:
    """Per-document canonical, beam and IS (one estimate per seed) log-likelihoods and IS diagnostics."""
    rows = []
    canon = canonical.loglikelihood_rolling(lm, texts)
    beam_bound = resolve(BEAM_RUN.replace(beam_size=beam_size), lm)
    seeded = [
        resolve(IS_RUN.replace(num_samples=num_samples, temperature=temperature, seed=seed), lm)
        for seed in range(seeds)
    ]
    for text, c in tqdm(list(zip(texts, canon)), desc="documents"):
        beam = beam_bound.estimate(text, device=device)
        runs = [run.estimate(text, device=device) for run in seeded]
        diag = summarize(runs[0].log_weights)
        rows.append(GapDocument(text, len(text.encode()), beam.num_tokens, c, beam.log_likelihood,
                                [r.log_likelihood for r in runs], diag.ess, diag.pareto_k))  # fmt: skip
    return rows


def to_json(documents: list[GapDocument], settings: dict) -> dict:
    """The output file's record: ``documents`` (one object per document, its fields under their JSON keys) and the
    ``settings`` of the command."""
    return {"documents": [as_json(d) for d in documents], "settings": settings}


def table(docs: list[GapDocument], num_samples: int, beam_size: int, proposal: str = "") -> str:
    """Markdown: corpus totals of canonical, beam and IS (mean ± sd over seeds), gaps and IS diagnostics."""
    n_bytes = sum(d.bytes for d in docs)
    canon = sum(d.canonical for d in docs)
    beam = sum(d.beam_log_likelihood for d in docs)
    seeds = len(docs[0].is_log_likelihoods)
    is_totals = np.array([sum(d.is_log_likelihoods[s] for d in docs) for s in range(seeds)])
    bpb = lambda ll: -ll / n_bytes / math.log(2)
    ess = np.array([d.ess for d in docs])
    khat = np.array([d.pareto_k for d in docs], dtype=np.float64)
    is_sd = is_totals.std(ddof=1) if len(is_totals) > 1 else 0.0
    lines = [
        f"{len(docs)} documents, {sum(d.tokens for d in docs)} canonical tokens, {n_bytes} bytes",
        "",
        "| estimate | log p (nats, corpus) | bits per byte | marginal − canonical (nats) | (% of −log p canonical) |",
        "|---|---|---|---|---|",
        f"| canonical (= lm-eval hf) | {canon:.3f} | {bpb(canon):.4f} | 0 | 0 |",
        (f"| beam, k = {beam_size} (lower bound) | {beam:.3f} | {bpb(beam):.4f} | {beam - canon:.3f} |"
         f" {100 * (beam - canon) / -canon:.2f}% |"),
        (f"| IS, K = {num_samples}{proposal} ({len(is_totals)} seeds: mean ± sd) | {is_totals.mean():.3f} ± {is_sd:.3f} |"
         f" {bpb(is_totals.mean()):.4f} | {is_totals.mean() - canon:.3f} | {100 * (is_totals.mean() - canon) / -canon:.2f}% |"),
        "",
        (f"IS diagnostics (seed 0): mean ESS {ess.mean():.1f} of {num_samples}, min ESS {ess.min():.1f}; "
         f"documents with Pareto k̂ > 0.7: {int((khat[np.isfinite(khat)] > 0.7).sum())} / {int(np.isfinite(khat).sum())}"
         f" with k̂ defined; documents where beam > canonical: {sum(d.beam_log_likelihood > d.canonical + 1e-6 for d in docs)}"
         f" / {len(docs)}"),
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--pretrained", default=None, help="local folder or Hub id (default: the bundled tiny GPT-2)"
    )
    p.add_argument("--data", default=str(DEFAULT_DATA), help="JSONL with a 'text' field per line")
    p.add_argument("--num-samples", type=int, default=100)
    p.add_argument("--beam-size", type=int, default=8)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0, help="τ of the proposal")
    p.add_argument(
        "--canonical-mix", type=float, default=None, help="ε of the proposal (default: the model's, 0.9)"
    )
    p.add_argument("--limit", type=int, default=None, help="first N documents only")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="e.g. bfloat16 (log-probabilities still summed in float64)")
    p.add_argument(
        "--output",
        default=None,
        help="write per-document numbers to this JSON file, and the table beside it (.md)",
    )
    args = p.parse_args(argv)
    texts = read_texts(args.data)
    texts = texts[: args.limit] if args.limit else texts
    dtype = getattr(torch, args.dtype) if args.dtype else None
    mix = {} if args.canonical_mix is None else {"canonical_mix": args.canonical_mix}
    lm, path = load_model(
        "tokenization", args.pretrained, device=args.device, dtype=dtype, given_as="--pretrained", **mix
    )
    docs = measure(
        lm, texts, args.num_samples, args.beam_size, args.seeds, args.temperature, torch.device(args.device)
    )
    printed = table(
        docs, args.num_samples, args.beam_size, f", τ = {args.temperature:g}, ε = {lm.canonical_mix:g}"
    )
    print(printed)
    if args.output:
        # bundled files as lm_latent_eval/data/...: no machine's path
        settings = {**vars(args), "data": package_path(args.data), "checkpoint": package_path(path)}
        out = write_json(args.output, to_json(docs, settings))
        # the table as printed, beside the JSON (gap.json -> gap.md)
        if out.suffix != ".md":
            out.with_suffix(".md").write_text(printed + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
