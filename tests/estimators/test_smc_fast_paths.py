"""The SMC fast paths of issue 33 (item 2) change no number: each is compared with the path it replaces, on the bundled
models, and seeded SMC log weights and diagnostics must be bit-identical.

- HMM: ``draw_by_row`` (softmax and cumulative sums of the [S, S] table, gathered by the previous state) against
  ``tempered_draw`` of the K gathered rows; SMC against SMC with the reference draw, next to the exact log p(x).
- RNNG: ``DistinctHistories`` (the network once per distinct history) against one row per particle.
- KGLM: the parent and edge terms of the particles that drew "related" only, against every particle, masked; p's
  latent terms from the proposal's draw (``drawn_log_prob``) and the words from the per-document table, against
  ``score_step`` and ``word_log_prob_step`` per token.
- EntityNLM: resampling records ancestors instead of copying every particle's z so far. One exception to "bit for
  bit": on the CPU its particles are stored once per distinct history (``stepwise.EntityNLMParticles.history``), and
  p, q and the words are computed once per history, on fewer rows than one per particle, which float32 rounds
  differently at different positions; the log weights agree with the one-row-per-particle layout to 1e-6 relative
  (the rounding ``log_joint`` has against it too), and the draws are the same.
- The SMC loop: the runs that resample at one token resampled as one batch, against one run at a time. The runs' statistics
  (ESS, mean weight) with runs of several sizes, by segment reductions over all runs, against each run alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lm_latent_eval import tensors
from lm_latent_eval.estimators import smc_log_weights
from lm_latent_eval.estimators.resampling import RunLayout, runs_log_ess
from lm_latent_eval.estimators.smc import Lane, _checked_increments, systematic_resample
from lm_latent_eval.models import load_model
from lm_latent_eval.models.hmm import stepwise as hmm_stepwise
from lm_latent_eval.models.kglm import stepwise as kglm_stepwise
from lm_latent_eval.models.rnng import stepwise as rnng_stepwise
from lm_latent_eval.tensors import tempered_draw

TEXTS = {
    "hmm": "the cat sat on the mat and the dog ran",
    "rnng": "the dog saw a cat with a telescope",
    "kglm": "Barack Obama was born in Honolulu , Hawaii . He was the president of the United States .",
    "entitynlm": "John met Mary . He gave her a book and she thanked him .",
}
# (num_samples, resample_threshold): the default, resampling at every token, and two blocks of runs
SETTINGS = [(64, 0.5), (64, 1.0), (1100, 0.5)]


def smc_runs(model, text: str, peek: bool) -> list[tuple[np.ndarray, tuple]]:
    """SMC log weights and diagnostics of ``text`` under every setting of SETTINGS, seed 3."""
    x = model.tokenize(text)
    out = []
    for k, threshold in SETTINGS:
        lw, d = smc_log_weights(
            model, x, num_samples=k, seed=3, document=text, peek=peek, resample_threshold=threshold
        )
        out.append((lw, (d.ess_min, d.ess_mean, d.resampling_steps, d.run_log_likelihoods)))
    return out


def assert_identical(fast, reference) -> None:
    for (lw, diag), (lw_ref, diag_ref) in zip(fast, reference, strict=True):
        assert np.array_equal(lw, lw_ref)
        assert diag == diag_ref


@pytest.fixture(scope="module")
def bundled():
    return {}


def bundled_model(cache: dict, name: str):
    if name not in cache:
        cache[name] = load_model(name)[0]
    return cache[name]


def test_draw_by_row_is_tempered_draw_of_the_gathered_rows():
    """Same indices and log probabilities for the same generator state, at τ = 1 and τ ≠ 1."""
    logits = torch.randn(12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rows = torch.randint(0, 12, (500,), generator=torch.Generator().manual_seed(1))
    for tau in (1.0, 0.7):
        fast = hmm_stepwise.draw_by_row(logits, rows, tau, torch.Generator().manual_seed(2))
        reference = tempered_draw(logits[rows], tau, torch.Generator().manual_seed(2))
        assert torch.equal(fast[0], reference[0]) and torch.equal(fast[1], reference[1])


@pytest.mark.parametrize("peek", [True, False])
def test_hmm_smc_is_unchanged_by_the_table_draw(bundled, monkeypatch, peek):
    """SMC on the bundled HMM with ``draw_by_row`` and with the K-row reference draw: the same weights, close to
    the exact log p(x)."""
    model = bundled_model(bundled, "hmm")
    fast = smc_runs(model, TEXTS["hmm"], peek)
    monkeypatch.setattr(
        hmm_stepwise, "draw_by_row", lambda logits, rows, tau, gen: tempered_draw(logits[rows], tau, gen)
    )
    assert_identical(fast, smc_runs(model, TEXTS["hmm"], peek))
    exact = float(model.log_marginal(model.tokenize(TEXTS["hmm"])))
    lw = fast[-1][0]
    assert abs(float(np.logaddexp.reduce(lw)) - math.log(lw.size) - exact) < 0.1


@pytest.mark.parametrize("peek", [True, False])
def test_rnng_distinct_histories_are_one_row_per_particle(bundled, monkeypatch, peek):
    """The bundled RNNG (float32 rows of 32 values: ``rows_apart``) with particles stored per distinct history and
    with one row per particle (``advance`` on all K): the same weights; the per-particle view reads like a plain
    state."""
    model = bundled_model(bundled, "rnng")
    x = model.tokenize(TEXTS["rnng"])
    assert rnng_stepwise.rows_apart(model, x)
    state = model.smc_init(x, 32, 1.0, peek)
    assert isinstance(state, rnng_stepwise.DistinctHistories) and state.state.actions.shape[0] == 1
    gen = torch.Generator().manual_seed(0)
    for t in range(3):
        state, _ = model.smc_step(state, t, gen)
    state = model.smc_reorder(state, torch.arange(32).flip(0))
    assert state.actions.shape[0] == 32 and state.stacks.size.shape == (32,)
    assert state.state.actions.shape[0] <= 32
    fast = smc_runs(model, TEXTS["rnng"], peek)
    monkeypatch.setattr(rnng_stepwise, "rows_apart", lambda model, x: False)
    assert isinstance(model.smc_init(x, 32, 1.0, peek), rnng_stepwise.RNNGParticles)
    # bit for bit on an AMD EPYC's BLAS; an Intel Xeon's rounds the LSTM's rows by batch size (1e-8 nats here): the
    # same draws and resampling steps, the numbers to float32 rounding
    for (lw, diag), (lw_ref, diag_ref) in zip(fast, smc_runs(model, TEXTS["rnng"], peek), strict=True):
        assert np.allclose(lw, lw_ref, rtol=1e-7, atol=0) and diag[2] == diag_ref[2]
        assert np.allclose(diag[:2], diag_ref[:2], rtol=1e-6) and np.allclose(diag[3], diag_ref[3], rtol=1e-7)


@pytest.mark.parametrize("peek", [True, False])
def test_rnng_compact_histories_are_their_own_table(bundled, monkeypatch, peek):
    """After a step the RNNG's histories are the rows of its state (``DistinctHistories.compact``: no unique over
    the K particles, no copy); the same weights as finding the distinct histories again at every step."""
    model = bundled_model(bundled, "rnng")
    state = model.smc_init(model.tokenize(TEXTS["rnng"]), 32, 1.0, peek)
    state, _ = model.smc_step(state, 0, torch.Generator().manual_seed(0))
    assert state.compact and model.smc_reorder(state, torch.arange(32)).compact is False
    fast = smc_runs(model, TEXTS["rnng"], peek)
    advance = rnng_stepwise.distinct_advance

    def not_compact(model, particles, t, u):
        return advance(model, rnng_stepwise.DistinctHistories(particles.state, particles.rows), t, u)

    monkeypatch.setattr(rnng_stepwise, "distinct_advance", not_compact)
    assert_identical(fast, smc_runs(model, TEXTS["rnng"], peek))


def test_kglm_related_terms_of_the_related_particles_only(bundled, monkeypatch):
    """KGLM's sample_step and score_step with the parent and edge heads on the "related" particles only (the CPU's
    ``tensors.SELECT_ROWS_ON``), and on every particle (the accelerator path)."""
    model = bundled_model(bundled, "kglm")
    fast = smc_runs(model, TEXTS["kglm"], True)
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    assert_identical(fast, smc_runs(model, TEXTS["kglm"], True))


@pytest.mark.parametrize("select_rows", [True, False], ids=["related-rows", "masked"])
@pytest.mark.parametrize("peek", [True, False])
def test_kglm_p_terms_from_the_draw_and_the_word_table(bundled, monkeypatch, select_rows, peek):
    """KGLM's SMC step with p's latent terms read off the proposal's draw (``drawn_log_prob``) and the word terms
    gathered from ``word_log_prob_table``, against ``score_step`` on the drawn z_t and ``word_log_prob_step``: the
    same weights (K = 64 and 1,100 use the table, the graph having 60 entities)."""
    model = bundled_model(bundled, "kglm")
    if not select_rows:
        monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    assert model.smc_init(model.tokenize(TEXTS["kglm"]), 64, 1.0, peek).words is not None
    fast = smc_runs(model, TEXTS["kglm"], peek)
    draw_step, window = kglm_stepwise.draw_step, {}

    def recording_draw_step(tabs, state, t, u):
        window["state"] = state
        return draw_step(tabs, state, t, u)

    monkeypatch.setattr(kglm_stepwise, "draw_step", recording_draw_step)
    monkeypatch.setattr(
        kglm_stepwise,
        "drawn_log_prob",
        lambda tabs, d, t: kglm_stepwise.score_step(tabs, window["state"], t, d.typ, d.ent, d.par),
    )
    monkeypatch.setattr(kglm_stepwise, "WORD_TABLE_LIMIT", 0)
    assert_identical(fast, smc_runs(model, TEXTS["kglm"], peek))


@pytest.mark.parametrize("peek", [True, False])
def test_entitynlm_distinct_histories_against_one_row_per_particle(bundled, monkeypatch, peek):
    """EntityNLM's SMC with its particles stored once per distinct history (the CPU's layout) and with one row per
    particle (the accelerator's, ``tensors.SELECT_ROWS_ON`` emptied): the same resampling steps, log weights and run
    estimates within float32 rounding (1e-6 relative, as ``log_joint`` against per-row scoring)."""
    model = bundled_model(bundled, "entitynlm")
    x = model.tokenize(TEXTS["entitynlm"])
    assert model.smc_init(x, 8).history is not None
    distinct = smc_runs(model, TEXTS["entitynlm"], peek)
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    assert model.smc_init(x, 8).history is None
    per_particle = smc_runs(model, TEXTS["entitynlm"], peek)
    for (lw, diag), (lw_ref, diag_ref) in zip(distinct, per_particle, strict=True):
        np.testing.assert_allclose(lw, lw_ref, rtol=1e-6, atol=1e-6)
        assert diag[2] == diag_ref[2]
        np.testing.assert_allclose(diag[3], diag_ref[3], rtol=1e-6, atol=1e-6)


def test_entitynlm_latents_follow_the_recorded_ancestors(bundled):
    """EntityNLM's particles keep each token's z_t and the ancestors of each resampling: after resampling twice at
    one token, and again later, every particle holds its ancestors' z so far."""
    model = bundled_model(bundled, "entitynlm")
    x = model.tokenize(TEXTS["entitynlm"])
    K, gen = 16, torch.Generator().manual_seed(0)
    state = model.smc_reorder(model.smc_init(x, K, 1.0, True), torch.arange(K).flip(0))
    for t in range(x.numel()):
        state, _ = model.smc_step(state, t, gen)
        if t in (2, 5):
            for seed in (1, 2):
                ancestors = torch.randint(0, K, (K,), generator=torch.Generator().manual_seed(seed + t))
                before = model.smc_latents(state)
                state = model.smc_reorder(state, ancestors)
                after = model.smc_latents(state)
                assert all(torch.equal(after[k], before[k][ancestors]) for k in after)
    assert model.smc_latents(state)["mention"].shape == (K, x.numel())


def test_increment_check_and_run_ess_on_the_fast_path():
    """One reduction finds NaN and +inf increments and names the lane's document; the increments of lanes that have
    ended are 0 whatever the model returned; runs whose weights are all 0 have log ESS −inf, runs of several sizes
    each their own."""
    lanes = [Lane(torch.zeros(2), [1], None, "doc a"), Lane(torch.zeros(4), [2], None, "doc b")]
    ok = torch.tensor([0.0, -math.inf, -1.0], dtype=torch.float64)
    assert torch.equal(_checked_increments(ok, lanes, None, 0), ok)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="doc b: .*NaN or \\+inf"):
            _checked_increments(torch.tensor([0.0, bad, -1.0], dtype=torch.float64), lanes, None, 0)
    ended = torch.tensor([True, False, False])
    masked = _checked_increments(torch.tensor([math.nan, 1.0, 2.0], dtype=torch.float64), lanes, ended, 3)
    assert masked.tolist() == [0.0, 1.0, 2.0]
    log_w = torch.tensor([-math.inf, -math.inf, 0.0, 0.0], dtype=torch.float64)
    assert runs_log_ess(log_w, [2, 2]) == [-math.inf, pytest.approx(math.log(2.0))]
    mixed = torch.tensor([0.0, 0.0, 0.0, -math.inf, 0.0, 0.0, 5.0], dtype=torch.float64)
    w = [1.0, 1.0, math.exp(5.0)]
    assert runs_log_ess(mixed, [3, 1, 3]) == [
        pytest.approx(math.log(3.0)),
        -math.inf,
        pytest.approx(math.log(sum(w) ** 2 / sum(v * v for v in w))),
    ]


def test_systematic_resampling_of_several_runs_is_each_run_alone():
    """Rows of log weights resampled at once (one u per row, in row order) get the ancestors that resampling each row
    alone gives, from the same generator state."""
    log_w = torch.randn(3, 250, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    together = systematic_resample(log_w, torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(1)
    alone = torch.stack([systematic_resample(row, gen) for row in log_w])
    assert together.shape == (3, 250) and torch.equal(together, alone)


def test_statistics_of_runs_of_several_sizes_are_each_run_alone():
    """Runs of several sizes, in any order (the precision target's later stages side by side: each document's K its
    own), their statistics in one set of segment reductions over every run: each run's log ESS and log mean weight bit
    for bit what the run alone gives, weights all 0 included, and the exact values to rounding."""
    gen = torch.Generator().manual_seed(3)
    for sizes in ([529, 528, 7, 529, 250, 1, 250, 33], [3, 1, 3], [1024, 1023, 16, 1024]):
        for scale in (0.5, 30.0, 400.0):
            log_w = torch.randn(sum(sizes), dtype=torch.float64, generator=gen) * scale
            log_w[: sizes[0]] = -math.inf if scale == 30.0 else log_w[: sizes[0]]
            log_ess, log_mean = RunLayout(sizes).statistics(log_w)
            starts = np.cumsum([0, *sizes]).tolist()
            alone = [RunLayout([n]).statistics(log_w[a : a + n]) for n, a in zip(sizes, starts)]
            assert log_ess == [e[0][0] for e in alone] and log_mean == [e[1][0] for e in alone]
            for n, a, e, m in zip(sizes, starts, log_ess, log_mean):
                run = log_w[a : a + n]
                if torch.isneginf(run).all():
                    assert e == m == -math.inf
                    continue
                assert m == pytest.approx(float(torch.logsumexp(run, 0)) - math.log(n), rel=1e-12, abs=1e-12)
                assert e == pytest.approx(
                    float(2 * torch.logsumexp(run, 0) - torch.logsumexp(2 * run, 0)), abs=1e-9
                )
