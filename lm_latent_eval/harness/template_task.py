"""A perplexity task over another corpus that works from any folder.

A task YAML that ``include``s ``../latent_ppl_tiny/latent_ppl_tiny.yaml`` stops working when copied to another folder
(lm-eval resolves ``include`` relative to the YAML, and then only says "Tasks not found"). Naming this class instead,

    task: my_corpus_ppl
    class: !function lm_latent_eval.harness.template_task.PerplexityTask
    custom_dataset: !function my_pkg.data.load        # or dataset_path / data_files, as in any lm-eval task

gives the task every key of the bundled ``latent_ppl_tiny.yaml`` (metrics, aggregations, process_results), found
through the installed package. The YAML's own keys win, as with ``include``, except ``metric_list``, which merges
with the template's by metric name: an entry naming one of the template's metrics updates that entry's keys (say,
another ``aggregation``), an entry with a new name is added after them, and the template's other metrics stay
(``perplexity`` and ``perplexity_stderr``, the names before lm-eval 0.5 took ``perplexity`` for its own, name
``latent_perplexity`` and ``latent_perplexity_stderr``). A task that adds one metric therefore lists only that one,
and names a ``process_results`` of its own that gives its item (with the template's, a name it gives no item for is
refused at load as a misspelling, with the closest valid name):

    process_results: !function my_pkg.metrics.process_results   # perplexity_task's items and my_metric's
    metric_list:
      - metric: my_metric                # process_results must return an item for it
        aggregation: !function my_pkg.metrics.my_aggregation
        higher_is_better: false
"""

from __future__ import annotations

from .lm_eval_versions import rolling_task_base
from .perplexity_task import RENAMED_METRICS, check_metric_names
from .task_introspection import TEMPLATE, metric_names, template_config

__all__ = ["TEMPLATE", "PerplexityTask", "merge_metric_lists", "task_config", "template_config"]


def merge_metric_lists(template: list[dict], own: list[dict]) -> list[dict]:
    """``metric_list`` of a task built on the template: merged by metric name (``own`` updates or adds entries; an
    old name of ``RENAMED_METRICS`` names its new one).

    Examples
    --------
    >>> template = [{"metric": "a", "higher_is_better": False}, {"metric": "b", "higher_is_better": False}]
    >>> merge_metric_lists(template, [{"metric": "b", "aggregation": "mean"}, {"metric": "c"}])
    [{'metric': 'a', 'higher_is_better': False}, {'metric': 'b', 'higher_is_better': False, 'aggregation': 'mean'}, {'metric': 'c'}]
    >>> merge_metric_lists([{"metric": "latent_perplexity"}], [{"metric": "perplexity", "higher_is_better": False}])
    [{'metric': 'latent_perplexity', 'higher_is_better': False}]
    """
    merged = {entry["metric"]: dict(entry) for entry in template}
    for entry in own:
        name = entry["metric"]
        name = RENAMED_METRICS.get(name, name) if isinstance(name, str) else name
        merged[name] = {**merged.get(name, {}), **entry, "metric": name}
    return list(merged.values())


def task_config(own: dict, template: dict | None = None) -> dict:
    """The config of a task built on the template: the template's keys, then the YAML's (``class`` dropped), with
    ``metric_list`` merged by metric name (``merge_metric_lists``); a YAML that names its corpus by ``dataset_path``
    drops the template's ``custom_dataset`` (the bundled corpus, which lm-eval would read first).

    Examples
    --------
    >>> own = {"task": "my_ppl", "process_results": lambda doc, results: {},
    ...        "metric_list": [{"metric": "my_metric", "higher_is_better": False}]}
    >>> config = task_config(own)
    >>> config["task"], len(config["metric_list"]) == len(template_config()["metric_list"]) + 1
    ('my_ppl', True)
    >>> "custom_dataset" in task_config({"dataset_path": "json", "dataset_kwargs": {"data_files": "my.jsonl"}})
    False
    """
    template = template_config() if template is None else template
    own = {key: value for key, value in own.items() if key != "class"}
    if "process_results" not in own and own.get("metric_list"):
        # the template's process_results gives no item for another name: a misspelling, said at load
        check_metric_names(metric_names(own["metric_list"]), own.get("task", "this task"))
    if "dataset_path" in own:
        # lm-eval reads custom_dataset before dataset_path: the template's loader would score the bundled corpus
        template = {key: value for key, value in template.items() if key != "custom_dataset"}
    config = {**template, **own}
    if "metric_list" in own and "metric_list" in template:
        config["metric_list"] = merge_metric_lists(template["metric_list"], own["metric_list"])
    return config


class PerplexityTask(rolling_task_base()):
    """``latent_ppl_tiny``'s metrics over the corpus a task YAML names (``class:`` of the YAML).

    A subclass of the lm-eval class that builds ``loglikelihood_rolling`` requests in the installed release
    (``lm_eval_versions.rolling_task_base``: 0.4's ``ConfigurableTask``, 0.5's ``LoglikelihoodRollingTask``).

    Parameters
    ----------
    config : dict, optional
        The task YAML's keys, as lm-eval passes them; they override the template's, and its ``metric_list`` merges
        with the template's by metric name (``task_config``).

    Examples
    --------
    >>> task = PerplexityTask({"task": "my_ppl"})
    >>> task.config.task, "latent_perplexity" in [m["metric"] for m in task.config.metric_list]
    ('my_ppl', True)
    """

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config=task_config(config or {}))
