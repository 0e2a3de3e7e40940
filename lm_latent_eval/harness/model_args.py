"""The ``model_args`` a latent backend accepts, declared once and parsed with one clean error per mistake.

Three sources, none written twice: the fields of ``EstimatorSettings`` (estimator, num_samples, ...; their types and
one-line helps), the backend's own arguments (``BACKEND_ARGS``: model, pretrained, device, dtype, precision, results_dir,
threads, workers), and the
model class's own options: its ``MODEL_ARGS`` attribute ({name: (type, help)}), or, for a class that does not
declare it, the keyword parameters with defaults of its ``from_pretrained``. lm-eval parses ``--model_args`` values
already (``true`` → bool, digits → int); every value is checked against its declared type here.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import logging
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from lm_eval.api.model import LM
from lm_eval.utils import simple_parse_args_string

from ..errors import InputError, MissingFileError, UnsupportedError
from ..estimators import ESTIMATORS, EstimatorSettings
from ..models import MODELS, resolve_class
from ..models.memory_plan import DEFAULT_MEMORY_BUDGET, GIB, check_memory_budget
from ..precision import DEFAULT_PRECISION, PRECISION_HELP, check_precision
from .advice import log_like_lm_eval

logger = logging.getLogger(__name__)
# what lm-eval's CLI passes as --device when the user gave none
LM_EVAL_DEFAULT_DEVICE = "cuda:0"
# what lm-eval's CLI passes as --batch_size when the user gave none (a string); it cannot tell it from --batch_size 1
LM_EVAL_DEFAULT_BATCH_SIZE = "1"


@dataclass(frozen=True)
class ModelArg:
    """One accepted model_arg: its name, type (int, float, bool, str, or Path: an existing file) and help."""

    name: str
    kind: type
    help: str


BACKEND_ARGS = (
    ModelArg(
        "model", str, "(--model latent only) a name in lm_latent_eval.models.MODELS or package.module:Class"
    ),
    ModelArg("pretrained", str, "local folder or Hugging Face Hub id (default: the bundled checkpoint)"),
    ModelArg(
        "device",
        str,
        "cuda if available, else cpu; a small checkpoint runs on the CPU unless a device is asked for "
        "(model_args wins over lm-eval's --device)",
    ),
    ModelArg(
        "dtype", str, "torch dtype of the network (float32, bfloat16, ...); log-probabilities sum in float64"
    ),
    ModelArg("precision", str, PRECISION_HELP),
    ModelArg(
        "results_dir",
        str,
        "keep per-document results under this folder so a rerun resumes (off unless given)",
    ),
    ModelArg(
        "threads",
        int,
        "CPU threads for torch (default: torch's count, fewer where other processes keep cores busy)",
    ),
    ModelArg(
        "workers",
        int,
        "processes that estimate documents side by side on the CPU, the threads shared among them (default: one "
        "per thread; 1: one process with every thread); the numbers are the same for any count",
    ),
)
# accepted by the backends whose model plans its temporaries (``memory_plan``: latent_kglm, latent_entitynlm)
MEMORY_BUDGET_ARG = ModelArg(
    "memory_budget",
    float,
    f"GiB the temporaries of one log_joint call or sampler step may hold (default {DEFAULT_MEMORY_BUDGET // GIB}; "
    "models with a memory plan: kglm, entitynlm); chunks change a value within float32 rounding at most",
)
# passed by lm-eval to every model; batch_size is a particle count here
IGNORED_ARGS = ("max_batch_size",)
# names other libraries use for an accepted model_arg, too far from it for difflib ("did you mean" them all the same)
KNOWN_ALIASES = {"torch_dtype": "dtype"}


class ModelArgsError(InputError):
    """A model_arg that is unknown or has a value of the wrong type."""


def settings_args() -> tuple[ModelArg, ...]:
    """One ModelArg per field of EstimatorSettings (``int | None`` counts as int)."""
    hints = typing.get_type_hints(EstimatorSettings)
    out = []
    for f in dataclasses.fields(EstimatorSettings):
        kind = next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
        help_text = f.metadata.get("help", "")
        if f.name == "estimator":  # the names from the table itself, never a list written out
            help_text += f": {', '.join(ESTIMATORS)}"
        out.append(ModelArg(f.name, kind, help_text))
    return tuple(out)


def model_options(model_class) -> tuple[ModelArg, ...]:
    """The model's own options: ``MODEL_ARGS`` ({name: (type, help)}) if the class declares it, else the keyword
    parameters with defaults of ``from_pretrained`` (type from the annotation or the default), less the backend's own
    (``dtype`` and ``device``, which ``load_model`` passes to a ``from_pretrained`` that names them)."""
    declared = getattr(model_class, "MODEL_ARGS", None)
    if declared is not None:
        return tuple(ModelArg(name, kind, help_text) for name, (kind, help_text) in declared.items())
    loader = getattr(model_class, "from_pretrained", None)
    if loader is None:
        return ()
    # past the path / Hub id
    params = list(inspect.signature(loader).parameters.values())[1:]
    out = []
    for p in params:
        if p.default is inspect.Parameter.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if any(p.name == arg.name for arg in BACKEND_ARGS):
            continue
        kind = (
            p.annotation
            if isinstance(p.annotation, type)
            else type(p.default)
            if p.default is not None
            else str
        )
        out.append(ModelArg(p.name, kind, f"option of {model_class.__name__}.from_pretrained"))
    return tuple(out)


def parse_value(arg: ModelArg, value):
    """``value`` as ``arg.kind`` (lm-eval gives str, int or bool); ModelArgsError naming the argument otherwise."""
    if value is None:
        return None
    text = str(value).strip()
    if arg.kind is bool:
        if isinstance(value, bool) or text.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value if isinstance(value, bool) else text.lower() in ("true", "1", "yes")
        raise ModelArgsError(f"model_args {arg.name} must be true or false, got {value!r}")
    if arg.kind is int:
        # lm-eval's command line reads "-5" as the float -5.0 (its check for an int sees no digits in "-5")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not text.lstrip("-").isdigit():
            raise ModelArgsError(f"model_args {arg.name} must be an integer, got {value!r}")
        return int(text)
    if arg.kind is float:
        try:
            number = None if isinstance(value, bool) else float(text)
        except ValueError:
            number = None
        if number is None:
            raise ModelArgsError(f"model_args {arg.name} must be a number, got {value!r}")
        return number
    if arg.kind is Path:
        if not Path(text).exists():
            raise MissingFileError(f"model_args {arg.name}={text}: no such file")
        return text
    return text


def check_known(backend: str, given: dict, accepted: typing.Iterable[ModelArg]) -> None:
    """ModelArgsError for the first unknown names in ``given``, with "did you mean" and the accepted names."""
    names = [a.name for a in accepted]
    unknown = sorted(set(given) - set(names) - set(IGNORED_ARGS))
    if not unknown:
        return
    matches = {u: difflib.get_close_matches(u, names, n=1, cutoff=0.7) for u in unknown}
    matches = {u: [KNOWN_ALIASES[u]] if KNOWN_ALIASES.get(u) in names else m for u, m in matches.items()}
    hints = [f"{u} → {m[0]}" for u, m in matches.items() if m]
    guess = f" (did you mean {', '.join(hints)}?)" if hints else ""
    raise ModelArgsError(f"unknown model_args {unknown} for {backend}{guess}; accepted: {', '.join(names)}")


def parse_batch_size(value) -> int | None:
    """lm-eval's ``--batch_size`` (a string from the CLI): particles per log_joint call; ``auto`` → None (one block)."""
    if value is None or str(value).startswith("auto"):
        return None
    return parse_value(ModelArg("batch_size", int, ""), value)


def parse_count(name: str, value) -> int | None:
    """model_args ``threads`` or ``workers``: a positive integer, or None (the default: ``harness.threads``)."""
    count = parse_value(ModelArg(name, int, ""), value)
    if count is not None and count < 1:
        raise ModelArgsError(f"model_args {name} must be a positive integer, got {value!r}")
    return count


def has_memory_plan(model_class) -> bool:
    """Whether the model plans its temporaries within a ``memory_budget`` (its ``memory_plan``; models/memory_plan.py)."""
    return callable(getattr(model_class, "memory_plan", None))


def parse_memory_budget(value) -> int | None:
    """model_args ``memory_budget`` in GiB as bytes (None: the model's default), one line naming a bad value.

    Examples
    --------
    >>> parse_memory_budget(None), parse_memory_budget(4), parse_memory_budget("0.5")
    (None, 4294967296, 536870912)
    >>> parse_memory_budget("-1")
    Traceback (most recent call last):
    ...
    lm_latent_eval.harness.model_args.ModelArgsError: model_args memory_budget must be a number of GiB, at least 0.001 (1 MiB), got '-1'
    """
    gib = parse_value(MEMORY_BUDGET_ARG, value)
    if gib is None:
        return None
    try:
        return check_memory_budget(gib * GIB)
    except ValueError:
        raise ModelArgsError(
            f"model_args memory_budget must be a number of GiB, at least 0.001 (1 MiB), got {value!r}"
        ) from None


def parse_settings(given: dict) -> EstimatorSettings:
    """EstimatorSettings from the settings fields present in ``given`` (the rest keep their defaults)."""
    values = {}
    for arg in settings_args():
        raw = given.get(arg.name)
        value = parse_batch_size(raw) if arg.name == "batch_size" else parse_value(arg, raw)
        if value is not None:
            values[arg.name] = value
    try:
        return EstimatorSettings(**values)
    except ValueError as err:
        raise ModelArgsError(str(err)) from None


def accepted_args_doc(extra: typing.Iterable[ModelArg] = ()) -> str:
    """The accepted model_args as ``name (type): help`` lines, for docstrings and ``--help``-like listings."""
    args = (*BACKEND_ARGS, *settings_args(), *extra)
    return "\n".join(f"    {a.name} ({a.kind.__name__}): {a.help}" for a in args)


def resolve_device(device) -> torch.device:
    """The requested device; CUDA falls back to CPU (with a warning) on a machine without it (lm-eval defaults to
    cuda:0); None: cuda if available, else cpu. A name torch does not know, or a device this machine lacks (mps on
    Linux, cuda:3 beside one GPU), is refused in one line.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("tpu")
    Traceback (most recent call last):
    ...
    lm_latent_eval.harness.model_args.ModelArgsError: device=tpu: not a torch device; use cpu, cuda or cuda:N (mps on a Mac)
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelArgsError(
            f"device={device}: not a torch device; use cpu, cuda or cuda:N (mps on a Mac)"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"device={device} requested but CUDA is not available: running on cpu", stacklevel=3)
        return torch.device("cpu")
    if not device_available(device):
        here = "cpu or cuda" if torch.cuda.is_available() else "cpu"
        raise ModelArgsError(f"device={device}: not available on this machine; use {here}")
    return device


def device_available(device: torch.device) -> bool:
    """Whether this machine has ``device`` (a CUDA index is checked without starting CUDA there)."""
    if device.type == "cuda":
        return device.index is None or device.index < torch.cuda.device_count()
    try:
        torch.empty(0, device=device)
    except Exception:  # noqa: BLE001 -- RuntimeError, or xpu's AssertionError, hpu's ImportError: torch lacks it
        return False
    return True


def parse_dtype(dtype) -> torch.dtype | None:
    """A torch dtype from its name (``float32``, ``torch.bfloat16``); None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ModelArgsError(
            f"model_args dtype must name a torch dtype (float32, float64, bfloat16, ...), got {dtype!r}"
        )
    return value


def parse_precision(value) -> str:
    """model_args ``precision`` (``precision.PRECISIONS``; None: the default, float32), one line naming it otherwise.

    Examples
    --------
    >>> parse_precision(None), parse_precision("bfloat16")
    ('float32', 'bfloat16')
    >>> parse_precision("fp16")
    Traceback (most recent call last):
    ...
    lm_latent_eval.harness.model_args.ModelArgsError: model_args precision must be one of float32, tf32, bfloat16, got 'fp16'
    """
    try:
        return check_precision(value)
    except InputError as err:
        raise ModelArgsError(f"model_args {err}") from None


@dataclass(frozen=True)
class BackendArgs:
    """A backend's model_args, parsed and checked: the model to load and how, and the estimator settings.

    ``model``: a name in ``MODELS`` or ``package.module:Class``; ``options``: the model's own accepted options
    (``model_options``), ``model_kwargs`` those given (for ``from_pretrained``); ``settings`` before ``auto`` is
    resolved, ``given_settings`` those of its fields that model_args gave (as given: a setting the chosen estimator
    ignores is named in a warning); ``device`` as asked for (CUDA falls back to the CPU on a machine without it);
    ``precision`` of the matrix products while it estimates (``lm_latent_eval.precision``); ``memory_budget``:
    bytes the model's planned temporaries may hold (None: its default; accepted only where ``has_memory_plan``).
    """

    model: str
    pretrained: str | None
    settings: EstimatorSettings
    options: tuple[ModelArg, ...]
    model_kwargs: dict
    device: torch.device
    dtype: torch.dtype | None
    results_dir: str | None
    threads: int | None = None
    workers: int | None = None
    given_settings: dict = dataclasses.field(default_factory=dict)
    precision: str = DEFAULT_PRECISION
    # whether ``device`` was asked for (model_args or a --device other than lm-eval's default): else the backend may
    # run a small checkpoint on the CPU (``device_choice``)
    device_asked: bool = True
    memory_budget: int | None = None


def model_name(backend: str, fixed: str | None, given) -> str:
    """The model a backend loads: its fixed model (``latent_<name>``), or model_args ``model`` for ``--model latent``."""
    if fixed is not None and given not in (None, fixed):
        raise ModelArgsError(f"{backend} always loads model={fixed!r}; use --model latent for {given!r}")
    if (fixed or given) is None:
        raise ModelArgsError(
            f"--model latent needs model_args model=<one of {sorted(MODELS)} or package.module:Class>"
        )
    return fixed or str(given)


def parse_backend_args(backend: str, fixed: str | None, given: dict) -> BackendArgs:
    """``given`` (lm-eval's parsed ``--model_args`` plus ``device`` / ``batch_size``) as a ``BackendArgs``.

    Parameters
    ----------
    backend : str
        The backend class's name, for the errors.
    fixed : str or None
        The model the backend always loads (``LatentLMEval.MODEL``), None for ``--model latent``.
    given : dict
        The model_args.

    Returns
    -------
    BackendArgs

    Examples
    --------
    >>> args = parse_backend_args("LatentHMMEval", "hmm", {"num_samples": 8, "device": "cpu"})
    >>> args.model, args.settings.num_samples, args.device.type
    ('hmm', 8, 'cpu')
    >>> parse_backend_args("LatentHMMEval", "hmm", {"num_sample": 8})
    Traceback (most recent call last):
    ...
    lm_latent_eval.harness.model_args.ModelArgsError: unknown model_args ['num_sample'] for LatentHMMEval (did you mean num_sample → num_samples?)...
    """
    model = model_name(backend, fixed, given.get("model"))
    model_class = resolve_class(model)
    options = model_options(model_class)
    planned = (MEMORY_BUDGET_ARG,) if has_memory_plan(model_class) else ()
    check_known(backend, given, (*BACKEND_ARGS, *settings_args(), *options, *planned))
    try:
        settings = parse_settings(given)
    except ModelArgsError as err:
        raise ModelArgsError(f"bad model_args for {backend}: {err}") from None
    kwargs = {a.name: parse_value(a, given[a.name]) for a in options if given.get(a.name) is not None}
    pretrained = given.get("pretrained")
    # str(): lm-eval parses a folder named 2024 as an int
    results_dir = given.get("results_dir")
    return BackendArgs(
        model=model,
        pretrained=None if pretrained is None else str(pretrained),
        settings=settings,
        options=options,
        model_kwargs=kwargs,
        device=resolve_device(given.get("device")),
        device_asked=given.get("device") is not None,
        dtype=parse_dtype(given.get("dtype")),
        results_dir=None if results_dir is None else str(results_dir),
        threads=parse_count("threads", given.get("threads")),
        workers=parse_count("workers", given.get("workers")),
        precision=parse_precision(given.get("precision")),
        memory_budget=parse_memory_budget(given.get("memory_budget")),
        given_settings={a.name: given[a.name] for a in settings_args() if given.get(a.name) is not None},
    )


def with_cli_config(model_args: dict, cli: dict | None) -> dict:
    """model_args with lm-eval's CLI ``--device`` / ``--batch_size`` (always passed) where model_args lack them.

    model_args win, with a log line for each clash. lm-eval's own defaults are dropped, since nobody asked for them:
    ``--device cuda:0`` (the device is then the backend's choice: ``device_choice``), and ``--batch_size 1`` always (it would score one particle per
    ``log_joint`` call, up to 10x slower; our batch is a block of particles, not lm-eval's batch of requests, and
    the numbers never depend on it): the block is then ``auto``. A memory-limited user asks for one particle per
    call in model_args (``batch_size=1``), which lm-eval's CLI cannot tell from its default.

    Examples
    --------
    >>> with_cli_config({"device": "cpu"}, {"device": "cuda:1", "batch_size": "4", "max_batch_size": None})
    {'device': 'cpu', 'batch_size': '4'}
    >>> with_cli_config({}, {"batch_size": "1"}), with_cli_config({"batch_size": 1}, {"batch_size": "1"})
    ({}, {'batch_size': 1})
    """
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    if cli.get("device") == LM_EVAL_DEFAULT_DEVICE:
        # nobody asked for it: CUDA where there is one (``resolve_device``), the CPU for a small checkpoint
        # (``device_choice``)
        del cli["device"]
    if str(cli.get("batch_size")).strip() == LM_EVAL_DEFAULT_BATCH_SIZE:
        del cli["batch_size"]
        if "batch_size" not in model_args:
            logger.info(
                "--batch_size 1 (lm-eval's default) does not set the particle block: auto (one sample block; the "
                "numbers never depend on it); model_args batch_size=N sets it"
            )
    for key in sorted(set(cli) & set(model_args)):
        if str(cli[key]) != str(model_args[key]):
            logger.info("model_args %s=%s overrides --%s %s", key, model_args[key], key, cli[key])
    return {**cli, **model_args}


def name_output_folder(model_args: dict, model: str | None) -> None:
    """Add ``model=<model>`` to the model_args of a ``latent_<model>`` run given neither ``pretrained=`` nor
    ``model=``: lm-eval names the output folder after one of them (else after a random id, the same one for every
    model since lm-eval seeds Python's random).

    Examples
    --------
    >>> model_args = {"num_samples": 8}
    >>> name_output_folder(model_args, "hmm")
    >>> model_args
    {'num_samples': 8, 'model': 'hmm'}
    """
    if model is not None and not {"pretrained", "model"} & set(model_args):
        model_args["model"] = model


def backend_args_doc(model: str | None = None) -> str:
    """The model_args of ``--model latent`` (``model=None``) or ``latent_<model>``: ``accepted_args_doc`` with the
    model's own options (its ``MODEL_ARGS``).

    Examples
    --------
    >>> print(backend_args_doc("hmm").splitlines()[1])
        pretrained (str): local folder or Hugging Face Hub id (default: the bundled checkpoint)
    """
    if model is None:
        return accepted_args_doc()
    model_class = resolve_class(model)
    planned = (MEMORY_BUDGET_ARG,) if has_memory_plan(model_class) else ()
    return accepted_args_doc((*model_options(model_class), *planned))


# what lm-eval's --apply_chat_template gets from our backends
NO_CHAT_TEMPLATE = (
    "--apply_chat_template: the lm-latent-eval backends have no chat template (their models read plain text); "
    "run without it"
)


class ModelArgsLM(LM):
    """The two constructors lm-eval calls (``--model_args`` as a string or a dict) over our model_args: parsed as
    lm-eval parses them, the CLI's ``--device`` / ``--batch_size`` joined where model_args does not give them
    (``with_cli_config``), and the output folder named after the model (``name_output_folder``); lm-eval's chat
    template refused in one line (``NO_CHAT_TEMPLATE``). ``MODEL``: the model a ``latent_<name>`` class loads (None:
    model_args ``model=``)."""

    MODEL: str | None = None

    def chat_template(self, chat_template: bool | str = False) -> str:
        """No chat template: "" where none is asked for, else an UnsupportedError (one line under lm_eval)."""
        if chat_template:
            raise UnsupportedError(NO_CHAT_TEMPLATE)
        return ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt=True) -> str:
        raise UnsupportedError(NO_CHAT_TEMPLATE)

    @property
    def tokenizer_name(self) -> str:
        """lm-eval reads it only under --apply_chat_template (to key its request cache by the template)."""
        raise UnsupportedError(NO_CHAT_TEMPLATE)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> ModelArgsLM:
        """lm-eval's constructor: model_args win over the CLI's ``--device`` / ``--batch_size`` (the lines saying so
        through lm-eval's handler)."""
        log_like_lm_eval()
        name_output_folder(arg_dict, cls.MODEL)
        return cls(**with_cli_config(arg_dict, additional_config))

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> ModelArgsLM:
        """``--model_args key=value,...`` parsed as lm-eval does, then ``create_from_arg_obj``."""
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)
