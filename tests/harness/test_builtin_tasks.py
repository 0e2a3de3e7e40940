"""Built-in lm-eval tasks run unchanged through latent_hmm; only their dataset location points at tests/data copies.

Each test writes a two-key-override YAML into tmp_path that ``include:``s the built-in config by absolute path and
replaces dataset_path / dataset_name / dataset_kwargs (JSON files of the same schema), so prompts, metrics,
filters and few-shot settings stay exactly those of lm-eval 0.4.13.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager

from lm_latent_eval.harness.backends import LatentHMMEval

DATA = Path(__file__).resolve().parents[1] / "data"
BUILTIN_TASKS = Path(lm_eval.__file__).parent / "tasks"


def local_copy_of(
    builtin_yaml: str, task: str, data_dir: str, splits: list[str], tmp_path: Path
) -> TaskManager:
    """A TaskManager that sees ``task``: the built-in YAML with only its dataset location overridden."""
    files = {split: str(DATA / data_dir / f"{split}.jsonl") for split in splits}
    override = {
        "include": str(BUILTIN_TASKS / builtin_yaml),
        "task": task,
        "tag": [],
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
    }
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / f"{task}.yaml").write_text(json.dumps(override))  # JSON is YAML
    return TaskManager(include_path=str(folder), include_defaults=False)


@pytest.fixture(scope="module")
def hmm_exact():
    return LatentHMMEval(estimator="exact", device="cpu")


def run(lm, task: str, manager: TaskManager, **kwargs) -> dict:
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=[task],
        task_manager=manager,
        bootstrap_iters=0,
        log_samples=True,
        random_seed=0,
        **kwargs,
    )


def test_wikitext_loglikelihood_rolling_matches_forward_algorithm(hmm_exact, tmp_path):
    """wikitext word_perplexity through latent_hmm (exact) = exp(−Σ log p(x_n) / Σ words_n) from log_marginal."""
    manager = local_copy_of(
        "wikitext/wikitext.yaml",
        "wikitext_local",
        "wikitext_document_level",
        ["train", "validation", "test"],
        tmp_path,
    )
    out = run(hmm_exact, "wikitext_local", manager)
    samples = out["samples"]["wikitext_local"]
    assert len(samples) == 3
    total_ll, total_words = 0.0, 0
    for s in samples:
        text = s["arguments"][0][0]  # the detokenized page lm-eval sent (its own preprocess_wikitext)
        assert " @-@ " not in text
        exact = hmm_exact.model.log_marginal(hmm_exact.model.tokenize(text))
        assert s["resps"][0][0] == pytest.approx(exact, abs=1e-9)
        total_ll += exact
        total_words += len(re.split(r"\s+", s["doc"]["page"]))  # wikitext counts words of the raw page
    word_ppl = out["results"]["wikitext_local"]["word_perplexity,none"]
    assert word_ppl == pytest.approx(math.exp(-total_ll / total_words), rel=1e-9)
    assert out["config"]["estimator_settings"] == {"estimator": "exact"}


def test_arc_easy_multiple_choice_picks_argmax_of_exact_loglikelihood(hmm_exact, tmp_path):
    """arc_easy (loglikelihood requests): acc = share of questions whose answer has the largest log p(choice | question)."""
    manager = local_copy_of(
        "arc/arc_easy.yaml", "arc_easy_local", "ai2_arc_easy", ["train", "validation", "test"], tmp_path
    )
    out = run(hmm_exact, "arc_easy_local", manager)
    samples = out["samples"]["arc_easy_local"]
    assert len(samples) == 4
    model = hmm_exact.model
    correct = 0
    for s in samples:
        context = s["arguments"][0][0]
        assert context.startswith("Question: ") and context.endswith("\nAnswer:")
        lls = []
        for (ctx, cont), resp in zip(s["arguments"], s["resps"]):
            expected = model.log_marginal(model.tokenize(ctx + cont)) - model.log_marginal(
                model.tokenize(ctx)
            )
            assert resp[0][0] == pytest.approx(expected, abs=1e-9)
            lls.append(expected)
        correct += int(max(range(len(lls)), key=lls.__getitem__) == s["target"])
    assert out["results"]["arc_easy_local"]["acc,none"] == pytest.approx(correct / 4)


def test_gsm8k_generate_until_is_seeded_and_stops(tmp_path):
    """gsm8k (5-shot generate_until, its own regex filters) runs; samples depend only on (seed, context)."""
    manager = local_copy_of("gsm8k/gsm8k.yaml", "gsm8k_local", "gsm8k", ["train", "test"], tmp_path)
    lm = LatentHMMEval(seed=7, device="cpu")
    first = run(lm, "gsm8k_local", manager)
    again = run(LatentHMMEval(seed=7, device="cpu"), "gsm8k_local", manager)
    samples = [s for s in first["samples"]["gsm8k_local"] if s["filter"] == "strict-match"]
    assert len(samples) == 3
    assert [s["resps"] for s in first["samples"]["gsm8k_local"]] == [
        s["resps"] for s in again["samples"]["gsm8k_local"]
    ]
    for s in samples:
        context, gen_kwargs = s["arguments"][0]
        assert context.count("Question:") == 6  # 5 few-shot examples + the question
        for stop in gen_kwargs["until"]:
            assert stop not in s["resps"][0][0]
    assert 0.0 <= first["results"]["gsm8k_local"]["exact_match,strict-match"] <= 1.0


def test_gsm8k_generate_until_runs_on_latent_rnng(tmp_path):
    """generate_until on latent_rnng: the prefix's tree from a particle filter, then ancestral actions and words;
    seeded by (seed, context), cut at the task's stop strings, words from the RNNG's vocabulary."""
    from lm_latent_eval.harness.backends import LatentRNNGEval

    manager = local_copy_of("gsm8k/gsm8k.yaml", "gsm8k_local", "gsm8k", ["train", "test"], tmp_path)
    # sampling: gsm8k's greedy decoding would score 8 candidates per question by SMC (minutes; the greedy path is
    # tested on the HMM above and in test_run_settings.py)
    sampled = {"gen_kwargs": "do_sample=true,temperature=1.0"}
    first = run(LatentRNNGEval(seed=7, device="cpu"), "gsm8k_local", manager, **sampled)
    again = run(LatentRNNGEval(seed=7, device="cpu"), "gsm8k_local", manager, **sampled)
    other = run(LatentRNNGEval(seed=8, device="cpu"), "gsm8k_local", manager, **sampled)
    responses = [s["resps"] for s in first["samples"]["gsm8k_local"]]
    assert responses == [s["resps"] for s in again["samples"]["gsm8k_local"]]
    assert responses != [s["resps"] for s in other["samples"]["gsm8k_local"]]
    vocab = set(LatentRNNGEval(device="cpu").model.vocab)
    for s in first["samples"]["gsm8k_local"]:
        context, gen_kwargs = s["arguments"][0]
        assert context.count("Question:") == 6
        text = s["resps"][0][0]
        assert all(stop not in text for stop in gen_kwargs["until"])
        assert set(text.split()) <= vocab


def test_arc_easy_on_latent_rnng_answers_from_prefix_probabilities(tmp_path):
    """loglikelihood on latent_rnng: log P̂(a sentence starts with question ⊕ choice) − log P̂(starts with question),
    both SMC estimates of the prefix view (RNNG.prefix_model()); acc follows their argmax."""
    from lm_latent_eval.estimators import estimate_document
    from lm_latent_eval.harness.backends import LatentRNNGEval

    manager = local_copy_of(
        "arc/arc_easy.yaml", "arc_easy_local", "ai2_arc_easy", ["train", "validation", "test"], tmp_path
    )
    lm = LatentRNNGEval(num_samples=16, target_se=0, seed=3, device="cpu")
    assert lm.settings.estimator == "smc"
    out = run(lm, "arc_easy_local", manager)
    view = lm.model.prefix_model()
    correct = 0
    for s in out["samples"]["arc_easy_local"]:
        lls = []
        for (ctx, cont), resp in zip(s["arguments"], s["resps"]):
            whole, context = (estimate_document(view, t, lm.settings) for t in (ctx + cont, ctx))
            assert resp[0][0] == whole.log_likelihood - context.log_likelihood
            lls.append(resp[0][0])
        correct += int(max(range(len(lls)), key=lls.__getitem__) == s["target"])
    assert out["results"]["arc_easy_local"]["acc,none"] == pytest.approx(correct / 4)
