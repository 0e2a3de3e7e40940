"""A site dir holding what the wheel puts at site-packages root: the .pth that imports the start-up hook."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def hook_site_dir(parent: Path) -> Path:
    """``parent/site`` with a copy of ``lm_latent_eval_hook.pth``: add it with ``site.addsitedir`` in a subprocess."""
    site_dir = parent / "site"
    site_dir.mkdir()
    shutil.copy(REPO / "lm_latent_eval_hook.pth", site_dir)
    return site_dir
