"""The figures and records of a perplexity run that must agree with what the package knows (issue 34): an empty
document has no words, an undefined standard error is N/A, and the results JSON's config is consistent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager
from lm_eval.utils import make_table

from lm_latent_eval.harness.backends import LatentHMMEval, LatentLMEval

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"


def run_on(texts: list[str], tmp_path: Path, **model_args) -> dict:
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    lm = LatentHMMEval(device="cpu", **({"estimator": "exact"} | model_args))
    with pytest.warns(UserWarning, match="no tokens"):
        return lm_eval.simple_evaluate(
            model=lm,
            tasks=["latent_ppl_tiny"],
            task_manager=TaskManager(
                include_path=str(TASKS), include_defaults=False, metadata={"data_file": str(data)}
            ),
            bootstrap_iters=0,
        )


@pytest.mark.parametrize("empty", ["", "   "])
def test_an_empty_document_counts_no_words(empty, tmp_path):
    """lm-eval's count_words("") is 1 and count_words("   ") is 2: on the HMM, whose tokens are its words,
    word_perplexity stood at 51.61 beside perplexity 192.16 for {"the cat sat"}, {""}."""
    metrics = run_on(["the cat sat", empty], tmp_path)["results"]["latent_ppl_tiny"]
    assert metrics["word_perplexity,none"] == pytest.approx(metrics["latent_perplexity,none"], rel=1e-12)


def test_a_sampling_error_over_one_document_with_tokens_is_not_available(tmp_path):
    """Two documents, one of them empty: the standard error over documents cannot be estimated (it printed 0.0000)."""
    results = run_on(["the cat sat", ""], tmp_path, estimator="is", num_samples=16)
    assert results["results"]["latent_ppl_tiny"]["perplexity_sampling_se,none"] == "N/A"
    (row,) = [line for line in make_table(results).splitlines() if "|perplexity_sampling_se" in line]
    assert "N/A" in row and "0.0000" not in row and "nan" not in row.lower()
    # one document: NaN was printed as "nan"
    results = run_on(["the cat sat", "   "], tmp_path, estimator="is", num_samples=16)
    assert results["results"]["latent_ppl_tiny"]["perplexity_sampling_se,none"] == "N/A"
    assert not any(
        isinstance(v, float) and math.isnan(v) for v in results["results"]["latent_ppl_tiny"].values()
    )


def test_the_results_config_records_the_device_the_model_ran_on():
    """lm-eval writes its ``--device`` argument as given (``cuda:0`` by default, even on a CPU-only machine) into
    ``config.device`` after ``get_model_info``; ``model_device`` is where the model ran, beside ``device_type``."""
    results = lm_eval.simple_evaluate(
        model="latent_hmm",
        model_args="estimator=exact",
        tasks=["latent_ppl_tiny"],
        task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
        bootstrap_iters=0,
        limit=2,
        device="cuda:0",
    )
    config = results["config"]
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert config["model_device"] == expected and config["device_type"] == expected.split(":")[0]


def test_model_files_are_hashed_only_where_given():
    """A model with file options (KGLM's original-archive files) run without them: no empty ``model_files_sha256``
    beside ``checkpoint_sha256`` (the files the checkpoint holds are in its hash)."""
    from lm_latent_eval.harness.backends import LatentKGLMEval

    info = LatentKGLMEval(estimator="is", num_samples=4, device="cpu").get_model_info()
    assert info["checkpoint_sha256"] and "model_files_sha256" not in info


def test_a_whitespace_document_with_tokens_counts_no_words(tmp_path):
    """A model that scores whitespace (the tokenization model: "   " is three character tokens) keeps the document's
    log p in word_perplexity's numerator, but "   " holds no word (lm-eval counts two)."""
    texts = ["the cat sat", "   "]
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    lm = LatentLMEval(model="tokenization", device="cpu", estimator="exact")
    log_p = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts])
    assert lm.exchange.document("   ", log_p[1]).num_tokens > 0
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["latent_ppl_tiny"],
        task_manager=TaskManager(
            include_path=str(TASKS), include_defaults=False, metadata={"data_file": str(data)}
        ),
        bootstrap_iters=0,
    )
    metrics = results["results"]["latent_ppl_tiny"]
    assert metrics["word_perplexity,none"] == pytest.approx(math.exp(-sum(log_p) / 3), rel=1e-9)
