"""lm-eval integration: the start-up hook, the latent backends and the latent_ppl_tiny task.

Start-up cost of the hook (measured on this shared 2-core machine, Python 3.11, no timing assertion here):
``python -X importtime`` shows ``_lm_latent_eval_hook`` at 0.7-1.0 ms; interleaving 150 runs each of
``python -S -c "import site; site.addsitedir(D)"`` with D holding the .pth + hook vs. D empty gives medians of
12.7 ms vs. 10.2 ms, i.e. +2.5 ms for reading the .pth, importing the hook and installing its finder. Budget: < 10 ms.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from scipy.special import logsumexp

lm_eval = pytest.importorskip("lm_eval")
from hook_site import hook_site_dir
from is_checks import assert_unbiased
from lm_eval.api.instance import Instance
from lm_eval.api.model import CachingLM
from lm_eval.tasks import TaskManager

from lm_latent_eval.estimators import (
    EstimatorSettings,
    ISEstimate,
    ResolvedEstimator,
    corpus_ppl,
    estimate_document,
    instance_ppl,
    recorded_settings,
)
from lm_latent_eval.estimators.diagnostics import pareto_khat
from lm_latent_eval.harness import backends
from lm_latent_eval.harness.backends import LatentHMMEval, LatentLMEval
from lm_latent_eval.harness.exchange import EstimateExchange
from lm_latent_eval.models import checkpoint_hash, default_checkpoint

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"
CORPUS = [json.loads(line)["text"] for line in (REPO / "lm_latent_eval/data/corpus/tiny_test.jsonl").open()]


def python_with_hook(site_dir: Path, code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    prelude = f"import site; site.addsitedir({str(site_dir)!r})\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def rolling(text: str) -> Instance:
    return Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)


def pair(context: str, continuation: str) -> Instance:
    return Instance(request_type="loglikelihood", doc={}, arguments=(context, continuation), idx=0)


def log_forward(model, text: str) -> float:
    """log p(x) by a plain numpy forward algorithm over the HMM's (π, A, B): independent of the model's own code."""
    log_pi, log_A, log_B = (t.detach().double().numpy() for t in model.hmm.log_probs())
    x = model.tokenize(text).numpy()
    if x.size == 0:
        return 0.0
    alpha = log_pi + log_B[:, x[0]]
    for token in x[1:]:
        alpha = logsumexp(alpha[:, None] + log_A, axis=0) + log_B[:, token]
    return float(logsumexp(alpha))


# ---- start-up hook ----------------------------------------------------------------------------------------------


def test_hook_registers_latent_backends_and_keeps_builtin_models(tmp_path):
    code = """
import sys
assert "torch" not in sys.modules and "lm_eval" not in sys.modules and "lm_latent_eval" not in sys.modules
from lm_eval.api.registry import get_model
print(get_model("latent_hmm").__name__, get_model("latent").__name__, get_model("dummy").__name__, get_model("hf").__name__)
"""
    proc = python_with_hook(hook_site_dir(tmp_path), code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["LatentHMMEval", "LatentLMEval", "DummyLM", "HFLM"]


def test_without_hook_latent_names_are_unknown(tmp_path):
    """Control for the test above: the names come from the hook, not from anything else on the path."""
    empty = tmp_path / "empty"
    empty.mkdir()
    uninstall = (  # an installed copy of the package put the hook on sys.meta_path at start-up: take it off
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'RegistryImportFinder']\n"
    )
    proc = python_with_hook(
        empty, uninstall + "from lm_eval.api.registry import get_model\nget_model('latent_hmm')"
    )
    assert proc.returncode != 0 and "latent_hmm" in proc.stderr


def test_hook_backends_match_entry_points_and_plugin_registrations():
    from lm_latent_eval.harness import hook

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert hook.backend_targets() == pyproject["project"]["entry-points"]["lm_eval.models"]
    wheel_root = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert (
        wheel_root["lm_latent_eval/harness/hook.py"] == "_lm_latent_eval_hook.py"
    )  # what hook_site_dir copies
    from lm_eval.api.registry import get_model

    for name, target in hook.backend_targets().items():
        module, _, attr = target.partition(":")
        assert get_model(name) is getattr(__import__(module, fromlist=[attr]), attr)
    assert (REPO / "lm_latent_eval_hook.pth").read_text().strip() == "import _lm_latent_eval_hook"


def test_every_latent_backend_is_built_from_its_row_of_the_model_table():
    """One source of registration: each row of MODELS that names a backend is a ``latent_<name>`` target of the hook
    (and so of pyproject, checked above), served by ``backends`` as a class fixed to that model, built on first use
    and never written into the module's globals."""
    from lm_eval.api.registry import get_model

    from lm_latent_eval.harness import hook
    from lm_latent_eval.models import MODELS

    targets = hook.backend_targets()
    assert set(targets) == {"latent"} | {f"latent_{n}" for n, e in MODELS.items() if e.backend is not None}
    for name, entry in MODELS.items():
        if entry.backend is None:
            continue
        cls = getattr(backends, entry.backend)
        assert targets[f"latent_{name}"] == f"{backends.__name__}:{entry.backend}"
        assert issubclass(cls, LatentLMEval) and cls.MODEL == name and cls.__name__ == entry.backend
        assert get_model(f"latent_{name}") is cls is getattr(backends, entry.backend)
    assert not {e.backend for e in MODELS.values()} & set(vars(backends))
    with pytest.raises(AttributeError):
        backends.LatentNoSuchEval  # noqa: B018


def test_importing_or_building_a_backend_leaves_the_process_alone(tmp_path):
    """Issue 42 item 5: importing the backends registers nothing (the start-up hook or the entry points do); building
    one in a user's script wraps lm-eval's aggregation (one line in the log) but leaves the excepthook and torch's
    thread count as the script set them (the count is set only while the backend estimates)."""
    code = """
import logging, sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'RegistryImportFinder']
logging.basicConfig(level=logging.INFO)
import torch
hook, threads = sys.excepthook, torch.get_num_threads()
import lm_latent_eval.harness.backends as backends
from lm_eval import evaluator_utils
from lm_eval.api.registry import model_registry
assert "latent_hmm" not in model_registry and "LatentHMMEval" not in vars(backends)
assert not getattr(evaluator_utils._compute_task_aggregations, "drops_stderr_of_stderr", False)
backends.LatentHMMEval(estimator="exact", device="cpu", threads=threads + 1)
assert sys.excepthook is hook and torch.get_num_threads() == threads
assert evaluator_utils._compute_task_aggregations.drops_stderr_of_stderr
print("ok")
"""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = python_with_hook(empty, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok"]
    assert "evaluator_utils._compute_task_aggregations wrapped" in proc.stderr


# ---- backend ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hmm_is():
    # one process (workers=1): a test counts the estimates made
    return LatentHMMEval(estimator="is", num_samples=48, seed=11, device="cpu", batch_size="16", workers=1)


@pytest.fixture(scope="module")
def hmm_exact():
    return LatentHMMEval(estimator="exact", device="cpu")


def test_exact_rolling_equals_forward_algorithm(hmm_exact):
    docs = CORPUS[:6] + [""]
    with pytest.warns(UserWarning, match=r"an empty document \(''\) has no tokens"):
        got = hmm_exact.loglikelihood_rolling([rolling(t) for t in docs], disable_tqdm=True)
    assert isinstance(got, list) and all(isinstance(v, float) for v in got)
    assert got == pytest.approx([log_forward(hmm_exact.model, t) for t in docs], abs=1e-9)


def test_loglikelihood_is_difference_with_one_shared_context_estimate(hmm_is, monkeypatch):
    context = "The busy teacher"
    continuations = [" waited.", " slept.", " saw the dog."]
    calls = []
    real = ResolvedEstimator.estimate_documents

    def counting(self, texts, *args, **kw):
        calls.extend(texts)
        return real(self, texts, *args, **kw)

    monkeypatch.setattr(ResolvedEstimator, "estimate_documents", counting)
    got = hmm_is.loglikelihood([pair(context, c) for c in continuations] * 2, disable_tqdm=True)
    assert calls.count(context) == 1 and len(calls) == 1 + len(continuations)
    ctx = estimate_document(hmm_is.model, context, hmm_is.settings).log_likelihood
    for (value, greedy), c in zip(got, continuations * 2):
        assert value == estimate_document(hmm_is.model, context + c, hmm_is.settings).log_likelihood - ctx
        assert greedy is False


def test_exact_loglikelihood_is_the_conditional_and_obeys_the_chain_rule(hmm_exact):
    model = hmm_exact.model
    (ab,), (a,), (b,) = (
        hmm_exact.loglikelihood([pair(ctx, cont)], disable_tqdm=True)
        for ctx, cont in [("Anna saw", " the dog"), ("Anna saw", " the"), ("Anna saw the", " dog")]
    )
    assert ab[0] == pytest.approx(
        log_forward(model, "Anna saw the dog") - log_forward(model, "Anna saw"), abs=1e-9
    )
    assert ab[0] == pytest.approx(a[0] + b[0], abs=1e-9)
    assert ab[0] < 0


def test_results_do_not_depend_on_batch_size_or_request_order(hmm_is):
    other = LatentHMMEval(estimator="is", num_samples=48, seed=11, device="cpu", batch_size=1)
    docs = CORPUS[:8]
    assert hmm_is.loglikelihood_rolling([rolling(t) for t in docs], disable_tqdm=True) == list(
        reversed(other.loglikelihood_rolling([rolling(t) for t in reversed(docs)], disable_tqdm=True))
    )
    pairs = [("Anna", " slept."), ("The dog", " saw anna."), ("Anna", " saw the cat.")]
    assert hmm_is.loglikelihood([pair(*p) for p in pairs], disable_tqdm=True) == list(
        reversed(other.loglikelihood([pair(*p) for p in reversed(pairs)], disable_tqdm=True))
    )


def test_is_estimate_is_kept_with_its_weights_and_differs_by_seed(hmm_is):
    (value,) = hmm_is.loglikelihood_rolling([rolling(CORPUS[1])], disable_tqdm=True)
    est = hmm_is.exchange.peek(CORPUS[1])
    assert est.log_weights.shape == (48,) and est.log_likelihood == value
    assert value == pytest.approx(logsumexp(est.log_weights) - math.log(48), abs=1e-12)
    (other,) = LatentHMMEval(estimator="is", num_samples=48, seed=12, device="cpu").loglikelihood_rolling(
        [rolling(CORPUS[1])], disable_tqdm=True
    )
    assert other != value


def test_is_rolling_is_unbiased_for_p_and_biased_down_in_log_p():
    """Over 200 seeds: mean of p̂/p ≈ 1 (unbiased) and mean log p̂ ≤ log p (Jensen), each within 4 standard errors."""
    lm = LatentHMMEval(estimator="is", num_samples=4, device="cpu", batch_size="auto")
    text = CORPUS[2]
    exact = log_forward(lm.model, text)
    estimates = []
    for seed in range(200):
        lm.run = dataclasses.replace(lm.run, settings=lm.settings.replace(seed=seed))
        estimates.append(lm.loglikelihood_rolling([rolling(text)], disable_tqdm=True)[0])
    assert_unbiased(estimates, exact, num_se=4)
    assert np.std(estimates) > 0  # the proposal is mismatched: the estimates really vary


def test_generate_until_is_seeded_by_context_and_cut_at_until(hmm_is):
    reqs = [
        Instance("generate_until", {}, ("The old dog", {"until": ["."], "max_gen_toks": 30}), 0),
        Instance("generate_until", {}, ("Anna", {"until": [" the "], "max_gen_toks": 30}), 1),
    ]
    first = hmm_is.generate_until(reqs, disable_tqdm=True)
    assert first == list(reversed(hmm_is.generate_until(list(reversed(reqs)), disable_tqdm=True)))
    assert "." not in first[0] and " the " not in first[1]
    many = LatentHMMEval(seed=3, device="cpu").generate_until(
        [Instance("generate_until", {}, ("Anna", {"until": [], "max_gen_toks": 5}), 0)], disable_tqdm=True
    )
    assert 1 <= len(many[0].split()) <= 5


@pytest.mark.parametrize(
    "arg_string, match",
    [
        ("estimator=is,num_samples=0", "num_samples must be a positive integer"),
        ("temperature=0", "temperature must be a finite number > 0"),
        ("estimator=foo", "estimator must be one of"),
        ("num_samples=abc", "num_samples must be an integer"),
        ("num_sample=10", "unknown model_args \\['num_sample'\\]"),
        ("peek=maybe", "peek must be true or false"),
    ],
)
def test_bad_model_args_raise_clear_errors(arg_string, match):
    with pytest.raises(ValueError, match=match):
        LatentHMMEval.create_from_arg_string(arg_string, {"device": "cpu"})


def test_generic_backend_needs_a_model_and_rejects_unknown_ones():
    with pytest.raises(ValueError, match="needs model_args model="):
        LatentLMEval(device="cpu")
    with pytest.raises(ValueError, match="cannot import model class"):
        LatentLMEval(model="no_such_pkg.mod:Cls", device="cpu")
    custom = "model=lm_latent_eval.models.hmm:HMMLanguageModel"
    with pytest.raises(ValueError, match="no bundled checkpoint: pass pretrained="):
        LatentLMEval.create_from_arg_string(custom, {"device": "cpu"})
    ckpt = default_checkpoint("hmm")
    lm = LatentLMEval.create_from_arg_string(f"{custom},pretrained={ckpt}", {"device": "cpu"})
    assert lm.checkpoint_sha256 == checkpoint_hash(ckpt) and type(lm.model).__name__ == "HMMLanguageModel"


def test_device_in_model_args_wins_over_the_cli_device():
    """``--model_args device=cpu`` with lm-eval's default ``--device cuda:0`` (always passed) is not a clash."""
    from lm_eval.api.registry import get_model

    for build in (
        lambda cls: cls.create_from_arg_string("estimator=exact,device=cpu", {"device": "cuda:0"}),
        lambda cls: cls.create_from_arg_obj(
            {"estimator": "exact", "device": "cpu"}, {"device": "cuda:0", "batch_size": "4"}
        ),
    ):
        lm = build(get_model("latent_hmm"))
        assert lm.device.type == "cpu" and lm.get_model_info()["device_type"] == "cpu"
    lm = LatentHMMEval.create_from_arg_string(
        "estimator=is,batch_size=7", {"device": "cpu", "batch_size": "1"}
    )
    assert lm.settings.batch_size == 7  # model_args win for every key lm-eval also passes


def test_cuda_request_falls_back_to_cpu_with_warning():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.warns(UserWarning, match="CUDA is not available"):  # asked for in model_args
        lm = LatentHMMEval.create_from_arg_string("estimator=exact,device=cuda:0", {"batch_size": "1"})
    assert lm.device.type == "cpu"
    with warnings.catch_warnings():  # lm-eval's CLI passes --device cuda:0 when the user gave no --device
        warnings.simplefilter("error")
        lm = LatentHMMEval.create_from_arg_string("estimator=exact", {"device": "cuda:0", "batch_size": "1"})
    assert lm.device.type == "cpu"


def test_use_cache_database_of_another_estimator_is_refused(tmp_path):
    db = str(tmp_path / "cache.db")
    CachingLM(LatentHMMEval(estimator="is", num_samples=8, seed=1, device="cpu"), db).dbdict.close()
    CachingLM(
        LatentHMMEval(estimator="is", num_samples=8, seed=1, device="cpu"), db
    ).dbdict.close()  # same settings: fine
    with pytest.raises(ValueError) as caught:
        CachingLM(LatentHMMEval(estimator="is", num_samples=8, seed=2, device="cpu"), db)
    # issue 43, item 11: one short line naming the setting that differs (it was 1,777 characters of both JSONs)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(f"--use_cache database {db}") and "seed=1 (now 2)" in message, message


# ---- latent_ppl_tiny through lm-eval ------------------------------------------------------------------------------


def test_task_with_exact_estimator_reports_forward_algorithm_perplexity(hmm_exact):
    out = lm_eval.simple_evaluate(
        model=hmm_exact,
        tasks=["latent_ppl_tiny"],
        task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
        bootstrap_iters=0,
    )
    res = out["results"]["latent_ppl_tiny"]
    total_ll = sum(log_forward(hmm_exact.model, t) for t in CORPUS)
    total_tokens = sum(int(hmm_exact.model.tokenize(t).numel()) for t in CORPUS)
    assert res["instance_perplexity,none"] == pytest.approx(math.exp(-total_ll / total_tokens), rel=1e-9)
    assert res["corpus_perplexity,none"] == pytest.approx(res["instance_perplexity,none"], rel=1e-12)
    assert "is_ess_mean,none" not in res  # no importance weights: IS diagnostics do not apply, no row
    assert (
        res["latent_perplexity,none"] == res["perplexity_upper_bound,none"] == res["instance_perplexity,none"]
    )
    assert res["latent_perplexity_stderr,none"] == 0.0  # exact: no Monte Carlo error


@pytest.mark.parametrize("stale_table", [False, True])
def test_task_refuses_results_that_are_not_from_the_latent_backend(hmm_exact, stale_table):
    """Another model's numbers are refused, also when this process still holds latent estimates of the same texts."""
    EstimateExchange.current().clear()
    if stale_table:
        hmm_exact.loglikelihood_rolling([rolling(t) for t in CORPUS], disable_tqdm=True)
    match = "comes from another model or from a cache" if stale_table else "no estimate for document"
    with pytest.raises(RuntimeError, match=match):
        lm_eval.simple_evaluate(
            model="dummy",
            tasks=["latent_ppl_tiny"],
            task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
            bootstrap_iters=0,
        )


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One real ``python -m lm_eval run`` with the hook visible through a site dir (no pip install)."""
    tmp = tmp_path_factory.mktemp("cli")
    site_dir = hook_site_dir(tmp)
    argv = [
        "lm_eval",
        "run",
        "--model",
        "latent_hmm",
        "--model_args",
        "estimator=is,num_samples=32,seed=5",
        "--tasks",
        "latent_ppl_tiny",
        "--include_path",
        str(TASKS),
        "--output_path",
        str(tmp / "out"),
        "--log_samples",
        "--batch_size",
        "auto",  # device left at lm-eval's default cuda:0
    ]
    code = f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_module('lm_eval', run_name='__main__', alter_sys=True)"
    proc = python_with_hook(site_dir, code, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results_file,) = glob.glob(str(tmp / "out" / "**" / "results_*.json"), recursive=True)
    (samples_file,) = glob.glob(str(tmp / "out" / "**" / "samples_latent_ppl_tiny_*.jsonl"), recursive=True)
    samples = [json.loads(line) for line in Path(samples_file).read_text().splitlines()]
    return json.loads(Path(results_file).read_text()), sorted(samples, key=lambda s: s["doc_id"])


def test_cli_results_record_model_checkpoint_and_estimator(cli_run):
    results, _ = cli_run
    config = results["config"]
    assert config["model"] == "latent_hmm"
    assert config["latent_model"] == "lm_latent_eval.models.hmm:HMMLanguageModel"
    assert config["checkpoint_sha256"] == checkpoint_hash(default_checkpoint("hmm"))
    # lm-eval's default device (cuda:0) runs on the GPU where there is one: the record is of the device that ran
    ran_on = config["model_device"]
    assert config["device_type"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert config["estimator_settings"] == recorded_settings(
        EstimatorSettings("is", num_samples=32, seed=5), ran_on
    )
    metrics = results["results"]["latent_ppl_tiny"]
    for name in (
        "word_perplexity",
        "instance_perplexity",
        "corpus_perplexity",
        "is_ess_mean",
        "is_ess_min",
        "is_pareto_k_undefined",
    ):
        assert math.isfinite(metrics[f"{name},none"]), name
    assert 1.0 <= metrics["is_ess_min,none"] <= metrics["is_ess_mean,none"] <= 32.0
    undefined = metrics["is_pareto_k_undefined,none"]
    assert 0.0 <= undefined <= 1.0
    share = metrics["is_pareto_k_share,none"]
    assert math.isnan(share) if undefined == 1.0 else 0.0 <= share <= 1.0


def test_the_samples_file_holds_each_estimate_once(cli_run):
    """Issue 33, item 5: the samples file repeated each document's whole estimate once per metric (six times; 10 MB
    for the README's 20 documents). The ``latent_perplexity`` field holds it; every other field of the same statement holds
    a reference naming that field and the document."""
    _, samples = cli_run
    for s in samples:
        whole = [name for name, value in s.items() if isinstance(value, dict) and "log_weights" in value]
        assert whole == ["latent_perplexity"], whole
        for name in (
            "latent_perplexity_stderr",
            "perplexity_upper_bound",
            "instance_perplexity",
            "corpus_perplexity",
        ):
            assert (
                s[name]["same_as"] == "latent_perplexity" and s[name]["key"] == s["latent_perplexity"]["key"]
            ), name
            assert s[name]["log_likelihood"] == s["latent_perplexity"]["log_likelihood"], name


def test_cli_metrics_are_recomputable_from_the_saved_log_weights(cli_run):
    results, samples = cli_run
    metrics = results["results"]["latent_ppl_tiny"]
    assert [s["doc"]["text"] for s in samples] == CORPUS
    weights = [np.array(s["latent_perplexity"]["log_weights"]) for s in samples]
    tokens = [s["latent_perplexity"]["num_tokens"] for s in samples]
    assert all(w.shape == (32,) for w in weights)
    for s, w in zip(
        samples, weights
    ):  # the log-likelihood lm-eval got is the log-mean-exp of the saved weights
        assert float(s["resps"][0][0]) == pytest.approx(logsumexp(w) - math.log(32), abs=1e-12)
    assert metrics["instance_perplexity,none"] == pytest.approx(instance_ppl(weights, tokens), rel=1e-12)
    assert metrics["corpus_perplexity,none"] == pytest.approx(corpus_ppl(weights, tokens), rel=1e-12)
    khats = [pareto_khat(w) for w in weights]
    assert metrics["is_pareto_k_undefined,none"] == pytest.approx(np.mean(np.isnan(khats)))
    # guaranteed on every run: log-mean-exp >= mean (Jensen on the sample), so both IS perplexities are at most
    # exp(-Σ_n mean_k log w_nk / Σ_n T_n)
    elbo_ppl = math.exp(-sum(w.mean() for w in weights) / sum(tokens))
    assert metrics["instance_perplexity,none"] <= elbo_ppl * (1 + 1e-12)
    assert metrics["corpus_perplexity,none"] <= elbo_ppl * (1 + 1e-12)


def test_cli_weights_are_reproducible_in_process(cli_run):
    """The subprocess's samples equal an in-process estimate with the same (seed, document) on the device the run used
    (lm-eval's default, cuda:0, is the GPU where there is one; random streams differ between devices): no hidden
    state."""
    results, samples = cli_run
    lm = LatentHMMEval(estimator="is", num_samples=32, seed=5, device=results["config"]["model_device"])
    for s in samples[:5]:
        est = estimate_document(lm.model, s["doc"]["text"], lm.settings)
        assert np.array_equal(est.log_weights, np.array(s["latent_perplexity"]["log_weights"]))


@pytest.mark.slow
def test_two_process_accelerate_run_equals_single_process_run(tmp_path):
    """``torchrun --nproc_per_node 2`` (CPU, gloo) shards documents by rank; every metric must be unchanged."""
    pytest.importorskip("accelerate")
    site_dir = hook_site_dir(tmp_path)
    script = tmp_path / "run_lm_eval.py"
    script.write_text(
        f"import runpy, site, sys\nsite.addsitedir({str(site_dir)!r})\nsys.argv = ['lm_eval', *sys.argv[1:]]\n"
        "runpy.run_module('lm_eval', run_name='__main__', alter_sys=True)\n"
    )
    args = [
        "run", "--model", "latent_hmm", "--model_args", "estimator=is,num_samples=16,seed=4", "--tasks", "latent_ppl_tiny",
        "--include_path", str(TASKS), "--device", "cpu", "--batch_size", "auto",
    ]  # fmt: skip
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    metrics = []
    for prefix, out in (([], "one"), (launch, "two")):
        cmd = [sys.executable, *prefix, str(script), *args, "--output_path", str(tmp_path / out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # each rank's progress bar counts only its own shard of the 30 documents (tqdm may redraw a finished bar at
        # close, so the totals are compared as a set, not counted)
        totals = set(re.findall(r"log p\(x\):\s+\d+%.*?\d+/(\d+)", proc.stderr))
        assert totals == ({"15"} if out == "two" else {"30"})
        (results_file,) = glob.glob(str(tmp_path / out / "**" / "results_*.json"), recursive=True)
        metrics.append(json.loads(Path(results_file).read_text())["results"]["latent_ppl_tiny"])
    assert metrics[0]["sample_len"] == metrics[1]["sample_len"] == len(CORPUS)
    for key, value in metrics[0].items():
        if "," in key and "stderr" not in key:
            assert metrics[1][key] == pytest.approx(value, rel=1e-12, nan_ok=True), key


def test_unreliable_estimates_log_one_warning_with_advice(caplog):
    """A hot no-peeking proposal makes most IS estimates unreliable: one plain-words warning says so and what to try."""
    hot = LatentHMMEval(estimator="is", num_samples=64, temperature=5.0, peek=False, seed=3, device="cpu")
    with caplog.at_level("WARNING", logger=backends.__name__):
        hot.loglikelihood_rolling([rolling(t) for t in CORPUS[:6]], disable_tqdm=True)
    (record,) = [r for r in caplog.records if "no two-sided interval" in r.getMessage()]
    assert re.search(r"\d+ of 6 documents \(\d+%\) have Pareto k̂", record.getMessage())
    assert "true perplexity is at most" in record.getMessage()  # the certified bound
    assert "num_samples=640" in record.getMessage() and "peek=true" in record.getMessage()
    assert (
        "estimator=smc" in record.getMessage() and "target_se" in record.getMessage()
    )  # the HMM is stepwise
    caplog.clear()
    with caplog.at_level("WARNING", logger=backends.__name__):
        LatentHMMEval(estimator="exact", device="cpu").loglikelihood_rolling(
            [rolling(CORPUS[0])], disable_tqdm=True
        )
    assert not [r for r in caplog.records if "two-sided" in r.getMessage()]


def test_cli_table_shows_the_honest_statement_of_the_perplexity(cli_run):
    """The perplexity, its Stderr (Monte Carlo, or N/A where only the one-sided bound is honest), the certified bound
    and the sampling error over documents are the corpus estimate of the samples' own weights."""
    from lm_eval.utils import make_table

    from lm_latent_eval.estimators.corpus import corpus_estimate
    from lm_latent_eval.estimators.registry import estimate_from_json

    results, samples = cli_run
    metrics = results["results"]["latent_ppl_tiny"]
    corpus = corpus_estimate(
        [estimate_from_json({**s["latent_perplexity"], "document": s["doc"]["text"]}) for s in samples],
        keys=[s["latent_perplexity"]["key"] for s in samples],
    )
    assert metrics["latent_perplexity,none"] == pytest.approx(corpus.perplexity, rel=1e-12)
    assert metrics["perplexity_upper_bound,none"] == pytest.approx(corpus.perplexity_upper_bound, rel=1e-12)
    assert metrics["perplexity_sampling_se,none"] == pytest.approx(corpus.sampling_stderr, rel=1e-12)
    assert metrics["perplexity_upper_bound,none"] > metrics["latent_perplexity,none"]
    stderr = metrics["latent_perplexity_stderr,none"]
    assert stderr == (pytest.approx(corpus.interval_stderr) if corpus.interval.two_sided else "N/A")
    rows = [line for line in make_table(results).splitlines() if "|latent_perplexity " in line]
    assert len(rows) == 1 and ("N/A" in rows[0] if stderr == "N/A" else f"{stderr:.4f}" in rows[0])


def test_two_copies_of_the_hook_neither_recurse_nor_install_twice(tmp_path):
    """The installed ``_lm_latent_eval_hook`` plus ``lm_latent_eval.harness.hook`` from a checkout, before lm-eval loads."""
    code = """
import sys
import lm_latent_eval.harness.hook
finders = [f for f in sys.meta_path if type(f).__name__ == "RegistryImportFinder"]
assert len(finders) == 1, finders
from lm_eval.api.registry import get_model
print(get_model("latent_hmm").__name__)
"""
    proc = python_with_hook(hook_site_dir(tmp_path), code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["LatentHMMEval"]


def test_loglikelihood_is_refused_where_log_joint_is_not_a_prefix_probability(monkeypatch):
    """A model that scores complete texts and offers no prefix view: log p(context ⊕ continuation) − log p(context)
    is no conditional, so lm-eval's loglikelihood is refused with the reason (perplexity tasks still run); a model
    that does not declare it is refused too, with what to declare. (The RNNG answers from its prefix view:
    tests/harness/test_builtin_tasks.py, tests/models/rnng/.)"""
    request = Instance("loglikelihood", {}, ("the cat", " sat"), 0)
    lm = LatentHMMEval(estimator="exact", device="cpu")
    monkeypatch.setattr(type(lm.model), "prefix_probability", False)
    with pytest.raises(ValueError, match="scores complete texts"):
        lm.loglikelihood([request], disable_tqdm=True)
    monkeypatch.setattr(type(lm.model), "prefix_probability", None)
    with pytest.raises(ValueError, match="prefix_probability = True"):
        lm.loglikelihood([request], disable_tqdm=True)


def test_rows_that_repeat_a_number_are_explained(hmm_exact, caplog):
    """The quickstart table showed rows with one number (is_corpus = is_instance = word_perplexity, upp_* = ppl_* =
    is_*; now corpus_perplexity and instance_perplexity) without a word of why; the task now logs the reason for each repeat."""
    from lm_latent_eval.harness import perplexity_task

    with caplog.at_level("INFO", logger="lm_latent_eval"):
        lm_eval.simple_evaluate(
            model=hmm_exact, tasks=["latent_ppl_tiny"], limit=3, bootstrap_iters=0,
            task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
        )  # fmt: skip
    assert (
        "corpus_perplexity repeats instance_perplexity: an estimator=exact run has no importance samples"
        in caplog.text
    )
    words = ["a b c", "d e"]  # a word-level model (KGLM-like) whose samples paid no unknown-word penalty
    items = [
        perplexity_task._item(
            ISEstimate(t, len(t.split()), -3.0, np.full(4, -3.0), unk_penalty=np.zeros(4)), t
        )
        | {"num_words": len(t.split())}
        for t in words
    ]
    notes = " ".join(perplexity_task.repeated_rows(items))
    assert "word_perplexity repeats instance_perplexity: the model's tokens are the whitespace words" in notes
    assert "upp_instance and upp_corpus repeat" in notes and "ppl_* repeat them too" in notes
    assert "corpus_perplexity repeats" not in notes  # IS with equal K has a corpus level


def test_under_a_precision_target_the_log_says_the_corpus_row_is_na():
    """Issue 34, item 11: the log said corpus_perplexity "repeats" instance_perplexity under a precision target,
    where the table shows N/A."""
    from lm_latent_eval.estimators import SMCEstimate
    from lm_latent_eval.estimators.smc import SMCRun, smc_diagnostics
    from lm_latent_eval.harness import perplexity_task

    def estimate(text, size):
        runs = [SMCRun(np.full(size, -3.0), -3.0, 0, [], 0.0) for _ in range(4)]
        diag = smc_diagnostics(runs, [size] * 4, 0.5)
        return SMCEstimate(text, 2, -3.0, np.full(4 * size, -3.0), diagnostics=diag)

    items = [
        perplexity_task._item(estimate("a b", 25), "a b"),
        perplexity_task._item(estimate("c d", 50), "c d"),
    ]
    for item in items:
        item["num_words"] = 2
    notes = perplexity_task.repeated_rows(items)
    assert any(n.startswith("corpus_perplexity is N/A: the precision target") for n in notes), notes
    assert not any("corpus_perplexity repeats" in n for n in notes)


def test_the_backends_import_where_the_wheel_put_the_hook(tmp_path):
    """The wheel ships harness/hook.py only at site-packages root (``_lm_latent_eval_hook``, pyproject's
    force-include), so ``lm_latent_eval.harness.hook`` does not exist in an installed package: importing the backends
    failed there (the README's first command on a fresh machine), while every test, run from the checkout, passed."""
    from hook_site import hook_site_dir

    site_dir = hook_site_dir(tmp_path)
    code = (
        "import sys, site\n"
        f"site.addsitedir({str(site_dir)!r})\n"
        "sys.modules['lm_latent_eval.harness.hook'] = None  # as in the wheel: no such module\n"
        "import lm_latent_eval.harness.backends as b\n"
        "import lm_eval.api.registry as r\n"
        "assert r.get_model('latent_hmm') is b.LatentHMMEval\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_texts_auto_computes_exactly_are_said_in_the_log(caplog):
    """Issue 53 (8): the masked LM under auto computes a short text exactly (exact_where_cheaper) and said so nowhere
    per request; the log now counts them for every batch of requests."""
    lm = backends.LatentMaskedEval(num_samples=100, target_se=0, seed=1, device="cpu")
    texts = ["the cat sat", "anna saw the dog near the old house by the river in the morning"]
    with caplog.at_level("INFO", logger=backends.__name__):
        lm.loglikelihood_rolling(
            [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
        )
    lines = [r.getMessage() for r in caplog.records if "texts computed exactly" in r.getMessage()]
    assert len(lines) == 1 and "1 of 2 texts computed exactly (exact_where_cheaper" in lines[0]
    assert lm.exchange.peek(texts[0]).computed_exactly and not lm.exchange.peek(texts[1]).computed_exactly
