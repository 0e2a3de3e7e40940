"""Fixtures shared by the masked-LM tests that load checkpoint folders through transformers."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def offline():
    """HF_HUB_OFFLINE=1 for a module's loads: a checkpoint folder is read from disk, never looked up on the Hub."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield mp
