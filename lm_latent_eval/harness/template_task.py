"""A perplexity task over another corpus that works from any folder.

A task YAML that ``include``s ``../latent_ppl_tiny/latent_ppl_tiny.yaml`` stops working when copied to another folder
(lm-eval resolves ``include`` relative to the YAML, and then only says "Tasks not found"). Naming this class instead,

    task: my_corpus_ppl
    class: !function lm_latent_eval.harness.template_task.PerplexityTask
    custom_dataset: !function my_pkg.data.load        # or dataset_path / data_files, as in any lm-eval task

gives the task every key of the bundled ``latent_ppl_tiny.yaml`` (metrics, aggregations, process_results), found
through the installed package; the YAML's own keys win, as with ``include``.
"""

from __future__ import annotations

from lm_eval.api.task import ConfigurableTask

TEMPLATE = "latent_ppl_tiny/latent_ppl_tiny.yaml"  # under lm_latent_eval.tasks_path()


def template_config() -> dict:
    """The keys of the bundled perplexity task, its ``!function`` tags resolved (lm-eval's own YAML loader)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    import lm_latent_eval

    return load_yaml(f"{lm_latent_eval.tasks_path()}/{TEMPLATE}")


class PerplexityTask(ConfigurableTask):
    """``latent_ppl_tiny``'s metrics over the corpus the task YAML names (its keys override the template's)."""

    def __init__(self, config: dict | None = None) -> None:
        own = {key: value for key, value in (config or {}).items() if key != "class"}
        super().__init__(config={**template_config(), **own})
