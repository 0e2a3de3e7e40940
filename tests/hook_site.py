"""A site dir holding what the wheel puts at site-packages root: the .pth and the start-up hook module."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def hook_site_dir(parent: Path) -> Path:
    """``parent/site`` with the .pth and ``_lm_latent_eval_hook.py`` (as pyproject maps them into the wheel)."""
    site_dir = parent / "site"
    site_dir.mkdir()
    shutil.copy(REPO / "lm_latent_eval_hook.pth", site_dir)
    shutil.copy(REPO / "lm_latent_eval" / "harness" / "hook.py", site_dir / "_lm_latent_eval_hook.py")
    return site_dir
