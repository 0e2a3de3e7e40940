"""Settings a run is given and how the backend treats them (issue 34): lm-eval's default ``--batch_size 1`` does not
choose the particle block, a model_arg the chosen estimator ignores is named, and generation settings are honoured
or refused."""

from __future__ import annotations

import logging

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_latent_eval.harness.backends import LatentHMMEval


@pytest.mark.parametrize("cli", ["1", 1])
def test_lm_evals_default_batch_size_does_not_choose_the_particle_block(cli, caplog):
    """``--batch_size 1`` (lm-eval's default) scored one particle per log_joint call: up to 10x slower."""
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        lm = LatentHMMEval.create_from_arg_obj({"estimator": "is"}, {"batch_size": cli, "device": "cpu"})
    assert lm.settings.batch_size is None  # auto: one sample block
    assert not [r for r in caplog.records if "particle" in r.getMessage()]


def test_a_batch_size_asked_for_still_sets_the_particle_block():
    """model_args ``batch_size=1`` (a memory-limited user) and any other ``--batch_size`` are kept."""
    one = LatentHMMEval.create_from_arg_obj(
        {"estimator": "is", "batch_size": 1}, {"batch_size": "1", "device": "cpu"}
    )
    four = LatentHMMEval.create_from_arg_obj({"estimator": "is"}, {"batch_size": "4", "device": "cpu"})
    assert (one.settings.batch_size, four.settings.batch_size) == (1, 4)
