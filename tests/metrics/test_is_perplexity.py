"""is_perplexity: metric = Logan et al. formulas, exact values on a tractable HMM, offline loading (checkout and wheel)."""

from __future__ import annotations

import math
import shutil
import textwrap
import warnings

import numpy as np
import pytest
from metric_helpers import REPO, block_network, load_metric_offline, readme_doctests, run_doctests
from python_subprocess import run_python
from scipy.special import logsumexp

from lm_latent_eval.estimators import EstimatorSettings, beam_log_marginal, estimate_document


@pytest.fixture
def no_network(monkeypatch):
    block_network(monkeypatch)


@pytest.fixture
def metric(no_network):
    return load_metric_offline("is_perplexity")


def heavy_tailed_weights(rng, n_docs, k):
    """Log weights log p(x, z) − log q(z | x) with a heavy right tail, as a poor proposal gives."""
    return [rng.normal(-30.0, 1.0, size=k) + rng.standard_t(2, size=k) for _ in range(n_docs)]


def test_metric_equals_the_formulas_on_random_inputs(metric):
    import arviz

    rng = np.random.default_rng(0)
    lw = heavy_tailed_weights(rng, 6, 64)
    tokens = rng.integers(5, 40, size=6)
    out = metric.compute(log_weights=[w.tolist() for w in lw], num_tokens=tokens.tolist())
    total = tokens.sum()
    log_phat = np.array([logsumexp(w) - math.log(64) for w in lw])
    assert out["log_likelihoods"] == pytest.approx(log_phat, rel=1e-12)
    assert out["instance_perplexity"] == pytest.approx(math.exp(-log_phat.sum() / total), rel=1e-12)
    joint = np.sum(lw, axis=0)  # [K]: corpus sample k
    assert out["corpus_perplexity"] == pytest.approx(
        math.exp(-(logsumexp(joint) - math.log(64)) / total), rel=1e-12
    )
    ess = [np.exp(w).sum() ** 2 / (np.exp(w) ** 2).sum() for w in lw]
    assert out["ess"] == pytest.approx(ess, rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        khat = [float(arviz.psislw(w.copy())[1]) for w in lw]
    assert out["pareto_k"] == pytest.approx(khat, rel=1e-9)
    assert (
        out["pareto_k_threshold"] == [pytest.approx(1 - 1 / math.log10(64))] * 6
    )  # min(1 − 1/log10 64, 0.7)
    assert out["share_pareto_k_above_threshold"] == pytest.approx(
        np.mean(np.array(khat) >= 1 - 1 / math.log10(64))
    )
    curve = out["convergence"]
    assert curve["num_samples"] == [1, 2, 4, 8, 16, 32, 64]
    assert curve["instance_perplexity"][-1] == pytest.approx(out["instance_perplexity"], rel=1e-12)
    assert curve["corpus_perplexity"][-1] == pytest.approx(out["corpus_perplexity"], rel=1e-12)
    first = math.exp(
        -sum(w[0] for w in lw) / total
    )  # K' = 1: both levels use the first weight of each document
    assert curve["instance_perplexity"][0] == pytest.approx(first) and curve["corpus_perplexity"][
        0
    ] == pytest.approx(first)
    assert curve["instance_perplexity"][3] == pytest.approx(
        math.exp(-sum(logsumexp(w[:8]) - math.log(8) for w in lw) / total), rel=1e-12
    )
    # heavy tails at K = 64: only the certified one-sided bound is honest, Σ log p̂ + log 0.05
    assert out["interval"] == "one-sided" and "certified" in out["interval_note"]
    bound = math.exp(-(log_phat.sum() + math.log(0.05)) / total)
    assert out["perplexity_upper_bound"] == pytest.approx(bound, rel=1e-12)
    assert out["perplexity_interval"] == [0.0, pytest.approx(bound, rel=1e-12)] and math.isnan(
        out["monte_carlo_stderr"]
    )
    assert out["corpus_perplexity_upper_bound"] == pytest.approx(
        math.exp(-(logsumexp(joint) - math.log(64) + math.log(0.05)) / total), rel=1e-12
    )
    assert all(lo <= hi for lo, hi in out["log_likelihood_interval"]) and out["sampling_stderr"] > 0


def test_constant_weights_are_an_exact_estimate(metric):
    c = [-3.0, -7.5, -1.25]
    out = metric.compute(log_weights=[[v] * 16 for v in c], num_tokens=[2, 5, 1])
    exact = math.exp(-sum(c) / 8)
    assert out["instance_perplexity"] == pytest.approx(exact, rel=1e-12)
    assert out["corpus_perplexity"] == pytest.approx(exact, rel=1e-12)
    assert out["interval"] == "two-sided" and out["perplexity_interval"] == pytest.approx(
        [exact, exact], rel=1e-12
    )
    assert out["perplexity"] == pytest.approx(exact, rel=1e-12) and out["monte_carlo_stderr"] == 0.0
    assert out["ess"] == pytest.approx([16.0] * 3) and out["pareto_k"] == [0.0] * 3


def test_unequal_sample_counts(metric):
    lw = [[-1.0, -2.0, -0.5, -3.0], [-2.0, -2.5]]
    with pytest.raises(ValueError, match="same number of samples; got sample counts \\[2, 4\\]"):
        metric.compute(log_weights=lw, num_tokens=[1, 1])
    out = metric.compute(log_weights=lw, num_tokens=[1, 1], corpus_level=False)
    assert out["corpus_perplexity"] is None and out["corpus_perplexity_upper_bound"] is None
    assert out["num_samples"] == [4, 2] and out["convergence"]["num_samples"] == [1, 2]
    assert out["convergence"]["corpus_perplexity"] is None


def test_bad_input_names_the_document(metric):
    with pytest.raises(ValueError, match="document 1: 1 of 2 log weights are NaN"):
        metric.compute(log_weights=[[-1.0, -2.0], [-1.0, math.nan]], num_tokens=[1, 1])
    with pytest.raises(ValueError, match="zero tokens"):
        metric.compute(log_weights=[[-1.0]], num_tokens=[0])
    with pytest.raises(ValueError, match="2 beam bounds for 1 documents"):
        metric.compute(log_weights=[[-1.0]], num_tokens=[1], beam_log_likelihoods=[-1.0, -2.0])


def test_one_document_above_probability_one_is_a_warning_not_a_refusal(metric):
    """p̂ is unbiased, not bounded by 1: a near-certain document's p̂ can exceed 1 by Monte Carlo noise alone, so a
    document with log p̂ > 0 in a corpus below probability 1 is named in a warning and the report is made."""
    with pytest.warns(UserWarning, match=r"1 document\(s\) have log p̂ > 0.*document 1: log p̂ = 0.0\d+"):
        out = metric.compute(log_weights=[[-3.0, -2.0], [-0.2, 0.3]], num_tokens=[2, 1])
    assert out["perplexity"] > 1


@pytest.mark.parametrize(
    ("log_weights", "num_tokens", "expected"),
    [
        (
            [[-1.0, -2.0], [-1.0, -3.0]],
            [1, 2.5],
            "document 1: num_tokens must be a whole number ≥ 0, got 2.5",
        ),
        (
            [[-1.0, -2.0], [-1.0, -3.0]],
            [0, 1],
            "document 0: num_tokens is 0 but its log weights give log p̂ = -1.37989; an empty document has p = 1",
        ),
        (
            [[-1.0, -2.0], [1.0, 3.0]],
            [1, 1],
            "Σ log p̂ = 1.0539 > 0 over 2 documents (document 1: log p̂ = 2.43378), a probability above 1",
        ),
    ],
)
def test_impossible_inputs_are_refused_in_one_line_naming_the_document(
    metric, log_weights, num_tokens, expected
):
    """Issue 43, item 6: num_tokens 2.5 was truncated to 2, a 0-token document's log p̂ still counted, and log weights
    giving p̂ > 1 gave a perplexity below 1; each is an InputError (one line) naming the document."""
    from lm_latent_eval.errors import InputError

    with pytest.raises(InputError) as caught:
        metric.compute(log_weights=log_weights, num_tokens=num_tokens)
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    # an empty document whose log p̂ is 0 still adds nothing, as before
    out = metric.compute(log_weights=[[0.0, 0.0], [-1.0, -3.0]], num_tokens=[0, 2.0])
    assert out["num_tokens"] == 2


def test_beam_bound_outputs(metric):
    lw = [[-1.0, -2.0], [-4.0, -5.0], [-2.0, -2.0]]
    out = metric.compute(log_weights=lw, num_tokens=[1, 2, 3], beam_log_likelihoods=[-1.5, -3.0, -2.5])
    assert out["beam_perplexity"] == pytest.approx(math.exp(7.0 / 6))
    # log p̂ = (−1.38, −4.38, −2.0): only document 2 lies below its bound (−3.0), so IS underestimated it
    assert out["share_below_beam_bound"] == pytest.approx(1 / 3)


def test_against_exact_marginals_of_a_tractable_hmm(tiny_hmm, metric):
    """On a 3-state HMM: a beam over all 3^T paths is exact, a small beam is a strict bound, large-K IS is close."""
    texts = ["a b c a", "c c b", "b a a b c"]
    exact = np.array([float(tiny_hmm.log_marginal(tiny_hmm.tokenize(t))) for t in texts])
    tokens = [len(t.split()) for t in texts]
    true_ppl = math.exp(-exact.sum() / sum(tokens))
    estimates = [
        estimate_document(tiny_hmm, t, EstimatorSettings("is", num_samples=2048, seed=1)) for t in texts
    ]
    full_beam = [beam_log_marginal(tiny_hmm, tiny_hmm.tokenize(t), 3 ** len(t.split())) for t in texts]
    small_beam = [beam_log_marginal(tiny_hmm, tiny_hmm.tokenize(t), 2) for t in texts]
    lw = [e.log_weights.tolist() for e in estimates]
    out_full = metric.compute(log_weights=lw, num_tokens=tokens, beam_log_likelihoods=full_beam)
    out_small = metric.compute(log_weights=lw, num_tokens=tokens, beam_log_likelihoods=small_beam)
    assert out_full["beam_perplexity"] == pytest.approx(true_ppl, rel=1e-9)
    assert out_small["beam_perplexity"] > true_ppl * (1 + 1e-6)
    assert out_full["instance_perplexity"] == pytest.approx(true_ppl, rel=0.03)
    assert out_full["corpus_perplexity"] == pytest.approx(true_ppl, rel=0.05)
    assert out_full["log_likelihoods"] == pytest.approx(exact, abs=0.05)


def test_readme_and_docstring_examples_run(no_network):
    run_doctests("is_perplexity")
    readme_doctests("is_perplexity")


def test_plot_helpers_write_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lm_latent_eval.contrastive.plots import plot_contrastive_entropy
    from lm_latent_eval.estimators.report import weights_report
    from lm_latent_eval.reports.plots import plot_convergence, plot_estimate_density

    rng = np.random.default_rng(0)
    report = weights_report(heavy_tailed_weights(rng, 4, 32), [10] * 4, beam_log_likelihoods=[-40.0] * 4)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3))
    plot_convergence(
        report["convergence"], ax=axes[0], beam_perplexity=report["beam_perplexity"], true_perplexity=20.0
    )
    plot_estimate_density(
        {"run A": rng.normal(size=100), "run B": rng.normal(1, 1, size=100)}, ax=axes[1], true_value=0.0
    )
    ce = {
        "levels": [0.1, 0.3],
        "contrastive_entropy": {0.1: 0.2, 0.3: 0.5},
        "contrastive_entropy_std": {0.1: 0.01, 0.3: 0.02},
        "unit": "word",
    }
    plot_contrastive_entropy(ce, ax=axes[2], label="model")
    assert len(axes[0].get_lines()) == 4  # instance, corpus, beam bound, exact
    assert axes[2].get_xlabel() == "distortion level d"
    fig.savefig(tmp_path / "plots.png")
    plt.close(fig)
    assert (tmp_path / "plots.png").stat().st_size > 10_000


WHEEL_CHECK = """
import os, socket, sys

def refuse(*args, **kwargs):
    raise OSError("network access attempted")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
import evaluate, lm_latent_eval

for name in ("is_perplexity", "contrastive_entropy"):
    path = lm_latent_eval.metrics_path(name)
    assert path.startswith(sys.argv[1]), path
    metric = evaluate.load(path)
    print(name, type(metric).__name__)
out = evaluate.load(lm_latent_eval.metrics_path("is_perplexity")).compute(log_weights=[[-1.0, -2.0]], num_tokens=[1])
print(round(out["instance_perplexity"], 6))
"""


@pytest.mark.slow  # a fresh interpreter imports evaluate, datasets and torch: ~20 s on the shared CI machine
def test_loading_from_the_wheel_layout_offline(tmp_path):
    """The wheel puts metrics/ at lm_latent_eval/metrics: load both from such a site folder, sockets blocked, fresh cache."""
    site = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__", "data")
    shutil.copytree(REPO / "lm_latent_eval", site / "lm_latent_eval", ignore=ignore)
    shutil.copytree(REPO / "metrics", site / "lm_latent_eval" / "metrics", ignore=ignore)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    stdout = run_python(
        textwrap.dedent(WHEEL_CHECK), str(site), cwd=tmp_path, pythonpath=[site], env=env, timeout=300
    )
    lines = stdout.split("\n")
    assert "is_perplexity IsPerplexity" in lines and "contrastive_entropy ContrastiveEntropy" in lines
    expected = math.exp(-(logsumexp([-1.0, -2.0]) - math.log(2)))
    assert f"{expected:.6f}".rstrip("0") in stdout
