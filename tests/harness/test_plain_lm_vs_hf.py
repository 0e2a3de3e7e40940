"""The plain-LM case: ``--model latent`` (model=causal, exact) reports lm-eval's own ``hf`` numbers on wikitext."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager
from tiny_models import make_tiny_gpt2

import lm_latent_eval.harness.backends  # noqa: F401  (registers --model latent)

WIKITEXT = Path(__file__).resolve().parents[1] / "data" / "wikitext_document_level"


def test_word_perplexity_equals_hf_backend_with_multi_window_pages(tmp_path):
    """Context 8 with pages of ~30-80 words: many rolling windows; both backends must give the same numbers."""
    model_dir = make_tiny_gpt2(tmp_path / "gpt2", n_positions=8)
    override = {
        "include": str(Path(lm_eval.__file__).parent / "tasks" / "wikitext" / "wikitext.yaml"),
        "task": "wikitext_parity", "tag": [], "dataset_path": "json", "dataset_name": None,
        "dataset_kwargs": {"data_files": {s: str(WIKITEXT / f"{s}.jsonl") for s in ("train", "validation", "test")}},
    }  # fmt: skip
    (tmp_path / "wikitext_parity.yaml").write_text(json.dumps(override))
    manager = TaskManager(include_path=str(tmp_path), include_defaults=False)
    results = {}
    for name, model_args in {
        "hf": f"pretrained={model_dir},dtype=float32",
        "latent": f"model=causal,pretrained={model_dir},estimator=exact",
    }.items():
        out = lm_eval.simple_evaluate(
            model=name, model_args=model_args, tasks=["wikitext_parity"], task_manager=manager, device="cpu",
            batch_size=4, bootstrap_iters=0, log_samples=True,
        )  # fmt: skip
        results[name] = out
    hf, ours = (results[k]["results"]["wikitext_parity"] for k in ("hf", "latent"))
    for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours[metric] == pytest.approx(hf[metric], rel=1e-6), metric
    per_doc = [
        [
            s["resps"][0][0]
            for s in sorted(results[k]["samples"]["wikitext_parity"], key=lambda s: s["doc_id"])
        ]
        for k in ("hf", "latent")
    ]
    assert per_doc[1] == pytest.approx(per_doc[0], abs=1e-4)
