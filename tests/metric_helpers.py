"""Helpers of the metric tests: offline loading (sockets blocked), doctests of the metric modules and cards."""

from __future__ import annotations

import doctest
import importlib.util
import re
import socket
from pathlib import Path

import lm_latent_eval

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "tasks"
_FENCE = re.compile(r"```(?:python|py|pycon)\n(.*?)```", re.DOTALL)


def block_network(monkeypatch) -> None:
    """Any socket connection raises; the Hugging Face libraries are told they are offline."""

    def refuse(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    for var in ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")


def load_metric_offline(name: str):
    import evaluate

    return evaluate.load(lm_latent_eval.metrics_path(name))


def _run(text: str, name: str) -> doctest.TestResults:
    test = doctest.DocTestParser().get_doctest(text, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    return runner.summarize(verbose=False)


def run_doctests(name: str) -> None:
    """The examples of the metric module's docstring constants (_KWARGS_DESCRIPTION) pass."""
    path = Path(lm_latent_eval.metrics_path(name)) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_doctest_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = _run(module._KWARGS_DESCRIPTION, f"{name}._KWARGS_DESCRIPTION")
    assert result.attempted > 0 and result.failed == 0, result


def readme_doctests(name: str) -> None:
    """The metric card's examples pass as ``python -m doctest README.md`` runs them: the whole page, one namespace, no
    option flags (an expected output runs up to the next blank line, so a closing fence right after it would be read
    as part of the output)."""
    path = Path(lm_latent_eval.metrics_path(name)) / "README.md"
    result = doctest.testfile(str(path), module_relative=False, report=True, verbose=False)
    assert result.attempted > 0 and result.failed == 0, result
    assert result.attempted == sum(b.count(">>>") for b in _FENCE.findall(path.read_text(encoding="utf-8")))


def task_utils(family: str = "contrastive_entropy"):
    """The ``utils.py`` module of a task folder (loaded by path: every task folder has its own ``utils``)."""
    spec = importlib.util.spec_from_file_location(f"_task_utils_{family}", TASKS_DIR / family / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
