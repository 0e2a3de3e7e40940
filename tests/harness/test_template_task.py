"""A bundled perplexity task YAML copied alone into another folder still works (it used to name its metrics through
a relative ``include:``, and lm-eval then said only "Tasks not found")."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "lm_latent_eval" / "data"
# the contrastive tasks read utils.py beside them: their folder is the unit to copy; a task of another request type
# (loglikelihood, multiple_choice) names all it needs itself
PERPLEXITY_TASKS = sorted(
    p
    for p in (REPO / "tasks").glob("*/*.yaml")
    if p.parent.name != "contrastive_entropy"
    and re.search(r"^output_type: (?!loglikelihood_rolling$)", p.read_text(), re.MULTILINE) is None
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
    assert "latent_perplexity" in metrics and metrics == [m["metric"] for m in bundled.config.metric_list]
    assert copied.config.process_results is bundled.config.process_results
    assert copied.config.output_type == "loglikelihood_rolling"
    assert [copied.doc_to_target(d) for d in copied.test_docs()] == [
        bundled.doc_to_target(d) for d in bundled.test_docs()
    ]


def test_a_task_adds_one_metric_without_copying_the_others(tmp_path):
    """``metric_list`` merges with the template's by metric name: the YAML lists only what it adds or changes."""
    from lm_latent_eval.harness import perplexity_task
    from lm_latent_eval.harness.template_task import template_config

    folder = tmp_path / "my_tasks"
    folder.mkdir()
    # a metric of one's own needs a process_results that gives its item
    (folder / "my_metrics.py").write_text(
        "from lm_latent_eval.harness import perplexity_task\n\n\n"
        "def process_results(doc, results):\n"
        "    items = perplexity_task.process_results(doc, results)\n"
        "    return {**items, 'my_perplexity': items['latent_perplexity']}\n"
    )
    (folder / "my_ppl.yaml").write_text(
        "task: my_ppl\n"
        "class: !function lm_latent_eval.harness.template_task.PerplexityTask\n"
        "process_results: !function my_metrics.process_results\n"
        "metric_list:\n"
        "  - metric: perplexity\n"
        "    aggregation: !function lm_latent_eval.harness.perplexity_task.instance_perplexity\n"
        "  - metric: my_perplexity\n"
        "    aggregation: !function lm_latent_eval.harness.perplexity_task.perplexity\n"
        "    higher_is_better: false\n"
    )
    task = _built(folder, "my_ppl", {})
    template = [m["metric"] for m in template_config()["metric_list"]]
    assert [m["metric"] for m in task.config.metric_list] == [*template, "my_perplexity"]
    # "perplexity", the metric's name before lm-eval 0.5 took it, still names it
    (changed,) = [m for m in task.config.metric_list if m["metric"] == "latent_perplexity"]
    assert (
        changed["aggregation"] is perplexity_task.instance_perplexity and changed["higher_is_better"] is False
    )
    assert task.aggregation()["my_perplexity"] is perplexity_task.perplexity


def _exact_ppl(texts: list[str]) -> float:
    import math

    from lm_latent_eval.models import load_model

    hmm, _ = load_model("hmm")
    tokens = [hmm.tokenize(t) for t in texts]
    return math.exp(-sum(hmm.log_marginal(x) for x in tokens) / sum(len(x) for x in tokens))


def _hmm_exact_run(task: str, folder: Path, metadata: dict | None = None) -> dict:
    import lm_eval

    from lm_latent_eval.harness.backends import LatentHMMEval

    out = lm_eval.simple_evaluate(
        model=LatentHMMEval(estimator="exact", device="cpu"),
        tasks=[task],
        task_manager=TaskManager(include_path=str(folder), include_defaults=False, metadata=metadata),
    )
    return out["results"][task]


USERS_TEXTS = ["the cat sat on the mat", "a dog ran", "anna found the busy teacher"]


def test_a_task_naming_its_corpus_by_dataset_path_scores_that_corpus(tmp_path):
    """Issue 53 (2): the template's ``custom_dataset`` (the bundled 30 documents) won over the YAML's
    ``dataset_path: json`` + ``data_files``, as lm-eval reads custom_dataset first: 95.3487 on "30 documents" for an
    11-document file whose exact value is 141.0234."""
    import json

    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in USERS_TEXTS))
    (tmp_path / "my_ppl.yaml").write_text(
        "task: my_ppl\n"
        "class: !function lm_latent_eval.harness.template_task.PerplexityTask\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
    )
    res = _hmm_exact_run("my_ppl", tmp_path)
    assert res["sample_len"] == len(USERS_TEXTS)
    assert res["latent_perplexity,none"] == pytest.approx(_exact_ppl(USERS_TEXTS), rel=1e-9)


def test_a_misspelled_metadata_key_is_refused_and_an_unread_one_said(tmp_path):
    """Issue 53 (2): ``--metadata '{"data_fle": ...}'`` scored the bundled corpus without a word."""
    from lm_latent_eval.errors import InputError

    data = tmp_path / "mine.txt"
    data.write_text("\n".join(USERS_TEXTS) + "\n")
    tasks = REPO / "tasks"
    with pytest.raises(InputError, match="'data_fle' is not one this task reads .*did you mean data_file"):
        _hmm_exact_run("latent_ppl_tiny", tasks, {"data_fle": str(data)})
    res = _hmm_exact_run("latent_ppl_tiny", tasks, {"data_file": str(data)})
    assert res["latent_perplexity,none"] == pytest.approx(_exact_ppl(USERS_TEXTS), rel=1e-9)
    # a task over a bundled corpus reads no data_file: said, not silently scored instead
    with pytest.warns(
        UserWarning, match="'data_file' ignored by load_linked_tiny .*scores its bundled corpus"
    ):
        _built(tasks, "linked_wikitext2_tiny", {"data_file": str(data)}).test_docs()
