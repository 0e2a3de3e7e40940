"""The figures and records of a perplexity run that must agree with what the package knows (issue 34): an empty
document has no words, an undefined standard error is N/A, and the results JSON's config is consistent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager
from lm_eval.utils import make_table

from lm_latent_eval.harness.backends import LatentHMMEval

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
    assert metrics["word_perplexity,none"] == pytest.approx(metrics["perplexity,none"], rel=1e-12)


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
