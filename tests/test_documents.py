"""Documents from a user's file: every unusable line is one error naming the file and the line (not a KeyError from
deep inside lm-eval), and an empty document is a warning naming them (not ``document ''``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lm_latent_eval.cli import main
from lm_latent_eval.documents import read_texts
from lm_latent_eval.errors import InputError


def _jsonl(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _task_loader():
    from lm_latent_eval.harness.perplexity_task import load_corpus  # latent_ppl_tiny's custom_dataset

    return load_corpus


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        (json.dumps({"txt": "a typo"}), "JSON record has no 'text' field; its fields: ['txt']"),
        (json.dumps({"text": 3}), "'text' must be a string, got int"),
        ("{not json", "not valid JSON"),
        (json.dumps(["a", "list"]), "expected a JSON object"),
    ],
)
def test_unusable_line_names_file_and_line(tmp_path, bad_line, message):
    path = _jsonl(tmp_path, json.dumps({"text": "a dog ran ."}), "", bad_line)
    with pytest.raises(InputError, match=f"^{path}:3: {message[:20]}"):
        read_texts(path)
    with pytest.raises(
        InputError, match=f"{path}:3: "
    ):  # the latent_ppl_tiny task (--metadata data_file=...)
        _task_loader()(data_file=str(path))


def test_empty_document_warning_names_file_and_line(tmp_path):
    path = _jsonl(tmp_path, json.dumps({"text": "a dog ran ."}), json.dumps({"text": ""}))
    with pytest.warns(UserWarning, match=f"^{path}:2: empty document"):
        assert read_texts(path) == ["a dog ran .", ""]
    with pytest.warns(UserWarning, match=f"{path}:2: empty document"):
        assert _task_loader()(data_file=str(path))["test"]["text"] == ["a dog ran .", ""]


def test_sweep_with_a_bad_data_file_is_one_line(tmp_path, capsys):
    path = _jsonl(tmp_path, json.dumps({"body": "no text here"}))
    assert main(["sweep", "--data", str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"lm-latent-eval sweep: error: {path}:1: JSON record has no 'text' field (nor Linked WikiText-2 "
        "'tokens'); its fields: ['body']"
    )
