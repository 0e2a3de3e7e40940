"""The masked LMs' value head as SMC's look-ahead (``models/masked/value.py``), against length: error, spread, cost.

``--table``: SMC resampling at ESS < K/2 under the value head, beside SMC under the mean-field look-ahead and
importance sampling over uniform orders (the default statement's sampler), at K = 64 and 256, 5 seeds, on

- the bundled network (its checkpoint's head, fitted to exact values of texts of 10 to 14 tokens) on its held-out
  sentences joined and cut to T = 16, 32, 48, 64 tokens: the error against the exact value at 16, beyond it the
  perplexity and the spread of a text's log p̂ over the seeds (importance sampling's certified bounds:
  ``masked_length/elbo.md``);
- the oracle (``models/masked/oracle.py``, exact at every T) with a head fitted the same way to its own texts of 10
  to 14 tokens (``oracle_with_head``), T = 16, 32, 48.

``--coverage T``: the statement of ``resample_threshold=0.5`` (the rest as a user who names nothing else gets it:
``auto``, the precision target) over ``--seeds`` seeds, held to the exact value (``masked_coverage.coverage``): on
the bundled network's joined texts of T ≤ 16 tokens, or with ``--oracle`` on the oracle's four texts of T tokens
(any T) under its head from ``oracle_with_head``, fitted once and shared by ``--workers`` forked processes that
split the seeds.

    python bench/masked_value.py --table           # writes bench/masked_length/value_head.md
    python bench/masked_value.py --coverage 16 --seeds 100   # writes bench/masked_length/value_coverage_T16.json
    python bench/masked_value.py --coverage 32 --oracle --workers 2   # value_coverage_oracle_T32.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import torch
from masked_coverage import StateTables, coverage, summary
from masked_length import OUTPUT, joined_texts, mean_sd, oracle_texts
from masked_side_by_side import Cost, machine

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.oracle import make_oracle_model, oracle_log_marginal, sample_oracle_text
from lm_latent_eval.models.masked.value import ValueHead
from lm_latent_eval.models.masked.value_fit import HeadRecipe, fit_head

KS, SEEDS, TEXTS = (64, 256), 5, 4
NETWORK_LENGTHS, ORACLE_LENGTHS = (16, 32, 48, 64), (16, 32, 48)
ESTIMATORS = (
    ("importance sampling (uniform orders)", "is", 0.0, False),
    ("SMC at ESS < K/2, mean field", "smc", 0.5, False),
    ("SMC at ESS < K/2, value head", "smc", 0.5, True),
)


def oracle_with_head(seed: int = 0):
    """The oracle with a ``ValueHead`` fitted as the bundled network's is (``value_fit.fit_head``, the default
    ``HeadRecipe``), on texts the oracle draws (seeds 777,000 + k, then 888,000 + k)."""
    oracle, recipe = make_oracle_model(), HeadRecipe()
    short = [sample_oracle_text(oracle, recipe.lengths[k % len(recipe.lengths)], seed=777_000 + k)
             for k in range(recipe.pieces)]  # fmt: skip
    long = [sample_oracle_text(oracle, recipe.bellman_lengths[k % len(recipe.bellman_lengths)], seed=888_000 + k)
            for k in range(recipe.bellman_pieces)]  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        oracle.value_head = ValueHead(recipe.width)
    fit_head(oracle, short, long, seed)
    return oracle


@contextlib.contextmanager
def head_used(model, used: bool):
    """The model's value head while it runs, or the mean field (its head set aside)."""
    head = model.value_head
    if not used:
        model.value_head = None
    try:
        yield
    finally:
        model.value_head = head


def cell(model, texts: list[str], K: int, estimator: str, threshold: float, head: bool) -> tuple:
    """log p̂ [seeds, texts], network rows per seed (each seed from an empty row cache), seconds."""
    estimates, rows, start, cost = [], 0, time.perf_counter(), Cost(model)
    with head_used(model, head):
        for seed in range(SEEDS):
            settings = EstimatorSettings(
                estimator, K, peek=False, resample_threshold=threshold, target_se=0, seed=seed
            )
            run = resolve(settings, model)
            out, seed_rows, _, _ = cost.run(lambda: [run.estimate(t).log_likelihood for t in texts])
            estimates.append(out)
            rows += seed_rows
    return np.array(estimates), rows / SEEDS, time.perf_counter() - start


def table_rows(name: str, model, lengths, texts_of, truth_of) -> list[str]:
    """The table's rows of one model: each length, K and estimator."""
    rows = []
    for length in lengths:
        texts = texts_of(length)
        truth = truth_of(texts)
        tokens = sum(model.tokenize(t).numel() for t in texts)
        for K in KS:
            for label, estimator, threshold, head in ESTIMATORS:
                estimates, rows_per_seed, seconds = cell(model, texts, K, estimator, threshold, head)
                error = "—" if truth is None else mean_sd((estimates - truth).ravel())
                perplexity = np.exp(-estimates.sum(1) / tokens)
                rows.append(
                    f"| {name} | {length} | {K} | {label} | {error} | {perplexity.mean():.2f} "
                    f"({perplexity.min():.2f}-{perplexity.max():.2f}) | {np.median(estimates.std(0, ddof=1)):.2f} | "
                    f"{rows_per_seed / tokens:,.0f} | {seconds:.0f} |"
                )
                print(rows[-1], flush=True)
    return rows


def value_table() -> list[str]:
    """``--table``'s table (module docstring)."""
    network, _ = load_model("masked")

    def network_truth(texts):
        if network.tokenize(texts[0]).numel() > network.max_exact_tokens:
            return None
        return np.array([network.log_marginal(network.tokenize(t)) for t in texts])

    rows = table_rows("bundled network", network, NETWORK_LENGTHS, lambda T: joined_texts(network, T, TEXTS),
                      network_truth)  # fmt: skip
    start = time.perf_counter()
    oracle = oracle_with_head()
    fit_seconds = time.perf_counter() - start
    rows += table_rows("oracle", oracle, ORACLE_LENGTHS, lambda T: oracle_texts(oracle, T, TEXTS),
                       lambda texts: np.array([oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts]))  # fmt: skip
    return [
        (
            f"The masked LMs' value head as SMC's look-ahead (`python bench/masked_value.py --table`): {TEXTS} texts per "
            f"length T, {SEEDS} seeds per cell, K particles per text. log p̂ − log p: mean ± sd over texts × seeds "
            "where p is exact (the bundled network at 16 tokens, the oracle at every T); perplexity per token: mean "
            "over the seeds (range); sd of a text's log p̂ over the seeds (median over the texts); network rows per "
            "token of one seed, from an empty row cache (the head's T rows of pseudo-likelihoods included). The "
            f"bundled network's head is its checkpoint's; the oracle's was fitted the same way in {fit_seconds:.0f} s "
            f"(`oracle_with_head`). Machine: {machine()}."
        ),
        "",
        (
            "| model | T | K | estimator | log p̂ − log p | perplexity per token | sd of a text's log p̂ | network rows "
            "per token | seconds |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def coverage_runs(length: int, seeds: range) -> dict:
    """``--coverage``: the statement of ``resample_threshold=0.5`` on the bundled network's joined texts of
    ``length`` tokens (exact: every state run once by ``StateTables``), per seed."""
    network, _ = load_model("masked")
    texts = joined_texts(network, length, TEXTS)
    tables = StateTables(network, texts)
    with tables.installed():
        out = coverage(
            network, texts, {"resample_threshold": "0.5"}, seeds, tables.truth, lambda _: None, tables
        )
    return with_cost(out, length, len(texts))


def with_cost(out: dict, length: int, texts: int) -> dict:
    """``coverage``'s figures with the network rows per token of a seed (mean over the seeds)."""
    rows = np.mean([r["network_rows"] for r in out["runs"]])
    return {"length": length, "texts": texts, "rows_per_token": float(rows) / (length * texts), **out}


def oracle_coverage_runs(length: int, seeds: int, workers: int) -> dict:
    """``--coverage --oracle``: as ``coverage_runs`` on the oracle's texts of ``length`` tokens under its fitted head,
    the seeds split over ``workers`` processes forked after the fit (each saves its seeds so far beside the output)."""
    start = time.perf_counter()
    oracle = oracle_with_head()
    fit_seconds = time.perf_counter() - start
    texts = oracle_texts(oracle, length, TEXTS)
    truth = float(sum(oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts))

    def partial(worker: int) -> Path:
        return OUTPUT / f"value_coverage_oracle_T{length}.part{worker}.json"

    def part(worker: int) -> None:
        coverage(oracle, texts, {"resample_threshold": "0.5"}, range(worker, seeds, workers), truth,
                 lambda so_far: partial(worker).write_text(json.dumps(so_far) + "\n"), None)  # fmt: skip

    # forked: the fitted oracle shared, no pickling; each worker's seeds so far in its file, read back at the end
    processes = [multiprocessing.get_context("fork").Process(target=part, args=(w,)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise SystemExit(f"a worker failed; its seeds so far are in {partial(0).parent}")
    parts = [json.loads(partial(w).read_text()) for w in range(workers)]
    runs = sorted((run for p in parts for run in p["runs"]), key=lambda run: run["seed"])
    out = summary(parts[0]["model_args"], parts[0]["resolved"], runs)
    for worker in range(workers):
        partial(worker).unlink()
    return {"head_fit_seconds": fit_seconds, "truth": truth, **with_cost(out, length, len(texts))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="error, spread and cost against length")
    parser.add_argument("--coverage", type=int, metavar="T", help="the statement's coverage at T tokens")
    parser.add_argument(
        "--oracle", action="store_true", help="--coverage on the oracle (else the network, T ≤ 16)"
    )
    parser.add_argument("--seeds", type=int, default=100, help="seeds of --coverage")
    parser.add_argument("--workers", type=int, default=1, help="processes of --coverage --oracle")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.table:
        text = "\n".join(value_table()) + "\n"
        (OUTPUT / "value_head.md").write_text(text, encoding="utf-8")
        print(text)
    if args.coverage and args.oracle:
        out = oracle_coverage_runs(args.coverage, args.seeds, args.workers)
        (OUTPUT / f"value_coverage_oracle_T{args.coverage}.json").write_text(json.dumps(out, indent=1) + "\n")
        print({k: v for k, v in out.items() if k != "runs"})
    elif args.coverage:
        out = coverage_runs(args.coverage, range(args.seeds))
        (OUTPUT / f"value_coverage_T{args.coverage}.json").write_text(json.dumps(out, indent=1) + "\n")
        print({k: v for k, v in out.items() if k != "runs"})


if __name__ == "__main__":
    main()
