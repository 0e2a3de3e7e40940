"""The ``lm_eval`` command line that reproduces a run, as an estimate card prints it: every estimator setting spelled
out, the ``--include_path`` that finds its task again, the ``pretrained=`` checkpoint by an absolute path, the device
type it ran on and the PYTHONPATH its model needed.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import lm_latent_eval

from ..lm_eval_output import TaskRun


def _format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


BUNDLED_TASKS = '"$(lm-latent-eval tasks-path)"'


def _task_yaml(run: TaskRun) -> Path | None:
    """The task YAML the run read: lm-eval records it as the task config's ``metadata.config_source`` (None where the
    results file does not say, or the task had no YAML)."""
    source = (run.results.get("configs", {}).get(run.task, {}).get("metadata") or {}).get("config_source")
    if not source or source == "inline":
        return None
    # relative to the folder lm_eval ran in (a relative --include_path), which the backend records
    path, where = Path(source), run.config.get("working_directory")
    return Path(where) / path if where and not path.is_absolute() else path


def _model_args(run: TaskRun) -> dict:
    """The run's model_args as a dict (lm-eval records them as given: a dict, or the ``--model_args`` string)."""
    args = run.config.get("model_args") or {}
    if isinstance(args, str):
        args = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
    return dict(args)


def _relative_checkpoint(run: TaskRun) -> Path | None:
    """``pretrained=`` where it named a local checkpoint by a relative path, else None (an absolute path, a Hub id,
    the bundled checkpoint): the backend records the path it loaded as ``checkpoint``, which for a local folder or
    file is ``pretrained`` as given (for a Hub id, the snapshot in the Hub's cache)."""
    pretrained, checkpoint = _model_args(run).get("pretrained"), run.config.get("checkpoint")
    if pretrained is None or checkpoint is None:
        return None
    path = Path(str(pretrained))
    return path if not path.is_absolute() and Path(checkpoint) == path else None


def include_path(run: TaskRun) -> str | None:
    """The ``--include_path`` that finds the run's task again.

    Parameters
    ----------
    run : TaskRun
        The run; lm-eval's results file names the task's YAML (``metadata.config_source``).

    Returns
    -------
    str or None
        The bundled tasks (as ``"$(lm-latent-eval tasks-path)"``) for one of ours or where the results file does not
        say, None for one of lm-eval's own tasks, else the folder of the user's YAML (a copy of a bundled task that
        keeps its name must not run the bundled one).
    """
    yaml = _task_yaml(run)
    if yaml is None or yaml.resolve().is_relative_to(Path(lm_latent_eval.tasks_path()).resolve()):
        return BUNDLED_TASKS
    # lm-eval's own tasks (found without importing lm_eval, which is slow to import)
    lm_eval_spec = importlib.util.find_spec("lm_eval")
    if (
        lm_eval_spec
        and lm_eval_spec.origin
        and yaml.is_relative_to(Path(lm_eval_spec.origin).parent / "tasks")
    ):
        return None
    return str(yaml.parent)


def reproduce_note(run: TaskRun) -> str | None:
    """What the reader must know before running the card's command.

    Parameters
    ----------
    run : TaskRun
        The run.

    Returns
    -------
    str or None
        Where the command's ``--include_path`` is a guess (the results file names no task YAML), or it or
        ``pretrained=`` is relative to a folder the results file does not name, one sentence saying so; else None.
    """
    yaml = _task_yaml(run)
    if yaml is None:
        return (
            f"The results file does not name the YAML of task {run.task!r} (lm-eval's metadata.config_source), so the "
            "command assumes the bundled tasks; for a task of your own, replace the --include_path folder with yours."
        )
    relative = [f"--include_path {include_path(run)}"] if not yaml.is_absolute() else []
    if _relative_checkpoint(run) is not None and not run.config.get("working_directory"):
        relative.append(f"pretrained={_relative_checkpoint(run)}")
    if relative:
        return (
            f"The {' and '.join(relative)} {'is' if len(relative) == 1 else 'are'} relative to the folder lm_eval ran "
            "in, which the results file does not name (a run made before lm-latent-eval recorded its "
            "working_directory): run it from there."
        )
    return None


def reproduce_command(run: TaskRun) -> str:
    """The lm_eval command line that reproduces the run.

    Parameters
    ----------
    run : TaskRun
        The run, as its results file recorded it.

    Returns
    -------
    str
        The command, with every estimator setting spelled out, on the device type the run used (random streams
        differ between CPU and GPU), with the PYTHONPATH the model's code needed, writing into ``OUT``.

    Examples
    --------
    >>> config = {"model": "latent_hmm", "model_args": {"pretrained": "hmm"}, "limit": 6.0,
    ...           "estimator_settings": {"estimator": "exact"}}
    >>> run = TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "latent_ppl_tiny", {"config": config})
    >>> print(reproduce_command(run))  # doctest: +NORMALIZE_WHITESPACE
    lm_eval --model latent_hmm --model_args pretrained=hmm,estimator=exact --tasks latent_ppl_tiny
    --include_path "$(lm-latent-eval tasks-path)" --limit 6 --output_path OUT --log_samples
    """
    cfg = run.config
    args = _model_args(run)
    # a checkpoint given relative to the folder lm_eval ran in, named so that the command runs from any folder
    relative, where = _relative_checkpoint(run), cfg.get("working_directory")
    if relative is not None and where:
        args["pretrained"] = str(Path(where) / relative)
    for key, value in run.settings.items():
        if key != "sample_block":
            args.setdefault(key, value)
    # where it ran; lm-eval's own "device" is the --device asked for (cuda:0 default)
    device = cfg.get("device_type")
    if device is not None and "device" in args:
        args["device"] = device
    parts = [
        *([f"PYTHONPATH={shlex.quote(cfg['model_pythonpath'])}"] if cfg.get("model_pythonpath") else []),
        "lm_eval",
        "--model",
        cfg.get("model", "latent"),
        "--model_args",
        ",".join(f"{k}={_format_value(v)}" for k, v in args.items()),
        "--tasks",
        run.task,
    ]
    include = include_path(run)
    if include is not None:
        parts += ["--include_path", include]
    metadata = {
        k: v
        for k, v in (run.results.get("configs", {}).get(run.task, {}).get("metadata") or {}).items()
        if k not in ("version", "config_source") and k not in args
    }
    if metadata:
        parts += ["--metadata", shlex.quote(json.dumps(metadata))]
    for flag in ("device", "batch_size", "limit"):
        value = device if flag == "device" and device is not None else cfg.get(flag)
        if value is not None:
            parts += [
                f"--{flag}",
                str(int(value) if flag == "limit" and float(value).is_integer() else value),
            ]
    seeds = [cfg.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")]
    if all(s is not None for s in seeds):
        parts += ["--seed", ",".join(str(s) for s in seeds)]
    parts += ["--output_path", "OUT", "--log_samples"]
    return " ".join(p if p.startswith(('"$(', "'", "PYTHONPATH=")) else shlex.quote(str(p)) for p in parts)
