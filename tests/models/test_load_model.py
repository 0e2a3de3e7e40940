"""``load_model``: a ``pretrained=`` that names no folder says so, in one line, instead of a Hub validation or
network error."""

from __future__ import annotations

import pytest

from lm_latent_eval.errors import MissingFileError
from lm_latent_eval.models import load_model


def test_missing_absolute_folder_is_not_sent_to_the_hub():
    with pytest.raises(
        MissingFileError, match=r"pretrained=/nope/hmm: no such folder .* not a Hugging Face Hub id"
    ):
        load_model("hmm", "/nope/hmm")


def test_misspelled_local_folder_names_the_folder_and_the_hub(monkeypatch, tmp_path):
    """``org/name`` is a valid Hub id: offline, the error names the missing folder and the Hub cache, in one line."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingFileError) as err:
        load_model("hmm", "data/hmmm")
    message = str(err.value)
    assert f"pretrained=data/hmmm: no such folder ({tmp_path / 'data' / 'hmmm'})" in message
    assert "no Hugging Face Hub model of that name" in message and "\n" not in message
