"""A tiny latent LM with a continuous latent (the contract table's Gaussian row), and its references by quadrature.

z ~ N(0, 1), one real per document; given z the tokens are i.i.d. over the words {<unk>, a, b, c, d, e} with logits
OFFSETS + SLOPES · z. log p(x) = log ∫ N(z; 0, 1) Π_t p(x_t | z) dz has no closed form: ``log_marginal`` computes it
by Gauss–Hermite quadrature (256 nodes centred on the posterior mode and scaled by the Laplace standard deviation;
it agrees with ``integrate``, scipy's adaptive quadrature, within 1e-12 nats on the table's texts). The proposal
q(z | x) = N(m(x), 1) is centred on the posterior mode m(x) with the prior's unit variance, so that its tails are
never lighter than the posterior's (whose tails are the prior's: p(x | z) ≤ 1); tempered, N(m(x), τ) (q^{1/τ}
normalized). Without peeking it is the tempered prior N(0, τ). There is no beam (a continuous latent).

z is float64 [K, 1] for a text with tokens and [K, 0] for the empty text, which has no latent to draw: p("") = 1
exactly (z integrated out), so log q = log p = 0 there as for every model of the table.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy import integrate as scipy_integrate
from scipy import optimize, stats

from lm_latent_eval.protocol import CheckedSampler, check_text

VOCAB = ("<unk>", "a", "b", "c", "d", "e")
OFFSETS = (-1.5, 0.4, 0.2, -0.1, 0.0, -0.5)  # a_v
SLOPES = (0.3, 1.2, -0.8, 0.5, -1.5, 2.0)  # b_v: log p(x_t = v | z) = a_v + b_v z − logsumexp(a + b z)
QUADRATURE_NODES = 256
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_pdf(z: torch.Tensor, mean: float, var: float) -> torch.Tensor:
    """log N(z; mean, var), elementwise, float64."""
    return -((z - mean) ** 2) / (2 * var) - 0.5 * math.log(var) - LOG_SQRT_2PI


@functools.cache
def hermite_rule(n: int = QUADRATURE_NODES) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss–Hermite nodes u_i and log weights log w_i (∫ e^{−u²} f(u) du ≈ Σ w_i f(u_i)), float64."""
    nodes, weights = np.polynomial.hermite.hermgauss(n)
    return torch.from_numpy(nodes), torch.from_numpy(np.log(weights))


@dataclass(frozen=True)
class GaussianParticles:
    """SMC state: the text, q_τ's mean and variance, K, and z [K, 1] once drawn at step 0 ([K, 0] before)."""

    x: torch.Tensor
    mean: float
    var: float
    z: torch.Tensor


class GaussianProposal(CheckedSampler):
    """q_τ(z | x) = N(m(x), τ) peeking (m the posterior mode), N(0, τ) without: z [K, 1], log q_τ [K]."""

    tempers = True  # q(z | x)^{1/τ} of a Gaussian N(μ, σ²), normalized, is N(μ, τσ²)

    def __init__(self, lm: GaussianLatentLM):
        self.lm = lm

    def mean_and_var(self, x: torch.Tensor, temperature: float, peek: bool) -> tuple[float, float]:
        """(mean, variance) of q_τ(z | x)."""
        return (self.lm.posterior_mode(x)[0] if peek else 0.0), float(temperature)

    def _sample(self, x, num_samples, temperature, peek, generator):
        if x.numel() == 0:
            return torch.zeros(num_samples, 0, dtype=torch.float64), torch.zeros(
                num_samples, dtype=torch.float64
            )
        mean, var = self.mean_and_var(x, temperature, peek)
        z = draw(mean, var, num_samples, generator)
        return z, normal_log_pdf(z[:, 0], mean, var)

    def log_prob(self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True):
        """log q_τ(z | x) of given z [K, 1]: float64 [K] (0 for the empty text)."""
        if x.numel() == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64)
        mean, var = self.mean_and_var(x, temperature, peek)
        return normal_log_pdf(z[:, 0].double(), mean, var)


def draw(mean: float, var: float, num_samples: int, generator) -> torch.Tensor:
    """z [K, 1] ~ N(mean, var): the one draw ``proposal.sample`` and ``smc_step`` share (same numbers per seed)."""
    return mean + math.sqrt(var) * torch.randn(num_samples, 1, generator=generator, dtype=torch.float64)


class GaussianLatentLM:
    """p(x, z) = N(z; 0, 1) Π_t softmax(OFFSETS + SLOPES z)[x_t]: a prefix probability (no end event), a continuous
    latent (no beam), an exact marginal by quadrature and the stepwise part (z drawn at step 0)."""

    latent_support = "continuous"
    prefix_probability = True  # i.i.d. tokens given z, no end-of-text event
    # log_marginal is a 256-node Gauss-Hermite quadrature: cheap on any text
    exact_marginal_tractable = True

    def __init__(self, offsets=OFFSETS, slopes=SLOPES, vocab=VOCAB):
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}  # vocab[0] is the unknown word
        self.offsets = torch.tensor(offsets, dtype=torch.float64)
        self.slopes = torch.tensor(slopes, dtype=torch.float64)
        self.proposal = GaussianProposal(self)

    def tokenize(self, text: str) -> torch.Tensor:
        """Whitespace words → ids; an unknown word is <unk> (id 0), the empty text [0]."""
        return torch.tensor([self.index.get(w, 0) for w in text.split()], dtype=torch.long)

    def token_log_probs(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x_t | z_k): float64 [K, T] for z [K, 1]."""
        logits = self.offsets + self.slopes * z.double()  # [K, V]
        return torch.log_softmax(logits, -1)[:, x.cpu()]

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log N(z; 0, 1) + Σ_t log p(x_t | z): float64 [K] for z [K, 1] (a log density in z); 0 for the empty
        text (z [K, 0])."""
        check_text(x)
        width = min(x.numel(), 1)
        if not isinstance(z, torch.Tensor) or z.dim() != 2 or z.shape[1] != width:
            raise ValueError(f"z must be a float tensor [K, {width}] for a text of {x.numel()} tokens")
        if width == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64)
        return normal_log_pdf(z[:, 0].double(), 0.0, 1.0) + self.token_log_probs(x, z).sum(-1)

    def posterior_mode(self, x: torch.Tensor) -> tuple[float, float]:
        """(m, s²): the mode of g(z) = log p(z) + log p(x | z) and the Laplace variance −1/g''(m). g is strictly
        concave (g'' = −1 − T Var_softmax(b) ≤ −1): Newton's method, kept inside a bracket of the root of g'."""
        counts = torch.bincount(x.cpu(), minlength=len(self.vocab)).double()
        total, observed = float(counts.sum()), float(counts @ self.slopes)
        bound = 1.0 + 2.0 * total * float(self.slopes.abs().max())  # g'(−bound) > 0 > g'(bound)
        lo, hi, z = -bound, bound, 0.0
        for _ in range(200):
            grad, hess = self._derivatives(z, total, observed)
            lo, hi = (z, hi) if grad > 0 else (lo, z)
            step = z - grad / hess
            new = step if lo < step < hi else 0.5 * (lo + hi)
            if new == z or grad == 0.0:
                break
            z = new
        return z, -1.0 / self._derivatives(z, total, observed)[1]

    def _derivatives(self, z: float, total: float, observed: float) -> tuple[float, float]:
        probs = torch.softmax(self.offsets + self.slopes * z, 0)
        mean_b = float(probs @ self.slopes)
        var_b = float(probs @ self.slopes**2) - mean_b**2
        return -z + observed - total * mean_b, -1.0 - total * var_b

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """log ∫ p(x, z) dz by Gauss–Hermite quadrature at z = m + √2 s u_i (m, s² from ``posterior_mode``):
        log(√2 s) + logsumexp_i(log w_i + u_i² + log p(x, z_i)); 0.0 for the empty text."""
        if x.numel() == 0:
            return 0.0
        mode, var = self.posterior_mode(x)
        nodes, log_weights = hermite_rule()
        scale = math.sqrt(2 * var)
        log_p = self.log_joint(x, (mode + scale * nodes)[:, None])
        return math.log(scale) + float(torch.logsumexp(log_weights + nodes**2 + log_p, 0))

    # ------------------------------------------------------------ the stepwise part: z drawn with token 0

    def smc_init(self, x: torch.Tensor, num_particles: int, temperature: float = 1.0, peek: bool = True):
        """K particles that have drawn nothing yet (z [K, 0])."""
        mean, var = self.proposal.mean_and_var(x, temperature, peek) if x.numel() else (0.0, 1.0)
        return GaussianParticles(x, mean, var, torch.zeros(num_particles, 0, dtype=torch.float64))

    def smc_step(self, state: GaussianParticles, t: int, generator):
        """Step 0 draws z ~ q_τ and returns log p(z) + log p(x_0 | z) − log q_τ(z); step t > 0 returns
        log p(x_t | z). The increments sum to log_joint − log q_τ."""
        if t == 0:
            z = draw(state.mean, state.var, state.z.shape[0], generator)
            state = replace(state, z=z)
            prior_over_q = normal_log_pdf(z[:, 0], 0.0, 1.0) - normal_log_pdf(z[:, 0], state.mean, state.var)
            return state, prior_over_q + self.token_log_probs(state.x[:1], z)[:, 0]
        return state, self.token_log_probs(state.x[t : t + 1], state.z)[:, 0]

    def smc_reorder(self, state: GaussianParticles, ancestors: torch.Tensor) -> GaussianParticles:
        return replace(state, z=state.z[ancestors])

    def smc_latents(self, state: GaussianParticles) -> torch.Tensor:
        return state.z


# ---------------------------------------------------------------- references for the contract table


def reference_mode(model: GaussianLatentLM, x: torch.Tensor) -> float:
    """The posterior mode, recomputed independently of ``posterior_mode``: Brent's root of g'(z) in numpy."""
    a, b = model.offsets.numpy(), model.slopes.numpy()
    words = x.numpy()

    def grad(z: float) -> float:
        logits = a + b * z
        probs = np.exp(logits - logits.max())
        return -z + b[words].sum() - words.size * float(probs @ b) / probs.sum()

    bound = 1.0 + 2.0 * words.size * np.abs(b).max()
    return optimize.brentq(grad, -bound, bound, xtol=1e-15, rtol=4 * np.finfo(float).eps)


def reference_log_q(model, x, z, temperature, peek) -> torch.Tensor:
    """log q_τ(z | x) = log N(z; m(x) or 0, τ) with scipy and ``reference_mode``: float64 [K]."""
    if x.numel() == 0:
        return torch.zeros(z.shape[0], dtype=torch.float64)
    mean = reference_mode(model, x) if peek else 0.0
    return torch.from_numpy(stats.norm.logpdf(z[:, 0].numpy(), mean, math.sqrt(temperature)))


def integrate(log_f, lo: float = -math.inf, hi: float = math.inf) -> float:
    """log ∫_lo^hi exp(log_f(z)) dz by scipy's adaptive quadrature (QUADPACK) in float64, independent of
    ``log_marginal``'s rule: ``log_f`` maps z [N, 1] to [N]; the integrand is divided by its maximum on a grid over
    [−40, 40] and the integral split there. Relative accuracy about 1e-12 for the smooth unimodal integrands of the
    tests."""
    grid = torch.linspace(max(lo, -40.0), min(hi, 40.0), 8001, dtype=torch.float64)
    values = log_f(grid[:, None])
    peak = float(values.max())
    centre = float(grid[int(values.argmax())])

    def f(z: float) -> float:
        return math.exp(float(log_f(torch.tensor([[z]], dtype=torch.float64))[0]) - peak)

    options = {"epsabs": 0.0, "epsrel": 1e-12, "limit": 500}
    total = sum(scipy_integrate.quad(f, a, b, **options)[0] for a, b in ((lo, centre), (centre, hi)) if a < b)
    return peak + math.log(total)


def heavy_tails(model, x, temperature: float, peek: bool) -> str:
    """Why E_q[w²] = ∫ p(x, z)²/q_τ(z | x) dz is infinite (or too heavy for a 3-SE check); "" when it is finite.
    p(x, z)² ≤ N(z; 0, 1)², so with q_τ's variance τ the integrand's Gaussian factor is exp(z²(1/(2τ) − 1)):
    decaying for τ > 1/2."""
    if temperature > 0.5:
        return ""
    return (
        f"q_τ has variance τ = {temperature:g} ≤ 1/2: p(x, z)²/q_τ(z) has the non-decaying Gaussian factor "
        "exp(z²(1/(2τ) − 1)), so E_q[w²] is infinite (or too heavy-tailed for a 3-SE check)"
    )
