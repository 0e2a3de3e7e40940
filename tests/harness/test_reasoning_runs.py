"""latent_reasoning through lm_eval on the task data of tests/data: the reasoning tasks of tasks/ (arc_easy multiple
choice, gsm8k answer likelihood) and lm-eval's own gsm8k (generate_until), with only their dataset location pointing
at the local copies; exact values on the tiny symbolic model, a real command line on the bundled BPE GPT-2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from lm_eval_runs import run_lm_eval
from reasoning_tiny import TEMPLATE, make_tiny_reasoning

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

import lm_latent_eval
from lm_latent_eval.errors import UnsupportedError
from lm_latent_eval.harness.backends import LatentReasoningEval
from lm_latent_eval.models import default_checkpoint

DATA = Path(__file__).resolve().parents[1] / "data"
TASKS = Path(lm_latent_eval.tasks_path())
BUILTIN = Path(lm_eval.__file__).parent / "tasks"
SPLITS = {"ai2_arc_easy": ["train", "validation", "test"], "gsm8k": ["train", "test"]}


def local_tasks(folder: Path) -> Path:
    """YAMLs that include ours (and lm-eval's gsm8k) by absolute path, the dataset read from tests/data."""
    folder.mkdir()
    for task, include, data in [
        (
            "reasoning_arc_easy_local",
            TASKS / "reasoning_arc_easy" / "reasoning_arc_easy.yaml",
            "ai2_arc_easy",
        ),
        ("reasoning_gsm8k_local", TASKS / "reasoning_gsm8k_answer" / "reasoning_gsm8k_answer.yaml", "gsm8k"),
        ("gsm8k_local", BUILTIN / "gsm8k" / "gsm8k.yaml", "gsm8k"),
    ]:
        files = {split: str(DATA / data / f"{split}.jsonl") for split in SPLITS[data]}
        override = {"include": str(include), "task": task, "tag": [], "dataset_path": "json",
                    "dataset_name": None, "dataset_kwargs": {"data_files": files}}  # fmt: skip
        (folder / f"{task}.yaml").write_text(json.dumps(override))
    return folder


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    return make_tiny_reasoning(tmp_path_factory.mktemp("reasoning") / "lm")


def evaluate(lm, tasks: list[str], folder: Path) -> dict:
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, bootstrap_iters=0,
                                   log_samples=True, random_seed=0)  # fmt: skip


def test_multiple_choice_and_answer_likelihood_are_exact_and_is_states_them_honestly(tiny_path, tmp_path):
    """estimator=exact: every choice's log p(choice | question) is the view's enumerated marginal and acc their
    argmax; estimator=is (the model's own sampler, K = 32): the same requests, each answer on its own chains,
    and the bounded-weights interval of the mean answer log-likelihood contains the exact mean."""
    folder = local_tasks(tmp_path / "tasks")
    tasks = ["reasoning_arc_easy_local", "reasoning_gsm8k_local"]
    exact_lm = LatentReasoningEval(pretrained=str(tiny_path), estimator="exact", device="cpu", **TEMPLATE)
    exact = evaluate(exact_lm, tasks, folder)
    model = exact_lm.model
    correct, gold_values = 0, []
    for s in exact["samples"]["reasoning_arc_easy_local"]:
        values = []
        for (ctx, cont), resp in zip(s["arguments"], s["resps"]):
            view = model.conditional_model(ctx)
            assert resp[0][0] == pytest.approx(view.log_marginal(view.tokenize(ctx + cont)), abs=1e-9)
            values.append(resp[0][0])
        correct += int(np.argmax(values) == s["target"])
        gold_values.append(values[s["target"]])
        assert s["answer_log_likelihood"]["log_likelihood"] == pytest.approx(values[s["target"]])
    results = exact["results"]["reasoning_arc_easy_local"]
    assert results["acc,none"] == pytest.approx(correct / 4)
    assert results["answer_log_likelihood,none"] == pytest.approx(np.mean(gold_values))
    assert results["answer_ll_lower,none"] == pytest.approx(np.mean(gold_values), abs=1e-6)

    sampled_lm = LatentReasoningEval(pretrained=str(tiny_path), estimator="is", num_samples=32, seed=2,
                                     device="cpu", **TEMPLATE)  # fmt: skip
    assert sampled_lm.settings.peek is False  # the model's default: its own sampler
    sampled = evaluate(sampled_lm, tasks, folder)
    for task in tasks:
        mean = exact["results"][task]["answer_log_likelihood,none"]
        row = sampled["results"][task]
        assert row["answer_ll_bounded_lower,none"] <= mean <= row["answer_ll_bounded_upper,none"]
        assert row["answer_ll_lower,none"] <= mean <= row["answer_ll_upper,none"]
        assert math.isfinite(row["answer_ll_sampling_se,none"])
    for s in sampled["samples"]["reasoning_arc_easy_local"]:
        weights = np.array(s["answer_log_likelihood"]["log_weights"])
        assert weights.shape == (32,) and np.all(weights <= 1e-7)  # log p(y | x, z) ≤ 0
    flips = sampled["config"]["model_info"] if "model_info" in sampled["config"] else sampled["config"]
    assert "reasoning_arc_easy_local" in json.dumps(flips.get("choice_monte_carlo", {}))


def test_rolling_requests_are_refused_in_one_line(tiny_path):
    """loglikelihood_rolling: an UnsupportedError saying why and what to use instead, before any work."""
    lm = LatentReasoningEval(pretrained=str(tiny_path), device="cpu", **TEMPLATE)
    with pytest.raises(UnsupportedError, match="no question") as caught:
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("a b",), 0)])
    assert "\n" not in str(caught.value)


def test_lm_eval_command_line_runs_the_three_request_types(tmp_path):
    """A real lm_eval command line on the bundled BPE GPT-2 with the default template (chains cut at 12 tokens):
    multiple choice and answer likelihood (loglikelihood), lm-eval's gsm8k (generate_until: a chain, then the
    answer, cut at the task's stop strings); the samples and the answer metrics are written."""
    folder = local_tasks(tmp_path / "tasks")
    out = tmp_path / "out"
    model_args = f"pretrained={default_checkpoint('tokenization')},max_chain_tokens=12,num_samples=8,seed=1"
    run_lm_eval(
        ["--model", "latent_reasoning", "--model_args", model_args,
         "--tasks", "reasoning_arc_easy_local,reasoning_gsm8k_local,gsm8k_local", "--include_path", str(folder),
         "--limit", "2", "--num_fewshot", "0", "--device", "cpu", "--output_path", str(out), "--log_samples",
         "--gen_kwargs", "do_sample=true,temperature=1.0,max_gen_toks=16"]
    )  # fmt: skip
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    for task in ("reasoning_arc_easy_local", "reasoning_gsm8k_local"):
        row = results[task]
        assert row["answer_ll_bounded_lower,none"] <= row["answer_log_likelihood,none"] < 0
        assert row["answer_ll_lower,none"] <= row["answer_log_likelihood,none"]
    assert 0.0 <= results["gsm8k_local"]["exact_match,flexible-extract"] <= 1.0
    samples = [json.loads(line) for f in out.rglob("samples_gsm8k_local_*.jsonl") for line in f.open()]
    assert samples and all(isinstance(s["resps"][0][0], str) for s in samples)
