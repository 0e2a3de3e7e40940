"""The estimator table: every estimator by name, ``auto``'s choice, and the settings each one records.

``ESTIMATORS`` is the one table that ``estimator=``, ``auto``, the backends, the tasks, the cards and the docs' tables
read. Its order is ``auto``'s preference: the first estimator whose ``auto_reason(model)`` is not None is picked
(exact where the model declares a tractable marginal, SMC where it has the stepwise part, IS otherwise; the beam
bound, the masked LMs' ELBO and the canonical configuration are never picked).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch

from ..checks import check_fits_memory
from ..errors import InputError, UnsupportedError
from ..protocol import check_tempering, has
from ..tensors import available_memory
from .base import Estimator
from .beam import BEAM
from .canonical import CANONICAL
from .elbo import ELBO
from .exact import EXACT
from .importance import IMPORTANCE
from .record import DocumentEstimate
from .run import ResolvedEstimator
from .seeding import sample_block
from .settings import AUTO, AUTO_TARGET_SE, EstimatorSettings
from .smc import SMC

ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (EXACT, SMC, IMPORTANCE, BEAM, ELBO, CANONICAL)}


def estimator_named(name: str) -> Estimator:
    """The estimator registered as ``name`` (an InputError listing the names otherwise).

    Examples
    --------
    >>> estimator_named("is").kind[:10]
    'stochastic'
    >>> estimator_named("bootstrap")
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: estimator must be one of ('auto', 'exact', 'smc', 'is', 'beam', 'elbo', 'canonical'), got 'bootstrap'
    """
    if name not in ESTIMATORS:
        raise InputError(f"estimator must be one of {(AUTO, *ESTIMATORS)}, got {name!r}")
    return ESTIMATORS[name]


def resolve(settings: EstimatorSettings, model: Any) -> ResolvedEstimator:
    """The estimator that runs for ``model``, bound to its settings and the model, resolved once per run: ``auto``
    replaced by the estimator it picks, the chosen estimator's own rules checked, and its refusal of ``model`` (one
    line, ``UnsupportedError``) raised here, before any work.

    Under ``auto`` a sampling estimator gets the precision target (``target_se``, default ``AUTO_TARGET_SE``).
    Resolving a resolved record's settings returns the same settings.

    Parameters
    ----------
    settings : EstimatorSettings
        The requested settings.
    model : LatentLM
        The model to estimate with.

    Returns
    -------
    ResolvedEstimator
        The estimator, its resolved settings, the model, and one sentence saying why this estimator (``reason``).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> run = resolve(EstimatorSettings(), hmm)
    >>> run.settings.estimator, run.reason
    ('exact', 'auto: exact, HMMLanguageModel has a tractable log_marginal')
    """
    if settings.estimator != AUTO:
        estimator = estimator_named(settings.estimator)
        why = f"estimator={settings.estimator} as requested"
    else:
        estimator, why = next((e, e.auto_reason(model)) for e in ESTIMATORS.values() if e.auto_reason(model))
        if estimator.draws_samples:
            target = AUTO_TARGET_SE if settings.target_se is None else settings.target_se
            settings = settings.replace(target_se=target)
            why += f" (precision target {target} nats per token)"
            if settings.exact_where_cheaper is None and has(model, "exact_marginal_cost"):
                settings = settings.replace(exact_where_cheaper=True)
                why += "; documents whose exact program costs no more than their samples computed exactly"
        settings = settings.replace(estimator=estimator.name)
    require(estimator, model)
    estimator.check(settings)
    if estimator.draws_samples:
        check_tempering(model.proposal, settings.temperature)
        check_sample_memory(settings.num_samples, model)
    return ResolvedEstimator(estimator, settings, model, why)


# bytes each of K samples of a document holds until its estimate is made, however it is drawn: its log weight and
# log q, and the diagnostics' sorted copy and normalized weights (float64 [K] each, on the host)
SAMPLE_BYTES = 4 * 8


def _device_of(model: Any) -> torch.device:
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return parameter.device if parameter is not None else torch.device("cpu")


def check_sample_memory(num_samples: int, model: Any) -> None:
    """Refuse, before any work, a K whose samples would not fit the memory left: one line naming ``num_samples``, the
    memory it needs and the largest K that fits (``checks.check_fits_memory``), instead of an allocation error.

    What is counted is what a run holds at least: the K log weights of a document on the host (``SAMPLE_BYTES`` a
    sample), and, where the model offers a ``memory_plan`` (KGLM, EntityNLM), its sampler's temporaries for the
    particles one sample block advances together (IS and SMC both draw K in blocks of ``sample_block`` particles),
    which must also fit the model's ``memory_budget``: what a block draws together cannot be chunked.

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> hmm, _ = load_model("hmm")
    >>> check_sample_memory(10_000, hmm)
    >>> check_sample_memory(10**15, hmm)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: num_samples=1000000000000000 needs ... GiB for ..., more than the ...
    """
    device = _device_of(model)
    host = num_samples * SAMPLE_BYTES
    what = f"a document's log weights ({SAMPLE_BYTES} bytes a sample)"
    plan = getattr(model, "memory_plan", None)
    if callable(plan):
        block = min(num_samples, sample_block(device))
        sampler = sum(t.nbytes for t in plan(1, block).temporaries if t.name.startswith("sampler"))
        # the particles of a block are drawn together, so the budget cannot chunk them: refused here instead
        check_fits_memory("num_samples", num_samples, sampler, getattr(model, "memory_budget", None),
                          f"the {block:,} particles its sampler draws side by side (the model's memory_plan)",
                          "of the model's memory_budget (or raise memory_budget=)")  # fmt: skip
        if device.type == "cpu":
            host, what = host + sampler, what + " and its sampler's temporaries (the model's memory_plan)"
        else:
            check_fits_memory("num_samples", num_samples, sampler, available_memory(device),
                              f"the sampler's temporaries on {device} (the model's memory_plan)")  # fmt: skip
    check_fits_memory("num_samples", num_samples, host, available_memory("cpu"), what)


def with_model_defaults(
    settings: EstimatorSettings, model: Any, given: Collection[str] = ()
) -> tuple[EstimatorSettings, str]:
    """The settings with the model's own defaults (its attribute ``default_settings``, {field: value}) for
    every field the user did not give (``given``: the names given), and a clause naming those applied ("" if none).

    A model declares there what its measured behaviour asks for where the package default serves it badly (the
    masked LMs without a value head: ``peek=False``, uniform orders). The backends apply it before ``resolve``; the
    settings recorded with the results are the ones that ran.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(default_settings={"peek": False})
    >>> settings, why = with_model_defaults(EstimatorSettings(), model)
    >>> settings.peek, why
    (False, "; peek=False by the model's default_settings")
    >>> with_model_defaults(EstimatorSettings(), model, given={"peek"})[0].peek
    True
    """
    own = {k: v for k, v in (getattr(model, "default_settings", None) or {}).items() if k not in set(given)}
    if not own:
        return settings, ""
    applied = ", ".join(f"{k}={v}" for k, v in own.items())
    return settings.replace(**own), f"; {applied} by the model's default_settings"


def require(estimator: Estimator, model: Any) -> None:
    """An ``UnsupportedError`` in one line when ``model`` cannot serve ``estimator``: why, and which estimators it
    can use (``auto`` first).

    Examples
    --------
    >>> from lm_latent_eval.models import load_model
    >>> kglm, _ = load_model("kglm")
    >>> require(ESTIMATORS["exact"], kglm)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: KGLM has no exact log_marginal(x); use estimator=auto, or one of smc, is, beam

    A model whose latent is continuous has no beam (``protocol.missing_beam`` says why, this adds what it can use):

    >>> from types import SimpleNamespace
    >>> class Gaussian:
    ...     latent_support = "continuous"
    ...     proposal = SimpleNamespace(sample=print)
    ...     log_marginal = print
    >>> require(ESTIMATORS["beam"], Gaussian())
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: Gaussian has a continuous latent: no beam over configurations; use estimator=auto, or one of exact, is
    """
    reason = estimator.missing(model)
    if reason is not None:
        usable = [e.name for e in ESTIMATORS.values() if e.missing(model) is None]
        raise UnsupportedError(f"{reason}; use estimator=auto, or one of {', '.join(usable)}")


def recorded_settings(settings: EstimatorSettings, device: torch.device | str = "cpu") -> dict:
    """``ResolvedEstimator.recorded_settings`` of resolved ``settings`` without their model (a results file's).

    Examples
    --------
    >>> recorded_settings(EstimatorSettings("beam", beam_size=4))
    {'estimator': 'beam', 'beam_size': 4}
    """
    return ResolvedEstimator(estimator_named(settings.estimator), settings, None).recorded_settings(device)


def estimate_from_json(record: dict) -> DocumentEstimate:
    """The estimate a family's ``to_json`` wrote, read back by that family's record class."""
    return estimator_named(record["estimator"]).result.from_json(record)
