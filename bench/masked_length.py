"""Masked LMs against text length: what the 128-draw ELBO overstates, and what each lever costs at 16 to 64 tokens.

Two models read 64 positions: the bundled network (texts: its held-out sentences joined and cut to T tokens), and the
oracle (``models/masked/oracle.py``: a network whose conditionals read only the class counts of the revealed set,
so its exact order-marginal is a dynamic program at any length; texts: its own samples).

``--elbo``: per model and length T, the 128-draw ELBO's perplexity (``estimator=elbo``, LLaDA's count masks) beside
the truth: the exact value where it is computable (the oracle at every T, the bundled network at T = 16) and, on the
bundled network at every T, importance sampling's certified bound (95%, any K): the true perplexity is below it, so
ELBO / bound is a lower bound on what the ELBO overstates.

``--levers``: the relative variance per particle K · Var(p̂ / p) of importance sampling over uniform orders and of
SMC with the look-ahead twist (resampling at ESS < K/2, and at every step), on the oracle's texts at each T (p exact,
``--seeds`` runs of K particles per text): where resampling starts to pay, and how each grows with T.

    python bench/masked_length.py --elbo      # writes bench/masked_length/elbo.md
    python bench/masked_length.py --levers    # writes bench/masked_length/levers.md
    python bench/masked_length.py --twists    # writes bench/masked_length/twists.md
    python bench/masked_length.py --twist-fits   # writes bench/masked_length/twist_fits.md
    python bench/masked_length.py --twists-network   # writes bench/masked_length/twists_network.md
    python bench/masked_length.py --proposals   # writes bench/masked_length/proposals.md
    python bench/masked_length.py --control-variate   # writes bench/masked_length/control_variate.md
    python bench/masked_length.py --blocks    # writes bench/masked_length/blocks.md
    python bench/masked_length.py --coverage 16 --seeds 100   # writes bench/masked_length/coverage_T16.json

``--twist-fits``: at 32 tokens, the ramped pseudo-likelihood twist as K grows, and twists fitted at each step to
sums of the network's row at S (to the exact log V(S), and to what a run without the truth sees), beside the exact.
``--twists-network``: the same ramped twists on the bundled network at 32 tokens, beside importance sampling.
``--proposals``: orders drawn from the network's confidence in each true token (the peeking proposal, tempered), under
each resampling rule, on the oracle. ``--control-variate``: how much of importance sampling's variance the ELBO, as
a control variate, could remove (``control_variate_table``). ``--blocks``: several positions per step, each block's
factor summed over its internal orders from the rows of its subsets (``blocked_log_weights``), against the rows.

``--coverage T``: the default statement (what a user who gives no estimator setting gets) on the oracle's texts of T
tokens over ``--seeds`` seeds, held to the exact value: two-sided or not, covering or not, the certified bound holding
or not, network rows per token.

``--conditionals``: ``loglikelihood``'s requests at length, as lm-eval's multiple-choice tasks send them: after a
context of 16 tokens, 4 continuations (choices) of L = 1 to 30 tokens drawn by the oracle, estimated together on the
context's view (``conditional_model``, as the backend's ``view_conditionals`` does) by the default statement, over
100 seeds (``--long-seeds`` beyond 16 tokens), held to the exact Σ log p(continuation | context).

    python bench/masked_length.py --conditionals --long-seeds 8   # writes bench/masked_length/conditionals.md, .json
    python bench/masked_length.py --conditionals --render         # the table again from conditionals.json
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from masked_coverage import coverage, holds
from masked_side_by_side import Cost, machine

from lm_latent_eval.documents import read_texts
from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.document import importance_log_weights
from lm_latent_eval.estimators.elbo import corpus_elbo
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.resampling import systematic_resample
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.conditionals import step_scores
from lm_latent_eval.models.masked.corpus import TEST_FILE
from lm_latent_eval.models.masked.oracle import (
    importance_relative_variance,
    make_oracle_model,
    oracle_log_marginal,
    sample_oracle_text,
    uniform_order_log_moment,
)
from lm_latent_eval.models.masked.value import pseudo_log_likelihoods

OUTPUT = Path(__file__).resolve().parent / "masked_length"
LENGTHS = (16, 32, 48, 64)
TEXTS_PER_LENGTH = 4
ELBO_DRAWS = 128
BOUND_SAMPLES = 1000


def joined_texts(model, length: int, count: int = TEXTS_PER_LENGTH) -> list[str]:
    """``count`` texts of ``length`` tokens: the held-out sentences joined in order and cut into consecutive pieces
    (wrapping around), each written back as the words of its ids."""
    ids = torch.cat([model.tokenize(t) for t in read_texts(TEST_FILE)])
    ids = ids.repeat(math.ceil(length * count / ids.numel()))
    return [model.detokenize(ids[i * length : (i + 1) * length]) for i in range(count)]


def timed(model, fn):
    """(fn(), network rows it ran, seconds), from an empty row cache (``Cost.run``)."""
    out, rows, _, seconds = Cost(model).run(fn)
    return out, rows, seconds


def elbo_perplexity(model, texts: list[str], seed: int = 0) -> tuple[float, int, float]:
    """(the 128-draw ELBO's perplexity per token, rows, seconds) over ``texts``."""
    settings = EstimatorSettings("elbo", ELBO_DRAWS, seed=seed)
    estimates, rows, seconds = timed(
        model, lambda: estimate_corpus(resolve(settings, model), texts, progress=False)
    )
    total, _ = corpus_elbo([estimates[t] for t in texts])
    tokens = sum(e.num_tokens for e in estimates.values())
    return math.exp(-total / tokens), rows, seconds


def certified_bound(model, texts: list[str], seed: int = 0) -> tuple[float, float, int, float]:
    """(IS's point perplexity, its certified 95% upper bound, rows, seconds): K = 1,000 uniform orders per text."""
    settings = EstimatorSettings("is", BOUND_SAMPLES, peek=False, target_se=0, seed=seed)
    estimates, rows, seconds = timed(
        model, lambda: estimate_corpus(resolve(settings, model), texts, progress=False)
    )
    corpus = corpus_estimate([estimates[t] for t in texts])
    point = math.exp(-sum(estimates[t].log_likelihood for t in texts) / corpus.num_tokens)
    return point, corpus.perplexity_upper_bound, rows, seconds


def exact_perplexity(log_marginal, model, texts: list[str]) -> tuple[float, float]:
    """(the exact perplexity per token, seconds) by ``log_marginal(model, x)``."""
    start = time.perf_counter()
    ids = [model.tokenize(t) for t in texts]
    total = sum(log_marginal(model, x) for x in ids)
    return math.exp(-total / sum(x.numel() for x in ids)), time.perf_counter() - start


def oracle_texts(model, length: int, count: int = TEXTS_PER_LENGTH) -> list[str]:
    """``count`` texts of ``length`` tokens drawn by the oracle's own sampler (seeds 1000 · length + i)."""
    return [model.detokenize(sample_oracle_text(model, length, seed=1000 * length + i)) for i in range(count)]


def elbo_table() -> list[str]:
    """``--elbo``'s table: per model and T, the ELBO's perplexity beside the truth or the certified bound."""
    rows = []
    network, _ = load_model("masked")
    for length in LENGTHS:
        texts = joined_texts(network, length)
        elbo, elbo_rows, _ = elbo_perplexity(network, texts)
        point, bound, is_rows, is_seconds = certified_bound(network, texts)
        truth, overstated = "", f"≥ {100 * (elbo / bound - 1):.0f}% (against the bound)"
        if length <= network.max_exact_tokens:
            exact, _ = exact_perplexity(lambda model, x: model.log_marginal(x), network, texts)
            truth, overstated = f"{exact:.3f}", f"{100 * (elbo / exact - 1):.0f}%"
        rows.append(
            f"| bundled network | {length} | {elbo:.3f} ({elbo_rows:,} rows) | {truth or '—'} | {point:.3f} ≤ "
            f"{bound:.3f} ({is_rows:,} rows, {is_seconds:.0f} s) | {overstated} |"
        )
    oracle = make_oracle_model()
    for length in LENGTHS:
        texts = oracle_texts(oracle, length)
        elbo, elbo_rows, _ = elbo_perplexity(oracle, texts)
        exact, _ = exact_perplexity(oracle_log_marginal, oracle, texts)
        rows.append(
            f"| oracle (strength 2) | {length} | {elbo:.3f} ({elbo_rows:,} rows) | {exact:.3f} | — | "
            f"{100 * (elbo / exact - 1):.0f}% |"
        )
    return [
        (
            f"The 128-draw ELBO's perplexity per token against the truth, {TEXTS_PER_LENGTH} texts per length "
            "(`python bench/masked_length.py --elbo`). Bundled network: its held-out sentences joined and cut to T "
            "tokens; exact by the dynamic program over revealed sets at T = 16, beyond it importance sampling's "
            f"certified 95% bound (K = {BOUND_SAMPLES:,} uniform orders per text; its point estimate, biased high, "
            "beside it). Oracle: its own samples, exact at every T. Machine: "
            f"{machine()}."
        ),
        "",
        "| model | T | ELBO, 128 draws | exact | IS point ≤ certified bound | the ELBO overstates the perplexity by |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


LEVER_K, LEVER_SEEDS = 256, 10
RESAMPLING = (("never (importance sampling)", 0.0), ("at ESS < K/2", 0.5), ("every step", 1.0))


def smc_errors(oracle, texts: list[str], truth: dict, seeds: int, **settings) -> list[float]:
    """log p̂ − log p of the package's SMC at K = ``LEVER_K`` under ``settings`` (``EstimatorSettings`` fields), for
    each text (``truth``: text -> exact log p) and seed."""
    return [
        resolve(EstimatorSettings("smc", LEVER_K, target_se=0, seed=seed, **settings), oracle)
        .estimate(text)
        .log_likelihood
        - truth[text]
        for text in texts
        for seed in range(seeds)
    ]


def mean_sd(errors) -> str:
    """ "mean ± sd" of errors in nats, the tables' cell."""
    return f"{np.mean(errors):+.2f} ± {np.std(errors, ddof=1):.2f}"


def levers_table() -> list[str]:
    """``--levers``' table: on the oracle's texts, IS's exact relative variance and each resampling rule's error."""
    oracle = make_oracle_model()
    rows = []
    for length in LENGTHS:
        texts = oracle_texts(oracle, length)
        truth = {t: oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts}
        variance = sorted(importance_relative_variance(oracle, oracle.tokenize(t)) for t in texts)
        cells = [f"{np.median(variance):.3g} ({variance[0]:.2g}-{variance[-1]:.2g})"]
        for _, threshold in RESAMPLING:
            errors = smc_errors(oracle, texts, truth, LEVER_SEEDS, peek=False, resample_threshold=threshold)
            cells.append(mean_sd(errors))
        rows.append(f"| {length} | " + " | ".join(cells) + " |")
    head = " | ".join(f"log p̂ − log p, SMC resampling {label}" for label, _ in RESAMPLING)
    return [
        (
            f"The oracle (`make_oracle_model()`, strength 2) on {TEXTS_PER_LENGTH} of its own texts per length T "
            f"(`python bench/masked_length.py --levers`): importance sampling's relative variance per particle "
            "K · Var(p̂ / p) over uniform orders, exact (`importance_relative_variance`: median, range), and the error "
            f"log p̂ − log p (mean ± sd over the texts × {LEVER_SEEDS} seeds) of SMC over uniform orders with the "
            f"look-ahead twist at K = {LEVER_K} under each resampling rule. A mean far below 0 is an estimate that missed "
            f"the orders carrying p(x). Machine: {machine()}."
        ),
        "",
        f"| T | IS: K · Var(p̂ / p), exact | {head} |",
        "|---|---|" + "---|" * len(RESAMPLING),
        *rows,
    ]


CV_ORDERS = 20_000


def spread(values, spec: str) -> str:
    """ "median (smallest-largest)" of per-text values, a cell."""
    values = sorted(values)
    return f"{np.median(values):{spec}} ({values[0]:{spec}}-{values[-1]:{spec}})"


def exact_cases() -> list[tuple]:
    """(name, model, T, texts, log p(x) exactly) of ``--control-variate`` and ``--blocks``: the bundled network at 16
    tokens (its 2^T program) and the oracle at 16 and 32 (its count program)."""
    network, _ = load_model("masked")
    oracle = make_oracle_model()
    cases = [("bundled network", network, 16, joined_texts(network, 16), network.log_marginal)]
    return cases + [
        (
            "oracle (strength 2)",
            oracle,
            length,
            oracle_texts(oracle, length),
            lambda x: oracle_log_marginal(oracle, x),
        )
        for length in (16, 32)
    ]


def control_variate_table() -> list[str]:
    """``--control-variate``'s table: the most of importance sampling's variance the ELBO, as a control variate, can
    remove. Over uniform orders w = p(x | σ) and E[log w] is the ELBO, so w − β (log w − ELBO) is unbiased for p(x) at
    any β; with the ELBO known exactly and the best β = Cov(w, log w) / Var(log w) its variance is Var(w) (1 − ρ²),
    ρ = corr(w, log w)."""
    rows = []
    for name, model, length, texts, log_marginal in exact_cases():
        c, sd, rho2 = [], [], []
        for n, text in enumerate(texts):
            x = model.tokenize(text)
            log_w = importance_log_weights(model, x, num_samples=CV_ORDERS, peek=False, seed=n)
            ratio = np.exp(log_w - float(log_marginal(x)))
            c.append(ratio.var())
            sd.append(log_w.std())
            rho2.append(np.corrcoef(ratio, log_w)[0, 1] ** 2)
        rows.append(
            f"| {name} | {length} | {spread(c, '.3g')} | {spread(sd, '.2f')} | {spread(rho2, '.3f')} |"
        )
    return [
        (
            f"The ELBO as a control variate for importance sampling over uniform orders (`python "
            f"bench/masked_length.py --control-variate`): {CV_ORDERS:,} orders per text, {TEXTS_PER_LENGTH} texts "
            "per model and length T (median, range over the texts), w = p(x | σ) = p̂ of one order, p exact. With the "
            "ELBO E[log w] known and the best β, w − β (log w − ELBO) keeps a share 1 − ρ² of Var(w), ρ = corr(w, "
            "log w): ρ² is the most such a control variate removes (a sample estimate; w's tail makes it noisy). "
            f"Machine: {machine()}."
        ),
        "",
        "| model | T | K · Var(p̂ / p), sampled | sd of log w | ρ² = corr(w, log w)² |",
        "|---|---|---|---|---|",
        *rows,
    ]


BLOCK_SIZES = (1, 2, 3, 4)
BLOCK_ORDERS = {"bundled network": 10_000, "oracle (strength 2)": 20_000}


def token_log_probs(model, x: torch.Tensor, revealed: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """log p_θ(x_j | x_S) [N, T] float64: each position's true token under the network's row at each state S (the
    rows of ``revealed`` [N, T]), ``chunk`` rows at a time."""
    out = []
    for start in range(0, revealed.shape[0], chunk):
        rows = revealed[start : start + chunk]
        log_p = row_log_probs(model, x, rows)
        out.append(log_p.gather(-1, x.expand(rows.shape).unsqueeze(-1)).squeeze(-1))
    return torch.cat(out)


def block_rows(length: int, size: int) -> int:
    """Network rows of one particle of ``blocked_log_weights``: 2^b − 1 per block of b steps (the last may be
    shorter)."""
    return sum(2 ** min(size, length - start) - 1 for start in range(0, length, size))


def blocked_log_weights(model, x: torch.Tensor, orders: torch.Tensor, size: int) -> torch.Tensor:
    """log g(σ) [N] for orders [N, T]: the steps of σ cut into blocks of ``size`` and each block's factor averaged
    over its b! internal orders, exactly, from the 2^b − 1 rows S ∪ A, A ⊊ B (S: the positions revealed before the
    block B):

        g(σ) = Π_B (1 / b!) F_B(B),    F_B(∅) = 1,    F_B(A) = Σ_{i ∈ A} F_B(A − i) p_θ(x_i | x_{S ∪ (A − i)}).

    The state after a block does not depend on its internal order, and permuting within the blocks maps uniform
    orders to uniform orders, so E_σ[g] = E_σ[p(x | σ)] = p(x) and Var g ≤ Var p(x | σ). ``size`` 1 gives
    importance sampling's weight p(x | σ), T rows; ``size`` b, T (2^b − 1) / b rows."""
    N, T = orders.shape
    total = torch.zeros(N, dtype=torch.float64)
    for start in range(0, T, size):
        block = orders[:, start : start + size]
        b = block.shape[1]
        member = torch.tensor([[a >> k & 1 for k in range(b)] for a in range(2**b - 1)], dtype=torch.bool)
        revealed = torch.zeros(N, 2**b - 1, T, dtype=torch.bool)
        revealed.scatter_(2, orders[:, None, :start].expand(N, 2**b - 1, start), True)
        # A's positions too
        revealed |= torch.zeros_like(revealed).scatter_(
            2, block[:, None, :].expand(N, 2**b - 1, b), member.expand(N, 2**b - 1, b)
        )
        log_p = token_log_probs(model, x, revealed.view(-1, T)).view(N, 2**b - 1, T)
        # log p_θ(x_{B_k} | x_{S ∪ A}) [N, 2^b − 1, b]
        log_p = log_p.gather(2, block[:, None, :].expand(N, 2**b - 1, b))
        log_f = [torch.zeros(N, dtype=torch.float64)]
        for a in range(1, 2**b):
            terms = [log_f[a ^ 1 << k] + log_p[:, a ^ 1 << k, k] for k in range(b) if a >> k & 1]
            log_f.append(torch.logsumexp(torch.stack(terms), 0))
        total += log_f[-1] - math.lgamma(b + 1)
    return total


def blocks_table() -> list[str]:
    """``--blocks``' table: several positions per step under importance sampling over uniform orders, each block of b
    steps summed over its internal orders (``blocked_log_weights``): the variance per particle against the rows a
    particle costs."""
    rows = []
    for name, model, length, texts, log_marginal in exact_cases():
        count = BLOCK_ORDERS[name]
        per_size = {b: ([], [], []) for b in BLOCK_SIZES}
        for n, text in enumerate(texts):
            x = model.tokenize(text)
            truth = float(log_marginal(x))
            generator = torch.Generator().manual_seed(n)
            orders = torch.rand(count, x.numel(), generator=generator).argsort(-1)
            for b in BLOCK_SIZES:
                log_g = blocked_log_weights(model, x, orders, b).numpy() - truth
                c, sd, err = per_size[b]
                c.append(np.exp(log_g).var())
                sd.append(log_g.std())
                err.append(float(torch.logsumexp(torch.from_numpy(log_g), 0)) - math.log(count))
        base = np.array(per_size[1][0])
        for b in BLOCK_SIZES:
            c, sd, err = per_size[b]
            rows_per_token = block_rows(length, b) / length
            cost = np.array(c) * rows_per_token / base
            rows.append(
                f"| {name} | {length} | {b} | {rows_per_token:.2f} | {spread(c, '.3g')} | {spread(sd, '.2f')} | "
                f"{spread(cost, '.2f')} | {spread(err, '+.2f')} |"
            )
    return [
        (
            "Several positions per step (`python bench/masked_length.py --blocks`): importance sampling over uniform "
            "orders with each block of b consecutive steps averaged over its b! internal orders, exactly, from the "
            "2^b − 1 network rows of the block's subsets (`blocked_log_weights`; b = 1 is importance sampling itself), "
            f"the same orders for every b: {BLOCK_ORDERS['bundled network']:,} per text on the bundled network, "
            f"{BLOCK_ORDERS['oracle (strength 2)']:,} on the oracle, {TEXTS_PER_LENGTH} texts per model and length "
            "T (median, range over the texts), p exact. c = K · Var(p̂ / p), sampled (the weights' tail makes it "
            "noisy at 32 tokens); cost against b = 1 = c times the rows per particle, over b = 1's: below 1 a block "
            "pays, at the same rows. Machine: "
            f"{machine()}."
        ),
        "",
        (
            "| model | T | b | network rows per token | c = K · Var(p̂ / p), sampled | sd of log w | c × rows, "
            "against b = 1 | log p̂ − log p, all the orders |"
        ),
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def exact_twist(oracle):
    """log V(S) = log p(x_M | x_S revealed) of the oracle, every masked position M still to come in uniform order: its
    count program from S's class counts (a conditional view's context), memoized by (S's counts, M's tokens)."""
    classes, memo = oracle.predictor.word_class, {}

    def log_v(x: torch.Tensor, revealed: torch.Tensor) -> torch.Tensor:
        out = []
        for row in revealed:
            key = (
                tuple(torch.bincount(classes[x[row]], minlength=3).tolist()),
                tuple(sorted(x[~row].tolist())),
            )
            if key not in memo:
                view = copy.copy(oracle)
                view.context_ids = x[row]
                memo[key] = uniform_order_log_moment(view, x[~row], 1) if bool((~row).any()) else 0.0
            out.append(memo[key])
        return torch.tensor(out, dtype=torch.float64)

    return log_v


def twisted_smc(model, x: torch.Tensor, num_particles: int, log_twist, seed: int) -> float:
    """log p̂ of SMC over uniform orders whose weights after step t target p(x_S, σ_≤t) ψ(S) for the twist
    ``log_twist(x, revealed [K, T], scores, t)`` (ψ of the full set 1), resampling systematically at ESS < K/2: the
    package's stepwise part with its twist swapped (``models/masked/stepwise.py`` fixes ψ to the mean field)."""
    generator = torch.Generator().manual_seed(seed)
    K, T = num_particles, x.numel()
    revealed = torch.zeros(K, T, dtype=torch.bool)
    log_w, before, banked = torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.float64), 0.0
    for t in range(T):
        scores = step_scores(model, x, revealed)
        position = torch.multinomial((~revealed).double(), 1, generator=generator).squeeze(1)
        log_w += scores.log_token.gather(1, position[:, None]).squeeze(1)  # π / q = 1 for uniform orders
        revealed = revealed.clone()
        revealed[torch.arange(K), position] = True
        now = log_twist(x, revealed, step_scores(model, x, revealed), t) if t < T - 1 else torch.zeros(K)
        log_w, before = log_w + now - before, now
        ess = torch.exp(2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0))
        if t < T - 1 and ess < K / 2:
            banked += float(torch.logsumexp(log_w, 0)) - math.log(K)
            ancestors = systematic_resample(log_w, generator)
            revealed, before, log_w = (
                revealed[ancestors],
                before[ancestors],
                torch.zeros(K, dtype=torch.float64),
            )
    return banked + float(torch.logsumexp(log_w, 0)) - math.log(K)


def mean_field(x, revealed, scores, t):
    """The package's look-ahead ψ(S) = Π_{j ∉ S} p_θ(x_j | S)."""
    return scores.log_token.masked_fill(revealed, 0.0).sum(-1)


TWISTS = {
    "none (ψ = 1)": lambda x, revealed, scores, t: torch.zeros(revealed.shape[0], dtype=torch.float64),
    "mean field (the package's)": mean_field,
    "mean field ramped, ψ^((t+1)/T)": lambda x, revealed, scores, t: (
        (t + 1) / x.numel() * mean_field(x, revealed, scores, t)
    ),
}


def pseudo_likelihood_twist(model):
    """ψ(S) = (Π_{j ∉ S} p_θ(x_j | x_{−j}))^((t+1)/T), ramped: each masked token's conditional given every other
    token (T network rows per text, once, where the mean field reads them given S only), which the orders' later
    steps approach as their context grows."""
    memo = {}

    def log_psi(x, revealed, scores, t):
        key = tuple(x.tolist())
        if key not in memo:
            memo[key] = pseudo_log_likelihoods(model, x)
        return (t + 1) / x.numel() * memo[key].expand(revealed.shape).masked_fill(revealed, 0.0).sum(-1)

    return log_psi


TWIST_LENGTHS, TWIST_SEEDS = (16, 32, 48), 5
# the exact twist runs a count program per particle and step: at most this length (hours beyond)
EXACT_TWIST_LENGTH = 32


def twists_table() -> list[str]:
    """``--twists``' table: on the oracle's texts, the error of SMC over uniform orders at K = LEVER_K under each twist,
    the exact V(S) among them: how much of length's cost a twist can remove."""
    oracle = make_oracle_model()
    exact = exact_twist(oracle)
    twists = {
        **TWISTS,
        "pseudo-likelihood ramped, (Π_j p(x_j given x_−j))^((t+1)/T)": pseudo_likelihood_twist(oracle),
        "exact V(S) (the oracle only)": lambda x, revealed, scores, t: exact(x, revealed),
    }
    rows = []
    for length in TWIST_LENGTHS:
        texts = [oracle.tokenize(t) for t in oracle_texts(oracle, length)]
        truth = [oracle_log_marginal(oracle, x) for x in texts]
        cells = []
        for name, twist in twists.items():
            if name.startswith("exact") and length > EXACT_TWIST_LENGTH:
                cells.append("—")
                continue
            errors = [twisted_smc(oracle, x, LEVER_K, twist, seed) - p for x, p in zip(texts, truth)
                      for seed in range(TWIST_SEEDS)]  # fmt: skip
            cells.append(mean_sd(errors))
        rows.append(f"| {length} | " + " | ".join(cells) + " |")
    return [
        (
            f"SMC over uniform orders at K = {LEVER_K}, resampling at ESS < K/2, on {TEXTS_PER_LENGTH} of the oracle's "
            f"texts per length (`python bench/masked_length.py --twists`): the error log p̂ − log p (mean ± sd over the "
            f"texts × {TWIST_SEEDS} seeds) under each twist ψ(S) of the weights after each step. With the exact "
            f"V(S) = p(x_M | x_S) (up to {EXACT_TWIST_LENGTH} tokens: a count program per particle and step), the "
            f"twist SMC needs, the error stays small: what a twist must approximate. Machine: {machine()}."
        ),
        "",
        "| T | " + " | ".join(twists) + " |",
        "|---|" + "---|" * len(twists),
        *rows,
    ]


# --twist-fits: the length, the particle counts of the pseudo-likelihood twist, and the pilot's sets per step
FIT_LENGTH, FIT_KS, FIT_PILOT = 32, (256, 1024, 4096), 256


# (label, peek, τ, resample_threshold): the default's sampler, then the network's confidences in the true tokens
PROPOSALS = (
    ("uniform orders, never resampling (the default)", False, 1.0, 0.0),
    ("peeking, τ = 1, never resampling", True, 1.0, 0.0),
    ("peeking, τ = 1, at ESS < K/2", True, 1.0, 0.5),
    ("peeking, τ = 2, at ESS < K/2", True, 2.0, 0.5),
    ("peeking, τ = 1, every step", True, 1.0, 1.0),
)


def proposals_table() -> list[str]:
    """``--proposals``' table: on the oracle's texts, the error of SMC (the package's, its look-ahead twist in the
    weights) whose orders come from the network's confidences in the true tokens, q(i | S) ∝ p_θ(x_i | x_S)^{1/τ}
    (``peek=True``: at τ = 1 the locally optimal proposal), under each resampling rule, beside the default."""
    oracle = make_oracle_model()
    rows = []
    for length in TWIST_LENGTHS:
        texts = oracle_texts(oracle, length)
        truth = {t: oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts}
        cells = []
        for _, peek, tau, threshold in PROPOSALS:
            errors = smc_errors(
                oracle, texts, truth, TWIST_SEEDS, peek=peek, temperature=tau, resample_threshold=threshold
            )
            cells.append(mean_sd(errors))
        rows.append(f"| {length} | " + " | ".join(cells) + " |")
    return [
        (
            f"The oracle's texts ({TEXTS_PER_LENGTH} per length, `python bench/masked_length.py --proposals`): "
            f"log p̂ − log p (mean ± sd over the texts × {TWIST_SEEDS} seeds) of the package's SMC at K = {LEVER_K} "
            "with orders drawn from the network's confidence in each masked position's true token, q(i | S) ∝ "
            "p_θ(x_i | x_S)^(1/τ) (`peek=true`, `temperature=τ`; the weights correct for it), under each resampling "
            f"rule, beside the default's sampler. Machine: {machine()}."
        ),
        "",
        "| T | " + " | ".join(label for label, *_ in PROPOSALS) + " |",
        "|---|" + "---|" * len(PROPOSALS),
        *rows,
    ]


def row_log_probs(model, x: torch.Tensor, revealed: torch.Tensor) -> torch.Tensor:
    """log p_θ(v | S) [N, T, V], float64: the network's row at each state S (the rows of ``revealed`` [N, T])."""
    with torch.no_grad():
        logits = model.predict(torch.where(revealed, x, torch.full_like(x, model.mask_id))).double()
    return torch.log_softmax(logits, -1)


def row_features(
    log_p: torch.Tensor, x: torch.Tensor, revealed: torch.Tensor, pseudo: torch.Tensor
) -> torch.Tensor:
    """φ(S) [N, 5]: sums over the masked positions j ∉ S of the network's row at S (``row_log_probs``, no other row):
    log p_θ(x_j | S), its entropy, its largest log-probability, log p_θ(x_j | x_−j) (``pseudo`` [T]) and the squared
    difference of the first and the fourth."""
    token = log_p.gather(-1, x.expand(revealed.shape).unsqueeze(-1)).squeeze(-1)
    entropy = -(log_p.exp() * log_p.masked_fill(torch.isinf(log_p), 0.0)).sum(-1)
    terms = torch.stack(
        [token, entropy, log_p.max(-1).values, pseudo.expand(revealed.shape), (token - pseudo) ** 2]
    )
    return terms.masked_fill(revealed, 0.0).sum(-1).T


def fitted_twist(model, x: torch.Tensor, targets: str, seed: int, exact=None):
    """A twist log ψ_t(S) = β_t · φ(S) (``row_features``), β_t least squares at each step t on ``FIT_PILOT`` sets
    of t positions drawn by uniform orders: ``targets`` "exact" regresses the oracle's log V(S) (``exact``: an
    ``exact_twist``), "suffix" the pilot order's log p of the tokens it reveals after t (whose mean given S is the
    ELBO of V(S), what a twist fitted without the truth can see)."""
    T, K = x.numel(), FIT_PILOT
    pseudo = pseudo_log_likelihoods(model, x)
    generator = torch.Generator().manual_seed(10_000 + seed)
    revealed, features, steps = torch.zeros(K, T, dtype=torch.bool), [], []
    for _ in range(T):
        log_p = row_log_probs(model, x, revealed)
        features.append((row_features(log_p, x, revealed, pseudo), revealed))
        position = torch.multinomial((~revealed).double(), 1, generator=generator).squeeze(1)
        steps.append(log_p[torch.arange(K), position, x[position]])
        revealed = revealed.clone()
        revealed[torch.arange(K), position] = True
    # [K, T]: log p of the tokens revealed from step t on
    suffix = torch.stack(steps, 1).flip(1).cumsum(1).flip(1)
    coefficients = {}
    for t in range(1, T):
        phi, sets = features[t]
        y = exact(x, sets) if targets == "exact" else suffix[:, t]
        scale = phi.std(0).clamp(min=1e-12)
        design = torch.cat([torch.ones(K, 1, dtype=torch.float64), (phi - phi.mean(0)) / scale], 1)
        # the rank from the singular values (gelsd): features equal but for rounding (one position masked: the mean
        # field and the pseudo-likelihood) count once; gelsy's pivoted QR misjudged that rank in some runs
        beta = torch.linalg.lstsq(design, y[:, None], rcond=1e-10, driver="gelsd").solution[1:, 0]
        coefficients[t] = beta / scale  # the intercept and the centring are constants at step t: no effect

    def log_psi(x, revealed, scores, t):
        return row_features(row_log_probs(model, x, revealed), x, revealed, pseudo) @ coefficients[t + 1]

    return log_psi


def twist_fits_table() -> list[str]:
    """``--twist-fits``' table: on the oracle's texts of ``FIT_LENGTH`` tokens, the ramped pseudo-likelihood twist as
    K grows, and twists fitted to features of the network's row at S, against the exact V(S)."""
    oracle = make_oracle_model()
    exact = exact_twist(oracle)
    texts = [oracle.tokenize(t) for t in oracle_texts(oracle, FIT_LENGTH)]
    truth = [oracle_log_marginal(oracle, x) for x in texts]
    pseudo = pseudo_likelihood_twist(oracle)
    cells = [("pseudo-likelihood ramped (`--twists`)", K, lambda x, seed: pseudo) for K in FIT_KS]
    cells += [
        ("row features, fitted to the pilot's suffix log-likelihoods", LEVER_K,
         lambda x, seed: fitted_twist(oracle, x, "suffix", seed)),
        ("row features, fitted to the exact log V(S) (the oracle only)", LEVER_K,
         lambda x, seed: fitted_twist(oracle, x, "exact", seed, exact)),
        ("exact V(S) (the oracle only)", LEVER_K, lambda x, seed: lambda x, revealed, scores, t: exact(x, revealed)),
    ]  # fmt: skip
    rows = []
    for name, K, twist in cells:
        start = time.perf_counter()
        errors = [twisted_smc(oracle, x, K, twist(x, seed), seed) - p for x, p in zip(texts, truth)
                  for seed in range(TWIST_SEEDS)]  # fmt: skip
        rows.append(
            f"| {name} | {K:,} | {mean_sd(errors)} | {min(errors):+.2f} | "
            f"{max(errors):+.2f} | {time.perf_counter() - start:.0f} |"
        )
    return [
        (
            f"SMC over uniform orders, resampling at ESS < K/2, on {TEXTS_PER_LENGTH} of the oracle's texts of "
            f"{FIT_LENGTH} tokens (`python bench/masked_length.py --twist-fits`): the error log p̂ − log p (mean ± sd, "
            f"smallest, largest over the texts × {TWIST_SEEDS} seeds) under each twist. Fitted twists: log ψ_t(S) = "
            f"β_t · φ(S), φ five sums over the masked positions of the network's row at S (log p(x_j | S), its "
            f"entropy, its largest log-probability, log p(x_j | x_−j), the squared difference of the first and the "
            f"fourth), β_t least squares on {FIT_PILOT} pilot sets per step (their rows not counted in K). Seconds: "
            f"the cell's {TEXTS_PER_LENGTH * TWIST_SEEDS} runs, pilots and exact programs included. Machine: "
            f"{machine()}."
        ),
        "",
        "| twist | K | log p̂ − log p | smallest | largest | seconds |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


# --twists-network: the particle counts on the bundled network at FIT_LENGTH tokens
NETWORK_KS = (256, 1024)


def network_twists_table() -> list[str]:
    """``--twists-network``' table: on the bundled network's joined texts of ``FIT_LENGTH`` tokens, where no exact
    value exists, importance sampling over uniform orders beside SMC resampling under the ramped twists, each over
    ``TWIST_SEEDS`` seeds: the corpus perplexity and each text's spread of log p̂ over the seeds."""
    network, _ = load_model("masked")
    texts = joined_texts(network, FIT_LENGTH)
    ids = [network.tokenize(t) for t in texts]
    tokens = sum(x.numel() for x in ids)
    twists = {
        "SMC, mean field ramped": TWISTS["mean field ramped, ψ^((t+1)/T)"],
        "SMC, pseudo-likelihood ramped": pseudo_likelihood_twist(network),
    }

    def importance(K, seed):
        estimator = resolve(EstimatorSettings("is", K, peek=False, target_se=0, seed=seed), network)
        return [estimator.estimate(t).log_likelihood for t in texts]

    rows = []
    for name, K in itertools.product(["importance sampling (never resampling)", *twists], NETWORK_KS):
        start = time.perf_counter()
        if name in twists:
            runs = [
                [twisted_smc(network, x, K, twists[name], seed) for x in ids] for seed in range(TWIST_SEEDS)
            ]
        else:
            runs = [importance(K, seed) for seed in range(TWIST_SEEDS)]
        runs = np.array(runs)  # [seeds, texts]
        perplexity = np.exp(-runs.sum(1) / tokens)
        rows.append(
            f"| {name} | {K:,} | {perplexity.mean():.1f} ({perplexity.min():.1f}-{perplexity.max():.1f}) | "
            f"{np.median(runs.std(0, ddof=1)):.2f} | {time.perf_counter() - start:.0f} |"
        )
    point, bound, _, _ = certified_bound(network, texts)
    return [
        (
            f"The bundled network on {TEXTS_PER_LENGTH} texts of {FIT_LENGTH} tokens (its held-out sentences joined; "
            f"`python bench/masked_length.py --twists-network`), {TWIST_SEEDS} seeds per row: the corpus perplexity per "
            f"token (mean over the seeds, range) and the spread of a text's log p̂ over the seeds (sd, median of the "
            f"texts). SMC resamples at ESS < K/2 under the twist named. Importance sampling over {BOUND_SAMPLES:,} "
            f"uniform orders (seed 0) gives {point:.1f}, its certified 95% bound {bound:.1f}: the true perplexity is "
            f"below the bound, and every unbiased estimate of p(x) is low more often than high. Machine: {machine()}."
        ),
        "",
        "| estimator | K | perplexity per token | sd of a text's log p̂ | seconds |",
        "|---|---|---|---|---|",
        *rows,
    ]


def coverage_runs(length: int, seeds: range) -> dict:
    """``--coverage``: the default statement (``auto`` with the model's ``default_settings``, as the backend resolves
    them) on the oracle's texts of ``length`` tokens, per seed (``masked_coverage.coverage``): two-sided or not,
    whether it holds the exact Σ log p(x_n), whether the certified bound holds, particles per text, network rows,
    seconds; and the mean network rows per token."""
    oracle = make_oracle_model()
    texts = oracle_texts(oracle, length)
    truth = sum(oracle_log_marginal(oracle, oracle.tokenize(t)) for t in texts)
    out = coverage(oracle, texts, {}, seeds, truth, lambda _: None, None)
    rows = np.mean([r["network_rows"] for r in out["runs"]])
    return {
        "length": length,
        "texts": len(texts),
        "rows_per_token": float(rows) / (length * len(texts)),
        **out,
    }


CONTEXT_LENGTH, CHOICES, CONTINUATION_LENGTHS = 16, 4, (1, 2, 4, 8, 16, 24, 30)
# continuations up to this length get 100 seeds; longer ones --long-seeds
SHORT_CONTINUATION = 16


def question(oracle, length: int) -> tuple:
    """A multiple-choice question for the oracle: a context of CONTEXT_LENGTH tokens (its own text) and CHOICES
    distinct continuations of ``length`` tokens drawn given it (seeds 100 · length + i); (the context's view, its
    documents context ⊕ continuation, the exact Σ log p(continuation | context))."""
    context = oracle_texts(oracle, CONTEXT_LENGTH, 1)[0]
    view, texts = oracle.conditional_model(context), {}
    for seed in itertools.count(100 * length):
        texts[f"{context} {view.detokenize(sample_oracle_text(view, length, seed=seed))}"] = None
        if len(texts) == CHOICES:
            break
    return view, list(texts), sum(oracle_log_marginal(view, view.tokenize(t)) for t in texts)


def conditionals_runs(long_seeds: int) -> list[dict]:
    """``--conditionals``: per continuation length, the default statement of one question's choices over the seeds
    (``masked_coverage.coverage`` on the context's view)."""
    oracle, out = make_oracle_model(), []
    for length in CONTINUATION_LENGTHS:
        view, texts, truth = question(oracle, length)
        seeds = range(100 if length <= SHORT_CONTINUATION else long_seeds)
        out.append(
            conditionals_record(length, truth, coverage(view, texts, {}, seeds, truth, lambda _: None, None))
        )
    return out


def seed_means(runs: list[dict], tokens: int) -> dict:
    """Means over the seeds of ``masked_coverage.coverage``'s ``runs``: a seed's network rows per token (over
    ``tokens``), its seconds and its certified perplexity bound."""
    rows, seconds, bound = (float(np.mean([r[k] for r in runs])) for k in
                            ("network_rows", "seconds", "perplexity_upper_bound"))  # fmt: skip
    return {"rows_per_token": rows / tokens, "seconds_per_seed": seconds, "perplexity_bound_mean": bound}


def conditionals_record(length: int, truth: float, result: dict) -> dict:
    """One question's record: ``masked_coverage.coverage``'s ``result`` with its length, the exact value and the
    means over its seeds (``seed_means``, per continuation token)."""
    return {"length": length, "truth": truth, **seed_means(result["runs"], length * CHOICES), **result}


def recount(results: list[dict]) -> list[dict]:
    """``--conditionals --render``: a run's records with each seed's coverage judged again by
    ``masked_coverage.holds`` against the exact value (its questions drawn again: the same seeds)."""
    oracle = make_oracle_model()
    for r in results:
        r["truth"] = question(oracle, r["length"])[2]
        for run in r["runs"]:
            run["covered"] = run["two_sided"] and holds(run["lower"], run["upper"], r["truth"])
        r["covered"] = sum(run["covered"] for run in r["runs"])
    return results


DEFAULT_STATEMENT = (
    "the default statement (what `lm_eval --model latent_masked` gives with no estimator setting)"
)


def conditionals_table(
    results: list[dict],
    command: str = "python bench/masked_length.py --conditionals",
    statement: str = DEFAULT_STATEMENT,
) -> list[str]:
    """``conditionals.md`` from ``conditionals_runs``' records (``command`` and ``statement``: what ran them)."""
    return [
        (
            f"`loglikelihood` at length on the oracle (`make_oracle_model()`, strength 2; `{command}`): one question "
            f"per continuation length L, a context of {CONTEXT_LENGTH} tokens and {CHOICES} choices of L tokens drawn "
            f"by the oracle given it, estimated together on the context's view by {statement}, held to the exact "
            f"Σ log p(choice | context) of the count program. Machine: {machine()}."
        ),
        "",
        *conditionals_rows("L (tokens per choice)", [(r["length"], r) for r in results]),
    ]


def conditionals_rows(label: str, rows: list[tuple]) -> list[str]:
    """The table of a question's statements: a column ``label``, then per (label's value, record) its seeds, choices
    computed exactly and samples per choice (means over the seeds), how often two-sided, covering the truth and the
    bound held, network rows per continuation token and seconds per seed."""
    out = [
        (
            f"| {label} | seeds | choices computed exactly (mean) | samples per choice (mean) | two-sided | two-sided "
            "covering the truth | certified bound held | network rows per continuation token | seconds per seed |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for value, r in rows:
        runs = r["runs"]
        exact = sum(run["computed_exactly"] for run in runs) / len(runs)
        samples = (
            f"{np.mean([run['samples_mean'] for run in runs]):,.0f}" if exact < CHOICES else "none (exact)"
        )
        out.append(
            f"| {value} | {r['seeds']} | {exact:.1f} of {CHOICES} | {samples} | {r['two_sided']} "
            f"| {r['covered']} of {r['two_sided']} | {r['bound_held']} of {r['seeds']} | {r['rows_per_token']:,.1f} "
            f"| {r['seconds_per_seed']:.1f} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elbo", action="store_true", help="the ELBO against the truth at each length")
    parser.add_argument("--levers", action="store_true", help="IS and SMC's resampling rules on the oracle")
    parser.add_argument(
        "--twists", action="store_true", help="SMC's twist against the exact one on the oracle"
    )
    parser.add_argument(
        "--twist-fits", action="store_true", help="twists fitted to the network's row, and K, at 32 tokens"
    )
    parser.add_argument(
        "--twists-network", action="store_true", help="IS and the ramped twists on the bundled network at 32"
    )
    parser.add_argument(
        "--proposals", action="store_true", help="orders from the network's confidences, on the oracle"
    )
    parser.add_argument(
        "--coverage", type=int, metavar="T", help="the default statement's coverage at T tokens"
    )
    parser.add_argument(
        "--control-variate",
        action="store_true",
        help="how much variance the ELBO as a control variate removes",
    )
    parser.add_argument(
        "--blocks", action="store_true", help="several positions per step, summed over their orders"
    )
    parser.add_argument("--seeds", type=int, default=100, help="seeds of --coverage")
    parser.add_argument(
        "--conditionals", action="store_true", help="loglikelihood of 1 to 30 continuation tokens, coverage"
    )
    parser.add_argument(
        "--long-seeds", type=int, default=10, help="seeds of --conditionals beyond 16 continuation tokens"
    )
    parser.add_argument(
        "--render", action="store_true", help="--conditionals: the table from conditionals.json, judged again"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    OUTPUT.mkdir(exist_ok=True)
    tables = (
        (args.elbo, "elbo.md", elbo_table),
        (args.levers, "levers.md", levers_table),
        (args.twists, "twists.md", twists_table),
        (args.twist_fits, "twist_fits.md", twist_fits_table),
        (args.twists_network, "twists_network.md", network_twists_table),
        (args.proposals, "proposals.md", proposals_table),
        (args.control_variate, "control_variate.md", control_variate_table),
        (args.blocks, "blocks.md", blocks_table),
    )
    for wanted, name, table in tables:
        if wanted:
            text = "\n".join(table()) + "\n"
            (OUTPUT / name).write_text(text, encoding="utf-8")
            print(text)
    if args.conditionals:
        saved = OUTPUT / "conditionals.json"
        results = (
            recount(json.loads(saved.read_text())) if args.render else conditionals_runs(args.long_seeds)
        )
        saved.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        text = "\n".join(conditionals_table(results)) + "\n"
        (OUTPUT / "conditionals.md").write_text(text, encoding="utf-8")
        print(text)
    if args.coverage:
        out = coverage_runs(args.coverage, range(args.seeds))
        (OUTPUT / f"coverage_T{args.coverage}.json").write_text(
            json.dumps(out, indent=1) + "\n", encoding="utf-8"
        )
        print({k: v for k, v in out.items() if k != "runs"})


if __name__ == "__main__":
    main()
