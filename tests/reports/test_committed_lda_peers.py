"""The committed peer table (bench/lda_peers, quoted by docs/models.md and bench/RESULTS.md) is what its command prints
today.

tests/docs/test_docs_figures.py checks that the docs quote these files; this checks the files against the command (the
SMC interval once moved from [544.5, 550.2] to [543.6, 551.2] while the committed table kept the old one)."""

from __future__ import annotations

from pathlib import Path

import committed_tables
import pytest

from lm_latent_eval.cli import main

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "bench" / "lda_peers" / "table.md"
# the command docs/models.md gives, writing into a temporary folder instead of bench/lda_peers
ARGV = ["lda-peers", "--tomotopy-train", str(REPO / "lm_latent_eval/data/pydoc_topics/train.jsonl")]


def table_rows(text: str) -> dict[str, str]:
    """The table's rows by their first cell (the tool)."""
    return {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}


def same_row(committed: str, fresh: str) -> bool:
    """Equal words, and numbers equal to 1e-6 relative: the variational bounds of scikit-learn and gensim (about
    6.8e10) move in their last printed digits between CPUs and library builds, every figure we quote does not."""
    return committed_tables.same_row(committed, fresh, rel_tol=1e-6)


def test_same_row_tells_a_moved_interval_from_last_digits():
    row = "| SMC, K = 100 | unbiased p̂ per document, 4 runs, resampling | 547.4 | 95%: [{}, 551.2] |"
    assert same_row(row.format("543.6"), row.format("543.6"))
    assert not same_row(row.format("544.5"), row.format("543.6"))
    bound = "| gensim | exp(−bound) | {} | x |"
    assert same_row(bound.format("67,675,807,230.6"), bound.format("67,675,810,660.7"))


# not slow (about 6 s: trains a tomotopy model and runs every peer): it runs by default, so the committed table cannot
# drift from what the code prints
def test_committed_lda_peers_table_is_what_the_command_prints(tmp_path):
    pytest.importorskip("tomotopy")
    pytest.importorskip("gensim")
    assert main([*ARGV, "--output", str(tmp_path)]) == 0
    committed, fresh = table_rows(COMMITTED.read_text()), table_rows((tmp_path / "table.md").read_text())
    assert committed.keys() == fresh.keys()
    moved = [
        f"{committed[tool]}\n  now: {fresh[tool]}"
        for tool in committed
        if not same_row(committed[tool], fresh[tool])
    ]
    assert not moved, (
        "rerun `lm-latent-eval lda-peers ... --output bench/lda_peers` and update the docs:\n"
        + "\n".join(moved)
    )
