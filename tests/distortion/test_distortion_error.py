"""Distortion error (LeBrun et al. 2022): hand-computed values, formulas on random data, bootstrap, metric."""

import doctest
import importlib.util
import json
import shutil
import socket
import textwrap
from pathlib import Path

import numpy as np
import pytest
from python_subprocess import run_python

from lm_latent_eval import metrics_path
from lm_latent_eval.distortion import error_curves as de

REPO = Path(__file__).resolve().parents[2]
METRIC_DIR = REPO / "metrics" / "distortion_error"


# ---------------------------------------------------------------- numbers


def test_errors_and_summary_hand_computed():
    model = [-3.0, -6.0, -9.5, -10.0]
    reference = [-2.0, -6.0, -9.0, -12.0]
    errors = de.sequence_errors(model, reference)
    np.testing.assert_array_equal(errors, [-1.0, 0.0, -0.5, 2.0])
    s = de.summary(errors)
    assert s == {
        "num_sequences": 4,
        "mean_error": 0.125,
        "share_underestimated": 0.5,
        "share_overestimated": 0.25,
        "tolerance": 0.0,
    }
    # a tolerance of 0.75 nats leaves only −1 and 2 outside the dead band
    s = de.summary(errors, tolerance=0.75)
    assert (s["share_underestimated"], s["share_overestimated"]) == (0.25, 0.25)


def test_equal_width_curve_hand_computed():
    # log p_L in [−12, −2] cut in 2 bins: [−12, −7) has errors 2, −0.5; [−7, −2] has −1, 0 (−2 = max, closed)
    reference = np.array([-2.0, -6.0, -9.0, -12.0])
    errors = np.array([-1.0, 0.0, -0.5, 2.0])
    curve = de.equal_width_curve(reference, errors, num_bins=2, min_count=1, num_resamples=2000)
    assert curve["bin_left"] == [-12.0, -7.0]
    assert curve["bin_right"] == [-7.0, -2.0]
    assert curve["count"] == [2, 2]
    assert curve["mean_error"] == [0.75, -0.5]
    assert curve["mean_log_p_ref"] == [-10.5, -4.0]
    # bootstrap of two values {a, b}: resample means a, (a+b)/2, b with probabilities 1/4, 1/2, 1/4
    assert curve["ci_low"] == [-0.5, -1.0]
    assert curve["ci_high"] == [2.0, 0.0]
    assert (curve["dropped_bins"], curve["dropped_sequences"]) == (0, 0)


def test_bins_with_at_most_min_count_sequences_are_dropped_and_reported():
    # bin 0 gets exactly 10 sequences (dropped), bin 1 gets 11 (kept): edges are 0, 0.5, 1
    reference = np.r_[np.zeros(10), np.full(10, 0.9), [1.0]]
    errors = np.r_[np.full(10, 5.0), np.arange(11.0)]
    curve = de.equal_width_curve(reference, errors, num_bins=2, num_resamples=500)
    assert curve["count"] == [11]
    assert curve["mean_error"] == [5.0]
    assert curve["bin_left"] == [0.5]
    assert (curve["dropped_bins"], curve["dropped_sequences"]) == (1, 10)
    # the same rule with min_count=9 keeps both
    assert de.equal_width_curve(reference, errors, num_bins=2, min_count=9, num_resamples=500)["count"] == [
        10,
        11,
    ]


def test_equal_width_curve_matches_formula_on_random_inputs():
    rng = np.random.default_rng(1)
    reference = -rng.gamma(4.0, 10.0, size=3000)
    errors = rng.normal(0.05 * reference, 2.0)
    curve = de.equal_width_curve(
        reference, errors, num_bins=15, num_resamples=500, rng=np.random.default_rng(0)
    )
    edges = np.linspace(reference.min(), reference.max(), 16)
    kept = dropped = 0
    for b in range(15):
        last = b == 14
        inside = (reference >= edges[b]) & (
            (reference <= edges[b + 1]) if last else (reference < edges[b + 1])
        )
        if inside.sum() <= 10:
            dropped += inside.sum()
            continue
        assert curve["bin_left"][kept] == pytest.approx(edges[b])
        assert curve["count"][kept] == inside.sum()
        assert curve["mean_error"][kept] == pytest.approx(errors[inside].mean(), abs=1e-12)
        assert curve["mean_log_p_ref"][kept] == pytest.approx(reference[inside].mean(), abs=1e-12)
        assert curve["ci_low"][kept] < curve["mean_error"][kept] < curve["ci_high"][kept]
        kept += 1
    assert kept == len(curve["count"]) and dropped == curve["dropped_sequences"] > 0
    assert sum(curve["count"]) + curve["dropped_sequences"] == reference.size


def test_equal_size_curve_matches_formula_on_random_inputs():
    rng = np.random.default_rng(2)
    reference = rng.normal(-30.0, 8.0, size=1234)
    errors = rng.normal(size=1234)
    curve = de.equal_size_curve(reference, errors, num_bins=50, num_resamples=300)
    order = np.argsort(reference)
    assert len(curve["count"]) == 50 and sum(curve["count"]) == 1234
    assert set(curve["count"]) == {24, 25}  # 1234 = 34 × 25 + 16 × 24
    start = 0
    for b, c in enumerate(curve["count"]):
        idx = order[start : start + c]
        assert curve["mean_error"][b] == pytest.approx(errors[idx].mean(), abs=1e-12)
        assert curve["bin_left"][b] == reference[idx].min() and curve["bin_right"][b] == reference[idx].max()
        start += c
    assert all(np.diff(curve["mean_log_p_ref"]) > 0)
    with pytest.raises(ValueError, match="at least 50 sequences"):
        de.equal_size_curve(reference[:49], errors[:49], num_bins=50)


def test_perturbation_grid_matches_formula_on_random_inputs():
    rng = np.random.default_rng(3)
    n = 2000
    steps = rng.integers(0, 4, size=n)
    reference = rng.normal(-20.0, 5.0, size=n) - 3.0 * steps
    errors = rng.normal(0.5 * steps, 1.0)
    grid = de.perturbation_grid(reference, errors, steps, num_bins=6)
    edges = np.linspace(reference.min(), reference.max(), 7)
    b = np.clip(np.searchsorted(edges, reference, side="right") - 1, 0, 5)
    assert grid["steps"] == [0, 1, 2, 3]
    saw_none = False
    for r in range(6):
        for j, s in enumerate(grid["steps"]):
            cell = (b == r) & (steps == s)
            assert grid["count"][r][j] == cell.sum()
            if cell.sum() > 10:
                assert grid["mean_error"][r][j] == pytest.approx(errors[cell].mean(), abs=1e-12)
            else:
                saw_none = True
                assert grid["mean_error"][r][j] is None
    assert saw_none
    for j, s in enumerate(grid["steps"]):
        assert grid["mean_error_by_steps"][j] == pytest.approx(errors[steps == s].mean(), abs=1e-12)
        assert grid["share_underestimated_by_steps"][j] == pytest.approx((errors[steps == s] < 0).mean())
        assert grid["count_by_steps"][j] == (steps == s).sum()


def test_length_curve_expected_is_n_times_mean_token_error():
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 6, size=500)
    token_errors = [rng.normal(-0.2, 0.5, size=n) for n in lengths]
    errors = np.array([t.sum() for t in token_errors])
    curve = de.length_curve(errors, token_errors=token_errors, num_resamples=300)
    per_token = np.concatenate(token_errors).mean()
    assert curve["mean_per_token_error"] == pytest.approx(per_token, abs=1e-12)
    assert curve["length"] == [1, 2, 3, 4, 5]
    for k, n in enumerate(curve["length"]):
        assert curve["expected_error"][k] == pytest.approx(n * per_token, abs=1e-12)
        assert curve["mean_error"][k] == pytest.approx(errors[lengths == n].mean(), abs=1e-12)
        assert curve["count"][k] == (lengths == n).sum()
    # lengths alone give the same curve (ē = Σ error / Σ n)
    same = de.length_curve(errors, lengths=lengths, num_resamples=300)
    assert same["expected_error"] == pytest.approx(curve["expected_error"])
    assert same["mean_error"] == curve["mean_error"]


def test_length_curve_rejects_inconsistent_token_errors():
    errors = np.array([-1.0, 0.5])
    with pytest.raises(ValueError, match="sequence 1 per-token errors sum to 0.4"):
        de.length_curve(errors, token_errors=[[-0.5, -0.5], [0.4]])
    with pytest.raises(ValueError, match="sequence 0 has length 3 but 2 per-token errors"):
        de.length_curve(errors, lengths=[3, 1], token_errors=[[-0.5, -0.5], [0.5]])
    with pytest.raises(ValueError, match="needs lengths or per-token errors"):
        de.length_curve(errors)


@pytest.mark.parametrize(
    ("model", "reference", "message"),
    [
        ([-1.0, -2.0], [-1.0], "2 model log probabilities but 1 reference"),
        ([-1.0, float("nan")], [-1.0, -2.0], "predictions.*sequence 1 has value nan"),
        ([-1.0, -2.0], [float("-inf"), -2.0], "references.*sequence 0 has value -inf"),
        ([-1.0, float("-inf")], [-1.0, -2.0], "sequence 1.*probability 0 has error -inf"),
        ([], [], "at least one sequence"),
        ([[-1.0]], [[-1.0]], "one number per sequence"),
    ],
)
def test_bad_inputs_raise_clear_errors(model, reference, message):
    with pytest.raises(ValueError, match=message):
        de.sequence_errors(model, reference)


def test_bad_optional_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="num_perturbations: sequence 1 has -1"):
        de.distortion_report([-1.0, -2.0], [-1.0, -2.0], num_perturbations=[0, -1], num_equal_size_bins=1)
    with pytest.raises(ValueError, match="num_perturbations: sequence 0 has 0.5"):
        de.distortion_report([-1.0, -2.0], [-1.0, -2.0], num_perturbations=[0.5, 1], num_equal_size_bins=1)
    with pytest.raises(ValueError, match="lengths: expected 2 values"):
        de.distortion_report([-1.0, -2.0], [-1.0, -2.0], lengths=[3], num_equal_size_bins=1)
    with pytest.warns(UserWarning, match="equal-size curve skipped: 2 sequences are fewer than its 50 bins"):
        assert de.distortion_report([-1.0, -2.0], [-1.0, -2.0])["equal_size_curve"] is None


def test_identical_models_have_zero_error_everywhere():
    rng = np.random.default_rng(5)
    log_p = -rng.gamma(3.0, 10.0, size=600)
    report = de.distortion_report(
        log_p, log_p, num_perturbations=rng.integers(0, 3, 600), lengths=rng.integers(1, 9, 600)
    )
    assert report["mean_error"] == 0.0 and report["share_underestimated"] == 0.0
    for name in ("equal_width_curve", "equal_size_curve", "length_curve"):
        assert report[name]["mean_error"] and set(report[name]["mean_error"]) == {0.0}
        assert set(report[name]["ci_low"]) == {0.0} and set(report[name]["ci_high"]) == {0.0}


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_ci_closed_forms():
    assert de.bootstrap_mean_ci(np.full(7, 3.5)) == (3.5, 3.5)
    assert de.bootstrap_mean_ci([0.0, 1.0], rng=np.random.default_rng(0)) == (0.0, 1.0)
    # large normal sample: the percentile interval is mean ± 1.96 σ/√m up to Monte Carlo error
    v = np.random.default_rng(6).normal(size=400)
    lo, hi = de.bootstrap_mean_ci(v, rng=np.random.default_rng(1))
    half = 1.959964 * v.std() / np.sqrt(v.size)
    assert lo == pytest.approx(v.mean() - half, abs=0.06 * half)
    assert hi == pytest.approx(v.mean() + half, abs=0.06 * half)
    # a 50 % interval is narrower than the 95 % one
    lo50, hi50 = de.bootstrap_mean_ci(v, level=0.5, rng=np.random.default_rng(1))
    assert lo < lo50 < hi50 < hi


def test_bootstrap_chunking_keeps_the_interval():
    v = np.random.default_rng(7).normal(size=300)
    whole = de.bootstrap_mean_ci(v, rng=np.random.default_rng(2), chunk=10**9)
    chunked = de.bootstrap_mean_ci(v, rng=np.random.default_rng(2), chunk=1000)  # 3 resamples per chunk
    assert chunked == pytest.approx(whole, abs=0.02)


def _coverage(repeats: int, m: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(repeats):
        values = rng.exponential(size=m) - 1.0  # skewed, true mean 0
        lo, hi = de.bootstrap_mean_ci(values, rng=rng)
        hits += lo <= 0.0 <= hi
    return hits / repeats


def test_bootstrap_ci_covers_true_mean_at_about_nominal_rate():
    # 200 repeats of m = 60: binomial sd ≈ 0.015; the percentile bootstrap under-covers a bit on skewed data
    assert 0.88 <= _coverage(200, 60, seed=8) <= 0.99


@pytest.mark.slow
def test_bootstrap_ci_coverage_many_repeats():
    assert 0.92 <= _coverage(2000, 100, seed=9) <= 0.97


# ---------------------------------------------------------------- evaluate module


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access is blocked in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_metrics_path_points_at_the_module():
    assert Path(metrics_path("distortion_error")).resolve() == METRIC_DIR


def test_metric_loads_offline_and_equals_library_on_random_inputs(no_network):
    import evaluate

    metric = evaluate.load(str(METRIC_DIR))
    rng = np.random.default_rng(10)
    reference = -rng.gamma(3.0, 10.0, size=700)
    model = reference + rng.normal(-0.5, 1.0, size=700)
    steps = rng.integers(0, 3, size=700)
    lengths = rng.integers(2, 7, size=700)
    for start in range(0, 700, 200):  # batches go through the Arrow cache as float64
        metric.add_batch(predictions=model[start : start + 200], references=reference[start : start + 200])
    got = metric.compute(num_perturbations=steps, lengths=lengths, num_resamples=500, seed=3)
    want = de.distortion_report(
        model, reference, num_perturbations=steps, lengths=lengths, num_resamples=500, seed=3
    )
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert got["mean_error"] == pytest.approx(float(np.mean(model - reference)), abs=1e-12)


def test_metric_rejects_nan_with_a_clear_error(no_network):
    import evaluate

    metric = evaluate.load(str(METRIC_DIR))
    with pytest.raises(ValueError, match="sequence 1 has value nan"):
        metric.compute(predictions=[-1.0, float("nan")], references=[-1.0, -2.0], num_equal_size_bins=1)


def test_metric_docstring_examples_run(no_network):
    spec = importlib.util.spec_from_file_location(
        "distortion_error_module", METRIC_DIR / "distortion_error.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test = doctest.DocTestParser().get_doctest(module._KWARGS_DESCRIPTION, {}, "distortion_error", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries >= 8


def test_readme_examples_run(no_network):
    result = doctest.testfile(str(METRIC_DIR / "README.md"), module_relative=False, verbose=False)
    assert result.failed == 0 and result.attempted >= 12
    readme = (METRIC_DIR / "README.md").read_text()
    for section in (
        "## Metric Description",
        "### Inputs",
        "### Output Values",
        "## Limitations and Bias",
        "## Citation",
    ):
        assert section in readme


def test_metric_loads_from_installed_wheel_layout(tmp_path):
    """The wheel puts metrics/ in the package (pyproject force-include): load it there, offline, afresh."""
    site = tmp_path / "site"
    shutil.copytree(
        REPO / "lm_latent_eval", site / "lm_latent_eval", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(
        REPO / "metrics", site / "lm_latent_eval" / "metrics", ignore=shutil.ignore_patterns("__pycache__")
    )
    script = textwrap.dedent(
        """
        import json, socket, sys
        def refuse(*a, **k):
            raise OSError("network blocked")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        import evaluate, lm_latent_eval
        path = lm_latent_eval.metrics_path("distortion_error")
        metric = evaluate.load(path)
        out = metric.compute(predictions=[-3.0, -6.0, -9.5, -10.0], references=[-2.0, -6.0, -9.0, -12.0],
                             num_bins=2, num_equal_size_bins=2, min_count=1, num_resamples=100)
        print(json.dumps({"path": path, "package": lm_latent_eval.__file__, "mean_error": out["mean_error"]}))
        """
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    stdout = run_python(script, cwd=tmp_path, pythonpath=[site], env=env, timeout=300)
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["path"] == str(site / "lm_latent_eval" / "metrics" / "distortion_error")
    assert out["package"].startswith(str(site))
    assert out["mean_error"] == 0.125
