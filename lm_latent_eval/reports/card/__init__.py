"""``lm-latent-eval report <lm-eval output dir>``: one estimate card (Markdown, JSON, convergence PNG) per model × task.

A card states the perplexity to quote with its honest statement at the ``--level`` asked for (95% by default;
two-sided where that is honest, else the certified one-sided bound, with the reason), the certified bound, the
paper's instance- and corpus-level estimates and what kind of figure each is (exact, strict bound, or a stochastic
upper bound in expectation), the Monte Carlo error and the sampling error over documents apart, the settings that
produced them (estimator and why it was chosen, K, τ, peeking, seed), the model's identity (class, checkpoint sha256,
dtype, device), the reliability diagnostics (IS: ESS, Pareto k̂ against its threshold; SMC: runs, ESS over tokens)
with a plain-words verdict and what to try, and the command that reproduces the run. Everything comes from lm-eval's
results and samples files (``--log_samples``); ``--beam-size`` additionally recomputes the beam bound from the
recorded checkpoint.

One module per job: ``compute`` (the card's figures from a run, a JSON-ready dict), ``reproduce`` (the command that
reproduces the run), ``render`` (Markdown and the convergence plot), ``cli`` (the subcommand, which writes the files).
"""

from __future__ import annotations

from .cli import write_cards
from .compute import build_card, certain_statement, diagnostics, recompute, sampled_figures, verdict
from .render import card_markdown, save_plot
from .reproduce import include_path, reproduce_command, reproduce_note

__all__ = [
    "build_card",
    "card_markdown",
    "certain_statement",
    "diagnostics",
    "include_path",
    "recompute",
    "reproduce_command",
    "reproduce_note",
    "sampled_figures",
    "save_plot",
    "verdict",
    "write_cards",
]
