"""Resumable runs (model_args ``results_dir=``) and lm-eval's ``--use_cache``: no stale number is ever reused.

Documents are counted through ``ResolvedEstimator.estimate``, the one place the backend computes an estimate.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from lm_latent_eval.estimators import ResolvedEstimator, recorded_settings
from lm_latent_eval.harness import results_store
from lm_latent_eval.harness.backends import LatentHMMEval, LatentLMEval
from lm_latent_eval.harness.exchange import EstimateExchange
from lm_latent_eval.models import default_checkpoint
from lm_latent_eval.models.hmm import HMMLanguageModel

REPO = Path(__file__).resolve().parents[2]
CORPUS_FILE = REPO / "lm_latent_eval/data/corpus/tiny_test.jsonl"
DOCS = [json.loads(line)["text"] for line in CORPUS_FILE.open()][:10]
# one process (workers=1): the tests count, and crash, the estimates made
ARGS = {"estimator": "is", "num_samples": 32, "seed": 3, "device": "cpu", "batch_size": "auto", "workers": 1}


class ShiftedHMM(HMMLanguageModel):
    """The bundled HMM's checkpoint under another class: p(x, z) scaled by e^-1 (a different model, same bytes)."""

    def log_joint(self, x, z):
        return super().log_joint(x, z) - 1.0


def rolling(texts):
    return [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]


@pytest.fixture
def calls(monkeypatch):
    """Texts estimated (``ResolvedEstimator.estimate_documents``: one at a time under IS), in order;
    ``calls.fail_after = n`` raises on document n + 1 (a crash)."""
    real = ResolvedEstimator.estimate_documents

    class Counter(list):
        fail_after = None

    counter = Counter()

    def counting(self, texts, *args, **kw):
        if counter.fail_after is not None and len(counter) + len(texts) > counter.fail_after:
            raise RuntimeError("simulated crash")
        counter.extend(texts)
        return real(self, texts, *args, **kw)

    monkeypatch.setattr(ResolvedEstimator, "estimate_documents", counting)
    return counter


@pytest.fixture(scope="module")
def uninterrupted():
    """log p̂ and log weights of DOCS from a run without results_dir."""
    lm = LatentHMMEval(**ARGS)
    values = lm.loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    return values, [lm.exchange.peek(t).log_weights for t in DOCS]


def test_crashed_run_resumes_without_redoing_finished_documents(tmp_path, calls, uninterrupted):
    calls.fail_after = 4
    with pytest.raises(RuntimeError, match="simulated crash"):
        LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    assert calls == DOCS[:4]
    calls.clear()
    calls.fail_after = None
    lm = LatentHMMEval(**ARGS, results_dir=tmp_path)  # a fresh backend, as after a restart
    values = lm.loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    assert calls == DOCS[4:]
    assert values == uninterrupted[0]  # bit for bit
    for text, weights in zip(DOCS, uninterrupted[1]):
        assert np.array_equal(lm.exchange.peek(text).log_weights, weights)
    calls.clear()  # a third run computes nothing at all
    assert (
        LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
        == values
    )
    assert calls == []


KILLED_RUN = """
import os, signal, sys
import numpy as np
from lm_eval.api.instance import Instance
from lm_latent_eval.harness import backends, results_store

real_savez, count = np.savez, [0]
def savez_then_die(fh, **arrays):  # the 5th document: write half a file, then SIGKILL mid-write
    count[0] += 1
    if count[0] == 5:
        fh.write(b"PK\\x03\\x04 half a zip")
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_savez(fh, **arrays)
results_store.np.savez = savez_then_die
texts = [l for l in sys.stdin.read().split("\\x1e") if l]
lm = backends.LatentHMMEval(estimator="is", num_samples=32, seed=3, device="cpu", batch_size="auto", results_dir=sys.argv[1])
lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)])
"""


def test_process_killed_while_writing_leaves_only_whole_results(tmp_path, calls, uninterrupted):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(tmp_path)], input="\x1e".join(DOCS), env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-2000:]
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(list(folder.glob("*.npz"))) == 4  # the half-written 5th exists only as a temporary file
    assert len(list(folder.glob(".*.tmp"))) == 1
    values = LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood_rolling(
        rolling(DOCS), disable_tqdm=True
    )
    assert calls == DOCS[4:]
    assert values == uninterrupted[0]


@pytest.mark.filterwarnings("ignore:.*is_greedy is not computed")
def test_loglikelihood_contexts_and_continuations_resume_too(tmp_path, calls):
    pairs = [("Anna", " slept."), ("The dog", " saw anna."), ("Anna", " saw the cat.")]
    reqs = [Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)]
    first = LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood(reqs, disable_tqdm=True)
    assert len(calls) == 5  # two contexts, three full texts
    calls.clear()
    assert LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood(reqs, disable_tqdm=True) == first
    assert calls == []


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 4},
        {"num_samples": 16},
        {"temperature": 0.8},
        {"peek": False},
        {"estimator": "exact"},
        {"estimator": "beam", "beam_size": 4},
        {"dtype": "float64"},
        {"model": "test_resume:ShiftedHMM", "pretrained": str(default_checkpoint("hmm"))},
        {"model": "hmm", "pretrained": "TINY"},
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_changed_model_or_setting_never_reuses_stored_results(tmp_path, calls, change):
    base = LatentHMMEval(**ARGS, results_dir=tmp_path)
    stale = base.loglikelihood_rolling(rolling(DOCS[:4]), disable_tqdm=True)
    calls.clear()
    args = {**ARGS, **change, "results_dir": tmp_path}
    if args.get("pretrained") == "TINY":  # another checkpoint of the same class
        tiny = tmp_path / "tiny_hmm"
        HMMLanguageModel(vocab=["<unk>", "anna", "the", "dog"], num_states=3, seed=9).save_pretrained(tiny)
        args["pretrained"] = str(tiny)
    lm = LatentLMEval(**args) if "model" in args else LatentHMMEval(**args)
    fresh = lm.loglikelihood_rolling(rolling(DOCS[:4]), disable_tqdm=True)
    assert calls == DOCS[:4]
    assert lm.results_store.folder != base.results_store.folder
    if (
        "dtype" not in change
    ):  # float64 parameters may round to the same numbers; everything else changes them
        assert fresh != stale


def test_same_checkpoint_bytes_elsewhere_and_another_batch_size_reuse_results(tmp_path, calls):
    """The key is the checkpoint's content and the settings that change numbers, not its path or batch_size."""
    stored = LatentHMMEval(**ARGS, results_dir=tmp_path / "r").loglikelihood_rolling(
        rolling(DOCS[:4]), disable_tqdm=True
    )
    calls.clear()
    copy = tmp_path / "copy"
    shutil.copytree(default_checkpoint("hmm"), copy)
    lm = LatentLMEval(
        model="hmm", pretrained=str(copy), **{**ARGS, "batch_size": "3"}, results_dir=tmp_path / "r"
    )
    assert lm.loglikelihood_rolling(rolling(DOCS[:4]), disable_tqdm=True) == stored
    assert calls == []


def test_stored_files_hold_text_tokens_estimate_and_weights(tmp_path):
    lm = LatentHMMEval(**ARGS, results_dir=tmp_path)
    (value,) = lm.loglikelihood_rolling(rolling(DOCS[:1]), disable_tqdm=True)
    identity = json.loads((lm.results_store.folder / "identity.json").read_text())
    assert identity["checkpoint_sha256"] == lm.checkpoint_sha256
    assert identity["estimator_settings"] == recorded_settings(lm.settings)
    assert identity["device_type"] == "cpu" and identity["dtype"] == "float32"
    assert lm.results_store.folder.name == results_store.run_key(identity)
    with np.load(lm.results_store.path(DOCS[0])) as f:
        record = json.loads(str(f["record_json"]))
        assert record["document"] == DOCS[0]
        assert record["num_tokens"] == lm.model.tokenize(DOCS[0]).numel()
        assert record["log_likelihood"] == value and record["distinct_draws"] is not None
        assert f["log_weights"].shape == (32,)
        assert np.array_equal(f["log_weights"], lm.exchange.peek(DOCS[0]).log_weights)


def test_damaged_result_file_is_reported_and_recomputed(tmp_path, calls):
    lm = LatentHMMEval(**ARGS, results_dir=tmp_path)
    good = lm.loglikelihood_rolling(rolling(DOCS[:2]), disable_tqdm=True)
    lm.results_store.path(DOCS[1]).write_bytes(b"not a zip file")
    calls.clear()
    with pytest.warns(UserWarning, match="ignoring unreadable stored result"):
        again = LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood_rolling(
            rolling(DOCS[:2]), disable_tqdm=True
        )
    assert calls == [DOCS[1]] and again == good


# ---- lm-eval's --use_cache (keyed by request text only) ------------------------------------------------------------


def probe_task(tmp_path: Path) -> TaskManager:
    """A plain loglikelihood_rolling task (lm-eval's word_perplexity) over the bundled corpus."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    config = {
        "task": "cache_probe",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(CORPUS_FILE)}},
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}],
    }
    (folder / "cache_probe.yaml").write_text(json.dumps(config))
    return TaskManager(include_path=str(folder), include_defaults=False)


def test_use_cache_of_another_setting_is_refused_through_simple_evaluate(tmp_path, calls):
    """simple_evaluate(use_cache=...) is what ``lm_eval --use_cache`` runs: a cache from seed 1 refuses seed 2."""
    manager, cache = probe_task(tmp_path), str(tmp_path / "cache" / "lm")

    def evaluate(model_args):
        out = lm_eval.simple_evaluate(
            model="latent_hmm", model_args=model_args, tasks=["cache_probe"], task_manager=manager,
            use_cache=cache, bootstrap_iters=0, device="cpu",
        )  # fmt: skip
        return out["results"]["cache_probe"]["word_perplexity,none"]

    first = evaluate("estimator=is,num_samples=8,seed=1")
    assert len(calls) == 30
    calls.clear()
    assert (
        evaluate("estimator=is,num_samples=8,seed=1") == first
    )  # same model and settings: lm-eval's cache answers
    assert calls == []
    for other, differs in (
        ("estimator=is,num_samples=8,seed=2", "seed=1 (now 2)"),
        ("estimator=is,num_samples=16,seed=1", "num_samples=8 (now 16)"),
        ("estimator=exact", "estimator=is (now exact)"),
        ("estimator=is,num_samples=8,seed=1,dtype=float64", "dtype=float32 (now float64)"),
    ):
        with pytest.raises(ValueError, match="was written with .*" + re.escape(differs)):
            evaluate(other)
    assert calls == []
    assert Path(cache + "_rank0.db").is_file()


def test_use_cache_rerun_of_the_flagship_perplexity_task_gives_the_same_figures(tmp_path, calls):
    """Our perplexity tasks need each document's samples: a rerun that lm-eval's cache answers reads them from the
    same cache file (it failed on the second run before)."""
    manager = TaskManager(include_path=str(REPO / "tasks"), include_defaults=False)
    cache = str(tmp_path / "cache" / "lm")

    def evaluate():
        out = lm_eval.simple_evaluate(
            model="latent_hmm", model_args="estimator=is,num_samples=8,seed=1", tasks=["latent_ppl_tiny"],
            task_manager=manager, use_cache=cache, limit=4, device="cpu",
        )  # fmt: skip
        return out["results"]["latent_ppl_tiny"]

    first = evaluate()
    assert len(calls) == 4
    calls.clear()
    EstimateExchange.current().clear()  # a new process: nothing of the first run in memory
    assert evaluate() == first and calls == []


def test_results_files_get_the_umask_mode_and_a_resumed_run_says_how_many_it_loaded(tmp_path, caplog):
    """0o600 files (mkstemp's mode) locked a shared results folder to its writer; a resumed run logs its count."""
    lm = LatentHMMEval(**ARGS, results_dir=tmp_path)
    lm.loglikelihood_rolling(rolling(DOCS[:3]), disable_tqdm=True)
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in lm.results_store.folder.iterdir()}
    assert set(modes.values()) == {0o666 & ~mask}, modes
    with caplog.at_level("INFO", logger="lm_latent_eval"):
        LatentHMMEval(**ARGS, results_dir=tmp_path).loglikelihood_rolling(
            rolling(DOCS[:5]), disable_tqdm=True
        )
    assert "3 of 5 documents have their first estimate stored in" in caplog.text
    assert "stage 1: 3 loaded, 2 estimated" in caplog.text


def test_a_resumed_precision_target_says_what_it_loaded_at_each_stage(tmp_path, caplog):
    """Issue 34, item 17: a resumed run logged "20 of 20 documents loaded" while the precision target's later stages
    still ran. The log now counts per stage what was loaded and what was estimated: all of it loaded on a rerun of a
    finished run, and, when the later stages' files are gone (an interrupt after stage 1), those stages estimated."""
    args = {**ARGS, "estimator": "smc", "num_samples": 8, "target_se": 0.002}
    first = LatentHMMEval(**args, results_dir=tmp_path)
    first.loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    later = sorted(first.results_store.folder.glob("*.stage*.npz"))
    assert later, "the target did not go past its first stage: nothing to test"
    # the first run's lines, captured where an earlier test left the logger at INFO, are not the rerun's
    caplog.clear()
    with caplog.at_level("INFO", logger="lm_latent_eval"):
        LatentHMMEval(**args, results_dir=tmp_path).loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    assert "estimated" not in caplog.text.split("have their first estimate stored")[1]
    caplog.clear()
    for path in later:
        path.unlink()
    with caplog.at_level("INFO", logger="lm_latent_eval"):
        LatentHMMEval(**args, results_dir=tmp_path).loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    tally = caplog.text.split("have their first estimate stored")[1]
    assert f"stage 1: {len(set(DOCS))} loaded; stage 2: " in tally and " estimated" in tally


def test_a_resumed_run_states_the_same_record_and_certified_bound(tmp_path, calls):
    """Issue 53 (5): the store kept log p̂ and the weights but dropped the distinct draws the certified bound reads,
    so the bound moved on resume (16.8280, then 17.0396 with the same estimates). Every document's whole record
    comes back, and the corpus statement with it."""
    from lm_latent_eval.estimators.corpus import corpus_estimate

    first = LatentHMMEval(**ARGS, results_dir=tmp_path)
    first.loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    calls.clear()
    again = LatentHMMEval(**ARGS, results_dir=tmp_path)
    again.loglikelihood_rolling(rolling(DOCS), disable_tqdm=True)
    assert calls == []  # every record loaded
    made, loaded = ([lm.exchange.peek(t) for t in DOCS] for lm in (first, again))
    assert all(d.distinct_draws is not None for d in made)
    assert [d.to_json() for d in loaded] == [d.to_json() for d in made]
    bounds = [corpus_estimate(docs).perplexity_upper_bound for docs in (made, loaded)]
    assert bounds[0] == bounds[1]
