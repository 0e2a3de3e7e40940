"""``accelerate launch -m lm_eval --model latent_hmm ...`` with 2 CPU processes (gloo) equals one process.

On a machine without GPUs, ``accelerate launch --cpu --num_processes 2`` starts ONE process (accelerate's multi-CPU
mode needs MPI: ``--mpirun_hostfile``); ``--multi_gpu --num_processes 2`` is the flag that starts N processes through
torch.distributed.run, and the backend then opens a gloo process group because ``--device cpu``. That is the command
tested here, exactly as a user types it (``-m lm_eval``), with the start-up hook made visible through a
``sitecustomize`` instead of a pip install.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")
from hook_site import hook_site_dir
from lm_eval.api.instance import Instance
from python_subprocess import accelerate_launch, run_checked

from lm_latent_eval.estimators import ResolvedEstimator
from lm_latent_eval.harness import backends
from lm_latent_eval.harness.backends import LatentHMMEval

REPO = Path(__file__).resolve().parents[2]
CORPUS = [json.loads(line)["text"] for line in (REPO / "lm_latent_eval/data/corpus/tiny_test.jsonl").open()]
MODEL_ARGS = "estimator=smc,num_samples=512,seed=4"  # 4 runs: a numeric Monte Carlo Stderr


def environment(tmp_path: Path, site_dir: Path) -> dict:
    """PYTHONPATH with the checkout and a sitecustomize that adds ``site_dir`` (holding the .pth start-up hook)."""
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    return {**os.environ, "PYTHONPATH": f"{boot}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1"}


def lm_eval_args(output: Path, model_args: str) -> list[str]:
    return [
        "-m", "lm_eval", "run", "--model", "latent_hmm", "--model_args", model_args, "--tasks", "latent_ppl_tiny",
        "--include_path", str(REPO / "tasks"), "--device", "cpu", "--batch_size", "auto",
        "--output_path", str(output), "--log_samples",
    ]  # fmt: skip


def run(cmd: list[str], env: dict, cwd: Path) -> tuple[dict, list[dict], str]:
    proc = run_checked(cmd, env=env, timeout=900, cwd=cwd, tail=4000)
    out = Path(cmd[cmd.index("--output_path") + 1])
    (results_file,) = glob.glob(str(out / "**" / "results_*.json"), recursive=True)
    (samples_file,) = glob.glob(str(out / "**" / "samples_latent_ppl_tiny_*.jsonl"), recursive=True)
    samples = [json.loads(line) for line in Path(samples_file).read_text().splitlines()]
    return json.loads(Path(results_file).read_text()), sorted(samples, key=lambda s: s["doc_id"]), proc.stderr


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_equals_one_process(tmp_path, monkeypatch):
    env = environment(tmp_path, hook_site_dir(tmp_path))
    one, one_samples, _ = run([sys.executable, *lm_eval_args(tmp_path / "one", MODEL_ARGS)], env, tmp_path)
    store = tmp_path / "store"
    two, two_samples, stderr = run(
        [*accelerate_launch(2), *lm_eval_args(tmp_path / "two", f"{MODEL_ARGS},results_dir={store}")],
        env,
        tmp_path,
    )
    # two ranks, each estimating its own half of the 30 documents
    bars = re.findall(r"smc log p\(x\): 100%\|[^\r\n]*?(\d+)/(\d+)", stderr)  # tqdm may redraw a finished bar
    assert len(bars) >= 2 and set(bars) == {("15", "15")}
    assert two["results"]["latent_ppl_tiny"]["sample_len"] == len(CORPUS)
    # every figure, the Stderr column included (issue 19: it depended on the number of processes)
    assert isinstance(one["results"]["latent_ppl_tiny"]["latent_perplexity_stderr,none"], float)
    for key, value in one["results"]["latent_ppl_tiny"].items():
        if "," in key:
            got = two["results"]["latent_ppl_tiny"][key]
            assert got == (
                value if isinstance(value, str) else pytest.approx(value, rel=1e-12, nan_ok=True)
            ), key
    assert [s["resps"] for s in two_samples] == [s["resps"] for s in one_samples]  # per document, bit for bit
    assert [s["latent_perplexity"]["log_weights"] for s in two_samples] == [
        s["latent_perplexity"]["log_weights"] for s in one_samples
    ]

    # both ranks wrote into one results folder: a later single-process run computes nothing and agrees
    (folder,) = [p for p in store.iterdir() if p.is_dir()]
    assert len(list(folder.glob("*.npz"))) == len(CORPUS)
    calls = []
    real = ResolvedEstimator.estimate_documents
    monkeypatch.setattr(
        ResolvedEstimator,
        "estimate_documents",
        lambda self, texts, *a, **k: calls.extend(texts) or real(self, texts, *a, **k),
    )
    lm = LatentHMMEval(estimator="smc", num_samples=512, seed=4, device="cpu", results_dir=store, workers=1)
    values = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (s["doc"]["text"],), 0) for s in one_samples],
        disable_tqdm=True,
    )
    assert calls == []
    assert values == [float(s["resps"][0][0]) for s in one_samples]


class TwoRanks:
    """rank 0 of two processes: ``gather_object`` hands back this rank's object and ``other``'s (a fake process
    group: the collectives of a real one are tested by the slow launch below)."""

    rank, world_size = 0, 2

    def __init__(self, other=None) -> None:
        self.other, self.gathers = other, 0

    def all_reduce(self, values):
        return values

    def gather_object(self, obj, dst=0):
        self.gathers += 1
        return [obj, self.other.pop(0) if self.other else []]


def test_ranks_warn_once_about_the_whole_corpus_after_the_gather(caplog):
    """Each rank warned about its half of the documents, with that half's perplexity and bound; now rank 0 warns once
    when lm-eval gathers, about all documents, with the whole corpus's figures."""
    from lm_latent_eval.estimators import UncertaintyPolicy
    from lm_latent_eval.estimators.corpus import corpus_estimate

    hot = {
        "estimator": "is",
        "num_samples": 16,
        "temperature": 5.0,
        "peek": False,
        "seed": 3,
        "device": "cpu",
    }
    ranks = [LatentHMMEval(**hot), LatentHMMEval(**hot)]
    halves = [CORPUS[:6], CORPUS[6:12]]
    # rank 1 holds its half back for the gather
    ranks[1].batches.processes = TwoRanks()
    ranks[1].loglikelihood_rolling([rolling(t) for t in halves[1]], disable_tqdm=True)
    held = ranks[1].batches.held
    ranks[0].batches.processes = TwoRanks(other=[held])
    with caplog.at_level("WARNING", logger="lm_latent_eval"):
        ranks[0].loglikelihood_rolling([rolling(t) for t in halves[0]], disable_tqdm=True)
        assert not [r for r in caplog.records if "two-sided" in r.getMessage()]  # no warning about one half
        ranks[0].gather_object({"metrics": 1})
        ranks[0].gather_object({"samples": 2})  # lm-eval's second gather: nothing held any more
    (message,) = [r.getMessage() for r in caplog.records if "two-sided" in r.getMessage()]
    assert "these 12 documents" in message
    estimates = [ranks[0].exchange.peek(t) for t in halves[0]] + [
        ranks[1].exchange.peek(t) for t in halves[1]
    ]
    whole = corpus_estimate(estimates, UncertaintyPolicy())
    assert f"{whole.instance_perplexity:.4g}" in message and f"{whole.perplexity_upper_bound:.4g}" in message


@pytest.mark.parametrize(
    ("backend", "settings", "documents"),
    [
        # the context's view (``DocumentBatches.view_conditionals``): one estimate per pair
        ("LatentLMEval", {"model": "masked", "num_samples": 4}, 4),
        # the joint texts and the contexts: two estimates per pair
        ("LatentTokenizationEval", {"num_samples": 2}, 8),
    ],
)
def test_conditionals_warn_once_after_the_gather(caplog, backend, settings, documents):
    """The masked LMs' and the tokenization model's loglikelihood warned on each rank about its own pairs, bypassing
    the held-back check of the documents; now they are held for lm-eval's gather too."""
    cls = getattr(backends, backend)
    hot = {**settings, "estimator": "is", "temperature": 3.0, "seed": 3, "device": "cpu"}
    pairs = [
        [("Anna saw", " the dog."), ("The cat", " sat down.")],
        [("A dog", " ran."), ("Bob", " saw Anna.")],
    ]
    ranks = [cls(**hot), cls(**hot)]
    ranks[1].batches.processes = TwoRanks()
    with caplog.at_level("WARNING", logger="lm_latent_eval"):
        ranks[1].loglikelihood([Instance("loglikelihood", {}, p, 0) for p in pairs[1]], disable_tqdm=True)
        ranks[0].batches.processes = TwoRanks(other=[ranks[1].batches.held])
        ranks[0].loglikelihood([Instance("loglikelihood", {}, p, 0) for p in pairs[0]], disable_tqdm=True)
        assert not [r for r in caplog.records if "two-sided" in r.getMessage()]  # no warning about one shard
        ranks[0].gather_object({"metrics": 1})
    (message,) = [r.getMessage() for r in caplog.records if "two-sided" in r.getMessage()]
    assert f"these {documents} documents" in message


class SecondRank:
    """The processes of rank 1 of two (no process group: nothing here calls a collective)."""

    rank, world_size = 1, 2

    def __init__(self, device) -> None:
        self.device = device


def test_only_rank_0_names_the_estimator_and_the_settings_it_ignores(monkeypatch, caplog):
    """Every rank logged the estimator auto chose and warned about the same ignored model_args: said once now."""
    with caplog.at_level("INFO", logger="lm_latent_eval"):
        LatentHMMEval(num_samples=1000, device="cpu")
    assert [r for r in caplog.records if "no effect" in r.getMessage()]
    caplog.clear()
    monkeypatch.setattr(backends, "Processes", SecondRank)
    with caplog.at_level("INFO", logger="lm_latent_eval"):
        lm = LatentHMMEval(num_samples=1000, device="cpu")
    assert lm.rank == 1 and lm.settings.estimator == "exact"
    assert not [r for r in caplog.records if "no effect" in r.getMessage() or "auto: exact" in r.getMessage()]


def rolling(text: str) -> Instance:
    return Instance("loglikelihood_rolling", {}, (text,), 0)


@pytest.mark.slow
def test_two_processes_warn_once_about_the_whole_corpus(tmp_path):
    """Under 2 processes each rank logged its own reliability warning about its 15 documents (issue 34: 15.03 ≤ 15.29
    and 19.82 ≤ 20.19 beside the table's 17.18 ≤ 17.33); now one warning, about the 30."""
    env = environment(tmp_path, hook_site_dir(tmp_path))
    hot = "estimator=is,num_samples=16,temperature=5.0,peek=false,seed=3"
    _, _, stderr = run([*accelerate_launch(2), *lm_eval_args(tmp_path / "two", hot)], env, tmp_path)
    warnings = re.findall(
        r"no two-sided interval of the perplexity is honest for these (\d+) documents", stderr
    )
    assert warnings == [str(len(CORPUS))], stderr[-3000:]
