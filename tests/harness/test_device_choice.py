"""The device by default (harness/device_choice.py): a small local checkpoint runs on the CPU on a machine with CUDA
when nobody asked for a device, said in one line and recorded; a device asked for is always used."""

from __future__ import annotations

import logging

import pytest
import torch

from lm_latent_eval.harness.backends import LatentHMMEval
from lm_latent_eval.harness.device_choice import SMALL_CHECKPOINT_BYTES, choose_device, weight_bytes
from lm_latent_eval.harness.model_args import parse_backend_args, with_cli_config
from lm_latent_eval.models import MODELS, default_checkpoint

CUDA = torch.device("cuda")


def test_every_bundled_checkpoint_is_small_and_runs_on_the_cpu_by_default():
    """The rule's measured side: every bundled checkpoint (all measured slower on an H100 than on its CPU)."""
    for name in MODELS:
        folder = default_checkpoint(name)
        if folder is None:
            continue
        assert 0 < weight_bytes(folder) < SMALL_CHECKPOINT_BYTES, name
        choice = choose_device(CUDA, asked=False, checkpoint=folder)
        assert choice.device.type == "cpu" and "below 4 MB" in choice.reason, name


def test_a_device_asked_for_a_large_checkpoint_or_a_hub_id_keeps_cuda(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as fh:
        fh.truncate(SMALL_CHECKPOINT_BYTES)  # sparse: the size counts, not the bytes
    small = default_checkpoint("hmm")
    assert choose_device(CUDA, asked=True, checkpoint=small).device == CUDA
    assert choose_device(CUDA, asked=False, checkpoint=big).device == CUDA
    assert choose_device(CUDA, asked=False, checkpoint="someone/model").device == CUDA
    assert choose_device(CUDA, asked=False, checkpoint=None).device == CUDA
    cpu = torch.device("cpu")
    assert choose_device(cpu, asked=False, checkpoint=small) == choose_device(
        cpu, asked=True, checkpoint=small
    )


def test_lm_evals_default_device_is_not_asked_for_and_any_other_is():
    """lm-eval's CLI always passes --device (cuda:0 by default): that default is nobody's request."""
    default = with_cli_config({}, {"device": "cuda:0"})
    assert "device" not in default
    assert parse_backend_args("LatentHMMEval", "hmm", default).device_asked is False
    asked = with_cli_config({}, {"device": "cpu"})
    assert parse_backend_args("LatentHMMEval", "hmm", asked).device_asked is True
    assert parse_backend_args("LatentHMMEval", "hmm", {"device": "cuda:0"}).device_asked is True


def test_a_backend_on_a_cuda_machine_runs_the_bundled_model_on_the_cpu_and_says_so(monkeypatch, caplog):
    """With CUDA reported available and no device given: the CPU, one log line, ``device_choice`` in the results."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level(logging.INFO):
        lm = LatentHMMEval(estimator="exact")
    info = lm.get_model_info()
    assert info["model_device"] == "cpu" and "chosen over cuda" in info["device_choice"]
    lines = [r.getMessage() for r in caplog.records if "chosen over cuda" in r.getMessage()]
    assert len(lines) == 1 and "device=cuda" in lines[0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert LatentHMMEval(estimator="exact", device="cpu").get_model_info()["device_choice"] == (
        "as asked or by default"
    )


@pytest.mark.parametrize("text", ["the cat sat"])
def test_the_cpu_choice_gives_the_cpus_numbers(monkeypatch, text):
    """The run chosen onto the CPU is the CPU's run: the same log p̂ as asking for the CPU."""
    asked = LatentHMMEval(estimator="is", num_samples=64, seed=1, device="cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    chosen = LatentHMMEval(estimator="is", num_samples=64, seed=1)
    from lm_eval.api.instance import Instance

    request = [Instance("loglikelihood_rolling", {}, (text,), 0)]
    assert chosen.loglikelihood_rolling(request, disable_tqdm=True) == asked.loglikelihood_rolling(
        request, disable_tqdm=True
    )
