"""The JSON files the reports write (cards, comparisons, sweeps, peer tables, tokenization gaps): strict JSON, with no
bare ``NaN`` or ``Infinity`` (which Python writes by default and strict parsers such as JavaScript's refuse)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path


def json_key(key: str) -> dict:
    """The metadata of a record's field whose key in a report's JSON file is not the field's name
    (``field(metadata=json_key("is"))``; ``as_json`` and ``from_json`` read it)."""
    return {"json_key": key}


def as_json(record, skip_none: bool = False) -> dict:
    """A dataclass ``record`` as a JSON object: its fields in order, each under its key (``json_key``, else its name);
    with ``skip_none``, the fields that are None left out.

    Examples
    --------
    >>> @dataclasses.dataclass
    ... class Row:
    ...     beam_size: int
    ...     log_likelihood: float = dataclasses.field(metadata=json_key("ll"))
    ...     note: str | None = None
    >>> as_json(Row(4, -2.5), skip_none=True)
    {'beam_size': 4, 'll': -2.5}
    >>> from_json(Row, {"beam_size": 4, "ll": -2.5})
    Row(beam_size=4, log_likelihood=-2.5, note=None)
    """
    return {
        f.metadata.get("json_key", f.name): getattr(record, f.name)
        for f in dataclasses.fields(record)
        if not (skip_none and getattr(record, f.name) is None)
    }


def from_json(cls: type, obj: dict):
    """The ``cls`` record that ``as_json`` wrote as ``obj`` (a field whose key is absent keeps its default)."""
    names = {f.metadata.get("json_key", f.name): f.name for f in dataclasses.fields(cls)}
    return cls(**{names[key]: value for key, value in obj.items() if key in names})


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
