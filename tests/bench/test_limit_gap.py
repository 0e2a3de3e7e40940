"""bench/limit_gap.py --shift-against: the shift of log w and of log p̂ per token between two scorings of fixed draws."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from limit_gap import shift_rows


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")]


def test_shift_rows_measure_the_moved_log_weights():
    theirs = {
        "bundled/0": np.array([-3.0, -4.0, -np.inf]),
        "bundled/0/tokens": np.array(4),
        "bundled/1": np.array([-1.0, -2.0]),
        "bundled/1/tokens": np.array(2),
        "full/0": np.array([-5.0]),
        "full/0/tokens": np.array(10),
    }
    # the sampler's own log q: the same draws, log w moved by 2e-13 in one of them
    theirs |= {k + "/drawn": v for k, v in theirs.items() if not k.endswith("tokens")}
    ours = dict(
        theirs, **{"bundled/1": np.array([-1.0, -2.0 + 1e-3]), "full/0/drawn": np.array([-5.0 + 2e-13])}
    )
    bundled, full = (_cells(r) for r in shift_rows("kglm", ours, theirs))
    assert bundled[:4] == ["kglm", "bundled", "2 (6 tokens)", "1"]
    assert float(bundled[4]) == 1e-3 and float(bundled[5]) == 0.0
    moved = np.logaddexp(-1.0, -2.0 + 1e-3) - np.logaddexp(-1.0, -2.0)
    assert float(bundled[6]) == float(f"{moved / 2:.1e}")
    assert float(bundled[7]) == float(f"{moved / 6:+.1e}")
    assert full[3:8] == ["1", "0.0e+00", "2.0e-13", "0.0e+00", "+0.0e+00"]
