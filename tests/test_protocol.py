"""lm_latent_eval/protocol.py: the examples in its docstrings run as written (doctest)."""

from __future__ import annotations

import doctest

import lm_latent_eval.protocol


def test_protocol_docstring_examples_run():
    result = doctest.testmod(lm_latent_eval.protocol, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 20 and result.failed == 0
