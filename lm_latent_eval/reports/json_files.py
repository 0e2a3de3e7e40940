"""The JSON files the reports write (cards, comparisons, sweeps, peer tables, tokenization gaps): strict JSON, with no
bare ``NaN`` or ``Infinity`` (which Python writes by default and strict parsers such as JavaScript's refuse)."""

from __future__ import annotations

import json
import math
from pathlib import Path


def strict_json(value):
    """``value`` with every non-finite float replaced: NaN (a figure that is undefined, e.g. the Monte Carlo stderr of
    a run with no two-sided interval, or Pareto k̂ of tied weights) becomes null, ±inf the strings "inf" / "-inf";
    numpy scalars and arrays become Python numbers and lists.

    Examples
    --------
    >>> strict_json({"a": [float("nan"), float("-inf"), 1.5]})
    {'a': [None, '-inf', 1.5]}
    """
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def write_json(path: str | Path, value) -> Path:
    """``value`` written to ``path`` as strict, indented JSON (``strict_json``), its folder created; returns the path.

    Examples
    --------
    >>> import tempfile
    >>> path = write_json(Path(tempfile.mkdtemp()) / "out" / "a.json", {"k_hat": float("nan"), "ess": 3.5})
    >>> print(path.read_text())
    {
     "k_hat": null,
     "ess": 3.5
    }
    <BLANKLINE>
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(strict_json(value), indent=1, ensure_ascii=False, default=float, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path
