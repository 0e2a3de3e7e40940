"""LDA's lookahead (lookahead.py): the twisted SMC and its proposal against the exact dynamic program, the twist's
pieces, and lookahead=none as the urn proposal it was."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lda_tiny import TEXT, tiny_lda

from lm_latent_eval.estimators import log_mean_exp, smc_log_weights
from lm_latent_eval.models.lda import LDA
from lm_latent_eval.models.lda.exact import all_assignments
from lm_latent_eval.models.lda.lookahead import (
    build_lookahead,
    build_lookaheads,
    cvb0_fit,
    cvb0_responsibilities,
    log_twist,
)
from lm_latent_eval.models.lda.urn import counts_before


def sparse_lda(topics: int, words: int = 60, seed: int = 0, **config) -> LDA:
    """Peaked topics (rows ~ Dirichlet(0.1)), α = 0.1: the regime where the urn proposal's weights degenerate."""
    gen = np.random.default_rng(seed)
    phi = gen.dirichlet(np.full(words, 0.1), size=topics)
    return LDA.from_parameters(phi, 0.1, [f"w{i}" for i in range(words)], **config).eval()


def sampled_text(model: LDA, tokens: int, seed: int = 1) -> str:
    gen = np.random.default_rng(seed)
    phi = model.phi.numpy()
    z = gen.choice(model.num_topics, size=tokens, p=gen.dirichlet(model.alpha.numpy()))
    return " ".join(model.vocab[int(gen.choice(phi.shape[1], p=phi[k]))] for k in z)


def test_the_lookahead_pieces():
    """π is a permutation (most confident first), m^{(t)} = Σ_{s>t} r_s (0 at the last step), base ≥ Σ_k α_k Φ, and
    log ψ = 0 at the last step; CVB0's responsibilities are distributions."""
    model = tiny_lda()
    x = model.tokenize(TEXT)
    log_phi, alpha = model.log_phi_columns(x), model.alpha
    r = cvb0_responsibilities(log_phi, alpha)
    assert torch.allclose(r.sum(1), torch.ones(x.numel(), dtype=torch.float64))
    view = build_lookahead(log_phi, alpha)
    assert sorted(view.order.tolist()) == list(range(x.numel()))
    assert r.max(1).values[view.order].diff().le(0).all()
    ordered = r[view.order]
    for t in range(x.numel()):
        assert torch.allclose(view.ahead[t], ordered[t + 1 :].sum(0))
    assert (view.base >= (alpha * view.phi).sum(1) - 1e-15).all()
    assert log_twist(torch.zeros(3, x.numel(), dtype=torch.float64), view, x.numel() - 1).eq(0).all()


def test_lookaheads_built_together_equal_each_alone_bit_for_bit():
    """``build_lookaheads`` of documents of different lengths (an empty one among them), their CVB0 fits stopping
    after different numbers of sweeps, padded to the longest: each document's tables are those ``build_lookahead``
    gives it alone, to the bit, and the padding is what the side-by-side steps read as nothing (base 1, log norm 0,
    Φ and m 0)."""
    model = sparse_lda(8, seed=3)
    xs = [model.tokenize(sampled_text(model, n, seed=n)) for n in (37, 5, 0, 18, 1)]
    alpha = model.alpha.double()
    lengths, T = [x.numel() for x in xs], max(x.numel() for x in xs)
    log_phi = torch.zeros(len(xs), T, alpha.shape[0], dtype=torch.float64)
    for d, x in enumerate(xs):
        log_phi[d, : x.numel()] = model.log_phi_columns(x)
    r = cvb0_fit(log_phi, lengths, alpha, sweeps=6)
    # the sweeps each document's fit takes alone (the first after which its r stays the same)
    sweeps = []
    for d, x in enumerate(xs):
        n = x.numel()
        alone = [cvb0_fit(log_phi[d : d + 1, :n], [n], alpha, sweeps=s)[0] for s in range(1, 7)]
        assert torch.equal(r[d, :n], alone[-1]) and r[d, n:].eq(0).all()
        sweeps.append(min(s for s in range(6) if torch.equal(alone[s], alone[-1])))
    assert len(set(sweeps)) > 1, sweeps
    tables = build_lookaheads(log_phi, lengths, alpha)
    for d, x in enumerate(xs):
        n, alone = x.numel(), build_lookahead(model.log_phi_columns(x), alpha)
        assert torch.equal(tables.order[d, :n], alone.order)
        for name in ("ahead", "phi", "log_phi"):
            assert torch.equal(getattr(tables, name)[d, :n], getattr(alone, name)), name
        assert torch.equal(tables.base[d, :n, :n], alone.base)
        assert torch.equal(tables.log_norm[d, :n], alone.log_norm)
        assert tables.base[d, n:].eq(1).all() and tables.base[d, :, n:].eq(1).all()
        assert tables.log_norm[d, n:].eq(0).all() and tables.phi[d, n:].eq(0).all()
        assert tables.ahead[d, n:].eq(0).all()


def test_lookahead_none_is_the_urn_proposal():
    """lookahead=none: log q(z | x) = Σ_t log[(n_k + α_k) Φ[k, x_t] / Σ_j (n_j + α_j) Φ[j, x_t]] in the document's order."""
    model = tiny_lda(lookahead="none")
    x = model.tokenize(TEXT)
    z = all_assignments(x.numel(), 3)
    logits = torch.log(counts_before(z, 3) + model.alpha) + model.log_phi_columns(x)
    expected = torch.log_softmax(logits, -1).gather(-1, z[..., None]).squeeze(-1).sum(1)
    assert torch.allclose(model.proposal.log_prob(x, z), expected, atol=1e-12)
    with pytest.raises(ValueError, match="lookahead must be one of"):
        tiny_lda(lookahead="gibbs")


@pytest.mark.parametrize("lookahead", ["cvb0", "none"])
def test_smc_is_unbiased_on_a_sparse_lda_against_the_exact_value(lookahead):
    """6 peaked topics, 24 tokens (the dynamic program is exact): the mean of p̂ / p over 200 seeds of 32-particle
    SMC is 1 within 4 standard errors, for both proposals; the lookahead's log p̂ spreads less."""
    model = sparse_lda(6, lookahead=lookahead)
    text = sampled_text(model, 24)
    x = model.tokenize(text)
    exact = model.log_marginal(x)
    ll = np.array(
        [
            log_mean_exp(smc_log_weights(model, x, num_samples=32, seed=s, document=text)[0])
            for s in range(200)
        ]
    )
    ratio = np.exp(ll - exact)
    assert abs(ratio.mean() - 1.0) < 4 * ratio.std(ddof=1) / math.sqrt(ratio.size) + 1e-9
    if lookahead == "cvb0":
        urn = sparse_lda(6, lookahead="none")
        spread = np.std(
            [
                log_mean_exp(smc_log_weights(urn, x, num_samples=32, seed=s, document=text)[0])
                for s in range(50)
            ]
        )
        assert ll.std() < spread


def test_the_increments_telescope_on_a_larger_lda():
    """50 topics, 100 tokens, order and twist in play: Σ_t increments = log p(x, z) − log q(z | x) for the drawn z,
    and smc_latents returns z in the document's order."""
    model = sparse_lda(50, words=300)
    x = model.tokenize(sampled_text(model, 100, seed=3))
    state = model.smc_init(x, 8)
    gen = torch.Generator().manual_seed(0)
    total = torch.zeros(8, dtype=torch.float64)
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        total += inc
    z = model.smc_latents(state)
    expected = model.log_joint(x, z) - model.proposal.log_prob(x, z)
    assert torch.allclose(total, expected, atol=1e-8)


def test_empty_and_one_token_documents():
    """No tokens: q draws the empty z with log q = 0; one token: every SMC weight is p(x) exactly (fully adapted)."""
    model = tiny_lda()
    z, log_q = model.proposal.sample(model.tokenize(""), 4, generator=torch.Generator().manual_seed(0))
    assert z.shape == (4, 0) and log_q.eq(0).all()
    x = model.tokenize("apple")
    lw, _ = smc_log_weights(model, x, num_samples=8, seed=0, document="apple")
    assert np.allclose(lw, model.log_marginal(x))
