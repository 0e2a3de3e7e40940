"""Where bundled resources live: inside the wheel (lm_latent_eval/<name>) or beside the package in a checkout."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"


def resource_dir(name: str) -> Path:
    """``metrics`` or ``tasks``: the installed copy if present, else the checkout's top-level folder."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled {name!r} folder not found next to {PACKAGE_DIR}")
