"""The masked-diffusion papers' Monte Carlo ELBO (``estimator=elbo``): a named baseline, a lower bound on log p(x).

For a masked LM whose order policy is uniform (``models/masked``), the ELBO of the reveal order σ with q = p(σ) is

    ELBO(x) = E_σ log p(x | σ) = E_M [ w(M) Σ_{i ∈ M} log p_θ(x_i | x outside M revealed, M masked) ] ≤ log p(x),

and the anchors draw the masked set M three ways (``elbo_masks``), each term an unbiased draw of the same ELBO:

- ``count`` (LLaDA's evaluation, its lm-eval wrapper): l ~ U{1, …, T}, l positions masked uniformly, w = T / l;
- ``ratio`` (MDLM, LLaDA's training loss): t ~ U(0, 1), each position masked with probability t, w = 1 / t. Same mean,
  but its variance is infinite (P(one position masked) ≈ T t near t = 0, where the term is ≈ 1 / t), so its standard
  error does not settle as K grows;
- ``left_to_right`` (Dream's ``ar_ftb``): the one order revealing the positions left to right; the estimate is
  log p(x, σ_LR) = log p(x | σ_LR) − log T!, a lower bound with certainty, and the record keeps log p(x | σ_LR), the
  likelihood Dream reports (that of a sampler that always reveals left to right, not a bound on this model's p(x)).

Two more reproduce the authors' evaluation code on the same weights (``MASK_SCHEMES``), beside ours:

- ``llada`` (LLaDA's ``get_log_likelihood.py`` and ``eval_llada.py``): the softmax keeps the mask row, and the draws
  come in groups of b = 32 (``LLADA_GROUP``, eval_llada.py's batch): one l ~ U{1..T} per group, row j masking
  c_j = ((round(l + j T / b) − 1) mod T) + 1 positions, weight T / c_j, round half to even (``torch.round``). Where
  T / b is not an integer the counts are not uniform: at T = 8 every odd count is drawn 0.75 times as often as under
  U{1..T} and every even count 1.25 times, so the expectation Σ_c T w(c) f(c) / c weighs the ELBO's terms unevenly
  and is **not a bound** on log p(x) (nor, with the mask row kept, a figure of the sampler, which never writes it);
- ``mdlm`` (MDLM's evaluation as ``kuleshov-group/bd3lms``'s ``diffusion.py`` runs it): the mask row left out (its
  SUBS parameterization adds −10⁶ to it), t_k = ε + (1 − ε)((u_k + k) / K mod 1) with u_k ~ U(0, 1) (antithetic
  draws spread over the K rows), ε = 10⁻³ (``MDLM_EPS``), each position masked when a uniform draw is ≤ t_k, weight
  1 / t_k. Its expectation (1 − ε)⁻¹ ∫_ε^1 E[Σ_{i∈M} log p_θ(x_i | …) | t] / t dt leaves out t < ε and rescales the
  rest, so it is within O(ε) of the ELBO but **not a bound** in general.

The estimate is the mean of the K terms, with its standard error. E[ELBÔ] ≤ log p(x): its perplexity is an upper
bound in expectation, never an interval on log p, and no certified bound (``fixed_statement``: one-sided, at −∞).
A corpus's figure exp(−Σ_n ELBÔ_n / T) carries the standard error of the bound, exp(·) · √(Σ_n SE_n²) / T
(``bound_stderr``: ``CorpusEstimate.monte_carlo_stderr``, lm-eval's Stderr of ``perplexity``), which measures how far
the figure may be from the ELBO's expectation, not from the true perplexity (at or below both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..errors import UnsupportedError
from .base import Estimator
from .intervals import DocumentError, Interval
from .policy import DEFAULT_POLICY, UncertaintyPolicy
from .record import DocumentEstimate, as_array, as_list
from .seeding import document_generator, stage_block

ELBO_NOT_AN_ESTIMATE = "an ELBO is a lower bound on log p(x), not an estimate of it"
ELBO_NOT_CERTIFIED = (
    "the Monte Carlo ELBO is a lower bound on S in expectation only (E[ELBO estimate] ≤ log p for every document): "
    "its perplexity is an upper bound on average over seeds, with no certified bound"
)
# the random stream of estimator=elbo (IS uses blocks 0, 1, ...; generate_until −1, −2, ...)
ELBO_STREAM = 2**31
# LLaDA's evaluation: the rows that share one draw of l (eval_llada.py's batch_size default)
LLADA_GROUP = 32
# MDLM's evaluation: the smallest masking time t (sampling_eps_min)
MDLM_EPS = 1e-3


@dataclass
class ELBOEstimate(DocumentEstimate):
    """A Monte Carlo ELBO: ``log_likelihood`` is the mean of the K ``samples`` (float64 [K]); ``order_log_likelihood``
    (``left_to_right`` only) is log p(x | σ_LR), Dream's figure."""

    estimator: ClassVar[str] = "elbo"
    samples: np.ndarray | None = None
    order_log_likelihood: float | None = None

    @property
    def standard_error(self) -> float:
        """The Monte Carlo standard error of the mean, s / √K (0 for one order; NaN for K = 1)."""
        if self.samples is None or self.samples.size < 2:
            return math.nan if self.order_log_likelihood is None and self.num_tokens else 0.0
        return float(np.std(self.samples, ddof=1) / math.sqrt(self.samples.size))

    def error(self, policy: UncertaintyPolicy = DEFAULT_POLICY) -> DocumentError:
        if self.num_tokens == 0:
            return DocumentError(self.log_likelihood, 0.0, math.inf)
        return DocumentError(self.log_likelihood, math.nan, 0.0, ELBO_NOT_AN_ESTIMATE)

    def to_json(self) -> dict:
        return super().to_json() | {
            "samples": as_list(self.samples),
            "order_log_likelihood": self.order_log_likelihood,
        }

    @classmethod
    def from_json(cls, record: dict) -> ELBOEstimate:
        estimate = super().from_json(record)
        estimate.samples, estimate.order_log_likelihood = (
            as_array(record.get("samples")),
            record.get("order_log_likelihood"),
        )
        return estimate


def count_masks(K: int, T: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA's masks: l ~ U{1..T}, l positions masked uniformly; (masked BoolTensor [K, T], weights T / l float64 [K]).

    Examples
    --------
    >>> masked, weight = count_masks(4, 3, torch.Generator().manual_seed(0), "cpu")
    >>> bool((masked.sum(1) * weight == 3).all())
    True
    """
    count = torch.randint(1, T + 1, (K,), generator=generator, device=device)
    rank = torch.rand(K, T, generator=generator, device=device).argsort(1).argsort(1)
    return rank < count[:, None], T / count.double()


def ratio_masks(K: int, T: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """MDLM's masks: t ~ U(0, 1], each position masked with probability t; (masked [K, T], weights 1 / t [K])."""
    t = 1.0 - torch.rand(K, generator=generator, device=device, dtype=torch.float64)
    return torch.rand(K, T, generator=generator, device=device, dtype=torch.float64) < t[:, None], 1.0 / t


def llada_counts(group: int, T: int, first: int) -> torch.Tensor:
    """LLaDA's mask counts of one group of ``group`` rows from its draw l = ``first``: c_j = ((round(l + j T / b) − 1)
    mod T) + 1, computed as LLaDA's code does (float32 ``linspace``, ``torch.round``: half to even); LongTensor [b].

    Examples
    --------
    >>> llada_counts(8, 4, 1).tolist()  # T / b = 0.5: 1.5 rounds to 2, 2.5 to 2, 3.5 to 4
    [1, 2, 2, 2, 3, 4, 4, 4]
    """
    spread = torch.linspace(float(first), first + (group - 1) * (T / group), steps=group)
    return ((torch.round(spread).long() - 1) % T) + 1


def subsets_of_size(count: torch.Tensor, T: int, generator: torch.Generator, device) -> torch.Tensor:
    """K uniformly drawn sets, row k holding ``count[k]`` of the T positions: BoolTensor [K, T]."""
    rank = torch.rand(count.numel(), T, generator=generator, device=device).argsort(1).argsort(1)
    return rank < count.to(device)[:, None]


def llada_masks(K: int, T: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA's evaluation masks: groups of ``LLADA_GROUP`` rows, one l ~ U{1..T} per group, row j of a group masking
    ``llada_counts`` positions (the last group cut to K); (masked [K, T], weights T / c_j float64 [K]).

    Examples
    --------
    >>> masked, weight = llada_masks(40, 5, torch.Generator().manual_seed(0), "cpu")
    >>> bool((masked.sum(1) * weight == 5).all())
    True
    """
    groups = -(-K // LLADA_GROUP)
    first = torch.randint(1, T + 1, (groups,), generator=generator, device=device).tolist()
    count = torch.cat([llada_counts(LLADA_GROUP, T, k) for k in first])[:K]
    return subsets_of_size(count, T, generator, device), T / count.to(device).double()


def mdlm_masks(K: int, T: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """MDLM's evaluation masks: antithetic times t_k = ε + (1 − ε)((u_k + k) / K mod 1), each position masked when a
    uniform draw is ≤ t_k; (masked [K, T], weights 1 / t_k float64 [K]).

    Examples
    --------
    >>> masked, weight = mdlm_masks(4, 3, torch.Generator().manual_seed(0), "cpu")
    >>> sorted(((1 / weight - MDLM_EPS) / (1 - MDLM_EPS) * 4).floor().long().tolist())  # one time per quarter
    [0, 1, 2, 3]
    """
    u = torch.rand(K, generator=generator, device=device, dtype=torch.float64)
    spread = (u / K + torch.arange(K, device=device, dtype=torch.float64) / K) % 1
    t = MDLM_EPS + (1 - MDLM_EPS) * spread
    return torch.rand(K, T, generator=generator, device=device, dtype=torch.float64) <= t[:, None], 1.0 / t


@dataclass(frozen=True)
class MaskScheme:
    """How ``estimator=elbo`` draws its masks (``draw(K, T, generator, device) -> (masked [K, T], weights [K])``),
    whether the softmax keeps the mask row, and whether E[estimate] ≤ log p(x) holds."""

    draw: object
    keep_mask_row: bool
    bound: bool


MASK_SCHEMES = {
    "count": MaskScheme(count_masks, False, True),
    "ratio": MaskScheme(ratio_masks, False, True),
    "llada": MaskScheme(llada_masks, True, False),
    "mdlm": MaskScheme(mdlm_masks, False, False),
}


def masked_terms(
    model, x: torch.Tensor, masked: torch.Tensor, weight: torch.Tensor, keep_mask_row: bool = False
) -> torch.Tensor:
    """w_k Σ_{i ∈ M_k} log p_θ(x_i | x outside M_k revealed): float64 [K] (0 where nothing is masked); the mask row
    in the softmax where ``keep_mask_row``."""
    if keep_mask_row:
        log_token = model.masked_token_log_probs(x, ~masked, keep_mask_row=True)
    else:
        log_token = model.masked_token_log_probs(x, ~masked)
    return weight * log_token.to(weight.device).masked_fill(~masked, 0.0).sum(1)


def left_to_right(model, x: torch.Tensor) -> float:
    """log p(x | σ_LR) = Σ_t log p_θ(x_t | x_<t revealed, the rest masked)."""
    T = x.numel()
    revealed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-1)
    return float(model.masked_token_log_probs(x, revealed).diagonal().sum())


class MaskedELBO(Estimator):
    """``estimator=elbo``: the masked LMs' Monte Carlo ELBO with ``num_samples`` draws of ``elbo_masks`` masks."""

    name = "elbo"
    result = ELBOEstimate
    kind = "upper bound in expectation (the Monte Carlo ELBO: E[ELBO estimate] ≤ log p(x) for every document)"
    settings_fields = ("num_samples", "seed", "elbo_masks")

    def missing(self, model) -> str | None:
        """Not a masked LM (no ``masked_token_log_probs``), or an order policy other than uniform."""
        name = type(model).__name__
        if not callable(getattr(model, "masked_token_log_probs", None)):
            return f"{name} is not a masked LM: the ELBO needs masked_token_log_probs(x, revealed)"
        if getattr(model, "policy", "uniform") != "uniform":
            return f"the masking ELBO bounds log p(x) of the uniform order policy only; {name} has policy={model.policy}"
        return None

    def describe(self, settings: dict) -> str:
        if settings.get("elbo_masks") == "left_to_right":
            return "elbo left_to_right"
        return f"elbo {settings.get('elbo_masks')} K={settings.get('num_samples')}"

    def estimate(self, model, x, document, settings, *, device="cpu", progress=None, stage=0):
        T = int(x.numel())
        try:
            if settings.elbo_masks == "left_to_right":
                order = left_to_right(model, x)
                bound = order - math.lgamma(T + 1)
                return ELBOEstimate(document, T, bound, samples=np.array([bound]), order_log_likelihood=order)
            generator = document_generator(settings.seed, document, stage_block(ELBO_STREAM, stage), device)
            scheme = MASK_SCHEMES[settings.elbo_masks]
            masked, weight = scheme.draw(settings.num_samples, T, generator, x.device)
            samples = masked_terms(model, x, masked, weight, scheme.keep_mask_row).cpu().numpy()
        except UnsupportedError as err:  # a text longer than the network reads, which the ELBO cannot split
            raise UnsupportedError(f"{err}; use estimator=auto, which reads such a text in windows") from None
        if progress is not None:
            progress.update(settings.num_samples)
        return ELBOEstimate(document, T, float(samples.mean()), samples=samples)

    def bound_stderr(self, estimates) -> float:
        """√(Σ_n SE_n²): the Monte Carlo standard error of Σ_n ELBÔ_n (``corpus_elbo``), the error of the bound."""
        return corpus_elbo(estimates)[1]

    def fixed_statement(self, log_likelihood: float, level: float) -> Interval:
        """No statement about S: E[ELBO] ≤ S holds for the expectation, not for one draw (``ELBO_NOT_CERTIFIED``)."""
        return Interval(
            -math.inf, math.inf, math.nan, math.nan, math.nan, math.nan, level, ELBO_NOT_CERTIFIED
        )


ELBO = MaskedELBO()


def corpus_elbo(estimates) -> tuple[float, float]:
    """Σ_n ELBÔ_n and its standard error √(Σ_n SE_n²) (documents independent).

    Examples
    --------
    >>> corpus_elbo([ELBOEstimate("a", 1, -2.0, samples=np.array([-1.0, -3.0]))])
    (-2.0, 1.0)
    """
    total = float(sum(e.log_likelihood for e in estimates))
    return total, math.sqrt(sum(e.standard_error**2 for e in estimates if e.num_tokens))
