"""A bundled perplexity task YAML copied alone into another folder still works (it used to name its metrics through
a relative ``include:``, and lm-eval then said only "Tasks not found")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "lm_latent_eval" / "data"
# the contrastive tasks read utils.py beside them: their folder is the unit to copy; a completion task
# (loglikelihood) names all it needs itself
PERPLEXITY_TASKS = sorted(
    p
    for p in (REPO / "tasks").glob("*/*.yaml")
    if p.parent.name != "contrastive_entropy" and "output_type: loglikelihood\n" not in p.read_text()
)


def _metadata(tmp_path: Path) -> dict:
    """Data for the tasks over a user's corpus (the bundled files stand in for it)."""
    linked = tmp_path / "linked"
    linked.mkdir()
    for split in ("train", "valid", "test"):
        shutil.copy(DATA / "linked_tiny" / "test.jsonl", linked / f"{split}.jsonl")
    return {"data_dir": str(linked), "data_file": str(DATA / "ptb_tiny" / "test.txt")}


def _built(folder: Path, name: str, metadata: dict):
    (task,) = (
        TaskManager(include_path=str(folder), include_defaults=False, metadata=metadata)
        .load([name])["tasks"]
        .values()
    )
    return task


@pytest.mark.parametrize("yaml_file", PERPLEXITY_TASKS, ids=lambda p: p.stem)
def test_a_copied_task_yaml_builds_the_task_the_bundled_one_builds(yaml_file, tmp_path):
    if yaml_file.stem == "conll2012_ppl":
        metadata = {"data_file": str(DATA / "coref_tiny" / "test.jsonl")}
    else:
        metadata = _metadata(tmp_path)
    copy_dir = tmp_path / "my_tasks"
    copy_dir.mkdir()
    shutil.copy(yaml_file, copy_dir / yaml_file.name)
    copied, bundled = (
        _built(copy_dir, yaml_file.stem, metadata),
        _built(REPO / "tasks", yaml_file.stem, metadata),
    )
    metrics = [m["metric"] for m in copied.config.metric_list]
    assert "perplexity" in metrics and metrics == [m["metric"] for m in bundled.config.metric_list]
    assert copied.config.process_results is bundled.config.process_results
    assert copied.config.output_type == "loglikelihood_rolling"
    assert [copied.doc_to_target(d) for d in copied.test_docs()] == [
        bundled.doc_to_target(d) for d in bundled.test_docs()
    ]
