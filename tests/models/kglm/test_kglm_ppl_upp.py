"""KGLM's two published figures from one run: PPL (no unknown-word penalty) and UPP (unknown-penalized)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from kglm_tiny import tiny_kglm

from lm_latent_eval.estimators import EstimatorSettings, estimate_document

# in-vocabulary words, alias-only words (Lovelace, London: copyable from their entity) and unknown words (zebra)
TEXT = "Ada Lovelace was born in London zebra King the city"


def test_penalty_is_what_log_joint_subtracts():
    """log p_UPP(x, z) + penalty(z) = log p(x, z) of the same model with unk_penalty = 0, for every sample z."""
    model = tiny_kglm(proposal_features=True)
    x = model.tokenize(TEXT)
    z, _ = model.proposal.sample(x, 300, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        penalized = model.log_joint(x, z)
        penalty = model.unknown_word_penalty(x, z)
        model.unk_penalty = 0.0
        plain = model.log_joint(x, z)
        assert torch.equal(model.unknown_word_penalty(x, z), torch.zeros_like(penalty))
    assert torch.isfinite(penalized).all()
    torch.testing.assert_close(penalized + penalty, plain, rtol=0, atol=1e-9)
    # "zebra" is never copyable (1 nat); Lovelace / London cost 1 nat each unless copied from their entity
    assert set(penalty.unique().tolist()) <= {1.0, 2.0, 3.0} and penalty.min() >= 1.0
    assert len(penalty.unique()) > 1  # the penalty depends on z (whether the alias word was copied)


def test_estimate_carries_both_from_one_run():
    """PPL's log weights from one run equal a second run (same seed, same samples) of the unpenalized model."""
    model = tiny_kglm(proposal_features=True)
    settings = EstimatorSettings("is", num_samples=64, seed=5, batch_size=16)
    est = estimate_document(model, TEXT, settings)
    assert est.unk_penalty is not None and est.unk_penalty.shape == (64,)
    model.unk_penalty = 0.0
    plain = estimate_document(model, TEXT, settings)
    np.testing.assert_allclose(est.log_weights_without_unk_penalty(), plain.log_weights, rtol=0, atol=1e-9)
    assert est.log_likelihood < plain.log_likelihood  # the penalty only removes probability


def test_lm_eval_task_reports_ppl_and_upp(tmp_path):
    """linked_wikitext2_tiny names both figures; UPP = instance_perplexity and corpus_perplexity, PPL = the unpenalized model's perplexity."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from lm_latent_eval.harness.backends import LatentKGLMEval

    model = tiny_kglm(proposal_features=True)
    model.save_pretrained(tmp_path / "ckpt")
    lm = LatentKGLMEval(
        pretrained=str(tmp_path / "ckpt"), estimator="is", num_samples=16, seed=2, device="cpu"
    )
    tasks = TaskManager(include_path=str(pytest.importorskip("lm_latent_eval").tasks_path()))

    def run():
        out = simple_evaluate(
            model=lm,
            tasks=["linked_wikitext2_tiny"],
            task_manager=tasks,
            limit=3,
            log_samples=False,
            bootstrap_iters=0,
        )
        return out["results"]["linked_wikitext2_tiny"]

    both = run()
    for level in ("instance", "corpus"):
        assert both[f"upp_{level},none"] == pytest.approx(both[f"{level}_perplexity,none"], rel=1e-12)
        assert both[f"ppl_{level},none"] < both[f"upp_{level},none"]
    lm.model.unk_penalty = 0.0
    plain = run()
    for level in ("instance", "corpus"):
        assert both[f"ppl_{level},none"] == pytest.approx(plain[f"{level}_perplexity,none"], rel=1e-9)
        assert math.isfinite(plain[f"ppl_{level},none"])
