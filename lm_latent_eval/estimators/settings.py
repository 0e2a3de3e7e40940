"""Every choice that changes an estimate, as one frozen, validated record: ``EstimatorSettings``.

This module is the floor of ``estimators/``: it imports no algorithm. Each field carries a one-line ``help`` in its
metadata; the lm-eval backends derive their accepted ``model_args``, their parsing and their error messages from
these fields (harness/model_args.py), so a setting is declared once. Each rule on a single value is checked once,
here, in ``__post_init__``, with one exception type (``InputError``); the algorithms, proposals and models trust the
record they are given. Which estimator a name means, and the rules that tie a setting to one estimator (SMC's
particles per run), belong to the estimator table (``estimators.registry``), which also resolves ``auto``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field

from ..checks import check_num_samples, check_temperature
from ..errors import InputError

AUTO = "auto"  # the estimator name that the registry resolves per model
AUTO_TARGET_SE = 0.002  # estimator=auto's precision target (nats per token) unless target_se is given
MAX_SAMPLES_FACTOR = 256  # the precision target's default budget per document: 256 × num_samples
DEFAULT_RESAMPLE_THRESHOLD = 0.5  # SMC resamples when ESS < 0.5 · N
DEFAULT_SMC_RUNS = 4  # independent SMC runs per document: their spread is an honest Monte Carlo error
DEFAULT_LEVEL = 0.95  # the level of every interval and certified bound unless ``level`` is given
# the masks of estimator=elbo: LLaDA's count of masked positions, MDLM's masking ratio, Dream's left-to-right order,
# and the ELBO as LLaDA's and MDLM's evaluation code compute it (estimators/elbo.py's MASK_SCHEMES)
ELBO_MASKS = ("count", "ratio", "left_to_right", "llada", "mdlm")


def _help(text: str) -> dict:
    return {"help": text}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class EstimatorSettings:
    """Every choice that changes an estimate; recorded with each result.

    Parameters
    ----------
    estimator : str
        A name of the estimator table (``estimators.registry.ESTIMATORS``) or ``"auto"``.
    num_samples : int
        K, samples (IS) or particles (SMC) per document.
    temperature : float
        τ of the proposal, q_τ(z | x) ∝ q(z | x)^{1/τ}.
    peek : bool
        Whether the proposal reads the token it labels.
    beam_size : int
        k of the beam bound.
    seed : int
        With the document text, seeds every random stream.
    batch_size : int or None
        Particles per ``log_joint`` call (memory only; never changes a number).
    resample_threshold : float
        SMC resamples when ESS < threshold · particles of a run.
    smc_runs : int
        Independent SMC runs per document.
    target_se : float or None
        The precision target in nats per token (0: a fixed ``num_samples``).
    max_samples : int or None
        The precision target's budget per document.
    level : float
        The level of the two-sided interval; the certified bound holds with probability ≥ ``level``.
    elbo_masks : str
        The masks of ``estimator=elbo`` (one of ``ELBO_MASKS``).
    exact_where_cheaper : bool or None
        A sampling estimator computes exactly the documents whose exact program costs no more than their samples
        would (``protocol.exact_marginal_cost`` ≤ K); None: ``auto`` sets it where the model states that cost, any
        other estimator samples every document.

    Examples
    --------
    >>> EstimatorSettings("is", num_samples=64).num_samples
    64
    >>> EstimatorSettings(num_samples=0)
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.InputError: num_samples must be a positive integer, got 0
    """

    estimator: str = field(
        default=AUTO,
        # the names are the estimator table's (estimators.registry.ESTIMATORS), which model_args lists after this
        metadata=_help(
            "auto (exact where the model declares a tractable marginal, else smc where it is stepwise, else is) or a "
            "name of the estimator table"
        ),
    )
    num_samples: int = field(default=100, metadata=_help("K, samples (IS) or particles (SMC) per document"))
    temperature: float = field(default=1.0, metadata=_help("τ, divides every proposal logit"))
    peek: bool = field(default=True, metadata=_help("whether the proposal reads the token it labels"))
    beam_size: int = field(default=10, metadata=_help("k of the beam bound"))
    seed: int = field(
        default=1234, metadata=_help("any integer; with the document text, seeds every random stream")
    )
    # memory only; never changes a number
    batch_size: int | None = field(
        default=None, metadata=_help("particles per log_joint call (memory only; None: one sample block)")
    )
    resample_threshold: float = field(
        default=DEFAULT_RESAMPLE_THRESHOLD,
        metadata=_help("SMC resamples when ESS < threshold · particles of a run; in [0, 1], 0 = never"),
    )
    smc_runs: int = field(
        default=DEFAULT_SMC_RUNS,
        metadata=_help(
            "independent SMC runs per document (their spread is the Monte Carlo error; at least 2 for an interval)"
        ),
    )
    target_se: float | None = field(
        default=None,
        metadata=_help(
            "precision target: more samples for the documents that need them until the Monte Carlo standard error of "
            f"log perplexity (nats per token) is at most this and a two-sided interval is honest (auto: "
            f"{AUTO_TARGET_SE}; 0: fixed num_samples)"
        ),
    )
    max_samples: int | None = field(
        default=None,
        metadata=_help(
            f"the precision target's budget per document (default {MAX_SAMPLES_FACTOR} × num_samples)"
        ),
    )
    level: float = field(
        default=DEFAULT_LEVEL,
        metadata=_help(
            "level of the two-sided interval; the certified bound fails with probability at most 1 − level"
        ),
    )

    elbo_masks: str = field(
        default="count",
        metadata=_help(
            "estimator=elbo's masks: count (LLaDA: l ~ U{1..T} positions masked, weight T/l), ratio (MDLM: "
            "t ~ U(0, 1), each position masked w.p. t, weight 1/t), left_to_right (Dream: one order), or the authors' "
            "evaluation code: llada (mask row kept, 32 evenly spread counts per draw of l, rounded half to even: "
            "not a bound) or mdlm (t ~ U(0.001, 1) spread over the draws)"
        ),
    )

    exact_where_cheaper: bool | None = field(
        default=None,
        metadata=_help(
            "a sampling estimator computes exactly every document whose exact program costs no more than its K "
            "samples (the model's exact_marginal_cost; default: true under auto where the model states it)"
        ),
    )

    def __post_init__(self):
        if not isinstance(self.estimator, str):
            raise InputError(f"estimator must be a name, got {self.estimator!r}")
        check_num_samples(self.num_samples)
        check_temperature(self.temperature)
        check_num_samples(self.beam_size, "beam_size")
        # any integer: it is hashed with the document's text (estimators.seeding), so a negative one is as good
        if not isinstance(self.seed, numbers.Integral) or isinstance(self.seed, bool):
            raise InputError(f"seed must be an integer (any sign), got {self.seed!r}")
        if self.batch_size is not None:
            check_num_samples(self.batch_size, "batch_size")
        if not (_number(self.resample_threshold) and 0.0 <= self.resample_threshold <= 1.0):
            raise InputError(
                "resample_threshold must be a number in [0, 1] (resample when ESS < threshold · particles), "
                f"got {self.resample_threshold!r}"
            )
        check_num_samples(self.smc_runs, "smc_runs")
        if self.target_se is not None and not (_number(self.target_se) and self.target_se >= 0):
            raise InputError(
                f"target_se must be a number ≥ 0 (nats per token; 0: no target), got {self.target_se!r}"
            )
        if self.max_samples is not None:
            check_num_samples(self.max_samples, "max_samples")
            if self.max_samples < self.num_samples:
                raise InputError(
                    f"max_samples={self.max_samples} is below num_samples={self.num_samples}: the precision target "
                    "starts from num_samples and grows up to max_samples; raise max_samples or lower num_samples"
                )
        if not (_number(self.level) and 0.0 < self.level < 1.0):
            raise InputError(f"level must be a number strictly between 0 and 1, got {self.level!r}")
        if self.exact_where_cheaper not in (None, True, False):
            raise InputError(f"exact_where_cheaper must be true or false, got {self.exact_where_cheaper!r}")
        if self.elbo_masks not in ELBO_MASKS:
            raise InputError(f"elbo_masks must be one of {ELBO_MASKS}, got {self.elbo_masks!r}")

    @property
    def sample_budget(self) -> int:
        """Samples per document the precision target may reach (``max_samples``, default 256 × ``num_samples``)."""
        return self.max_samples or MAX_SAMPLES_FACTOR * self.num_samples

    def replace(self, **changes) -> EstimatorSettings:
        """A copy with ``changes`` (validated like any new record).

        Examples
        --------
        >>> EstimatorSettings("is").replace(num_samples=8).num_samples
        8
        """
        return dataclasses.replace(self, **changes)
