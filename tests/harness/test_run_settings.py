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


def ignored(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]


def test_a_setting_the_chosen_estimator_ignores_is_named_once(caplog):
    """The docs' estimate-card example gave ``num_samples=1000`` on the HMM, where ``auto`` runs the exact estimator:
    K had no effect, without a word."""
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval.create_from_arg_obj(
            {"num_samples": 1000, "seed": 3}, {"batch_size": "auto", "device": "cpu"}
        )
    (message,) = ignored(caplog)
    assert "num_samples=1000" in message and "seed=3" in message and "estimator=exact" in message
    assert "auto" in message  # why that estimator
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval(estimator="beam", num_samples=8, beam_size=4, device="cpu")
    (message,) = ignored(caplog)
    assert "num_samples=8" in message and "beam_size" not in message.split("no effect")[0]


def test_settings_the_estimator_uses_raise_no_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval(estimator="is", num_samples=8, seed=3, temperature=1.5, level=0.9, device="cpu")
        LatentHMMEval(
            estimator="smc", num_samples=8, smc_runs=2, target_se=0.01, max_samples=64, device="cpu"
        )
        LatentHMMEval(estimator="exact", batch_size=4, device="cpu")
    assert ignored(caplog) == []
