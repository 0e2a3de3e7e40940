"""Registry of our latent LMs and loading of any contract-conforming model by name or ``module:Class``."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, MissingFileError, UnsupportedError
from ..paths import DATA_DIR


@dataclass(frozen=True)
class ModelEntry:
    """One row of the model table: the class (``"module:Class"``, with ``from_pretrained(path_or_hub_id, **kwargs)``),
    the lm-eval backend class in ``lm_latent_eval.harness.backends`` that serves ``--model latent_<name>`` (None: only
    ``--model latent model=<name>``), the trainer module of ``lm-latent-eval train <name>`` (None: not trainable), the
    bundled held-out corpus under ``DATA_DIR`` (``bundled_corpus``) and the module that writes the bundled checkpoint
    and corpus (None: none bundled)."""

    target: str
    backend: str | None = None
    trainer: str | None = None
    corpus: str | None = None
    maker: str | None = None


# The one table of our latent LMs: adding a model is one row here (plus its lm_eval.models entry point in pyproject,
# which tests/harness/test_backends.py checks against this table, and a task under tasks/).
MODELS = {
    "hmm": ModelEntry(
        "lm_latent_eval.models.hmm:HMMLanguageModel",
        "LatentHMMEval",
        "lm_latent_eval.models.hmm.train",
        "corpus/tiny_test.jsonl",
        "lm_latent_eval.data.make_default_hmm",
    ),
    "kglm": ModelEntry(
        "lm_latent_eval.models.kglm:KGLM",
        "LatentKGLMEval",
        "lm_latent_eval.models.kglm.train",
        "linked_tiny/test.jsonl",
        "lm_latent_eval.models.kglm.make_default",
    ),
    "entitynlm": ModelEntry(
        "lm_latent_eval.models.entitynlm:EntityNLM",
        "LatentEntityNLMEval",
        "lm_latent_eval.models.entitynlm.train",
        "coref_tiny/test.jsonl",
        "lm_latent_eval.models.entitynlm.make_default",
    ),
    "rnng": ModelEntry(
        "lm_latent_eval.models.rnng:RNNG",
        "LatentRNNGEval",
        "lm_latent_eval.models.rnng.train",
        "ptb_tiny/test.txt",
        "lm_latent_eval.models.rnng.make_default",
    ),
    "lda": ModelEntry(
        "lm_latent_eval.models.lda:LDA",
        "LatentLDAEval",
        "lm_latent_eval.models.lda.train",
        "pydoc_topics/test.jsonl",
        "lm_latent_eval.models.lda.make_default",
    ),
    # masked-diffusion LMs, z = the order in which the positions are revealed
    "masked": ModelEntry(
        "lm_latent_eval.models.masked:MaskedDiffusionLM",
        "LatentMaskedEval",
        "lm_latent_eval.models.masked.train",
        "masked_tiny/test.jsonl",
        "lm_latent_eval.models.masked.make_default",
    ),
    # any Hugging Face causal LM, z = its tokenizations; and the same LM with a trivial z
    "tokenization": ModelEntry(
        "lm_latent_eval.models.tokenization:TokenizationLM",
        "LatentTokenizationEval",
        corpus="corpus/tiny_test.jsonl",
        maker="lm_latent_eval.models.tokenization.make_default",
    ),
    "causal": ModelEntry("lm_latent_eval.models.causal_lm:CausalLMAsLatent"),
    # any Hugging Face causal LM, z = its chain of thought between a question and an answer
    "reasoning": ModelEntry("lm_latent_eval.models.reasoning:LatentReasoningLM", "LatentReasoningEval"),
}


def model_target(model: str) -> str:
    """``"module:Class"`` of a registered name (``hmm``), or the import path itself (``pkg.mod:Cls``)."""
    return MODELS[model].target if model in MODELS else model


def resolve_class(model: str):
    """The class for a registered name (``hmm``) or an import path (``pkg.mod:Cls``)."""
    target = model_target(model)
    if ":" not in target:
        raise InputError(
            f"unknown model {model!r}: use one of {sorted(MODELS)} or 'package.module:ClassName'"
        )
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise InputError(f"cannot import model class {target!r}: {err}") from err


def bundled_corpus(model: str) -> Path:
    """The bundled held-out corpus of one of our models (its row's ``corpus``, under ``DATA_DIR``).

    Examples
    --------
    >>> bundled_corpus("kglm").relative_to(DATA_DIR).as_posix()
    'linked_tiny/test.jsonl'
    """
    entry = MODELS.get(model)
    if entry is None or entry.corpus is None:
        with_corpus = sorted(name for name, row in MODELS.items() if row.corpus)
        raise InputError(f"no bundled corpus for model {model!r}: one of {with_corpus}")
    return DATA_DIR / entry.corpus


def default_checkpoint(model: str) -> Path | None:
    """The bundled checkpoint folder for one of our models (``lm_latent_eval/data/<name>``), if shipped."""
    path = DATA_DIR / model
    return path if (path / "config.json").is_file() else None


def checkpoint_hash(path: str | Path) -> str:
    """sha256 over the checkpoint's files (names and bytes, sorted): the model's identity in results and caches."""
    path = Path(path)
    files = sorted(p for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


# a pretrained= with one of these endings is a local file, never a Hugging Face Hub id
LOCAL_FILE_SUFFIXES = (
    ".joblib",
    ".pkl",
    ".pickle",
    ".bin",
    ".gz",
    ".txt",
    ".json",
    ".safetensors",
    ".pt",
    ".tar",
)


def hub_snapshot(name: str, what: str = "pretrained") -> Path:
    """The local folder of Hub model ``name`` (downloaded if needed); MissingFileError saying that no folder and no
    Hub model of that name exists, or why the Hub could not be asked, in one line (``what``: the option's name)."""
    # kept local: this registry stays cheap to import (CONTRIBUTING.md)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError

    folder = f"{what}={name}: no such folder ({Path(name).expanduser().absolute()})"
    try:
        return Path(snapshot_download(name))
    except HFValidationError:
        raise MissingFileError(f"{folder}, and it is not a Hugging Face Hub id either") from None
    except RepositoryNotFoundError:
        raise MissingFileError(f"{folder}, and no Hugging Face Hub model of that name was found") from None
    except LocalEntryNotFoundError:
        raise MissingFileError(
            f"{folder}, and no Hugging Face Hub model of that name is in the local cache (the Hub was not asked: "
            "offline, HF_HUB_OFFLINE set, or no connection)"
        ) from None


def places_while_loading(cls) -> bool:
    """Whether ``cls.from_pretrained`` takes ``dtype`` and ``device`` keyword arguments (and so loads its weights in
    that dtype onto that device, as the masked LM's Hugging Face checkpoints do): named parameters, not ``**kwargs``.

    Examples
    --------
    >>> class Placed:
    ...     @classmethod
    ...     def from_pretrained(cls, path, *, dtype=None, device=None): ...
    >>> class Plain:
    ...     @classmethod
    ...     def from_pretrained(cls, path, **kwargs): ...
    >>> places_while_loading(Placed), places_while_loading(Plain)
    (True, False)
    """
    try:
        parameters = inspect.signature(cls.from_pretrained).parameters
    except (TypeError, ValueError):
        return False
    return all(
        name in parameters and parameters[name].kind is not inspect.Parameter.VAR_KEYWORD
        for name in ("dtype", "device")
    )


def load_model(
    model: str = "hmm",
    pretrained: str | Path | None = None,
    device: str = "cpu",
    dtype=None,
    *,
    given_as: str = "pretrained",
    **kwargs,
):
    """Instantiate ``model`` from ``pretrained`` (local dir or Hub id; default: the bundled checkpoint), eval mode.

    Returns (model, checkpoint_dir) so callers can record ``checkpoint_hash(checkpoint_dir)``. ``given_as``: how the
    caller's user gave ``pretrained``, for the errors (``pretrained`` in model_args, ``--pretrained`` on a command
    line).
    """
    cls = resolve_class(model)
    if not callable(getattr(cls, "from_pretrained", None)):
        raise UnsupportedError(
            f"model class {model_target(model)!r} has no from_pretrained(path, **kwargs): a model class needs it to "
            "be loaded (docs/your-model.md)"
        )
    if pretrained is None:
        pretrained = default_checkpoint(model)
        if pretrained is None:
            raise InputError(f"model {model!r} has no bundled checkpoint: pass {given_as}=<dir or hub id>")
    path = Path(pretrained)
    if not path.exists():
        if path.suffix in LOCAL_FILE_SUFFIXES:
            raise MissingFileError(
                f"{given_as}={pretrained}: no such model file ({path.expanduser().absolute()}), and a name ending in "
                f"{path.suffix} is a local file, not a Hugging Face Hub id"
            )
        path = hub_snapshot(str(pretrained), given_as)
    if path.is_dir():
        # kept local: this registry stays cheap to import (CONTRIBUTING.md)
        from .checkpoints import check_checkpoint

        check_checkpoint(cls, model, path, f"{given_as}={pretrained}", given=kwargs)
    # a class whose from_pretrained names dtype and device reads the weights that way (an 8B network never sits on
    # the host in float32); the others are cast and moved below
    placement = {"dtype": dtype, "device": device} if places_while_loading(cls) else {}
    # huggingface_hub prints "Loading weights from local directory"
    with contextlib.redirect_stdout(io.StringIO()):
        lm = cls.from_pretrained(str(path), **placement, **kwargs)
    # kept local: this registry stays cheap to import (CONTRIBUTING.md)
    from ..protocol.capabilities import missing

    absent = missing(lm, "latent_lm")
    if absent:
        raise UnsupportedError(
            f"model class {model_target(model)!r} is not a latent LM: it has no {', '.join(absent)} (the contract: "
            "proposal, tokenize(text), log_joint(x, z); docs/your-model.md)"
        )
    if dtype is not None and hasattr(lm, "to"):
        lm = lm.to(dtype=dtype)
    if hasattr(lm, "to"):
        lm = lm.to(device)
    if hasattr(lm, "eval"):
        lm.eval()
    return lm, path
