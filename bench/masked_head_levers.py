"""What the value head's one-row proposal still offers at length (issue 52, item 1), on the oracle: its temperature, a
defensive mixture with uniform orders, its own normaliser as the twist, and a head fitted to the proposal's one-step
consistency; on the bundled network also DUEL's samplers' scores as proposals.

The package's SMC with ``peek=true`` under a value head (``masked_value.proposal_smc``'s ``"one row"``: K = 256,
resampling at ESS < K/2) on 4 of the oracle's texts of 16, 32 and 48 tokens (``masked_length.oracle_texts``), 20
seeds each, held to the exact log p(x): the error log p̂ − log p (mean ± sd over texts × seeds), the median over the
texts of the sd of a text's log p̂ over the seeds, and K times its square (c, the variance per particle, which sets
the particles a precision target asks for), beside the variants:

- the proposal tempered, q(i | S) ∝ exp(ℓ_i / τ) (model_args ``temperature=τ``);
- a defensive mixture, (1 − ε) q + ε · uniform over the masked positions (``proposal_smc``'s ``defensive``), which
  bounds each step's weight by |M| / ε times its target's increment;
- the twist ψ(S) replaced by the proposal's own normaliser Z(S) (``masked_value.one_row_values``: the Bellman
  identity's right side read from S's row; the final weights are the same, only the resampling targets change);
- the recipe's head (``masked_value.oracle_with_head``) fitted further, on texts of 32 to 48 tokens, to the one-step
  consistency of the proposal: the variance, within groups of sets of one size, of
  log Z(S ∪ {i}) − log ψ̃(S ∪ {i} | S) for i ~ q(i | S) (``consistency_loss``), which is the log increment of SMC's
  weight at a step that draws i; the sets S uniform, drawn by the proposal from the empty set, or SMC's particles.

The tempered rows again on the bundled network under its checkpoint's head, on its joined held-out sentences of 16 and
32 tokens (``masked_length.joined_texts``): the sd and c alone (its truth is out of reach at 32 tokens); there also
uniform orders under the head and DUEL's deterministic samplers' scores as proposals, q(i | S) ∝ exp(s_i(S) / τ)
with s_i the greedy-confidence or probability-margin score read from S's row (``masked_value.policy_scores``; the
weight corrects for q). The oracle has no such rows: its conditionals are the same at every masked position, so
those scores make q uniform there.

Last, on the oracle's texts of 32 tokens, c at K = 256 beside K = 1,024 for the package's proposal, the best
tempered one and the defensive mixtures: a c that grows with K is the mark of a heavy tail in the weights (the
spread at small K understates the error).

    python bench/masked_head_levers.py     # writes bench/masked_length/head_levers.md
"""

from __future__ import annotations

import copy
import time
from typing import NamedTuple

import numpy as np
import torch
from masked_length import OUTPUT, joined_texts, mean_sd, oracle_texts
from masked_side_by_side import machine
from masked_value import TEXTS, ess_below_half, one_row_values, oracle_with_head, proposal_smc

from lm_latent_eval.estimators.resampling import systematic_resample
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.conditionals import step_scores
from lm_latent_eval.models.masked.oracle import oracle_log_marginal, sample_oracle_text
from lm_latent_eval.models.masked.stepwise import proposal_logits
from lm_latent_eval.models.masked.value import log_lookahead, pseudo_log_likelihoods, sets_of_size

K, SEEDS, LENGTHS = 256, 20, (16, 32, 48)
# a row's columns per length (or K): ``cells``' error (where there is a truth), spread and c
TRUTH_COLUMNS = ("log p̂ − log p", "sd", "c")


class Variant(NamedTuple):
    """One row: its label and ``proposal_smc``'s proposal, temperature, twist and defensive share."""

    label: str
    proposal: str = "one row"
    temperature: float = 1.0
    twist: str = "head"
    defensive: float = 0.0


PACKAGE = Variant("the package's (τ = 1)")
TEMPERED = tuple(Variant(f"tempered, τ = {tau:g}", temperature=tau) for tau in (1.25, 1.5, 2.0))
DEFENSIVE = tuple(Variant(f"defensive mixture, ε = {eps:g}", defensive=eps) for eps in (0.1, 0.3))
VARIANTS = (
    PACKAGE,
    *TEMPERED,
    *DEFENSIVE,
    Variant("twist Z(S), the proposal's normaliser", twist="proposal"),
)
NETWORK_VARIANTS = (
    PACKAGE,
    *TEMPERED,
    *DEFENSIVE,
    Variant("uniform orders", "uniform"),
    Variant("DUEL greedy confidence's scores, τ = 1", "greedy_confidence"),
    Variant("DUEL greedy confidence's scores, τ = 0.5", "greedy_confidence", 0.5),
    Variant("DUEL probability margin's scores, τ = 1", "margin"),
)
# c against K at GROWTH_LENGTH tokens (the oracle): K beside the larger GROWTH_K
GROWTH_K, GROWTH_LENGTH = 1024, 32
GROWTH_VARIANTS = (PACKAGE, TEMPERED[1], *DEFENSIVE)
# how the sets S of the consistency fit are drawn
STATES = {
    "uniform": "uniform sets of each size",
    "rollout": "the proposal's draws from the empty set",
    "smc": "SMC's particles (16, resampled at ESS < 8)",
}
FIT_STEPS, FIT_SETS, FIT_RATE = 400, 16, 3e-4
NETWORK_LENGTHS = (16, 32)


def draw_sets(model, x, pseudo, size: int, count: int, states: str, generator) -> torch.Tensor:
    """``count`` sets of ``size`` positions of x [count, T], drawn as ``STATES[states]`` says."""
    T = x.numel()
    if states == "uniform":
        return sets_of_size(T, size, count, generator)
    revealed = torch.zeros(count, T, dtype=torch.bool)
    log_w, log_psi = torch.zeros(count, dtype=torch.float64), torch.zeros(count, dtype=torch.float64)
    for _ in range(size):
        scores = step_scores(model, x, revealed)
        log_q = torch.log_softmax(proposal_logits(model, scores, revealed, pseudo, True), 1)
        position = torch.multinomial(log_q.exp(), 1, generator=generator).squeeze(1)
        log_w = log_w + (scores.log_joint - log_q).gather(1, position[:, None]).squeeze(1) - log_psi
        revealed = revealed.clone()
        revealed[torch.arange(count), position] = True
        if states == "smc":
            log_psi = log_lookahead(model, step_scores(model, x, revealed).log_token, revealed, pseudo)
            log_w = log_w + log_psi
            if ess_below_half(log_w):
                ancestors = systematic_resample(log_w, generator)
                revealed, log_psi = revealed[ancestors], log_psi[ancestors]
                log_w = torch.zeros(count, dtype=torch.float64)
    return revealed


def consistency_loss(model, x, pseudo, revealed: torch.Tensor, generator) -> torch.Tensor:
    """The variance over the sets ``revealed`` [N, T] of log Z(S ∪ {i}) − log ψ̃(S ∪ {i} | S), i ~ q(i | S): the
    log increment of SMC's weight under the one-row proposal, differentiable in the head."""
    scores = step_scores(model, x, revealed)
    children = one_row_values(model.value_head, scores, revealed, pseudo)[0]
    with torch.no_grad():
        q = torch.softmax(proposal_logits(model, scores, revealed, pseudo, True), 1)
        position = torch.multinomial(q, 1, generator=generator).squeeze(1)
    rows = torch.arange(revealed.shape[0])
    child = revealed.clone()
    child[rows, position] = True
    ahead = (
        torch.zeros(rows.numel(), dtype=torch.float64)
        if bool(child.all())
        else one_row_values(model.value_head, step_scores(model, x, child), child, pseudo)[1]
    )
    residual = ahead - children[rows, position]
    return ((residual - residual.mean()) ** 2).mean()


def fit_consistency(oracle, states: str, seed: int = 0):
    """A copy of the oracle's head fitted ``FIT_STEPS`` Adam steps (8 groups of one text, one size and
    ``FIT_SETS`` sets each) to ``consistency_loss`` on 30 of its texts of 32 to 48 tokens (seeds 999,000 + k):
    (the head, the mean loss of the first and of the last 50 steps)."""
    texts = [sample_oracle_text(oracle, (32, 40, 48)[k % 3], seed=999_000 + k) for k in range(30)]
    pseudos = [pseudo_log_likelihoods(oracle, x) for x in texts]
    head = oracle.value_head
    oracle.value_head = copy.deepcopy(head)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(oracle.value_head.parameters(), lr=FIT_RATE)
    losses = []
    for _ in range(FIT_STEPS):
        loss = 0.0
        for _ in range(8):
            k = int(torch.randint(len(texts), (1,), generator=generator))
            size = int(torch.randint(texts[k].numel(), (1,), generator=generator))
            with torch.no_grad():
                revealed = draw_sets(oracle, texts[k], pseudos[k], size, FIT_SETS, states, generator)
            loss = loss + consistency_loss(oracle, texts[k], pseudos[k], revealed, generator) / 8
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    fitted, oracle.value_head = oracle.value_head.eval(), head
    return fitted, float(np.mean(losses[:50])), float(np.mean(losses[-50:]))


def row(label: str, values: list[str]) -> str:
    """One markdown table row: the label, then the values."""
    return "| " + " | ".join([label, *values]) + " |"


def header(first: str, groups: list[str], columns: tuple[str, ...]) -> list[str]:
    """A markdown table's header and rule: ``first``, then each group's columns ("group: column")."""
    return [
        row(first, [f"{g}: {c}" for g in groups for c in columns]),
        "|---|" + "---|" * (len(groups) * len(columns)),
    ]


def cells(model, texts: dict, truth: dict | None, variant: Variant = PACKAGE, k: int = K) -> list[str]:
    """One row's cells per length of ``texts``: the error (where ``truth`` is given), the median sd of a text's log p̂,
    c = k · sd²."""
    out = []
    for T, xs in texts.items():
        estimates = np.array(
            [[proposal_smc(model, x, k, seed, *variant[1:])[0] for x in xs] for seed in range(SEEDS)]
        )
        sd = np.median(estimates.std(0, ddof=1))
        error = "" if truth is None else f"{mean_sd((estimates - truth[T]).ravel())} | "
        out.append(f"{error}{sd:.2f} | {k * sd**2:.1f}")
    return out


def levers_table() -> list[str]:
    """The output's lines: the variants' table, then the consistency fits' losses."""
    start = time.perf_counter()
    oracle = oracle_with_head()
    fit_seconds = time.perf_counter() - start
    texts = {T: [oracle.tokenize(t) for t in oracle_texts(oracle, T, TEXTS)] for T in LENGTHS}
    truth = {T: np.array([oracle_log_marginal(oracle, x) for x in texts[T]]) for T in LENGTHS}
    rows, fits = [], []
    at_k = {}  # each variant's cells at K, per length
    for variant in VARIANTS:
        at_k[variant] = cells(oracle, texts, truth, variant)
        rows.append(row(variant.label, at_k[variant]))
        print(rows[-1], flush=True)
    growth, longer = [], {GROWTH_LENGTH: texts[GROWTH_LENGTH]}
    for variant in GROWTH_VARIANTS:
        at_growth_k = cells(oracle, longer, truth, variant, GROWTH_K)[0]
        growth.append(row(variant.label, [at_k[variant][LENGTHS.index(GROWTH_LENGTH)], at_growth_k]))
        print(growth[-1], flush=True)
    recipe = oracle.value_head
    for states, how in STATES.items():
        began = time.perf_counter()
        oracle.value_head, first, last = fit_consistency(oracle, states)
        fits.append(f"| {how} | {first:.3f} | {last:.3f} | {time.perf_counter() - began:.0f} |")
        rows.append(row(f"head fitted to the consistency on {how}", cells(oracle, texts, truth)))
        oracle.value_head = recipe
        print(fits[-1], rows[-1], sep="\n", flush=True)
    network, _ = load_model("masked")
    network_texts = {
        T: [network.tokenize(t) for t in joined_texts(network, T, TEXTS)] for T in NETWORK_LENGTHS
    }
    network_rows = []
    for variant in NETWORK_VARIANTS:
        network_rows.append(row(variant.label, cells(network, network_texts, None, variant)))
        print(network_rows[-1], flush=True)
    return [
        (
            f"The value head's one-row proposal on the oracle (`python bench/masked_head_levers.py`): SMC with "
            f"`peek=true` under the recipe's head (`oracle_with_head`, fitted in {fit_seconds:.0f} s), K = {K}, "
            f"resampling at ESS < K/2, {TEXTS} texts per length, {SEEDS} seeds: the error log p̂ − log p (mean ± sd), the "
            "median over the texts of the sd of a text's log p̂ over the seeds, and c = K · sd² (the variance per "
            f"particle). Machine: {machine()}."
        ),
        "",
        *header("proposal / twist / head", [f"T = {T}" for T in LENGTHS], TRUTH_COLUMNS),
        *rows,
        "",
        (
            f"c against K on the oracle's texts of {GROWTH_LENGTH} tokens, the same {SEEDS} seeds (a c that grows with K: "
            "heavy-tailed weights):"
        ),
        "",
        *header("proposal", [f"K = {k:,}" for k in (K, GROWTH_K)], TRUTH_COLUMNS),
        *growth,
        "",
        (
            f"The consistency fits ({FIT_STEPS} Adam steps at rate {FIT_RATE:g}, 8 groups of {FIT_SETS} sets each, texts of "
            "32 to 48 tokens): the loss, the variance of the log increment log Z(S ∪ {i}) − log ψ̃(S ∪ {i} | S) within a "
            "group, in nats², averaged over the first and the last 50 steps."
        ),
        "",
        "| sets S | loss, first 50 steps | loss, last 50 steps | seconds |",
        "|---|---|---|---|",
        *fits,
        "",
        (
            f"The bundled network under its checkpoint's head, {TEXTS} of its joined held-out texts per length, the same "
            "SMC and seeds (no truth at 32 tokens: the spread alone):"
        ),
        "",
        *header("proposal", [f"T = {T}" for T in NETWORK_LENGTHS], TRUTH_COLUMNS[1:]),
        *network_rows,
    ]


def main() -> None:
    torch.set_num_threads(1)
    text = "\n".join(levers_table()) + "\n"
    (OUTPUT / "head_levers.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
