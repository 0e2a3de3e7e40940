"""What our models saved in the Hub layout (``PyTorchModelHubMixin``) share when they are loaded, and the checks of a
checkpoint folder before any model reads it (``check_checkpoint``: one line naming the file, never a traceback)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Collection
from pathlib import Path

from ..errors import InputError


class StrictLoading:
    """Mixed in before ``PyTorchModelHubMixin``: ``from_pretrained`` loads with strict=True, so a checkpoint missing
    a parameter is an error, never a random init."""

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs):
        return super()._from_pretrained(strict=strict, **kwargs)


AGAIN = "copy or download the checkpoint again"


def check_checkpoint(cls, model: str, folder: Path, where: str, given: Collection[str] = ()) -> None:
    """InputError in one line when the checkpoint folder ``folder`` cannot be read as ``cls`` (model ``model``): an
    empty folder (for a class known to read files: a Hub-mixin or transformers class), a config.json or .safetensors file cut off or damaged, or another model's checkpoint (``fits``;
    ``given``: the options passed beside it). ``where``: how the user named it (``pretrained=...``)."""
    reads_files = init_parameters(cls) is not None or getattr(cls, "reads_transformers_checkpoints", False)
    if reads_files and not any(folder.iterdir()):
        raise InputError(
            f"{where}: an empty folder; name a checkpoint folder (config.json, model.safetensors)"
        )
    config = read_config(folder / "config.json", where)
    for weights in sorted(folder.glob("*.safetensors")):
        check_safetensors(weights, where)
    if fits(cls, config, given):
        return
    other = checkpoint_kind(config)
    if other is not None:
        what, advice = other
        raise InputError(f"{where}: {what}, not of model {model}; {advice}, or name a checkpoint of {model}")
    found = "no config.json" if config is None else f"a config.json without {cls.__name__}'s settings"
    raise InputError(
        f"{where}: not a checkpoint of model {model} (it has {found}); name a checkpoint of {model}"
    )


def read_config(path: Path, where: str) -> dict | None:
    """The checkpoint's config.json as a dict (None where there is none); InputError naming it if it is damaged."""
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"{where}: {path} is not valid JSON ({err}): cut off or damaged; {AGAIN}") from None
    if not isinstance(config, dict):
        raise InputError(f"{where}: {path} is not a JSON object of settings; {AGAIN}")
    return config


def check_safetensors(path: Path, where: str) -> None:
    """InputError naming ``path`` where its header cannot be read or does not cover the file (cut off)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "numpy"):
            pass
    except Exception as err:  # noqa: BLE001 -- safetensors' own SafetensorError, and OSError
        raise InputError(f"{where}: {path} is cut off or damaged ({err}); {AGAIN}") from None


def fits(cls, config: dict | None, given: Collection[str] = ()) -> bool:
    """Whether ``config`` (None: no config.json) can be ``cls``'s. A Hub-mixin class is built from config.json (its
    keys are ``__init__``'s parameters), and reads a transformers checkpoint (a ``model_type`` key) only where it
    declares ``reads_transformers_checkpoints``; a class that declares it and is not a Hub-mixin class reads only
    those; of any other class nothing can be told (True)."""
    config = config or {}
    reads_transformers = getattr(cls, "reads_transformers_checkpoints", False)
    params = init_parameters(cls)
    if "model_type" in config:
        return params is None or reads_transformers
    if params is None:
        return not reads_transformers
    required = {n for n, p in params.items() if p.default is p.empty}
    return set(config) <= set(params) and required <= set(config) | set(given)


def init_parameters(cls) -> dict[str, inspect.Parameter] | None:
    """The named ``__init__`` parameters a Hub-mixin class is built from by config.json (None: not such a class, or
    one that takes any key: ``**kwargs`` or a whole ``config``)."""
    params = dict(getattr(cls, "_hub_mixin_init_parameters", None) or {})
    params.pop("self", None)
    if not params or "config" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return {n: p for n, p in params.items() if p.kind != p.VAR_POSITIONAL}


def checkpoint_kind(config: dict | None) -> tuple[str, str] | None:
    """(what the checkpoint is, what to do) where config.json tells: a transformers checkpoint, or one of our models'
    (the row of ``MODELS`` whose class it fits); None otherwise."""
    from . import MODELS, resolve_class  # the table imports nothing of this module

    config = config or {}
    if "model_type" in config:
        return (
            f"a transformers checkpoint (model_type {config['model_type']} in its config.json)",
            "use model tokenization (a causal LM) or masked (a masked LM)",
        )
    for name in MODELS:
        try:
            cls = resolve_class(name)
        except InputError:  # a row whose dependencies are not installed
            continue
        if init_parameters(cls) is not None and config and fits(cls, config):
            return (
                f"a checkpoint of model {name} (by its config.json)",
                f"use model {name} (--model latent_{name})",
            )
    return None
