"""A committed table's row against the same row printed again today: the words equal, the numbers to a tolerance for
the last digits that CPUs and library builds move."""

from __future__ import annotations

import math
import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def same_row(committed: str, fresh: str, rel_tol: float = 0.0, last_digit: bool = False) -> bool:
    """Equal words, and each number of ``fresh`` equal to ``committed``'s to ``rel_tol`` relative, or, with
    ``last_digit``, to one unit of the committed figure's last printed digit (a value on a rounding boundary)."""
    if NUMBER.sub("#", committed) != NUMBER.sub("#", fresh):
        return False
    for x, y in zip(NUMBER.findall(committed), NUMBER.findall(fresh)):
        unit = 10.0 ** -len(x.partition(".")[2]) if last_digit else 0.0
        a, b = float(x.replace(",", "")), float(y.replace(",", ""))
        if not (math.isclose(a, b, rel_tol=rel_tol, abs_tol=0) or abs(a - b) <= 1.5 * unit):
            return False
    return True
