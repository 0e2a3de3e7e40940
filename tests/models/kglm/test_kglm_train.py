"""Training a KGLM + proposal on annotated JSONL, its checkpoint, the bundled default and its lm-eval task."""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from lm_latent_eval.models import default_checkpoint
from lm_latent_eval.models.kglm import KGLM
from lm_latent_eval.models.kglm.linked_wikitext import document_tensors, read_linked_jsonl
from lm_latent_eval.models.kglm.synthetic import SyntheticConfig, generate_corpus
from lm_latent_eval.models.kglm.train import TrainConfig, add_arguments, evaluate_gold, run, train_kglm
from lm_latent_eval.paths import DATA_DIR

FIXTURES = (
    Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model" / "enhanced-wikitext-test"
)
SMALL = TrainConfig(token_dim=16, entity_dim=8, hidden_size=24, num_layers=2, epochs=3, lr=5e-3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    graph, docs = generate_corpus(SyntheticConfig(num_documents=40, num_entities=30), seed=2)
    out = tmp_path_factory.mktemp("kglm_ckpt")
    model, history = train_kglm(docs[:32], docs[32:], graph, SMALL, out, progress=False)
    return model, history, docs[32:], out


def test_training_lowers_validation_perplexity(trained):
    model, history, valid, _ = trained
    assert [h["epoch"] for h in history] == [0, 1, 2, 3]
    untrained, best = history[0]["valid_joint_ppl"], min(h["valid_joint_ppl"] for h in history[1:])
    assert best < 0.5 * untrained  # the untrained model is near-uniform over the vocabulary
    assert history[-1]["valid_q_nll_peek"] < history[0]["valid_q_nll_peek"]
    # the returned model is the best epoch's
    data = [(d.title, *document_tensors(d, model)[:2]) for d in valid]
    assert evaluate_gold(model, data)["joint_ppl"] == pytest.approx(best, rel=1e-9)


def test_checkpoint_round_trip(trained):
    model, history, valid, out = trained
    assert {"config.json", "model.safetensors", "knowledge_graph.json", "training.json"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "training.json").read_text())["history"] == history
    loaded = KGLM.from_pretrained(str(out))
    x, z, _ = document_tensors(valid[0], loaded)
    with torch.no_grad():
        assert torch.equal(loaded.log_joint(x, z), model.log_joint(x, z))
        assert torch.equal(
            loaded.proposal.log_prob(x, z, peek=False), model.proposal.log_prob(x, z, peek=False)
        )


def test_cli_trains_on_the_original_pickled_graph(tmp_path):
    if not FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/kglm-model not present")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--train",
            str(FIXTURES / "train.jsonl"),
            "--valid",
            str(FIXTURES / "train.jsonl"),
            "--knowledge-graph-pickle",
            str(FIXTURES / "knowledge_graph.pkl"),
            "--alias-pickle",
            str(FIXTURES / "alias.pkl"),
            "--output",
            str(tmp_path / "ckpt"),
            "--epochs",
            "1",
            "--token-dim",
            "8",
            "--entity-dim",
            "4",
            "--hidden-size",
            "8",
            "--no-progress",
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fixture's annotations fit the model unchanged
        assert run(args) == 0
    model = KGLM.from_pretrained(str(tmp_path / "ckpt"))
    assert model.graph.num_entities > 1000  # every KG tail is an entity
    assert model.graph.entity_aliases(model.graph.entity_id("Q1223"))[0] == ["Washington"]


def test_cli_requires_data(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        run(parser.parse_args(["--output", str(tmp_path / "x")]))


# --- the bundled default -------------------------------------------------------------------------------------------
bundled = pytest.mark.skipif(default_checkpoint("kglm") is None, reason="bundled KGLM not built")


@bundled
def test_bundled_model_scores_the_bundled_data():
    model = KGLM.from_pretrained(str(default_checkpoint("kglm")))
    docs = list(read_linked_jsonl(DATA_DIR / "linked_tiny" / "test.jsonl"))
    assert len(docs) >= 10
    data = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = [(d.title, *document_tensors(d, model)[:2]) for d in docs]
    gold = evaluate_gold(model, data)
    vocab = len(model.vocab)
    assert gold["joint_ppl"] < vocab / 4  # far better than uniform over the vocabulary
    assert gold["q_nll_peek"] < 1.0  # q puts most of its mass on the gold annotations


@bundled
def test_linked_wikitext2_tiny_task_runs():
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_latent_eval
    from lm_latent_eval.harness.backends import LatentLMEval

    lm = LatentLMEval(estimator="is", model="kglm", num_samples=8, seed=1, device="cpu")
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["linked_wikitext2_tiny"],
        task_manager=TaskManager(include_path=lm_latent_eval.tasks_path()),
        limit=3,
    )
    metrics = results["results"]["linked_wikitext2_tiny"]
    instance, corpus = metrics["instance_perplexity,none"], metrics["corpus_perplexity,none"]
    assert math.isfinite(instance) and math.isfinite(corpus) and instance > 1 and corpus > 1
    assert metrics["is_ess_min,none"] >= 1
