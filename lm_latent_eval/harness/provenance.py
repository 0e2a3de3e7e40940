"""What a run records about the model it evaluated (lm-eval's ``get_model_info``, merged into ``results["config"]``):
checkpoint path and hash, Hub commit, dtype, the precision of the matrix products, parameter count, the estimator
settings and why ``auto`` chose them.

``model_info`` builds the whole record; ``run_identity`` is its part that can change a number (the results store's
run key and the ``--use_cache`` fingerprint compare it).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import torch

from .. import __version__
from ..estimators import ResolvedEstimator
from ..models import checkpoint_hash, model_target
from ..models.cuda_graphs import graphs_in_effect
from ..models.memory_plan import GIB
from ..paths import DATA_DIR
from ..precision import in_effect
from .model_args import BackendArgs

# get_model_info keys that name the model but never change a number (kept out of the results_dir run key)
NAMING_KEYS = (
    "checkpoint",
    "model_name",
    "model_revision",
    "model_pythonpath",
    "cuda_graphs_requested",
    # as given; "precision" is the part that can change a number (tf32 is float32 off CUDA)
    "precision_requested",
    # which GPU of a machine: device_type is the part that can change a number
    "model_device",
    "working_directory",
)
# model_args recorded under a naming key of their own (cuda_graphs → cuda_graphs_requested), not as model options
NAMING_MODEL_ARGS = ("cuda_graphs",)


def model_info(
    args: BackendArgs,
    model,
    checkpoint: Path,
    checkpoint_sha256: str,
    run: ResolvedEstimator,
    estimator_choice: str,
    device: torch.device,
) -> dict:
    """Model identity and estimator settings of a backend: lm-eval's ``get_model_info``.

    Besides our keys, the ones lm-eval's ``hf`` backend fills for leaderboards: ``model_name`` (``pretrained`` as
    given, else the bundled checkpoint's package path), ``model_sha`` (sha256 of the checkpoint's files: we hash
    content, the Hub commit is ``model_revision`` when the checkpoint came from the Hub cache), ``model_dtype`` (as
    ``hf`` writes it, e.g. ``torch.float32``) and ``model_num_parameters`` (p and q).

    Parameters
    ----------
    args : BackendArgs
        The backend's parsed model_args.
    model
        The loaded latent LM.
    checkpoint : Path
        The folder it was loaded from, and ``checkpoint_sha256`` its hash (``models.checkpoint_hash``).
    run : ResolvedEstimator
        The run's estimator (``auto`` replaced by the estimator it chose, for the reason ``estimator_choice``).
    device : torch.device
        Where the model runs (random streams and float rounding differ between cpu and cuda).

    Returns
    -------
    dict
        JSON-ready.
    """
    cls = type(model)
    dtype = args.dtype or parameter_dtype(model)
    info = {
        "model_name": args.pretrained or package_path(checkpoint),
        "model_sha": checkpoint_sha256,
        "model_revision": hub_revision(checkpoint),
        "model_dtype": str(dtype),
        "model_num_parameters": num_parameters(model),
        "latent_model": model_target(args.model),
        "latent_model_class": f"{cls.__module__}:{cls.__qualname__}",
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": checkpoint_sha256,
        "estimator_settings": run.recorded_settings(device),
        "estimator_choice": estimator_choice,
        "device_type": device.type,
        # where the model ran: lm-eval writes its own config.device after this record, as its --device was given
        # (its CLI default cuda:0 even on a machine without CUDA, where the run used the CPU)
        "model_device": str(device),
        # what the relative paths of the run are relative to: lm-eval records the task YAML it read
        # (metadata.config_source) under the --include_path as given; the card's Reproduce command needs it absolute
        "working_directory": os.getcwd(),
        "dtype": str(dtype).removeprefix("torch."),
        "lm_latent_eval_version": __version__,
    }
    return info | code_info(model) | model_options_info(args, model, device)


def precision_info(precision: str, device: torch.device) -> dict:
    """model_args ``precision`` as asked for (a naming key) and the precision in effect on ``device`` (tf32 is float32
    off CUDA), which can change a number.

    Examples
    --------
    >>> precision_info("tf32", torch.device("cpu"))
    {'precision': 'float32', 'precision_requested': 'tf32'}
    """
    return {"precision": in_effect(precision, device), "precision_requested": precision}


def code_info(model) -> dict:
    """Where the model's code is importable from (a folder for PYTHONPATH, when it is neither ours nor installed), and
    for a sentence-level model whether the end-of-sentence token is scored and counted."""
    info = {}
    if (root := import_root(type(model))) is not None:
        info["model_pythonpath"] = root
    if hasattr(model, "count_eos"):
        info["count_eos"] = bool(model.count_eos)
    return info


def model_options_info(args: BackendArgs, model, device: torch.device) -> dict:
    """The model's own options given in model_args (an LDA's alpha, unknown_words, ...: they can change a number),
    the hashes of its own files, whether its sampler's step runs from a CUDA graph (KGLM, EntityNLM), the memory
    budget of a model with a memory plan (GiB), and the precision of its matrix products (``precision_info``)."""
    info = precision_info(args.precision, device)
    options = {
        a.name: args.model_kwargs[a.name]
        for a in args.options
        if a.name in args.model_kwargs and a.name not in NAMING_MODEL_ARGS
    }
    if options:
        info["model_options"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}
    if callable(getattr(model, "memory_plan", None)):
        # chunks change a value within float32 rounding at most: part of the run's identity
        info["memory_budget_gib"] = model.memory_budget / GIB
    graphs = getattr(model, "cuda_graphs", None)
    if graphs is not None:
        info["cuda_graphs_requested"] = graphs
        # a graph may round differently: it joins the results store's key
        if graphs_in_effect(model, device):
            info["cuda_graphs"] = True
    # only files given: those a checkpoint holds are in checkpoint_sha256
    files = {
        a.name: checkpoint_hash(args.model_kwargs[a.name])
        for a in args.options
        if a.kind is Path and a.name in args.model_kwargs
    }
    if files:
        info["model_files_sha256"] = files
    return info


def run_identity(info: dict) -> dict:
    """The part of ``model_info`` that can change a number (``NAMING_KEYS`` left out): the results store's key.

    Examples
    --------
    >>> run_identity({"checkpoint": "/tmp/a", "checkpoint_sha256": "ab", "model_name": "x"})
    {'checkpoint_sha256': 'ab'}
    """
    return {k: v for k, v in info.items() if k not in NAMING_KEYS}


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
