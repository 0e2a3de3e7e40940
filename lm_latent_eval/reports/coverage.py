"""The measured coverage of our 95% statements, read from the committed output of ``bench/interval_coverage.py``
(``lm_latent_eval/data/interval_coverage/coverage.json``, shipped with the package), for the cards to quote."""

from __future__ import annotations

import functools
import json
import math

from ..paths import DATA_DIR

COVERAGE_FILE = DATA_DIR / "interval_coverage" / "coverage.json"


@functools.cache
def _results() -> list[dict]:
    if not COVERAGE_FILE.is_file():
        return []
    results = json.loads(COVERAGE_FILE.read_text(encoding="utf-8")).get("results", [])
    # an older layout (results not a list): not measured
    return results if isinstance(results, list) else []


def measured_coverage(estimator: str, num_documents: int) -> str:
    """A sentence with the lowest and highest measured coverage of the printed statement for ``estimator`` at the
    measured corpus size nearest ``num_documents`` (log scale), over K and peeking modes."""
    results = _results()
    rows = [
        r["rows"]
        for r in results
        if r["setting"]["estimator"] == estimator
        and r["setting"].get("smc_runs", 4) != 1
        and r["setting"].get("model", "hmm") == "hmm"  # the sentence quotes the bundled HMM's rows
    ]
    sizes = sorted({int(n) for r in rows for n in r})
    if not sizes or num_documents < 1:
        return f"coverage of {estimator} statements not measured"
    n = min(sizes, key=lambda size: abs(math.log(size) - math.log(num_documents)))
    measured = [r[str(n)] for r in rows if str(n) in r]
    cov = [m["coverage"] for m in measured]
    runs = sorted({m["runs"] for m in measured})
    runs_text = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}–{runs[-1]}"
    return (
        f"measured coverage of the printed {estimator.upper()} statement at {n} documents: "
        f"{100 * min(cov):.0f}–{100 * max(cov):.0f}% over {len(measured)} settings of K, peeking and precision "
        f"target ({runs_text} runs each on the bundled HMM, bench/interval_coverage.py)"
    )
