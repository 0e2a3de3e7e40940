"""RNNG beyond the contract table (tests/contract/): the enumerator lists every binary tree once, the inside
algorithm's partition function is the sum over those trees, temperature divides the span scores, k-best on ties,
K trees scored at once equal K single passes and repeated trees are scored once, the generative story's masks and
sentence end, tokenization, bad inputs, save/load, gradients."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from rnng_tiny import TEXT, tiny_rnng
from round_trip import draws_with_one_seed, reloaded

from lm_latent_eval.models.rnng import RNNG
from lm_latent_eval.models.rnng.enumerate import catalan, enumerate_trees, exact_log_marginal
from lm_latent_eval.models.rnng.latents import actions_from_spans, is_tree, spans_from_actions
from lm_latent_eval.models.rnng.tree_crf import inside, kbest_trees, log_partition, tree_scores
from lm_latent_eval.tensors import distinct_rows

ATOL = 1e-5  # float32 network math, float64 accumulation


@pytest.fixture(scope="module")
def model():
    return tiny_rnng()


def _keys(z: torch.Tensor) -> list[tuple]:
    return [tuple(r) for r in z.tolist()]


@pytest.mark.parametrize("T", [1, 2, 3, 5, 8])
def test_enumeration_lists_every_tree_once(T):
    z = enumerate_trees(T)
    assert z.shape == (catalan(T - 1), 2 * T - 1) and len(set(_keys(z))) == z.shape[0]
    assert is_tree(z, T).all()
    spans = spans_from_actions(z, T)
    assert (spans.sum((1, 2)) == 2 * T - 1).all() and torch.equal(actions_from_spans(spans), z)


def test_is_tree_recognizes_exactly_the_enumerated_trees():
    """Among all 2^(2T−1) SHIFT / REDUCE sequences, is_tree holds on the Catalan(T − 1) enumerated trees only."""
    for T in (1, 3, 5):
        every = torch.tensor(list(itertools.product([0, 1], repeat=2 * T - 1)))
        assert set(_keys(every[is_tree(every, T)])) == set(_keys(enumerate_trees(T)))


@pytest.mark.parametrize("T", [1, 2, 4, 7])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_inside_partition_function_equals_the_enumerated_sum(T, temperature):
    scores = torch.randn(2, T, T, generator=torch.Generator().manual_seed(T)) / temperature
    spans = spans_from_actions(enumerate_trees(T), T)
    for b in range(2):
        enumerated = torch.logsumexp(tree_scores(scores[b], spans), 0)
        assert float(log_partition(scores)[b]) == pytest.approx(float(enumerated), abs=1e-10)
        assert float(inside(scores)[b, 0, T - 1]) == pytest.approx(float(enumerated), abs=1e-10)


def test_temperature_divides_the_span_scores(model):
    x = model.tokenize("the dog saw a cat")
    z = enumerate_trees(5)
    with torch.no_grad():
        s = model.proposal.span_scores(x)
        expected = tree_scores(s / 2.5, spans_from_actions(z, 5)) - log_partition((s / 2.5)[None])[0]
        assert torch.allclose(model.proposal.log_prob(x, z, 2.5), expected, atol=1e-12)


def test_kbest_on_ties_and_short_spans():
    """Equal scores: every tree ties, k-best still returns distinct trees, capped by Catalan(T − 1)."""
    spans, scores = kbest_trees(torch.zeros(6, 6), 100)
    assert spans.shape[0] == catalan(5) == 42 and torch.allclose(scores, torch.zeros(42, dtype=torch.float64))
    assert len(set(_keys(actions_from_spans(spans)))) == 42
    spans, _ = kbest_trees(torch.zeros(1, 1), 5)
    assert spans.shape == (1, 1, 1)


def test_batched_trees_equal_single_tree_passes(model):
    """log p and log q of K trees at once equal K one-tree calls (the batch loops over actions, never particles)."""
    x = model.tokenize(TEXT)
    z, _ = model.proposal.sample(x, 40, 1.0, True, torch.Generator().manual_seed(0))
    with torch.no_grad():
        batched_p, batched_q = model.log_joint(x, z), model.proposal.log_prob(x, z, 0.8)
        single_p = torch.cat([model.log_joint(x, z[i : i + 1]) for i in range(40)])
        single_q = torch.cat([model.proposal.log_prob(x, z[i : i + 1], 0.8) for i in range(40)])
    assert torch.allclose(batched_p, single_p, atol=ATOL) and torch.allclose(batched_q, single_q, atol=1e-9)


def test_repeated_trees_are_scored_once_and_get_one_value(model):
    """distinct_rows lists each tree once in order of first appearance; every copy of a tree gets the same log p,
    that of the tree scored among the distinct trees."""
    trees = enumerate_trees(8)
    z = trees[[3, 7, 3, 3, 100, 7]]
    distinct, index = distinct_rows(z)
    assert distinct.tolist() == trees[[3, 7, 100]].tolist() and index.tolist() == [0, 1, 0, 0, 2, 1]
    x = model.tokenize(TEXT)
    with torch.no_grad():
        log_p, once = model.log_joint(x, z), model.log_joint(x, trees[[3, 7, 100, 3]])
    assert log_p.tolist() == [
        log_p[0].item(),
        log_p[1].item(),
        log_p[0].item(),
        log_p[0].item(),
        log_p[4].item(),
        log_p[1].item(),
    ]
    assert torch.allclose(log_p, once[[0, 1, 0, 0, 2, 1]], atol=ATOL)


def test_distinct_rows_is_exact_when_two_rows_share_a_key(monkeypatch):
    """Rows grouped by a key that collides ([1, 0] and [0, 1] both sum to 1) are still told apart."""
    from lm_latent_eval import tensors

    rows = torch.tensor([[1, 0], [0, 1], [1, 0], [2, 2], [0, 1]])
    monkeypatch.setattr(tensors, "row_keys", lambda r: r.sum(1))
    distinct, index = distinct_rows(rows, min_rows=4)
    assert distinct.tolist() == [[1, 0], [0, 1], [2, 2], [1, 0]] and index.tolist() == [0, 1, 0, 2, 1]


def test_generative_story_masks_and_sentence_end():
    """Σ_w p(w) over one-word sentences is 1 (<s> and </s> impossible there); counting </s> adds log p(</s> | ·) < 0."""
    model = tiny_rnng(seed=3, count_eos=False)
    shift = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad():
        total = torch.logsumexp(
            torch.cat(
                [
                    model.log_joint(torch.tensor([w]), shift)
                    for w in range(len(model.vocab))
                    if w not in (model.bos_id, model.eos_id)
                ]
            ),
            0,
        )
        assert float(total) == pytest.approx(0.0, abs=1e-6)
        words = model.tokenize("the dog saw")
        with_end = torch.cat([words, torch.tensor([model.eos_id])])
        z = enumerate_trees(3)
        end = model.log_joint(with_end, z) - model.log_joint(words, z)
    assert (end < 0).all() and torch.isfinite(end).all()
    assert model.tokenize("the dog").tolist() == [model.word_to_id["the"], model.word_to_id["dog"]]
    counted = tiny_rnng(seed=3, count_eos=True)
    assert counted.tokenize("the dog").tolist()[-1] == counted.eos_id


def test_bad_inputs_are_clear_errors(model):
    x = model.tokenize("the dog saw")
    from lm_latent_eval.models.rnng import TreeCRFProposal

    loose = TreeCRFProposal(len(model.vocab), model.bos_id, model.eos_id, 4, 4)  # belongs to no RNNG
    with pytest.raises(ValueError, match="belongs to no RNNG"):
        loose.sample(x, 3, peek=False)
    with pytest.raises(ValueError, match=r"2T-1=5"):
        model.log_joint(x, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="SHIFT"):
        model.log_joint(x, torch.full((1, 5), 2, dtype=torch.long))
    with pytest.raises(ValueError, match="ids outside"):
        model.log_joint(torch.tensor([99]), torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="inside the sentence"):
        model.log_joint(torch.tensor([3, model.eos_id, 4]), torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        model.proposal.sample(x, 3, temperature=0.0)
    with pytest.raises(ValueError, match="beam_size"):
        model.proposal.beam(x, 0)


def test_tokenize_and_one_word_sentences(model):
    """Unknown words and a literal </s> are <unk>, the counted sentence end is appended, whitespace is no token; a
    one-word sentence has one tree with q = 1 (the empty sentence's log q = log p = 0: tests/contract/)."""
    assert model.tokenize("").numel() == 0 and model.tokenize("   ").numel() == 0
    assert model.tokenize("the zebra </s>").tolist() == [
        model.word_to_id["the"],
        model.unk_id,
        model.unk_id,
        model.eos_id,
    ]
    z, _ = model.proposal.sample(model.tokenize(""), 3)
    assert z.shape == (3, 0)
    one = model.tokenize("dog")
    z, log_q = model.proposal.sample(one, 4)
    assert z.tolist() == [[0]] * 4 and torch.equal(log_q, torch.zeros(4, dtype=torch.float64))
    with torch.no_grad():
        assert exact_log_marginal(model, one) == pytest.approx(float(model.log_joint(one, z[:1])[0]))


def test_save_load_round_trip(model, tmp_path):
    loaded = reloaded(model, tmp_path / "ckpt")
    x = model.tokenize(TEXT)
    (z, log_q), (z2, log_q2) = draws_with_one_seed([model, loaded], x, 16, 1.3, peek=True, seed=5)
    assert torch.equal(z, z2) and torch.equal(log_q, log_q2)
    with torch.no_grad():
        assert torch.equal(model.log_joint(x, z), loaded.log_joint(x, z))
    assert loaded.vocab == model.vocab and loaded.count_eos and loaded.num_layers == 2
    assert RNNG.from_pretrained(str(tmp_path / "ckpt"), count_eos=False).tokenize("dog").numel() == 1


def test_gradients_reach_p_and_q(model):
    """The supervised losses are differentiable through the stack, the composition and the inside algorithm."""
    x = model.tokenize("the dog saw a")
    z = enumerate_trees(4)[:3]
    model.train()
    try:
        loss = -(model.log_joint(x, z).sum() + model.proposal.log_prob(x, z).sum())
        loss.backward()
    finally:
        model.eval()
    for name in (
        "compose.linear.weight",
        "stack_lstm.cells.0.weight_hh",
        "action_head.weight",
        "proposal.span_mlp.0.weight",
        "proposal.encoder.weight_ih_l0",
    ):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name
    model.zero_grad()
    assert math.isfinite(float(loss.detach()))
