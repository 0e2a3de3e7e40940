"""A user's own perplexity task keeps any subset of the template's metrics, in any order, with the figures of the
whole task (issue 43, item 10: the samples file holds each estimate once, and a task without ``latent_perplexity``
failed with "this metric's items refer to the estimates of 'perplexity', which lm-eval has not aggregated first");
a misspelled metric name is one line naming the task, the name and the valid names (item 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
import lm_eval
from lm_eval.tasks import TaskManager

from lm_latent_eval.errors import InputError

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = (REPO / "tasks" / "latent_ppl_tiny" / "latent_ppl_tiny.yaml").read_text(encoding="utf-8")
HEAD, ENTRIES = TEMPLATE.split("metric_list:\n")
ENTRIES = ENTRIES.split("metadata:")[0]
# the bundled task's metric_list entries by metric name (each entry's lines as written)
BLOCKS = {
    block.split("\n", 1)[0].split("#")[0].strip(): "  - metric: " + block
    for block in ENTRIES.split("  - metric: ")[1:]
}
PERPLEXITY = ["latent_perplexity", "latent_perplexity_stderr", "perplexity_upper_bound", "instance_perplexity",
              "corpus_perplexity"]  # fmt: skip
# (task, metrics kept in this order, whether the task's process_results is the user's own, which keeps a subset)
SUBSETS = [
    ("a_without_latent", ["instance_perplexity", "corpus_perplexity"], False),
    ("b_reversed", ["corpus_perplexity", "perplexity_upper_bound", "latent_perplexity_stderr", "latent_perplexity"], False),
    ("c_own_process_results", ["corpus_perplexity", "latent_perplexity_stderr"], True),
]  # fmt: skip
OWN_PROCESS_RESULTS = """from lm_latent_eval.harness import perplexity_task

KEEP = {keep!r}


def process_results(doc, results):
    items = perplexity_task.process_results(doc, results)
    return {{name: items[name] for name in KEEP}}
"""


def _task_yaml(name: str, metrics: list[str], own: bool) -> str:
    head = HEAD.replace("task: latent_ppl_tiny", f"task: {name}")
    if own:
        head = head.replace(
            "!function lm_latent_eval.harness.perplexity_task.process_results",
            f"!function {name}_metrics.process_results",
        )
    return head + "metric_list:\n" + "".join(BLOCKS[m] for m in metrics) + "metadata:\n  version: 1.0\n"


def test_every_subset_and_order_of_the_metrics_gives_the_whole_tasks_figures(tmp_path):
    folder = tmp_path / "my_tasks"
    folder.mkdir()
    (folder / "z_whole.yaml").write_text(_task_yaml("z_whole", list(BLOCKS), False), encoding="utf-8")
    for name, metrics, own in SUBSETS:
        (folder / f"{name}.yaml").write_text(_task_yaml(name, metrics, own), encoding="utf-8")
        if own:
            (folder / f"{name}_metrics.py").write_text(
                OWN_PROCESS_RESULTS.format(keep=metrics), encoding="utf-8"
            )
    names = [name for name, _, _ in SUBSETS] + ["z_whole"]
    out = lm_eval.simple_evaluate(
        model="latent_hmm",
        model_args="estimator=is,num_samples=16,seed=3,device=cpu",
        tasks=names,
        task_manager=TaskManager(include_path=str(folder), include_defaults=False),
        limit=6,
        log_samples=True,
    )
    whole = out["results"]["z_whole"]
    assert whole["corpus_perplexity,none"] != pytest.approx(whole["instance_perplexity,none"], rel=1e-9)
    for name, metrics, _ in SUBSETS:
        got = out["results"][name]
        for metric in metrics:
            assert got[f"{metric},none"] == whole[f"{metric},none"], (name, metric)
    # each estimate once in the samples file, whole in the first kept metric that stands for it
    for sample in out["samples"]["a_without_latent"]:
        first, second = sample["instance_perplexity"], sample["corpus_perplexity"]
        assert (
            len(first["log_weights"]) == 16
            and json.loads(json.dumps(second))["same_as"] == "instance_perplexity"
        )


def test_a_misspelled_metric_is_one_line_naming_the_task_and_the_valid_names(tmp_path):
    """On the template (``PerplexityTask``) at load; in a copy of the bundled YAML at its first document."""
    from lm_latent_eval.harness.perplexity_task import kept_items
    from lm_latent_eval.harness.template_task import PerplexityTask

    with pytest.raises(InputError) as caught:
        PerplexityTask(
            {"task": "my_ppl", "metric_list": [{"metric": "latnet_perplexity", "higher_is_better": False}]}
        )
    message = str(caught.value)
    assert "\n" not in message and message.startswith(
        "task my_ppl: metric_list names 'latnet_perplexity', which lm-latent-eval's process_results does not give; "
        "did you mean latent_perplexity? valid names: word_perplexity, latent_perplexity, "
    )
    assert "corpus_perplexity" in message
    with pytest.raises(
        InputError, match="task my_copy: metric_list names 'corpus_perplexty'.*did you mean corpus_perplexity"
    ):
        kept_items({}, ["instance_perplexity", "corpus_perplexty"], "my_copy")


def test_a_copied_task_with_a_misspelled_metric_stops_at_its_first_document(tmp_path):
    folder = tmp_path / "my_tasks"
    folder.mkdir()
    text = _task_yaml("my_copy", ["instance_perplexity", "corpus_perplexity"], False)
    (folder / "my_copy.yaml").write_text(
        text.replace("metric: corpus_perplexity", "metric: corpus_perplexty")
    )
    with pytest.raises(InputError, match="task my_copy: metric_list names 'corpus_perplexty'"):
        lm_eval.simple_evaluate(
            model="latent_hmm",
            model_args="estimator=exact,device=cpu",
            tasks=["my_copy"],
            task_manager=TaskManager(include_path=str(folder), include_defaults=False),
            limit=2,
        )
