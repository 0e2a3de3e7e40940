"""What a run records about the model it evaluated: checkpoint path and hash, Hub commit, dtype, parameter count."""

from __future__ import annotations

import os

import torch

# get_model_info keys that name the model but never change a number (kept out of the results_dir run key)
NAMING_KEYS = ("checkpoint", "model_name", "model_revision", "model_pythonpath", "cuda_graphs_requested")
# model_args recorded under a naming key of their own (cuda_graphs → cuda_graphs_requested), not as model options
NAMING_MODEL_ARGS = ("cuda_graphs",)


def parameter_dtype(model) -> torch.dtype | None:
    """dtype of the model's first floating-point parameter (None for a model without parameters)."""
    params = getattr(model, "parameters", None)
    return next((p.dtype for p in params() if p.is_floating_point()), None) if callable(params) else None


def num_parameters(model) -> int:
    """Number of distinct parameters of the model (its proposal included); 0 for a model without parameters."""
    params = getattr(model, "parameters", None)
    return sum(p.numel() for p in params()) if callable(params) else 0


def package_path(checkpoint) -> str:
    """``lm_latent_eval/data/<name>`` for a bundled checkpoint (machine-independent), else the path itself."""
    from ..paths import DATA_DIR

    path = os.path.abspath(checkpoint)
    root = os.path.dirname(os.path.dirname(os.path.abspath(DATA_DIR)))
    return os.path.relpath(path, root) if path.startswith(os.path.abspath(DATA_DIR)) else str(checkpoint)


def hub_revision(checkpoint) -> str | None:
    """The Hub commit of a checkpoint in the huggingface_hub cache (``.../snapshots/<commit>``), else None."""
    parent, name = os.path.split(os.path.normpath(str(checkpoint)))
    is_commit = len(name) == 40 and all(c in "0123456789abcdef" for c in name)
    return name if os.path.basename(parent) == "snapshots" and is_commit else None


def import_root(cls) -> str | None:
    """The folder that must be on PYTHONPATH to import ``cls`` again (absolute): the sys.path entry holding its
    top-level module, for a class that is neither ours nor installed (e.g. ``model=my_pkg.mod:Cls`` found in the
    working directory, which ``python -m lm_eval`` puts on sys.path and the ``lm_eval`` script does not); else None."""
    import sys
    import sysconfig

    top = cls.__module__.split(".")[0]
    module = sys.modules.get(top)
    location = getattr(module, "__file__", None)
    if top == __name__.split(".")[0] or location is None:
        return None
    path = os.path.dirname(os.path.abspath(location))
    root = os.path.dirname(path) if os.path.basename(location) == "__init__.py" else path
    installed = {os.path.abspath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib")}
    if root in installed or os.path.basename(root) in ("site-packages", "dist-packages"):
        return None
    return root
