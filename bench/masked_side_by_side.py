"""The bundled masked-diffusion LM on its held-out sentences: the anchors' ELBO figures beside the perplexity itself.

Per method, the perplexity per token and bits per byte of the 43 distinct held-out sentences of ``masked_ppl_tiny``
(every one within the exact dynamic program's reach), the statement each method allows (an interval or a bound), the
network rows and forward calls it ran and its seconds, all on the real network, in one process:

- ELBO with 1 and 128 mask draws (``estimator=elbo``, LLaDA's count masks; 128 with MDLM's ratio masks too): a
  lower bound on log p in expectation, shown with its own 95% interval (an interval on the ELBO, not on log p);
- one left-to-right order (Dream's ``ar_ftb``): log p(x | σ_LR), the likelihood of a sampler that always reveals left
  to right, and log p(x, σ_LR), a certain lower bound on this model's log p(x);
- the ELBO as LLaDA's evaluation code computes it (``elbo_masks=llada``: the mask row kept, 32 evenly spread mask
  counts per draw rounded half to even) and as MDLM's does (``elbo_masks=mdlm``): neither is a bound in general;
- DUEL's deterministic unmasking policies (greedy confidence, probability margin, left to right, and their block
  variants at B = 4): each one's exact likelihood, that of its sampler along its one order, not of the order mixture;
- IS and SMC at K = 100 and 1,000 over uniform orders (``peek=false``, a fixed K; SMC resampling at ESS < K/2 under
  the checkpoint's value head), the package's defaults (``auto`` with the model's ``default_settings``: SMC resampling
  under the value head and peeking through it, with the precision target), and the exact dynamic program (the truth).

The coverage of the default statement over 50 seeds is ``bench/masked_coverage.py``'s (``coverage.md`` here).

    python bench/masked_side_by_side.py        # writes bench/masked_side_by_side/table.md
    python bench/masked_side_by_side.py --variance   # writes bench/masked_side_by_side/variance.md

``--variance``: why the defaults are what they are. Per proposal (uniform orders, or peeking: myopic at τ or through the
checkpoint's value head) and resampling rule (SMC at ESS < K/2 under the mean field's or the value head's look-ahead,
or never: importance sampling over K orders in 4 runs), at a fixed
K = 128 over 8 seeds, the relative variance per particle K · Var(p̂ / p) against the exact p of each sentence,
averaged over the sentences of each length: what the precision target pays particles for.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from lm_latent_eval.documents import read_texts
from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.elbo import corpus_elbo
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.corpus import TEST_FILE

OUTPUT = Path(__file__).resolve().parent / "masked_side_by_side"
# SMC's fixed-K rows resample (the package's resample_threshold) under the checkpoint's value head
SMC_TWIST = {"is": "", "smc": ", resampling at ESS < K/2 under the value head"}
Z95 = 1.959963984540054
# B of DUEL's block policies here (the held-out sentences are shorter than LLaDA's 32)
BLOCK = 4


class Cost:
    """Network rows (``model.network_rows``), forward calls (a hook on the network) and seconds of one method."""

    def __init__(self, model) -> None:
        self.model, self.calls = model, 0
        model.predictor.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))

    def run(self, fn):
        # each method starts with no row kept (the model's row cache): its rows are its own
        self.model.row_cache.clear()
        rows, calls, start = self.model.network_rows, self.calls, time.perf_counter()
        out = fn()
        return out, self.model.network_rows - rows, self.calls - calls, time.perf_counter() - start


def per_token(log_likelihood: float, tokens: int, nbytes: int) -> tuple[float, float]:
    """(perplexity per token, bits per byte) of a corpus log-likelihood."""
    return math.exp(-log_likelihood / tokens), -log_likelihood / math.log(2) / nbytes


def ppl_range(lower_ll: float, upper_ll: float, tokens: int) -> str:
    """'[a, b]' perplexities of a log-likelihood range."""
    return f"[{math.exp(-upper_ll / tokens):.3f}, {math.exp(-lower_ll / tokens):.3f}]"


def statement(corpus) -> str:
    """The package's printed statement: the two-sided interval, or the certified bound."""
    lower, upper = corpus.perplexity_interval
    if corpus.interval.two_sided:
        return f"{corpus.perplexity:.3f} in [{lower:.3f}, {upper:.3f}] (95%), certified ≤ {corpus.perplexity_upper_bound:.3f}"
    return f"≤ {corpus.perplexity_upper_bound:.3f} certified (one-sided: no honest interval)"


def sampled_row(model, texts, cost, name: str, settings: EstimatorSettings, nbytes: int) -> list:
    """A row of IS, SMC or the defaults: the corpus statement of ``estimate_corpus`` as the perplexity task prints it."""
    estimates, rows, calls, seconds = cost.run(
        lambda: estimate_corpus(resolve(settings, model), texts, progress=False)
    )
    corpus = corpus_estimate([estimates[t] for t in texts])
    ll = sum(estimates[t].log_likelihood for t in texts)
    figure = corpus.perplexity if corpus.interval.two_sided else math.exp(-ll / corpus.num_tokens)
    bpb = math.log(figure) * corpus.num_tokens / math.log(2) / nbytes
    return [name, f"{figure:.3f}", f"{bpb:.4f}", statement(corpus), rows, calls, seconds]


def elbo_row(
    model,
    texts,
    cost,
    name: str,
    settings: EstimatorSettings,
    nbytes: int,
    claim: str = "≥ true PPL in expectation",
) -> list:
    """A row of estimator=elbo: Σ ELBÔ with its own 95% interval (over the ELBO, not log p); ``claim``: what the
    figure says about the true perplexity."""
    estimates, rows, calls, seconds = cost.run(
        lambda: estimate_corpus(resolve(settings, model), texts, progress=False)
    )
    tokens = sum(e.num_tokens for e in estimates.values())
    total, se = corpus_elbo([estimates[t] for t in texts])
    ppl, bpb = per_token(total, tokens, nbytes)
    said = f"{claim}; the ELBO's own 95% interval {ppl_range(total - Z95 * se, total + Z95 * se, tokens)}"
    if not math.isfinite(se):
        said = f"{claim}; one draw per sentence: no standard error"
    if settings.elbo_masks == "left_to_right":
        dream = sum(estimates[t].order_log_likelihood for t in texts)
        said = f"≥ true PPL with certainty (log p(x, σ_LR)); Dream's figure log p(x \\| σ_LR): {per_token(dream, tokens, nbytes)[0]:.3f}"
    return [name, f"{ppl:.3f}", f"{bpb:.4f}", said, rows, calls, seconds]


def exact_row(model, texts, cost, name: str, nbytes: int, note: str) -> list:
    estimates, rows, calls, seconds = cost.run(
        lambda: estimate_corpus(resolve(EstimatorSettings("exact"), model), texts, progress=False)
    )
    tokens = sum(e.num_tokens for e in estimates.values())
    ppl, bpb = per_token(sum(e.log_likelihood for e in estimates.values()), tokens, nbytes)
    return [name, f"{ppl:.3f}", f"{bpb:.4f}", note, rows, calls, seconds]


def machine() -> str:
    cpu = subprocess.run(["lscpu"], check=False, capture_output=True, text=True).stdout
    model = next(
        (line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?"
    )
    load = os.getloadavg()[0]
    return f"{model}, {os.cpu_count()} cores (nproc), torch {torch.__version__} (1 thread), Python {platform.python_version()}, load average {load:.1f}"


def rows_of(model, samplers, texts, nbytes: int) -> list[list]:
    """Every method's row, in the table's order (``samplers``: (label, model) of DUEL's deterministic policies)."""
    cost = Cost(model)
    out = [
        elbo_row(model, texts, cost, "ELBO, 1 mask draw (count)", EstimatorSettings("elbo", 1), nbytes),
        elbo_row(
            model, texts, cost, "ELBO, 128 mask draws (count, LLaDA)", EstimatorSettings("elbo", 128), nbytes
        ),
        elbo_row(
            model,
            texts,
            cost,
            "ELBO, 128 mask draws (ratio, MDLM)",
            EstimatorSettings("elbo", 128, elbo_masks="ratio"),
            nbytes,
        ),
        elbo_row(
            model,
            texts,
            cost,
            "one left-to-right order (Dream)",
            EstimatorSettings("elbo", elbo_masks="left_to_right"),
            nbytes,
        ),
        elbo_row(
            model,
            texts,
            cost,
            "ELBO, 128 draws as LLaDA's evaluation code (elbo_masks=llada)",
            EstimatorSettings("elbo", 128, elbo_masks="llada"),
            nbytes,
            "not a bound (mask row kept; counts rounded half to even, unevenly weighted)",
        ),
        elbo_row(
            model,
            texts,
            cost,
            "ELBO, 128 draws as MDLM's evaluation code (elbo_masks=mdlm)",
            EstimatorSettings("elbo", 128, elbo_masks="mdlm"),
            nbytes,
            "not a bound in general (t ≥ 0.001, rescaled)",
        ),
    ]
    for label, sampler in samplers:
        out.append(
            exact_row(
                sampler,
                texts,
                Cost(sampler),
                f"DUEL {label} (policy={sampler.policy})",
                nbytes,
                "exact likelihood of that sampler (its one order), not of the order mixture",
            )
        )
    for estimator in ("is", "smc"):
        for k in (100, 1000):
            settings = EstimatorSettings(estimator, k, peek=False, target_se=0)
            out.append(
                sampled_row(
                    model,
                    texts,
                    cost,
                    f"{estimator.upper()}, K = {k}, uniform orders{SMC_TWIST[estimator]}",
                    settings,
                    nbytes,
                )
            )
    # as the backend resolves them: the model's default_settings (its value head's), then auto (SMC, precision target)
    defaults, _ = with_model_defaults(EstimatorSettings(), model)
    label = "package defaults (auto: SMC at ESS < K/2 under the value head, peeking through it, target)"
    out.append(sampled_row(model, texts, cost, label, defaults, nbytes))
    out.append(
        exact_row(model, texts, cost, "exact (dynamic program over revealed sets)", nbytes, "the truth")
    )
    return out


VARIANCE_K, VARIANCE_SEEDS = 128, 8
# (label, whether the checkpoint's value head is kept, the settings given): without the head SMC's look-ahead is the
# mean field and peeking is myopic, q(i | S) ∝ p_θ(x_i | x_S)^(1/τ)
PROPOSALS = (
    ("mean field, uniform orders, SMC resampling at ESS < K/2 (the defaults before the value head and the row cache)",
     False, {"peek": False, "resample_threshold": 0.5}),
    ("uniform orders, never resampling (the defaults of a model without a value head)",
     False, {"peek": False, "resample_threshold": 0.0}),
    ("myopic peeking, τ = 1, never resampling", False, {"peek": True, "resample_threshold": 0.0}),
    ("myopic peeking, τ = 2, never resampling", False, {"peek": True, "temperature": 2.0, "resample_threshold": 0.0}),
    ("myopic peeking, τ = 4, never resampling", False, {"peek": True, "temperature": 4.0, "resample_threshold": 0.0}),
    ("value head, uniform orders, SMC resampling at ESS < K/2", True, {"peek": False, "resample_threshold": 0.5}),
    ("value head, peeking through it, SMC resampling at ESS < K/2 (the checkpoint's defaults)",
     True, {"peek": True, "resample_threshold": 0.5}),
)  # fmt: skip


def variance_table(model, texts) -> list[str]:
    """``--variance``'s table (module docstring): one row per proposal, one column per sentence length."""
    truth = {t: model.log_marginal(model.tokenize(t)) for t in texts}
    lengths = sorted({model.tokenize(t).numel() for t in texts})
    rows, head = [], model.value_head
    for label, with_head, given in PROPOSALS:
        model.value_head = head if with_head else None
        by_length = {n: [] for n in lengths}
        total = 0.0
        for text in texts:
            ratios = [
                math.exp(
                    resolve(EstimatorSettings("smc", VARIANCE_K, target_se=0, seed=s, **given), model)
                    .estimate(text)
                    .log_likelihood
                    - truth[text]
                )
                for s in range(VARIANCE_SEEDS)
            ]
            by_length[model.tokenize(text).numel()].append(VARIANCE_K * np.var(ratios, ddof=1))
            total += np.var(ratios, ddof=1)
        cells = " | ".join(f"{np.mean(by_length[n]):.2f}" for n in lengths)
        rows.append(f"| {label} | {cells} | {total:.3f} |")
    model.value_head = head
    counts = {n: sum(model.tokenize(t).numel() == n for t in texts) for n in lengths}
    return [
        (
            f"Relative variance per particle K · Var(p̂ / p) of the bundled masked LM's {len(texts)} held-out sentences "
            f"at K = {VARIANCE_K} ({VARIANCE_SEEDS} seeds each; p exact), mean over the sentences of each length T "
            "(their count in brackets); last column Σ_n Var(p̂_n / p_n) at K = 128, against the precision target's "
            f"(0.002 · 330)² = {(0.002 * 330) ** 2:.4f}. Machine: {machine()}."
        ),
        "",
        "| proposal | " + " | ".join(f"T = {n} ({counts[n]})" for n in lengths) + " | Σ Var at K = 128 |",
        "|---|" + "---|" * (len(lengths) + 1),
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variance", action="store_true", help="write variance.md instead of table.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("masked")
    if args.variance:
        texts = list(dict.fromkeys(read_texts(TEST_FILE)))
        lines = variance_table(model, texts)
        OUTPUT.mkdir(parents=True, exist_ok=True)
        (OUTPUT / "variance.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines))
        return
    samplers = [
        (label, load_model("masked", policy=policy, policy_block=BLOCK)[0])
        for label, policy in (
            ("greedy confidence", "greedy_confidence"),
            ("probability margin", "margin"),
            ("left to right", "left_to_right"),
            (f"block greedy confidence, B = {BLOCK}", "block_greedy_confidence"),
            (f"block probability margin, B = {BLOCK}", "block_margin"),
            (f"block left to right, B = {BLOCK}", "block_left_to_right"),
        )
    ]
    texts = list(dict.fromkeys(read_texts(TEST_FILE)))
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    tokens = sum(model.tokenize(t).numel() for t in texts)
    table = rows_of(model, samplers, texts, nbytes)
    lines = [
        (
            f"Bundled masked-diffusion LM (`latent_masked`), the {len(texts)} distinct held-out sentences of "
            f"`masked_ppl_tiny` ({tokens} tokens, {nbytes} bytes; seed 1234). Machine: {machine()}."
        ),
        "",
        "| method | perplexity per token | bits per byte | statement | network rows | forward calls | seconds |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:,} | {r[5]:,} | {r[6]:.1f} |" for r in table),
    ]
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
