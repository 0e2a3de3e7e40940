"""``lm-latent-eval sweep``: IS perplexity over τ × {peek, no peek} × {corpus, instance} (Logan et al. 2020, Table 1),
SMC rows for the same proposal settings (models with the stepwise part), beam bounds for several k (Table 2), and the
K-convergence plot, all from one run per proposal setting.

One module per job: ``compute`` (the rows, a ``SweepResult``), ``render`` (Markdown tables and the convergence
figure), ``cli`` (the subcommand, which writes ``sweep.json``, ``tables.md`` and ``convergence.png``).
"""

from __future__ import annotations

from .compute import (
    DEFAULT_BEAM_SIZES,
    DEFAULT_TEMPERATURES,
    SweepResult,
    exact_estimates,
    is_row,
    run_sweep,
    smc_row,
)
from .render import (
    convergence_figure,
    save_convergence_plot,
    smc_table_markdown,
    table1_markdown,
    table2_markdown,
    tables_markdown,
)

__all__ = [
    "DEFAULT_BEAM_SIZES",
    "DEFAULT_TEMPERATURES",
    "SweepResult",
    "convergence_figure",
    "exact_estimates",
    "is_row",
    "run_sweep",
    "save_convergence_plot",
    "smc_row",
    "smc_table_markdown",
    "table1_markdown",
    "table2_markdown",
    "tables_markdown",
]
