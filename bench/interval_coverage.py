"""How often does a 95% interval of log p̂ cover the exact log p(x)? Repeated IS runs against exact values.

Cases: the bundled HMM on 10 bundled documents (exact value: forward algorithm; samples: the model's own proposal,
seeds 0..R−1), and the tiny KGLM and EntityNLM of the tests on one short text whose latent configurations are
enumerated (exact value: the sum over the support; samples: z ~ q drawn over the enumerated support with q's exact
probabilities, which the model tests certify equal to the proposal's sampler). For every run the first K samples,
K = 10, 100, 1000, give one interval per method (``lm_latent_eval.estimators.intervals``); the table is the share of
intervals that contain the exact value, per document and for the corpus sum Σ_n log p(x_n) (HMM, 10 documents).

    python bench/interval_coverage.py --repeats 300   # writes lm_latent_eval/data/interval_coverage (read by the cards)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tiny enumerable KGLM / EntityNLM of the tests

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.estimators.intervals import (
    INTERVAL_METHODS,
    corpus_log_likelihood_interval,
    log_likelihood_interval,
)

SIZES = (10, 100, 1000)


def hmm_case(peek: bool, repeats: int, num_docs: int):
    """(exact log p [N], log weights [R, N, K_max]) of the bundled HMM on ``num_docs`` bundled documents."""
    from lm_latent_eval.models import load_model
    from lm_latent_eval.paths import DATA_DIR

    model, _ = load_model("hmm")
    with open(DATA_DIR / "corpus" / "tiny_test.jsonl", encoding="utf-8") as fh:
        docs = [json.loads(line)["text"] for line in fh if line.strip()]
    docs = docs[:: max(1, len(docs) // num_docs)][:num_docs]
    xs = [model.tokenize(d) for d in docs]
    exact = np.array([float(model.log_marginal(x)) for x in xs])
    lw = np.empty((repeats, len(docs), max(SIZES)))
    for r in tqdm(range(repeats), desc=f"HMM peek={peek}", leave=False):
        for n, (d, x) in enumerate(zip(docs, xs)):
            lw[r, n] = importance_log_weights(model, x, num_samples=max(SIZES), temperature=1.0, peek=peek, seed=r, document=d)
    return exact, lw


@torch.no_grad()
def enumerated_case(name: str, peek: bool, repeats: int, seed: int = 0):
    """(exact log p [1], log weights [R, 1, K_max]) by drawing z ~ q over the enumerated support."""
    if name == "kglm":
        from kglm_tiny import tiny_kglm

        from lm_latent_eval.models.kglm.enumerate import enumerate_latents

        model = tiny_kglm(proposal_features=True)
        x = model.tokenize("Ada Lovelace was born")
        support = enumerate_latents(model, x.numel())
    else:
        from entitynlm_tiny import TEXT, tiny_entitynlm

        from lm_latent_eval.models.entitynlm.enumerate import enumerate_latents

        model = tiny_entitynlm()
        x = model.tokenize(TEXT)
        support = enumerate_latents(x.numel(), model.max_entities, model.max_mention_length)
    log_joint = model.log_joint(x, support).double().numpy()
    log_q = model.proposal.log_prob(x, support, 1.0, peek).double().numpy()
    q = np.exp(log_q)
    assert abs(q.sum() - 1.0) < 1e-6, f"{name}: q sums to {q.sum()} over the enumerated support"
    exact = float(np.logaddexp.reduce(log_joint))
    log_w = log_joint - log_q
    rng = np.random.default_rng(seed)
    idx = rng.choice(q.size, size=(repeats, 1, max(SIZES)), p=q / q.sum())
    return np.array([exact]), log_w[idx]


def coverage(exact: np.ndarray, lw: np.ndarray, num_resamples: int, seed: int = 0, methods=INTERVAL_METHODS) -> dict:
    """{K: {method: coverage per document and of the corpus sum, and of the lower end alone (log p ≥ lo, i.e.
    true PPL ≤ the upper end of the PPL interval), median width}}."""
    rng = np.random.default_rng(seed)
    repeats, docs, _ = lw.shape
    out = {}
    for k in SIZES:
        out[k] = {}
        for method in methods:
            hits, above_lo, widths, corpus_hits, corpus_above_lo = 0, 0, [], 0, 0
            for r in range(repeats):
                for n in range(docs):
                    lo, hi = log_likelihood_interval(lw[r, n, :k], method=method, num_resamples=num_resamples, rng=rng)
                    hits += lo <= exact[n] <= hi
                    above_lo += lo <= exact[n]
                    widths.append(hi - lo)
                if docs > 1:
                    lo, hi = corpus_log_likelihood_interval(list(lw[r, :, :k]), method=method,
                                                            num_resamples=num_resamples, rng=rng)
                    corpus_hits += lo <= exact.sum() <= hi
                    corpus_above_lo += lo <= exact.sum()
            finite = [w for w in widths if math.isfinite(w)]
            out[k][method] = {
                "document_coverage": hits / (repeats * docs),
                "corpus_coverage": corpus_hits / repeats if docs > 1 else None,
                "document_lower_end_coverage": above_lo / (repeats * docs),
                "corpus_lower_end_coverage": corpus_above_lo / repeats if docs > 1 else None,
                "median_width": float(np.median(finite)) if finite else math.inf,
                "infinite_share": 1.0 - len(finite) / len(widths),
                "intervals": repeats * docs,
            }
    return out


def markdown(results: dict, methods=INTERVAL_METHODS) -> str:
    """One row per (case, K): document-level coverage of each method, corpus-level coverage in parentheses."""
    head = "| case | K | " + " | ".join(methods) + " |"
    lines = [head, "|---|---|" + "---|" * len(methods)]
    for case, by_k in results.items():
        for k, row in by_k.items():
            cells = []
            for method in methods:
                c = row[method]
                cell = f"{100 * c['document_coverage']:.1f}%"
                if c["corpus_coverage"] is not None:
                    cell += f" ({100 * c['corpus_coverage']:.1f}%)"
                cells.append(cell)
            lines.append(f"| {case} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--documents", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=500, help="bootstrap resamples per interval")
    parser.add_argument("--output", default="lm_latent_eval/data/interval_coverage")
    parser.add_argument("--methods", default=",".join(INTERVAL_METHODS), help="comma-separated interval methods")
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = tuple(args.methods.split(","))
    start = time.perf_counter()
    cases = {
        "HMM, peeking (FFBS)": lambda: hmm_case(True, args.repeats, args.documents),
        "HMM, no peeking": lambda: hmm_case(False, args.repeats, args.documents),
        "KGLM (enumerated), peeking": lambda: enumerated_case("kglm", True, args.repeats * args.documents),
        "KGLM (enumerated), no peeking": lambda: enumerated_case("kglm", False, args.repeats * args.documents),
        "EntityNLM (enumerated), peeking": lambda: enumerated_case("entitynlm", True, args.repeats * args.documents),
        "EntityNLM (enumerated), no peeking": lambda: enumerated_case("entitynlm", False, args.repeats * args.documents),
    }
    results = {}
    for case, make in tqdm(cases.items(), desc="cases"):
        exact, lw = make()
        results[case] = coverage(exact, lw, args.resamples, methods=methods)
        print(f"{case}: done ({time.perf_counter() - start:.0f} s)", flush=True)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"repeats": args.repeats, "documents": args.documents, "resamples": args.resamples, "level": 0.95,
            "seconds": time.perf_counter() - start}
    (out / "coverage.json").write_text(json.dumps({"settings": meta, "results": results}, indent=1))
    table = markdown(results, methods)
    (out / "coverage.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
