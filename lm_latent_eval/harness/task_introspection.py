"""The task configs our callbacks read from lm-eval, through private accesses (it has no public API for them): the
calling task's (``calling_task``: the metrics it lists) and the bundled template's (``template_config``)."""

from __future__ import annotations

import sys

from lm_eval.api.task import Task

from .. import tasks_path

# the task whose keys a task on ``template_task.PerplexityTask`` gets, under lm_latent_eval.tasks_path()
TEMPLATE = "latent_ppl_tiny/latent_ppl_tiny.yaml"


def metric_names(config_metric_list) -> list[str] | None:
    """The metric names of a task config's ``metric_list`` (None without one)."""
    if not config_metric_list:
        return None
    return [entry["metric"] for entry in config_metric_list if isinstance(entry, dict) and "metric" in entry]


def calling_task() -> Task | None:
    """The lm-eval task whose ``process_results`` method called the caller of this one, directly or through a user's
    own ``process_results`` (0.4's ``ConfigurableTask`` and 0.5's ``Task`` call ``self.config.process_results(doc,
    results)``), or None when no task called (a script, a doctest)."""
    # no public API names the task being processed; the stack does: calling_task <- process_results <- its method
    frame = sys._getframe(1)
    for _ in range(2):
        frame = frame and frame.f_back
        if isinstance(task := frame and frame.f_locals.get("self"), Task):
            return task
    return None


def template_config() -> dict:
    """The bundled perplexity task's keys (``TEMPLATE``), ``!function`` tags resolved by lm-eval's YAML loader."""
    # no public loader of one task YAML (0.4.13 and 0.5.0.dev1 alike): the private one lm-eval's TaskManager uses
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(f"{tasks_path()}/{TEMPLATE}")
