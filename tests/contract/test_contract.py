"""Every latent LM against the contract (DESIGN.md sections 3, 4) on a tiny instance with a listable support (or,
for a continuous latent, a quadrature).

One row per model in ``cases.py``; each property below runs on every row (over the peek modes the row has) and
skips, naming the reason, where it does not apply (no stepwise part, nothing expressible outside the support,
no beam, weights too heavy-tailed for a 3-SE check). Exact properties: q sums to one over the support, samples
lie in it with q's frequencies and report their own log q, log_joint is float64 [K], −inf exactly outside the
support and sums to the exact log p(x), beam ≤ exact with equality once the beam covers the support, stepwise
increments sum to log p(x, z) − log q(z | x), the empty text. Statistical properties (fixed seeds): IS and SMC
estimates of p are unbiased (mean p̂/p within 3 standard errors over 300 seeds), IS converges to the exact
value. For a continuous latent the sums over the support are integrals (the row's ``integrate``): q_τ integrates
to one, p(x, z) to the exact p(x), and the draws fall into bins with the probabilities q_τ integrates to there.
"""

from __future__ import annotations

import functools
import itertools
import math
import re

import numpy as np
import pytest
import torch
from cases import CASES, Case
from is_checks import assert_frequencies_match, assert_unbiased, exact_is_standard_error

from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.estimators import (
    EstimatorSettings,
    beam_log_marginal,
    estimate_document,
    importance_log_weights,
    log_mean_exp,
    resolve,
    smc_log_weights,
)
from lm_latent_eval.protocol import (
    has,
    is_prefix_probability,
    latent_support,
    missing,
    num_particles,
    require_beam,
    select_particles,
)

TEMPERATURES = (0.5, 1.0, 2.0)
RUNS = 300  # independent estimates per unbiasedness check
BINS = 20  # a continuous latent's draws against q_τ: chi-square over this many bins
MAX_RELATIVE_SD = 4.0  # of p̂/p at K = 4: beyond it 300 runs cannot estimate the spread a 3-SE check needs


def rows(slow_when=None, **axes) -> list:
    """pytest parameters: every row of the table × every combination of ``axes`` (name -> values); the axis
    ``peek`` takes only the row's peek modes; ``slow_when(*combo)`` marks a combination slow."""
    params = []
    for case in CASES:
        combos = [()]
        for name, values in axes.items():
            values = [v for v in values if v in case.peeks] if name == "peek" else values
            combos = [(*c, v) for c in combos for v in values]
        params += [pytest.param(case, *combo, id="-".join([case.name, *map(_label, combo)]),
                                marks=[pytest.mark.slow] if slow_when and slow_when(*combo) else [])
                   for combo in combos]  # fmt: skip
    return params


def _label(value) -> str:
    if isinstance(value, tuple):
        return "-".join(map(_label, value))
    if isinstance(value, bool):
        return "peek" if value else "no-peek"
    return f"{value:g}"


@functools.cache
def built(case: Case):
    """One model per row for the whole module (the properties never change a model)."""
    return case.build()


def require_stepwise(case: Case) -> None:
    if not case.stepwise:
        pytest.skip(f"{case.name} has no stepwise part (smc_init, smc_step, smc_reorder, smc_latents)")


def require_same_stepwise_proposal(case: Case, peek: bool) -> None:
    require_stepwise(case)
    if peek and case.twisted_peek:
        pytest.skip(f"{case.name}: {case.twisted_peek}")


def configurations(case: Case, model, x):
    """The enumerated support, or, for a continuous latent, 64 draws of q (peek, τ = 1, seed 0): z with p(x, z) > 0."""
    if case.support is not None:
        return case.support(model, x)
    with torch.no_grad():
        return model.proposal.sample(x, 64, 1.0, True, torch.Generator().manual_seed(0))[0]


def index_of(case: Case, support) -> dict[tuple, int]:
    keys = case.keys(support)
    index = {key: i for i, key in enumerate(keys)}
    assert len(index) == len(keys), "the enumerator listed a configuration twice"
    return index


def rows_in(case: Case, index: dict, z) -> list[int]:
    """Row of the support of every configuration of z; fails on one outside the support."""
    keys = case.keys(z)
    outside = [key for key in keys if key not in index]
    assert not outside, f"{len(outside)} configurations outside the enumerated support, e.g. {outside[0]}"
    return [index[key] for key in keys]


# ---------------------------------------------------------------- the row describes the model


@pytest.mark.parametrize("case", rows())
def test_the_row_declares_what_the_model_offers(case):
    """The contract's methods exist; the stepwise part exists exactly where the row says; a proposal without
    peek=false refuses it by name."""
    model = built(case)
    assert has(model, "latent_lm")
    assert has(model, "stepwise") == case.stepwise, f"missing: {missing(model, 'stepwise')}"
    assert (latent_support(model) == "continuous") == (case.support is None)
    assert has(model, "beam_proposal") == (not case.no_beam)
    if case.no_beam:
        with pytest.raises(UnsupportedError, match="no beam"):
            require_beam(model)
    if case.no_peek:
        with pytest.raises(ValueError, match="peek"):
            model.proposal.sample(model.tokenize(case.text), 2, peek=False)


@pytest.mark.parametrize("case", [c for c in CASES if c.no_beam], ids=lambda c: c.name)
def test_estimator_beam_on_a_model_without_a_beam_names_why_and_what_it_can_use(case):
    """The contract states the reason (``require_beam``); the estimator table adds the estimators the model can use,
    in one line: the protocol names no estimator."""
    model = built(case)
    with pytest.raises(UnsupportedError) as caught:
        resolve(EstimatorSettings("beam"), model)
    reason, usable = str(caught.value).split("; use estimator=auto, or one of ")
    with pytest.raises(UnsupportedError, match=re.escape(reason)):
        require_beam(model)
    assert "is" in usable.split(", ") and "beam" not in usable.split(", ")


# ---------------------------------------------------------------- the proposal q(z | x)


@pytest.mark.parametrize("case,peek,temperature", rows(peek=(True, False), temperature=TEMPERATURES))
def test_proposal_sums_to_one_over_the_support(case, peek, temperature):
    """Σ_z q_τ(z | x) = 1 over the enumerated support, and q > 0 on every z with p(x, z) > 0 (q covers p); for a
    continuous latent ∫ q_τ(z | x) dz = 1 (a log q off by a constant fails here)."""
    model = built(case)
    for text in (case.short_text, case.text):
        x = model.tokenize(text)
        if case.support is None:
            with torch.no_grad():
                total = case.integrate(lambda z, x=x: case.log_q(model, x, z, temperature, peek))
            assert total == pytest.approx(0.0, abs=case.q_atol)
            continue
        support = case.support(model, x)
        if num_particles(support) == 1:
            pytest.skip(f"{case.name}: one configuration, whose q = 1 is the sampler's log q = 0 (next test)")
        with torch.no_grad():
            log_q = case.log_q(model, x, support, temperature, peek)
        assert log_q.dtype == torch.float64 and torch.isfinite(log_q).all()
        assert float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=case.q_atol)


@pytest.mark.parametrize("case,peek,temperature", rows(peek=(True, False), temperature=TEMPERATURES))
def test_samples_lie_in_the_support_report_their_log_q_and_follow_q(case, peek, temperature):
    """Every draw has p(x, z) > 0, the log q returned with it is the enumerated log q_τ of that z, and the
    draws' frequencies match q_τ (chi-square); for a continuous latent, ``draws_follow_a_density``."""
    model = built(case)
    x = model.tokenize(case.short_text)
    if case.support is None:
        draws_follow_a_density(case, model, x, temperature, peek)
        return
    support = case.support(model, x)
    index = index_of(case, support)
    n = case.num_draws
    with torch.no_grad():
        log_q_support = case.log_q(model, x, support, temperature, peek)
        z, log_q = model.proposal.sample(x, n, temperature, peek, torch.Generator().manual_seed(11))
        log_p = model.log_joint(x, z)
    assert num_particles(z) == n and log_q.shape == (n,) and log_q.dtype == torch.float64
    drawn = rows_in(case, index, z)
    assert torch.isfinite(log_p).all()
    torch.testing.assert_close(log_q.cpu(), log_q_support[drawn], rtol=0, atol=case.q_atol)
    counts = np.bincount(drawn, minlength=len(index))
    if len(index) > 1:
        assert_frequencies_match(counts, log_q_support.exp().numpy())


def draws_follow_a_density(case: Case, model, x, temperature: float, peek: bool) -> None:
    """A continuous latent (z [K, 1]): every draw has p(x, z) > 0 and reports the row's log q_τ at it, and the
    draws fall into BINS bins (edges: quantiles of 2,000 draws of another seed) with the probabilities that
    exp(log q_τ) integrates to over them (chi-square): log q_τ is the density of what was sampled."""
    n = case.num_draws
    with torch.no_grad():
        z, log_q = model.proposal.sample(x, n, temperature, peek, torch.Generator().manual_seed(11))
        pilot, _ = model.proposal.sample(x, 2_000, temperature, peek, torch.Generator().manual_seed(12))
        log_p = model.log_joint(x, z)
        expected = case.log_q(model, x, z, temperature, peek)
    assert z.shape == (n, 1) and log_q.shape == (n,) and log_q.dtype == torch.float64
    assert torch.isfinite(log_p).all()
    torch.testing.assert_close(log_q.cpu(), expected, rtol=0, atol=case.q_atol)
    edges = np.quantile(pilot[:, 0].numpy(), np.linspace(0, 1, BINS + 1)[1:-1])
    bounds = [-math.inf, *edges.tolist(), math.inf]

    def log_q_of(z):
        return case.log_q(model, x, z, temperature, peek)

    probs = np.exp([case.integrate(log_q_of, lo, hi) for lo, hi in itertools.pairwise(bounds)])
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    counts = np.bincount(np.searchsorted(edges, z[:, 0].numpy()), minlength=BINS)
    assert_frequencies_match(counts, probs)


# ---------------------------------------------------------------- the joint p(x, z)


@pytest.mark.parametrize("case", rows())
def test_log_joint_is_float64_per_configuration(case):
    """log_joint(x, z) is float64 [K] for any K, finite on the support, and one configuration alone scores as
    within the batch."""
    model = built(case)
    x = model.tokenize(case.text)
    support = configurations(case, model, x)
    m = num_particles(support)
    with torch.no_grad():
        log_p = model.log_joint(x, support)
        first = model.log_joint(x, select_particles(support, slice(0, 1)))
    assert log_p.shape == (m,) and log_p.dtype == torch.float64 and torch.isfinite(log_p).all()
    assert first.shape == (1,) and first.dtype == torch.float64
    assert float(first[0]) == pytest.approx(float(log_p[0]), abs=1e-5)  # float32 network, other batch shape


@pytest.mark.parametrize("case", rows())
def test_log_joint_sums_to_the_exact_marginal_over_the_support(case):
    """logsumexp of log p(x, z) over the enumerated support = the exact log p(x), a probability (< 0) above
    every single configuration; for a continuous latent log ∫ p(x, z) dz by the row's own quadrature."""
    model = built(case)
    for text in (case.short_text, case.text):
        x = model.tokenize(text)
        if case.support is None:
            exact = case.exact(model, x)
            with torch.no_grad():
                integral = case.integrate(lambda z, x=x: model.log_joint(x, z))
            assert integral == pytest.approx(exact, abs=case.p_atol) and exact < 0
            continue
        support = case.support(model, x)
        with torch.no_grad():
            log_p = model.log_joint(x, support)
        exact = case.exact(model, x)
        assert float(torch.logsumexp(log_p, 0)) == pytest.approx(exact, abs=case.p_atol)
        assert exact < 0
        if num_particles(support) > 1:
            assert exact > float(log_p.max())


@pytest.mark.parametrize("case", rows())
def test_log_joint_is_minus_inf_exactly_outside_the_support(case):
    """Over configurations the model can express, valid or not: log p(x, z) is −inf (never NaN or +inf)
    exactly outside the enumerated support, which they contain whole; where the proposal scores them, q_τ > 0
    exactly where p > 0."""
    if case.expressible is None:
        pytest.skip(f"{case.name}: {case.why_nothing_outside}")
    model = built(case)
    x = model.tokenize(case.short_text)
    support_keys = set(case.keys(case.support(model, x)))
    candidates = case.expressible(model, x)
    keys = case.keys(candidates)
    with torch.no_grad():
        log_p = model.log_joint(x, candidates)
    assert log_p.dtype == torch.float64 and not torch.isnan(log_p).any() and not torch.isposinf(log_p).any()
    finite = torch.isfinite(log_p).tolist()
    assert finite == [key in support_keys for key in keys]
    assert support_keys <= set(keys) and num_particles(candidates) > len(support_keys)
    if hasattr(model.proposal, "log_prob"):
        for peek, temperature in ((True, 1.0), (True, 0.7), (False, 0.5)):
            if peek or not case.no_peek:
                with torch.no_grad():
                    log_q = model.proposal.log_prob(x, candidates, temperature, peek)
                assert not torch.isnan(log_q).any() and torch.isfinite(log_q).tolist() == finite


# ---------------------------------------------------------------- importance sampling


def is_estimates(model, text: str, peek: bool, temperature: float, num_samples: int = 4) -> np.ndarray:
    """log p̂ of RUNS independent IS runs (seeds 0..RUNS−1)."""
    x = model.tokenize(text)
    sampling = {"num_samples": num_samples, "temperature": temperature, "peek": peek, "document": text}
    return np.array([log_mean_exp(importance_log_weights(model, x, seed=s, **sampling)) for s in range(RUNS)])


def assert_unbiased_or_exact(
    log_p_hat: np.ndarray, log_p: float, atol: float, sd: float | None = None
) -> None:
    """Mean p̂/p = 1 within 3 standard errors (of the exact SD ``sd`` where known), the estimates really varying; or
    every p̂ = p (q = p(z|x))."""
    ratio = np.exp(log_p_hat - log_p)
    if ratio.std() == 0:
        assert log_p_hat[0] == pytest.approx(log_p, abs=atol)
        return
    assert_unbiased(log_p_hat, log_p, sd=sd)
    assert ratio.std(ddof=1) / math.sqrt(ratio.size) > 1e-3  # power: the check can see a bias


def require_light_tails(case: Case, model, x, peek: bool, temperature: float) -> float:
    """The standard deviation of p̂/p at K = 4, exact from the support (for a continuous latent, from E_q[w²] by
    quadrature where the row says it is finite); skips where it exceeds MAX_RELATIVE_SD (heavy tails: the sample
    SD of 300 runs underestimates it and their mean lags below 1; the HMM without peeking at τ = 0.5, SD 34, is
    still 4 SE low after 20,000 runs)."""
    if case.support is None:
        why = case.heavy_tails(model, x, temperature, peek)
        if why:
            pytest.skip(f"{case.name}: {why}")
        with torch.no_grad():
            second = case.integrate(
                lambda z: 2 * model.log_joint(x, z) - case.log_q(model, x, z, temperature, peek)
            )
        sd = math.sqrt(max(0.0, math.expm1(second - 2 * case.exact(model, x))) / 4)
    else:
        support = case.support(model, x)
        with torch.no_grad():
            log_q = case.log_q(model, x, support, temperature, peek)
            sd = exact_is_standard_error(model.log_joint(x, support), log_q, case.exact(model, x), 4)
    if sd > MAX_RELATIVE_SD:
        pytest.skip(f"{case.name}: SD of p̂/p at K = 4 is {sd:.1f} > {MAX_RELATIVE_SD}, too heavy-tailed")
    return sd


def tempered(peek: bool, temperature: float) -> bool:
    return temperature != 1.0


@pytest.mark.parametrize("case,peek,temperature",
                         rows(peek=(True, False), temperature=TEMPERATURES, slow_when=tempered))  # fmt: skip
def test_importance_sampling_is_unbiased(case, peek, temperature):
    """E[p̂] = p: over 300 seeds the mean p̂/p of K = 4 samples is 1 within 3 standard errors, and
    E[log p̂] ≤ log p (tempered proposals, τ ≠ 1, in the slow suite)."""
    model = built(case)
    x = model.tokenize(case.text)
    sd = require_light_tails(case, model, x, peek, temperature)
    log_p_hat = is_estimates(model, case.text, peek, temperature)
    assert_unbiased_or_exact(log_p_hat, case.exact(model, x), case.p_atol, sd)


@pytest.mark.parametrize("case,peek,temperature", rows(peek=(True, False), temperature=TEMPERATURES))
def test_importance_sampling_converges_to_the_exact_value(case, peek, temperature):
    """K = 16,384: log p̂ within 4 standard errors of log p (the standard error exact, from the support)."""
    model = built(case)
    x = model.tokenize(case.text)
    se = require_light_tails(case, model, x, peek, temperature) * math.sqrt(4 / 16_384)
    assert se < 0.1
    exact = case.exact(model, x)
    lw = importance_log_weights(model, x, num_samples=16_384, temperature=temperature, peek=peek, seed=3,
                                document=case.text)  # fmt: skip
    assert np.isfinite(lw).all()
    assert float(log_mean_exp(lw)) == pytest.approx(exact, abs=4 * se + case.p_atol)


# ---------------------------------------------------------------- the stepwise part and SMC


def run_steps(model, x, num_particles: int, temperature: float, peek: bool, seed: int, reorder_at=()):
    """Advance K particles over x; at the tokens in ``reorder_at`` reorder them by random ancestors. Returns
    (z, the summed increments of each particle's lineage)."""
    gen = torch.Generator().manual_seed(seed)
    state = model.smc_init(x, num_particles, temperature, peek)
    total = torch.zeros(num_particles, dtype=torch.float64)
    for t in range(x.numel()):
        if t in reorder_at:
            gen_t = torch.Generator().manual_seed(t)
            ancestors = torch.randint(num_particles, (num_particles,), generator=gen_t)
            before = particle_histories(model.smc_latents(state))
            state, total = model.smc_reorder(state, ancestors), total[ancestors]
            assert particle_histories(model.smc_latents(state)) == [before[a] for a in ancestors.tolist()]
        state, increment = model.smc_step(state, t, gen)
        assert increment.shape == (num_particles,) and increment.dtype == torch.float64
        total += increment.cpu()
    return model.smc_latents(state), total


def particle_histories(z) -> list:
    """z [K, ...] (a tensor or a dict of tensors) as one nested list per particle."""
    if isinstance(z, dict):
        return [list(row) for row in zip(*(particle_histories(z[k]) for k in sorted(z)))]
    return z.tolist()


@pytest.mark.parametrize("case,peek,temperature", rows(peek=(True, False), temperature=(0.7, 1.0)))
def test_stepwise_increments_sum_to_log_joint_minus_log_q(case, peek, temperature):
    """smc_step draws, from the same random stream, the z that proposal.sample draws (where the row says it draws
    them in the same order), and the increments of each particle sum to log p(x, z) − log q_τ(z | x)."""
    require_same_stepwise_proposal(case, peek)
    model = built(case)
    x = model.tokenize(case.text)
    z, total = run_steps(model, x, 64, temperature, peek, seed=3)
    if not (peek and case.peek_draw_order):
        z_sampled, _ = model.proposal.sample(x, 64, temperature, peek, torch.Generator().manual_seed(3))
        assert case.keys(z) == case.keys(z_sampled)
    with torch.no_grad():
        expected = model.log_joint(x, z) - case.log_q(model, x, z, temperature, peek)
    assert torch.isfinite(total).all()
    torch.testing.assert_close(total, expected.to(torch.float64), rtol=0, atol=case.stepwise_atol)


@pytest.mark.parametrize("case,temperature", rows(temperature=(0.7, 1.0)))
def test_stepwise_draws_follow_q_where_their_order_differs(case, temperature):
    """Where smc_step draws q's configurations in another order than proposal.sample (peek=true), the draws of
    the stepwise path without resampling still follow q_τ(z | x): chi-square against the enumerated q."""
    require_stepwise(case)
    if not case.peek_draw_order:
        pytest.skip(f"{case.name}: smc_step draws proposal.sample's configurations (previous test)")
    model = built(case)
    x = model.tokenize(case.short_text)
    support = case.support(model, x)
    index = index_of(case, support)
    z, _ = run_steps(model, x, case.num_draws, temperature, True, seed=13)
    with torch.no_grad():
        log_q = case.log_q(model, x, support, temperature, True)
    counts = np.bincount(rows_in(case, index, z), minlength=len(index))
    assert_frequencies_match(counts, log_q.exp().numpy())


@pytest.mark.parametrize("case,peek", rows(peek=(True, False)))
def test_reorder_carries_whole_histories(case, peek):
    """After resampling twice mid-document, particle k holds the history of its ancestor, and each lineage's
    increments still sum to log p(x, z) − log q(z | x) of the z it ends with."""
    require_same_stepwise_proposal(case, peek)
    model = built(case)
    x = model.tokenize(case.text)
    z, total = run_steps(model, x, 16, 1.0, peek, seed=5, reorder_at=(1, x.numel() - 1))
    with torch.no_grad():
        expected = model.log_joint(x, z) - case.log_q(model, x, z, 1.0, peek)
    torch.testing.assert_close(total, expected.to(torch.float64), rtol=0, atol=case.stepwise_atol)


@pytest.mark.parametrize("case,peek", rows(peek=(True, False)))
def test_smc_without_resampling_weighs_what_importance_sampling_draws(case, peek):
    """Threshold 0: SMC's log weights are IS's for the same (seed, document), draw for draw."""
    temperature = 1.0 if peek else 0.7
    require_same_stepwise_proposal(case, peek)
    if peek and case.peek_draw_order:
        pytest.skip(f"{case.name}: {case.peek_draw_order} (the same q: previous tests)")
    model = built(case)
    x = model.tokenize(case.text)
    kwargs = {"num_samples": 200, "temperature": temperature, "peek": peek, "seed": 4, "document": case.text}
    lw_is = importance_log_weights(model, x, **kwargs)
    lw_smc, diag = smc_log_weights(model, x, resample_threshold=0.0, smc_runs=1, **kwargs)
    distinct = 6 if case.support is None else min(6, num_particles(case.support(model, x)))
    assert diag.resampling_steps == 0 and np.unique(lw_is).size >= distinct
    np.testing.assert_allclose(lw_smc, lw_is, rtol=0, atol=max(1e-6, case.stepwise_atol))


@pytest.mark.parametrize("case,peek", rows(peek=(True, False)))
def test_smc_is_unbiased(case, peek):
    """E[p̂] = p with resampling: over 300 seeds the mean p̂/p of K = 4 particles is 1 within 3 standard
    errors, and E[log p̂] ≤ log p (within 3 standard errors: the gap Var(p̂/p)/2 can be far below them); at threshold 1 (every step: without peeking, and for a row that only peeks)
    resampling really happens."""
    threshold = 0.5 if peek and not case.no_peek else 1.0
    require_stepwise(case)
    model = built(case)
    x = model.tokenize(case.text)
    log_p = case.exact(model, x)
    runs = [smc_log_weights(model, x, num_samples=4, temperature=1.0, peek=peek, seed=s, document=case.text,
                            resample_threshold=threshold, smc_runs=1) for s in range(RUNS)]  # fmt: skip
    log_p_hat = np.array([log_mean_exp(lw) for lw, _ in runs])
    assert_unbiased_or_exact(log_p_hat, log_p, case.p_atol)  # and mean log p̂ < log p + 3 SE (Jensen)
    if np.exp(log_p_hat - log_p).std() == 0:
        return  # one configuration (a plain causal LM): every particle carries p exactly
    if threshold == 1.0:
        assert np.mean([diag.resampling_steps for _, diag in runs]) > 0.25  # ties (ESS = K) never resample


# ---------------------------------------------------------------- beam


@pytest.mark.parametrize("case", rows())
def test_beam_is_a_lower_bound_and_exact_once_it_covers_the_support(case):
    """beam(x, k) returns ≤ k distinct configurations of the support (from an exact k-best: the k of highest
    q, best first, nested in k); log Σ_beam p(x, z) ≤ log p(x), below it for k = 1, equal once k reaches the
    support size."""
    if case.no_beam:
        pytest.skip(f"{case.name} has no beam, {case.no_beam} (require_beam refuses it: the first test)")
    model = built(case)
    x = model.tokenize(case.text)
    support = case.support(model, x)
    index = index_of(case, support)
    m = len(index)
    exact = case.exact(model, x)
    if case.beam_is_k_best:
        with torch.no_grad():
            best_first = case.log_q(model, x, support, 1.0, True).sort(descending=True).values
    values = []
    for k in sorted({1, 2, 5, m // 4, m // 2, m - 1} - {0}):
        beam = model.proposal.beam(x, k)
        drawn = rows_in(case, index, beam)
        assert 1 <= len(drawn) <= k and len(set(drawn)) == len(drawn)
        values.append(beam_log_marginal(model, x, k, case.text))
        assert values[-1] <= exact + case.p_atol
        if case.beam_is_k_best:
            with torch.no_grad():
                log_q = case.log_q(model, x, support, 1.0, True)[drawn]
            assert len(drawn) == min(k, m)
            torch.testing.assert_close(log_q, best_first[: len(drawn)], rtol=0, atol=case.q_atol)
    if case.beam_is_k_best:  # a larger beam holds the smaller one
        assert all(b >= a - case.p_atol for a, b in itertools.pairwise(values))
    if m > 1:
        assert values[0] < exact - 1e-3
    whole = model.proposal.beam(x, m + 10)
    assert sorted(rows_in(case, index, whole)) == list(range(m))  # every configuration, once
    assert beam_log_marginal(model, x, m + 10, case.text) == pytest.approx(exact, abs=case.p_atol)


# ---------------------------------------------------------------- the empty text


@pytest.mark.parametrize("case", rows())
def test_empty_text_has_no_tokens_and_probability_one(case):
    """tokenize("") is LongTensor [0]; its K configurations have log q = log p = 0; every estimator returns
    log p = 0 over 0 tokens."""
    model = built(case)
    x = model.tokenize("")
    assert x.dtype == torch.long and x.shape == (0,)
    z, log_q = model.proposal.sample(x, 3)
    assert num_particles(z) == 3 and torch.equal(log_q.cpu(), torch.zeros(3, dtype=torch.float64))
    with torch.no_grad():
        assert torch.equal(model.log_joint(x, z).cpu(), torch.zeros(3, dtype=torch.float64))
    assert case.exact(model, x) == 0.0
    if case.stepwise:
        z = model.smc_latents(model.smc_init(x, 3))
        assert torch.equal(model.log_joint(x, z).cpu(), torch.zeros(3, dtype=torch.float64))
    estimators = [
        "is",
        *["beam"] * has(model, "beam_proposal"),
        *["smc"] * case.stepwise,
        *["exact"] * has(model, "exact_marginal"),
    ]
    for name in estimators:
        estimate = estimate_document(model, "", EstimatorSettings(name, num_samples=4))
        assert (estimate.num_tokens, estimate.log_likelihood) == (0, 0.0)


# ---------------------------------------------------------------- the prefix-probability declaration


def _log_p_of_each_next_token(case: Case, model, context: torch.Tensor) -> list[float]:
    """log p(context w) for every id w the model accepts inside a text (an RNNG refuses <s> and </s> there)."""
    vocab = getattr(model, "vocab", None)
    out = []
    for w in range(len(vocab) if vocab is not None else int(model.model.config.vocab_size)):
        try:
            out.append(case.exact(model, torch.cat([context, torch.tensor([w])])))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("case", rows())
def test_declared_prefix_probability_is_what_the_model_computes(case):
    """Every model declares ``prefix_probability``. Where it says True, Σ_w p(context w) / p(context) = 1 over the
    vocabulary (exact marginals), so log p(context ⊕ continuation) − log p(context) is a conditional; where it says
    False (an RNNG scores complete trees), that sum is visibly below 1 and lm-eval's loglikelihood is refused."""
    model = built(case)
    declared = is_prefix_probability(model)
    assert declared is not None, f"{case.name} does not declare prefix_probability"
    if case.name.startswith("tokenization"):
        pytest.skip(
            "declared False: its loglikelihood conditions on the spelled string (with_cover_end), not on tokens"
        )
    if case.name.startswith("kglm"):
        pytest.skip(
            "open vocabulary: an unknown word costs p(@@UNKNOWN@@) spread over unknown types (the penalty), so "
            "no finite sum over ids is 1; that log_joint has no end-of-text event is the stepwise test's "
            "log p(x, z) = Σ_t log p(x_t, z_t | x_<t, z_<t)"
        )
    if case.name.startswith("masked"):
        pytest.skip(
            "declared False: p(x) is a distribution over the texts of each length T (tests/models/masked checks "
            "that it sums to 1 over them), so p(context w) and p(context) are over different lengths"
        )
    if getattr(model, "count_eos", False):
        pytest.skip("x ends with </s>: no next word to sum over")
    context = model.tokenize(case.short_text)[:2]
    log_ratio = _log_p_of_each_next_token(case, model, context)
    total = float(torch.logsumexp(torch.tensor(log_ratio, dtype=torch.float64), 0)) - case.exact(
        model, context
    )
    if declared:
        assert total == pytest.approx(0.0, abs=1e-5)
    else:
        assert total < -0.01
