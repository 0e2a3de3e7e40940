"""The masked LM's row cache (``row_cache.py``): a revealed set run once per text across calls, with the same numbers
bit for bit; rows kept apart by text, context, policy and parameters; none kept in training mode. And the model's
default settings (uniform orders, SMC that never resamples): unbiased against the exact value."""

from __future__ import annotations

import math

import numpy as np
import torch

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.models.masked import tiny_masked_lm

TEXTS = ["a b c d a", "d c b a", "b b a c d a"]


def estimates(model, seeds=(0, 1)):
    """Log weights and log p̂ of SMC (resampling or not) and IS, peeking or not, and the exact values."""
    out = []
    for seed in seeds:
        for text in TEXTS:
            for estimator, threshold in (("smc", 0.5), ("smc", 0.0), ("is", 0.5)):
                settings = EstimatorSettings(
                    estimator, 32, peek=seed == 1, target_se=0, seed=seed, resample_threshold=threshold
                )
                e = resolve(settings, model).estimate(text)
                out.append((e.log_likelihood, getattr(e, "log_weights", None)))
    out.append([model.log_marginal(model.tokenize(t)) for t in TEXTS])
    return out


def same(a, b) -> bool:
    for u, v in zip(a, b):
        if isinstance(u, tuple):
            if u[0] != v[0] or (u[1] is not None and not np.array_equal(u[1], v[1])):
                return False
        elif u != v:
            return False
    return len(a) == len(b)


def test_the_cache_changes_no_number_and_runs_each_state_once():
    model = tiny_masked_lm(seed=3, dtype=torch.float32)
    model.row_cache.max_entries = 0
    rows = model.network_rows
    without = estimates(model)
    rows_without = model.network_rows - rows
    model.row_cache.max_entries = 1 << 20
    model.row_cache.clear()
    rows = model.network_rows
    cached = estimates(model)
    rows_cached = model.network_rows - rows
    assert same(without, cached)
    # every state of the three texts at most once: 2^5 − 1 + 2^4 − 1 + 2^6 − 1 (+ the full sets the SMC step reads)
    assert rows_cached <= 31 + 15 + 63 + 3 < rows_without / 3
    assert model.row_cache.rows_read > 0


def test_rows_are_kept_apart_by_parameters_context_and_training_mode():
    model = tiny_masked_lm(seed=3)
    x = model.tokenize("a b c")
    first = model.log_marginal(x)
    rows = model.network_rows
    assert model.log_marginal(x) == first and model.network_rows == rows  # read back
    with torch.no_grad():
        model.predictor.output.bias.add_(torch.linspace(-1, 1, model.predictor.output.bias.numel()))
    changed = model.log_marginal(x)
    assert changed != first and model.network_rows == rows + 7  # a changed network runs again
    model.row_cache.max_entries = 0
    assert model.log_marginal(x) == changed  # the value the network gives now
    model.row_cache.max_entries = 1 << 20
    view = model.conditional_model("d d")
    y = view.tokenize("d d a b c")
    assert torch.equal(y, x)
    in_context = view.log_marginal(y)
    assert in_context != changed
    model.predictor.train()
    rows = model.network_rows
    model.log_marginal(x)
    model.log_marginal(x)
    assert model.network_rows == rows + 14  # nothing kept in training mode
    model.predictor.eval()


def test_the_cache_keeps_at_most_its_entries():
    model = tiny_masked_lm(seed=3)
    model.row_cache.max_entries = 2 * 5 * 40  # 40 rows of 5 positions
    model.log_marginal(model.tokenize("a b c d a"))  # 31 rows
    model.log_marginal(model.tokenize("d c b a c"))  # 31 more: the first text's rows are dropped
    assert len(model.row_cache.texts) == 1
    assert sum(r.entries for r in model.row_cache.texts.values()) <= model.row_cache.max_entries


def test_the_default_settings_are_unbiased_against_the_exact_value():
    """auto with the model's default_settings (SMC over uniform orders, never resampling): the mean of p̂ / p over
    400 seeds is 1 within 4 standard errors, on a text of 6 tokens (720 orders)."""
    model = tiny_masked_lm(seed=5)
    text = "d a c b a b"
    exact = model.log_marginal(model.tokenize(text))
    # sampled: 6 tokens cost (2^6 − 1) / 6 = 10.5 particles, which auto would compute exactly
    settings, _ = with_model_defaults(
        EstimatorSettings(num_samples=64, target_se=0, exact_where_cheaper=False), model
    )
    assert resolve(settings, model).settings.estimator == "smc" and settings.resample_threshold == 0.0
    runs = (resolve(settings.replace(seed=s), model) for s in range(400))
    ratios = np.array([math.exp(run.estimate(text).log_likelihood - exact) for run in runs])
    assert abs(ratios.mean() - 1) < 4 * ratios.std(ddof=1) / math.sqrt(ratios.size)
    assert ratios.std() > 1e-3
