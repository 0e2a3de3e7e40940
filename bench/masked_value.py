"""The masked LMs' value head as SMC's look-ahead (``models/masked/value.py``), against length: error, spread, cost.

``--table``: SMC resampling at ESS < K/2 under the value head, drawing uniform orders or peeking through the head
(``peek=true``: ``stepwise.proposal_logits``), beside SMC under the mean-field look-ahead and importance sampling
over uniform orders (the default statement's sampler), at K = 64 and 256, 5 seeds, on

- the bundled network (its checkpoint's head, fitted to exact values of texts of 10 to 14 tokens) on its held-out
  sentences joined and cut to T = 16, 32, 48, 64 tokens: the error against the exact value at 16, beyond it the
  perplexity and the spread of a text's log p̂ over the seeds (importance sampling's certified bounds:
  ``masked_length/elbo.md``);
- the oracle (``models/masked/oracle.py``, exact at every T) with a head fitted the same way to its own texts of 10
  to 14 tokens (``oracle_with_head``), T = 16, 32, 48.

``--coverage T``: the statement of ``resample_threshold=0.5`` (with ``--peek``, and ``peek=true``; the rest as a
user who names nothing else gets it: ``auto``, the precision target) over ``--seeds`` seeds, held to the exact
value (``masked_coverage.coverage``): on the bundled network's joined texts of T ≤ 16 tokens, or with ``--oracle``
on the oracle's four texts of T tokens (any T; ``--texts N``: N of them) under its head from ``oracle_with_head``,
fitted once and shared by ``--workers`` forked processes that split the seeds.

    python bench/masked_value.py --table           # writes bench/masked_length/value_head.md
    python bench/masked_value.py --coverage 16 --seeds 100   # writes bench/masked_length/value_coverage_T16.json
    python bench/masked_value.py --coverage 32 --oracle --workers 2   # value_coverage_oracle_T32.json
    python bench/masked_value.py --coverage 32 --oracle --peek   # value_coverage_oracle_peek_T32.json
    python bench/masked_value.py --coverage 48 --oracle --peek --first-seed 20 --seeds 20   # ..._T48_seeds20_39.json
    python bench/masked_value.py --pool 48 --oracle --peek   # the chunks joined: ..._T48_pooled.json
    python bench/masked_value.py --coverage 32 --oracle --peek --texts 16 --seeds 30   # ..._T32_N16_seeds0_29.json
    python bench/masked_value.py --coverage 32 --oracle --peek --target-se 0.01   # ..._T32_se0.01.json
    python bench/masked_value.py --proposals       # writes bench/masked_length/value_proposals.md
    python bench/masked_value.py --conditionals 16,24,30 --peek --workers 2   # value_conditionals_peek.md, .json
    python bench/masked_value.py --windows         # writes bench/masked_length/value_windows.md
    python bench/masked_value.py --conditionals-network 16 --seeds 16 --workers 2   # value_conditionals_network.md

``--conditionals L,L``: ``loglikelihood``'s requests as ``masked_length.py --conditionals`` poses them (a context of 16
tokens, four choices of L tokens each), estimated on the context's view under the oracle's head by the statement of
``--coverage``, over ``--seeds`` seeds per L, held to the exact Σ log p(choice | context).

``--conditionals-network L``: one such question on the bundled network (its context and choices pieces of its
joined held-out sentences; L ≤ 16, so that the dynamic program gives the truth) under the checkpoint's defaults and
under those of a model without a head.

``--windows``: texts longer than the bundled network reads (96 tokens, read in windows of 32: ``windows.py``) under
the checkpoint's defaults (SMC resampling under its value head, which reads each set's current window, and peeking
through it) beside importance sampling over uniform orders, at the same fixed K over a few seeds: perplexity,
certified bound, network rows per token and seconds.

``--proposals``: what still moves SMC under a value head at 32 and 48 tokens, on the oracle: the head (the recipe's;
the recipe's carried on by more Bellman steps at 32 to 64 tokens; one fitted to the oracle's exact log V(S) on texts
of 24 to 64 tokens, targets no real network offers) and the proposal over the next position (``proposal_smc``), with
each head's errors against the exact log V(S) and against the Bellman identity on sets of the bench's texts.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import multiprocessing
import re
import time
from pathlib import Path

import numpy as np
import torch
from masked_coverage import StateTables, coverage, pooled, summary
from masked_length import (
    CHOICES,
    CONTEXT_LENGTH,
    OUTPUT,
    conditionals_record,
    conditionals_rows,
    conditionals_table,
    exact_twist,
    joined_texts,
    mean_sd,
    oracle_texts,
    question,
    seed_means,
)
from masked_side_by_side import Cost, machine

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.estimators.resampling import systematic_resample
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.conditionals import masked_ids, step_scores
from lm_latent_eval.models.masked.oracle import make_oracle_model, oracle_log_marginal, sample_oracle_text
from lm_latent_eval.models.masked.policy import position_scores
from lm_latent_eval.models.masked.stepwise import proposal_logits
from lm_latent_eval.models.masked.value import (
    ValueHead,
    bellman_targets,
    fit_value_head,
    log_lookahead,
    pseudo_log_likelihoods,
    sets_of_size,
)
from lm_latent_eval.models.masked.value_fit import HeadRecipe, fit_head
from lm_latent_eval.tensors import log_normalizer

KS, SEEDS, TEXTS = (64, 256), 5, 4
NETWORK_LENGTHS, ORACLE_LENGTHS = (16, 32, 48, 64), (16, 32, 48)
# (label, estimator, resample_threshold, the value head used, peek)
ESTIMATORS = (
    ("importance sampling (uniform orders)", "is", 0.0, False, False),
    ("SMC at ESS < K/2, mean field", "smc", 0.5, False, False),
    ("SMC at ESS < K/2, value head", "smc", 0.5, True, False),
    ("SMC at ESS < K/2, value head, peeking through it", "smc", 0.5, True, True),
)


def oracle_with_head(seed: int = 0):
    """The oracle with a ``ValueHead`` fitted as the bundled network's is (``value_fit.fit_head``, the default
    ``HeadRecipe``), on texts the oracle draws (seeds 777,000 + k, then 888,000 + k)."""
    oracle, recipe = make_oracle_model(), HeadRecipe()
    short = [sample_oracle_text(oracle, recipe.lengths[k % len(recipe.lengths)], seed=777_000 + k)
             for k in range(recipe.pieces)]  # fmt: skip
    long = [sample_oracle_text(oracle, recipe.bellman_lengths[k % len(recipe.bellman_lengths)], seed=888_000 + k)
            for k in range(recipe.bellman_pieces)]  # fmt: skip
    oracle.value_head = ValueHead.seeded(seed, recipe.width)
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


def cell(
    model,
    texts: list[str],
    K: int,
    estimator: str,
    threshold: float,
    head: bool,
    seeds: int = SEEDS,
    peek: bool = False,
) -> tuple:
    """log p̂ [seeds, texts], network rows per seed (each seed from an empty row cache), seconds."""
    estimates, rows, start, cost = [], 0, time.perf_counter(), Cost(model)
    with head_used(model, head):
        for seed in range(seeds):
            settings = EstimatorSettings(
                estimator, K, peek=peek, resample_threshold=threshold, target_se=0, seed=seed
            )
            run = resolve(settings, model)
            out, seed_rows, _, _ = cost.run(lambda: [run.estimate(t).log_likelihood for t in texts])
            estimates.append(out)
            rows += seed_rows
    return np.array(estimates), rows / seeds, time.perf_counter() - start


def table_rows(name: str, model, lengths, texts_of, truth_of) -> list[str]:
    """The table's rows of one model: each length, K and estimator."""
    rows = []
    for length in lengths:
        texts = texts_of(length)
        truth = truth_of(texts)
        tokens = sum(model.tokenize(t).numel() for t in texts)
        for K in KS:
            for label, estimator, threshold, head, peek in ESTIMATORS:
                estimates, rows_per_seed, seconds = cell(
                    model, texts, K, estimator, threshold, head, SEEDS, peek
                )
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


def coverage_args(
    peek: bool, num_samples: int | None = None, target_se: float | None = None, max_samples: int | None = None
) -> dict:
    """The model_args of ``--coverage``: resampling at ESS < K/2, with ``--peek`` the proposal through the head
    (``peek=true``), with ``--num-samples K`` stage 1's K (else the default's), with ``--target-se S`` the precision
    target S nats per token (else the default's), with ``--max-samples M`` the precision target's cap per text."""
    chosen = {"peek": "true"} if peek else {}
    return {
        "resample_threshold": "0.5",
        **chosen,
        **({"num_samples": str(num_samples)} if num_samples else {}),
        **({"target_se": str(target_se)} if target_se else {}),
        **({"max_samples": str(max_samples)} if max_samples else {}),
    }


def coverage_name(
    length: int,
    oracle: bool,
    peek: bool,
    seeds: range,
    num_samples: int | None = None,
    texts: int = TEXTS,
    target_se: float | None = None,
    max_samples: int | None = None,
) -> Path:
    """The output of ``--coverage``; seeds other than 0-99 (``--first-seed``, ``--seeds``) name their range, so that
    runs in chunks keep every chunk (``masked_coverage.pooled`` joins them), ``--num-samples K`` its K,
    ``--texts N`` its N, ``--target-se S`` its S and ``--max-samples M`` its M."""
    chunk = "" if seeds == range(100) else f"_seeds{seeds.start}_{seeds.stop - 1}"
    stem = f"value_coverage{'_oracle' if oracle else ''}{'_peek' if peek else ''}_T{length}"
    corpus = "" if texts == TEXTS else f"_N{texts}"
    target = f"_se{target_se:g}" if target_se else ""
    cap = f"_max{max_samples}" if max_samples else ""
    return OUTPUT / f"{stem}{corpus}{f'_K{num_samples}' if num_samples else ''}{target}{cap}{chunk}.json"


def pooled_name(length: int, oracle: bool, peek: bool, texts: int = TEXTS) -> Path:
    """Where ``--pool T`` writes the chunks joined when they are not seeds 0-99."""
    stem = coverage_name(length, oracle, peek, range(100), texts=texts).stem
    return OUTPUT / f"{stem}_pooled.json"


def pooled_chunks(length: int, oracle: bool, peek: bool, texts: int = TEXTS) -> Path:
    """``--pool T``: one setting's chunks (``coverage_name``'s ``_seedsA_B`` files) joined by
    ``masked_coverage.pooled``, written as the run of seeds 0-99 would be where they are those seeds, else beside
    them as ``..._pooled.json``; one line where the chunks' texts, truth or model_args differ."""
    stem = coverage_name(length, oracle, peek, range(100), texts=texts).stem
    files = [
        f for f in OUTPUT.glob(f"{stem}_seeds*.json") if re.fullmatch(rf"{stem}_seeds\d+_\d+\.json", f.name)
    ]
    # a chunk still running keeps its seeds so far in ..._seedsA_B.partW.json: not a chunk
    chunks = [json.loads(f.read_text()) for f in sorted(files)]
    if not chunks:
        raise SystemExit(f"--pool {length}: no {stem}_seedsA_B.json in {OUTPUT}")
    if len({json.dumps([c["texts"], c.get("truth"), c["model_args"]]) for c in chunks}) > 1:
        raise SystemExit(f"--pool {length}: the chunks of {stem} differ in their texts, truth or model_args")
    out = with_cost(pooled(chunks), length, chunks[0]["texts"])
    out["runs"].sort(key=lambda run: run["seed"])
    seeds = [run["seed"] for run in out["runs"]]
    path = OUTPUT / f"{stem}.json" if seeds == list(range(100)) else pooled_name(length, oracle, peek, texts)
    fit = {k: chunks[0][k] for k in ("head_fit_seconds", "truth") if k in chunks[0]}
    path.write_text(json.dumps({**fit, **out}, indent=1) + "\n")
    return path


def coverage_runs(length: int, seeds: range, peek: bool = False, num_samples: int | None = None) -> dict:
    """``--coverage``: the statement of ``coverage_args`` on the bundled network's joined texts of ``length``
    tokens (exact: every state run once by ``StateTables``), per seed."""
    network, _ = load_model("masked")
    texts = joined_texts(network, length, TEXTS)
    tables = StateTables(network, texts)
    with tables.installed():
        given = coverage_args(peek, num_samples)
        out = coverage(network, texts, given, seeds, tables.truth, lambda _: None, tables)
    return with_cost(out, length, len(texts))


def with_cost(out: dict, length: int, texts: int) -> dict:
    """``coverage``'s figures with the means over its seeds (``masked_length.seed_means``)."""
    return {"length": length, "texts": texts, **seed_means(out["runs"], length * texts), **out}


def forked_coverage(model, texts, truth: float, given: dict, seeds: range, workers: int, partial) -> dict:
    """``masked_coverage.coverage`` of the model_args ``given`` with the seeds split over ``workers`` processes forked
    from this one (the fitted model shared, no pickling); each worker keeps its seeds so far in ``partial(worker)``,
    read back and removed at the end."""

    def part(worker: int) -> None:
        coverage(model, texts, given, seeds[worker::workers], truth,
                 lambda so_far: partial(worker).write_text(json.dumps(so_far) + "\n"), None)  # fmt: skip

    processes = [multiprocessing.get_context("fork").Process(target=part, args=(w,)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise SystemExit(f"a worker failed; its seeds so far are in {partial(0).parent}")
    parts = [json.loads(partial(w).read_text()) for w in range(workers)]
    runs = sorted((run for p in parts for run in p["runs"]), key=lambda run: run["seed"])
    for worker in range(workers):
        partial(worker).unlink()
    return summary(parts[0]["model_args"], parts[0]["resolved"], runs)


def oracle_coverage_runs(
    length: int,
    seeds: range,
    workers: int,
    peek: bool = False,
    num_samples: int | None = None,
    count: int = TEXTS,
    target_se: float | None = None,
    max_samples: int | None = None,
) -> dict:
    """``--coverage --oracle``: as ``coverage_runs`` on ``count`` of the oracle's texts of ``length`` tokens under its
    fitted head, the seeds split over ``workers`` forked processes (``forked_coverage``)."""
    start = time.perf_counter()
    oracle = oracle_with_head()
    fit_seconds = time.perf_counter() - start
    texts = oracle_texts(oracle, length, count)
    truth = float(sum(oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts))
    stem = coverage_name(length, True, peek, seeds, num_samples, count, target_se, max_samples)
    given = coverage_args(peek, num_samples, target_se, max_samples)
    out = forked_coverage(oracle, texts, truth, given, seeds, workers,
                          lambda worker: stem.with_suffix(f".part{worker}.json"))  # fmt: skip
    return {"head_fit_seconds": fit_seconds, "truth": truth, **with_cost(out, length, len(texts))}


def conditionals_runs(lengths: list[int], seeds: range, workers: int, peek: bool) -> list[dict]:
    """``--conditionals``: ``masked_length --conditionals``' questions (a context of 16 tokens, four choices of L
    tokens) under the oracle's fitted head, the statement of ``coverage_args(peek)`` over ``seeds`` per L, held to
    the exact Σ log p(choice | context), in records ``masked_length.conditionals_table`` renders."""
    oracle, out = oracle_with_head(), []
    for length in lengths:
        view, texts, truth = question(oracle, length)
        part = OUTPUT / f"value_conditionals_L{length}"
        result = forked_coverage(view, texts, truth, coverage_args(peek), seeds, workers,
                                 lambda worker, part=part: part.with_suffix(f".part{worker}.json"))  # fmt: skip
        # two workers share the machine's two cores: a seed's seconds as its process measured them
        out.append(conditionals_record(length, truth, result))
    return out


def ess_below_half(log_w: torch.Tensor) -> bool:
    """Whether the effective sample size (Σ w)² / Σ w² of the log weights [K] is below K / 2: the benches' SMC
    resamples there."""
    return bool(torch.exp(2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0)) < log_w.numel() / 2)


def one_row_values(
    head, scores, revealed: torch.Tensor, pseudo: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the head's one-row proposal reads from the rows ``scores`` of the sets ``revealed`` [N, T]:
    (log ψ̃(S ∪ {i}) [N, T] at each masked i, log Z(S) [N]), ψ̃(S ∪ {i}) the head at S ∪ {i} with each ℓ_j(S ∪ {i})
    taken as ℓ_j(S), Z(S) = Σ_{i ∈ M} π(i | S) p_θ(x_i | S) ψ̃(S ∪ {i}) its normaliser: the Bellman identity's right
    side read from S's own row (exact where one position is masked: ψ̃ of the full set is 1). Differentiable in the
    head's weights (``ValueHead.corrections`` itself: texts the network reads whole)."""
    corrections = head.corrections(scores.log_token, pseudo, revealed, shift=-1)
    ahead = ValueHead.log_psi(scores.log_token, revealed, corrections)
    children = ahead[:, None] - scores.log_token - corrections
    return children, ahead + torch.logsumexp(scores.log_order - corrections, 1)


def policy_scores(model, x: torch.Tensor, revealed: torch.Tensor, policy: str) -> torch.Tensor:
    """The score s_i(S) [N, T] a deterministic order policy (``policy.POLICIES``: DUEL's ``greedy_confidence``,
    ``margin``) ranks the masked positions of the sets ``revealed`` [N, T] by, float64, −inf at the revealed ones:
    read from S's row (the mask row left out), as the model's policy would read it; no row counted."""
    with torch.no_grad():
        logits = model.predict(masked_ids(x, revealed, model.mask_id))
    logits = logits.index_fill(-1, torch.tensor([model.mask_id]), -math.inf)
    scores = position_scores(policy, logits, log_normalizer(logits, torch.float64))
    return scores.masked_fill(revealed, -math.inf)


def proposal_smc(
    model,
    x: torch.Tensor,
    K: int,
    seed: int,
    proposal: str,
    temperature: float = 1.0,
    twist: str = "head",
    defensive: float = 0.0,
) -> tuple[float, int]:
    """(log p̂, network rows) of SMC over orders under the model's value head ψ, resampling systematically at
    ESS < K/2, the next position drawn from

    - ``"one row"``: the package's peeking proposal under the head (``stepwise.proposal_logits``) at
      ``temperature``, weight π p_θ(x_i | S) ψ(S ∪ {i}) / (q(i | S) ψ(S)) (ψ(S ∪ {i}) from the new row): the package's
      SMC with ``peek=true``, one run of K particles; ``twist="proposal"`` takes ψ(S) = ``one_row_values``' Z(S)
      instead of the head's ψ(S) (the same final weights, other intermediate targets);
    - ``"adapted"``: q(i | S) ∝ π(i | S) p_θ(x_i | S) ψ(S ∪ {i}) over every masked i (the fully adapted proposal: the
      |M| rows of S's children), weight Σ_i π p_θ ψ(S ∪ {i}) / ψ(S), whatever i is drawn, resampled before the draw;
    - a DUEL policy's name (``"greedy_confidence"``, ``"margin"``): q(i | S) ∝ exp(s_i(S) / ``temperature``) over the
      masked i, s_i the score that deterministic sampler ranks positions by (``policy_scores``: read from S's row,
      blind to the masked tokens), weight π p_θ(x_i | S) ψ(S ∪ {i}) / (q(i | S) ψ(S)) as for ``"one row"``.

    ``defensive`` = ε > 0 (not ``"adapted"``) draws from the mixture (1 − ε) q + ε · uniform over the masked positions
    instead, and weights by it: a step's weight is then at most |M| / ε times its target's increment.

    The package's stepwise part (``models/masked/stepwise.py``) with its proposal swapped; ψ(∅) = 1, ψ(all) = 1."""
    generator = torch.Generator().manual_seed(seed)
    T = x.numel()
    pseudo = pseudo_log_likelihoods(model, x)
    revealed = torch.zeros(K, T, dtype=torch.bool)
    scores, rows = step_scores(model, x, revealed), T + 1
    log_psi, log_w, banked = torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.float64), 0.0

    def resample(*tensors):
        nonlocal banked, log_w
        if not ess_below_half(log_w):
            return tensors
        banked += float(torch.logsumexp(log_w, 0)) - math.log(K)
        ancestors = systematic_resample(log_w, generator)
        log_w = torch.zeros(K, dtype=torch.float64)
        return tuple(t[ancestors] for t in tensors)

    for t in range(T):
        if proposal == "adapted":
            at = torch.nonzero(~revealed)
            child = revealed[at[:, 0]].clone()
            child[torch.arange(at.shape[0]), at[:, 1]] = True
            ahead = torch.zeros(at.shape[0], dtype=torch.float64)
            if t < T - 1:
                distinct, index = torch.unique(child, dim=0, return_inverse=True)
                rows += distinct.shape[0]
                ahead = log_lookahead(model, step_scores(model, x, distinct).log_token, distinct, pseudo)[
                    index
                ]
            logits = torch.full((K, T), -math.inf, dtype=torch.float64)
            logits[at[:, 0], at[:, 1]] = scores.log_joint[at[:, 0], at[:, 1]] + ahead
            log_w = log_w + torch.logsumexp(logits, 1) - log_psi
            revealed, logits = resample(revealed, logits)
            position = torch.multinomial(torch.softmax(logits, 1), 1, generator=generator).squeeze(1)
        else:
            logits = (
                proposal_logits(model, scores, revealed, pseudo, True)
                if proposal == "one row"
                else policy_scores(model, x, revealed, proposal)
            )
            log_q = torch.log_softmax(logits / temperature, 1)
            if defensive:
                masked = torch.isfinite(log_q)
                uniform = (-masked.sum(1, keepdim=True).double().log()).expand_as(log_q)
                uniform = uniform.masked_fill(~masked, -math.inf)
                log_q = torch.logaddexp(log_q + math.log1p(-defensive), uniform + math.log(defensive))
            position = torch.multinomial(log_q.exp(), 1, generator=generator).squeeze(1)
            log_w = log_w + (scores.log_joint - log_q).gather(1, position[:, None]).squeeze(1) - log_psi
        revealed = revealed.clone()
        revealed[torch.arange(K), position] = True
        if t < T - 1:
            scores = step_scores(model, x, revealed)
            if twist == "proposal":
                with torch.no_grad():
                    log_psi = one_row_values(model.value_head, scores, revealed, pseudo)[1]
            else:
                log_psi = log_lookahead(model, scores.log_token, revealed, pseudo)
            if proposal != "adapted":  # (the adapted proposal counted this row among the children)
                rows += torch.unique(revealed, dim=0).shape[0]
                log_w = log_w + log_psi
                revealed, log_psi, log_token, log_order = resample(
                    revealed, log_psi, scores.log_token, scores.log_order
                )
                scores = type(scores)(log_token, log_order)
    return banked + float(torch.logsumexp(log_w, 0)) - math.log(K), rows


def oracle_exact_head(oracle, log_v, steps: int = 900):
    """A ``ValueHead`` fitted to the oracle's exact log V(S) (``masked_length.exact_twist``: its count program) on
    36 of its texts of 24 to 64 tokens (seeds 555,000 + k) by ``value.fit_value_head``; ``log_v``:
    ``exact_twist(oracle)``."""
    texts = [sample_oracle_text(oracle, (24, 32, 40, 48, 56, 64)[k % 6], seed=555_000 + k) for k in range(36)]
    head = oracle.value_head
    oracle.value_head = ValueHead.seeded(0, HeadRecipe().width)
    fit_value_head(oracle, texts, steps, 1, log_v)
    exact, oracle.value_head = oracle.value_head, head
    return exact


def oracle_longer_head(oracle, steps: int = 800):
    """A copy of the oracle's head fitted ``steps`` more Bellman steps (``value.fit_value_head``, the recipe's sets
    and rate) on 40 of its texts of 32 to 64 tokens (seeds 999,000 + k): the recipe carried to the lengths it is
    evaluated at."""
    recipe, lengths = HeadRecipe(), (32, 40, 48, 56, 64)
    texts = [sample_oracle_text(oracle, lengths[k % 5], seed=999_000 + k) for k in range(40)]
    head = oracle.value_head
    oracle.value_head = copy.deepcopy(head)
    fit_value_head(oracle, texts, steps, 0, "bellman", recipe.bellman_sets, recipe.bellman_rate)
    longer, oracle.value_head = oracle.value_head, head
    return longer


def head_errors(oracle, head, x: torch.Tensor, log_v) -> tuple[float, float]:
    """The head's mean squared errors on the text x: of log ψ(S) against the exact log V(S), and against the Bellman
    identity's right side under the head (``value.bellman_targets``: one step's consistency, what SMC's increments
    see), each less its mean over 16 sets of one size, over sizes 1, 1 + T/12, ... (None: the mean field, whose
    Bellman side is taken under the mean field)."""
    previous, oracle.value_head = oracle.value_head, head
    pseudo, T, exact, bellman = pseudo_log_likelihoods(oracle, x), x.numel(), [], []
    used = None if head is None else pseudo
    for size in range(1, T, max(1, T // 12)):
        revealed = sets_of_size(T, size, 16, torch.Generator().manual_seed(100 * T + size))
        scores = step_scores(oracle, x, revealed)
        with torch.no_grad():
            psi = log_lookahead(oracle, scores.log_token, revealed, used)
            for errors, target in (
                (exact, log_v(x, revealed)),
                (bellman, bellman_targets(oracle, x, used, revealed, scores)),
            ):
                residual = psi - target
                errors.append(float(((residual - residual.mean()) ** 2).mean()))
    oracle.value_head = previous
    return sum(exact) / len(exact), sum(bellman) / len(bellman)


def head_error_row(name: str, oracle, head, texts: dict, log_v) -> str:
    """A row of the heads' table: root mean squared errors (``head_errors``) over the texts, at each length."""
    cells = []
    for xs in texts.values():
        errors = np.array([head_errors(oracle, head, x, log_v) for x in xs]).mean(0)
        cells.append(f"{math.sqrt(errors[0]):.2f} / {math.sqrt(errors[1]):.2f}")
    return f"| {name} | " + " | ".join(cells) + " |"


PROPOSAL_LENGTHS, PROPOSAL_K, PROPOSAL_SEEDS = (32, 48), 256, 10
PROPOSAL_ROWS = (
    ("uniform orders (the package's SMC)", "uniform"),
    ("the head's one-row proposal", "one row"),
    ("fully adapted (the children's rows)", "adapted"),
)


def proposals_table() -> list[str]:
    """``--proposals``' tables (module docstring)."""
    start = time.perf_counter()
    oracle = oracle_with_head()
    recipe_seconds, start = time.perf_counter() - start, time.perf_counter()
    log_v = exact_twist(oracle)  # one memo of the count programs for the fit and the errors
    exact_head = oracle_exact_head(oracle, log_v)
    exact_seconds = time.perf_counter() - start
    start, recipe_head = time.perf_counter(), oracle.value_head
    longer_head = oracle_longer_head(oracle)
    longer_seconds = time.perf_counter() - start
    heads = (
        ("the recipe's (`oracle_with_head`)", recipe_head),
        ("the recipe's, 800 Bellman steps more at 32-64", longer_head),
        ("fitted to exact log V(S)", exact_head),
    )
    texts = {T: [oracle.tokenize(t) for t in oracle_texts(oracle, T, TEXTS)] for T in (*PROPOSAL_LENGTHS, 64)}
    errors = [
        head_error_row(name, oracle, head, texts, log_v) for name, head in (("mean field", None), *heads)
    ]
    rows = []
    for T in PROPOSAL_LENGTHS:
        truth = np.array([oracle_log_marginal(oracle, x) for x in texts[T]])
        for head_name, head in heads:
            oracle.value_head = head
            for label, proposal in PROPOSAL_ROWS:
                if proposal == "adapted" and head is not recipe_head:
                    continue  # the proposal's gain is the recipe head's row; each other head's costs 10 minutes more
                began = time.perf_counter()
                if proposal == "uniform":
                    estimates, seed_rows, _ = cell(oracle, [oracle.detokenize(x) for x in texts[T]], PROPOSAL_K,
                                                   "smc", 0.5, True, PROPOSAL_SEEDS)  # fmt: skip
                else:
                    runs = [[proposal_smc(oracle, x, PROPOSAL_K, seed, proposal) for x in texts[T]]
                            for seed in range(PROPOSAL_SEEDS)]  # fmt: skip
                    estimates = np.array([[estimate for estimate, _ in run] for run in runs])
                    seed_rows = sum(r for run in runs for _, r in run) / PROPOSAL_SEEDS
                rows.append(
                    f"| {T} | {head_name} | {label} | {mean_sd((estimates - truth).ravel())} | "
                    f"{np.median(estimates.std(0, ddof=1)):.2f} | {seed_rows / (TEXTS * T):,.0f} | "
                    f"{time.perf_counter() - began:.0f} |"
                )
                print(rows[-1], flush=True)
    return [
        (
            f"What still moves SMC under a value head, on the oracle (`python bench/masked_value.py --proposals`): "
            f"{TEXTS} texts per length T, {PROPOSAL_SEEDS} seeds, K = {PROPOSAL_K}, resampling at ESS < K/2. The "
            f"recipe's head was fitted in {recipe_seconds:.0f} s (exact values of texts of 10 to 14 tokens, the "
            f"Bellman identity to 52), carried on by 800 Bellman steps on texts of 32 to 64 tokens in {longer_seconds:.0f} s "
            f"(`oracle_longer_head`); the third was fitted in {exact_seconds:.0f} s to the oracle's exact log V(S) on "
            "texts of 24 to 64 tokens (`oracle_exact_head`: targets no real network offers). The heads' errors "
            "(`head_errors`): root mean square of log ψ(S) less the exact log V(S) / less the Bellman identity's right "
            "side under the head (one step's consistency, what SMC's increments see), each less its mean over 16 sets "
            "of one size (sizes 1, 1 + T/12, ...), on the bench's texts. Proposals (`proposal_smc`): the package's "
            "(uniform orders); the head's one-row proposal, q(i | S) ∝ π(i | S) exp(−g_φ(ℓ_i(S), λ_i, |M| − 1)) "
            "(ψ(S ∪ {i}) read from the row at S, no row more); fully adapted, q(i | S) ∝ π(i | S) p_θ(x_i | S) ψ(S ∪ {i}) from the "
            f"|M| rows of S's children. Machine: {machine()}."
        ),
        "",
        "| head | " + " | ".join(f"error at T = {T} (log V / Bellman)" for T in texts) + " |",
        "|---|" + "---|" * len(texts),
        *errors,
        "",
        "| T | head | proposal | log p̂ − log p | sd of a text's log p̂ | network rows per token | seconds |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


# (label, model_args) of ``--conditionals-network``: the bundled checkpoint's defaults, and those of a model without a head
NETWORK_CONDITIONALS = (
    ("the checkpoint's defaults (its value head: resample_threshold=0.5, peek=true)", {}),
    ("the defaults of a model without a head (resample_threshold=0, peek=false)",
     {"resample_threshold": "0", "peek": "false"}),
)  # fmt: skip


def network_question(model, length: int) -> tuple:
    """A multiple-choice question on the bundled network: a context of CONTEXT_LENGTH tokens and CHOICES continuations
    of ``length`` tokens, consecutive pieces of its joined held-out sentences; (the context's view, its documents,
    the exact Σ log p(continuation | context), 2^length network rows per choice)."""
    ids = model.tokenize(joined_texts(model, CONTEXT_LENGTH + CHOICES * length, 1)[0])
    context = model.detokenize(ids[:CONTEXT_LENGTH])
    pieces = ids[CONTEXT_LENGTH:].view(CHOICES, length)
    view = model.conditional_model(context)
    texts = [f"{context} {model.detokenize(piece)}" for piece in pieces]
    return view, texts, sum(view.log_marginal(view.tokenize(t)) for t in texts)


def network_conditionals_runs(length: int, seeds: range, workers: int) -> list[dict]:
    """``--conditionals-network L``: one question's choices of ``length`` tokens on the bundled network under each
    setting of ``NETWORK_CONDITIONALS`` over ``seeds``, held to the exact value (records of ``conditionals_record``)."""
    model, _ = load_model("masked")
    view, texts, truth = network_question(model, length)
    out, part = [], OUTPUT / f"value_conditionals_network_L{length}"
    for label, given in NETWORK_CONDITIONALS:
        result = forked_coverage(view, texts, truth, given, seeds, workers,
                                 lambda worker: part.with_suffix(f".part{worker}.json"))  # fmt: skip
        out.append({"setting": label, **conditionals_record(length, truth, result)})
    return out


def network_conditionals_table(results: list[dict], command: str) -> list[str]:
    """``value_conditionals_network.md`` from ``network_conditionals_runs``' records."""
    return [
        (
            f"`loglikelihood` on the bundled masked LM (`{command}`): one question, a context of {CONTEXT_LENGTH} "
            f"tokens and {CHOICES} choices of {results[0]['length']} tokens (consecutive pieces of its joined held-out "
            "sentences), estimated together on the context's view, held to the exact Σ log p(choice | context) of the "
            f"dynamic program. Seconds per seed are of two processes sharing two cores. Machine: {machine()}."
        ),
        "",
        *conditionals_rows("setting", [(r["setting"], r) for r in results]),
    ]


WINDOW_LENGTH, WINDOW_K, WINDOW_SEEDS = 96, 400, 3
# (label, the model_args given beyond estimator=smc and K; the rest by the checkpoint's default_settings)
WINDOW_SETTINGS = (
    ("the checkpoint's defaults (resample_threshold=0.5, peek=true, the value head window by window)", {}),
    ("importance sampling over uniform orders (resample_threshold=0, peek=false)",
     {"resample_threshold": 0.0, "peek": False}),
)  # fmt: skip


def windows_table() -> list[str]:
    """``--windows``' table: each setting's corpus statement on ``TEXTS // 2`` joined texts of ``WINDOW_LENGTH`` tokens
    at K = ``WINDOW_K``, over ``WINDOW_SEEDS`` seeds (each from an empty row cache)."""
    model, _ = load_model("masked")
    texts = joined_texts(model, WINDOW_LENGTH, TEXTS // 2)
    tokens, cost, rows = WINDOW_LENGTH * len(texts), Cost(model), []
    for label, given in WINDOW_SETTINGS:
        settings, _ = with_model_defaults(
            EstimatorSettings("smc", WINDOW_K, target_se=0, **given), model, set(given)
        )
        runs = []
        for seed in range(WINDOW_SEEDS):
            run = resolve(settings.replace(seed=seed), model)
            runs.append(cost.run(lambda run=run: corpus_estimate([run.estimate(t) for t in texts])))
        ppl = [c.perplexity for c, *_ in runs]
        bound = [c.perplexity_upper_bound for c, *_ in runs]
        two_sided = sum(c.interval.two_sided for c, *_ in runs)
        rows.append(
            f"| {label} | {np.mean(ppl):.3f} ({min(ppl):.3f}-{max(ppl):.3f}) | {np.mean(bound):.3f} "
            f"({min(bound):.3f}-{max(bound):.3f}) | {two_sided} of {WINDOW_SEEDS} "
            f"| {np.mean([r for _, r, _, _ in runs]) / tokens:,.1f} | {np.mean([s for *_, s in runs]):.0f} |"
        )
    return [
        (
            f"The bundled masked LM (it reads {model.max_length} positions) on {len(texts)} of its joined held-out texts "
            f"of {WINDOW_LENGTH} tokens, read in windows; SMC at K = {WINDOW_K} (no precision target), seeds 0 to "
            f"{WINDOW_SEEDS - 1} (`python bench/masked_value.py --windows`). Machine: {machine()}."
        ),
        "",
        (
            "| setting | perplexity per token, mean (range) | certified bound, mean (range) | two-sided | network rows "
            "per token | seconds per seed |"
        ),
        "|---|---|---|---|---|---|",
        *rows,
    ]


def lengths_list(text: str) -> list[int]:
    """``--conditionals``' comma-separated lengths (argparse's one line on anything else)."""
    return [int(length) for length in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="error, spread and cost against length")
    parser.add_argument("--coverage", type=int, metavar="T", help="the statement's coverage at T tokens")
    parser.add_argument("--proposals", action="store_true", help="heads and proposals at 32 and 48 (oracle)")
    parser.add_argument(
        "--windows", action="store_true", help="texts read in windows: the defaults against IS"
    )
    parser.add_argument(
        "--oracle", action="store_true", help="--coverage on the oracle (else the network, T ≤ 16)"
    )
    parser.add_argument("--seeds", type=int, default=100, help="seeds of --coverage")
    parser.add_argument("--first-seed", type=int, default=0, help="--coverage's first seed (runs in chunks)")
    parser.add_argument("--peek", action="store_true", help="--coverage with peek=true (the head's proposal)")
    parser.add_argument("--num-samples", type=int, metavar="K", help="--coverage with stage 1's K (else 100)")
    parser.add_argument(
        "--texts", type=int, default=TEXTS, metavar="N", help="--coverage --oracle on N texts"
    )
    parser.add_argument(
        "--target-se",
        type=float,
        metavar="S",
        help="--coverage --oracle with target_se=S (else estimator=auto's 0.002)",
    )
    parser.add_argument(
        "--max-samples",
        type=int,
        metavar="M",
        help="--coverage --oracle with the precision target's cap per text",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes of --coverage --oracle")
    parser.add_argument("--pool", type=int, metavar="T", help="join the --coverage chunks at T tokens")
    parser.add_argument("--conditionals", type=lengths_list, metavar="L,L",
                        help="loglikelihood's coverage at L tokens per choice")  # fmt: skip
    parser.add_argument("--conditionals-network", type=int, metavar="L",
                        help="a question of L tokens per choice on the bundled network, with and without its head")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.table:
        text = "\n".join(value_table()) + "\n"
        (OUTPUT / "value_head.md").write_text(text, encoding="utf-8")
        print(text)
    if args.proposals:
        text = "\n".join(proposals_table()) + "\n"
        (OUTPUT / "value_proposals.md").write_text(text, encoding="utf-8")
        print(text)
    if args.windows:
        text = "\n".join(windows_table()) + "\n"
        (OUTPUT / "value_windows.md").write_text(text, encoding="utf-8")
        print(text)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.conditionals:
        results = conditionals_runs(args.conditionals, seeds, args.workers, args.peek)
        stem = OUTPUT / f"value_conditionals{'_peek' if args.peek else ''}"
        stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        given = ",".join(f"{k}={v}" for k, v in coverage_args(args.peek).items())
        lines = conditionals_table(
            results,
            f"python bench/masked_value.py --conditionals {','.join(map(str, args.conditionals))}{' --peek' if args.peek else ''}",
            f"the statement of model_args {given} under the oracle's value head (`oracle_with_head`)",
        )
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines))
    if args.conditionals_network:
        results = network_conditionals_runs(args.conditionals_network, seeds, args.workers)
        stem = OUTPUT / "value_conditionals_network"
        stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        command = (
            f"python bench/masked_value.py --conditionals-network {args.conditionals_network} --seeds {args.seeds} "
            f"--workers {args.workers}"
        )
        lines = network_conditionals_table(results, command)
        stem.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines))
    if args.pool:
        print(f"wrote {pooled_chunks(args.pool, args.oracle, args.peek, args.texts)}")
    if args.coverage and args.oracle:
        out = oracle_coverage_runs(
            args.coverage, seeds, args.workers, args.peek, args.num_samples, args.texts, args.target_se,
            args.max_samples,
        )  # fmt: skip
        path = coverage_name(
            args.coverage,
            True,
            args.peek,
            seeds,
            args.num_samples,
            args.texts,
            args.target_se,
            args.max_samples,
        )
        path.write_text(json.dumps(out, indent=1) + "\n")
        print({k: v for k, v in out.items() if k != "runs"})
    elif args.coverage:
        out = coverage_runs(args.coverage, seeds, args.peek, args.num_samples)
        path = coverage_name(args.coverage, False, args.peek, seeds, args.num_samples)
        path.write_text(json.dumps(out, indent=1) + "\n")
        print({k: v for k, v in out.items() if k != "runs"})


if __name__ == "__main__":
    main()
