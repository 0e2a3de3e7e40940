"""lm-latent-eval: evaluate latent-variable language models with importance sampling, beam and exact marginals.

Importing this package is cheap (no torch); import submodules for the work.
"""

from .paths import resource_dir

__version__ = "0.1.0"


def metrics_path(name: str | None = None) -> str:
    """Folder of the bundled ``evaluate`` metric modules (or of one of them): ``evaluate.load(metrics_path("is_perplexity"))``."""
    base = resource_dir("metrics")
    return str(base / name) if name else str(base)


def tasks_path() -> str:
    """Folder of the bundled lm-eval task configs: ``lm_eval --include_path $(lm-latent-eval tasks-path) ...``."""
    return str(resource_dir("tasks"))
