"""EntityNLM beyond the contract table (tests/contract/): Σ_x p(x) = 1 over short texts, K particles scored at once
equal K single-particle passes over one shared encoding, the entity update of eqs. 7–8, what each mention token
changes, what the proposal may read, tokenization, bad inputs, save/load, and six-token documents under other
limits on entities and mention lengths."""

from __future__ import annotations

import itertools

import pytest
import torch
from entitynlm_tiny import TEXT, tiny_entitynlm
from round_trip import draws_with_one_seed, reloaded

from lm_latent_eval.estimators import beam_log_marginal, importance_log_weights, log_mean_exp
from lm_latent_eval.models.entitynlm import LATENT_KEYS, EntityNLM
from lm_latent_eval.models.entitynlm.enumerate import enumerate_latents, exact_log_marginal

ATOL = 1e-6  # float32 network math, float64 accumulation


@pytest.fixture(scope="module")
def model():
    return tiny_entitynlm()


def test_p_is_a_distribution_over_texts(model):
    """Σ_x Σ_z p(x, z) = 1 over all texts of 1 and of 2 tokens (prefix probabilities, no end event)."""
    V = len(model.vocab)
    for T in (1, 2):
        logs = [exact_log_marginal(model, torch.tensor(x)) for x in itertools.product(range(V), repeat=T)]
        assert float(torch.logsumexp(torch.tensor(logs, dtype=torch.float64), 0)) == pytest.approx(
            0.0, abs=1e-5
        )


def test_batched_particles_equal_single_particle_passes_over_one_encoding(model):
    """log p and log q of K particles at once equal K one-particle calls; the encoders run once per document."""
    x = model.tokenize(TEXT)
    z, _ = model.proposal.sample(x, 64, 1.0, True, torch.Generator().manual_seed(0))
    calls = {"p": 0, "q": 0}

    def counting(name, fn):
        def wrapped(*args):
            calls[name] += 1
            return fn(*args)

        return wrapped

    model.encode_batch = counting("p", model.encode_batch)
    model.proposal.encode_batch = counting("q", model.proposal.encode_batch)
    try:
        model.train(False)  # clears the per-document caches
        with torch.no_grad():
            batched_p = model.log_joint(x, z)
            batched_q = model.proposal.log_prob(x, z, 0.8, False)
            assert calls == {"p": 1, "q": 1}
            single_p = torch.cat(
                [model.log_joint(x, {k: v[i : i + 1] for k, v in z.items()}) for i in range(64)]
            )
            single_q = torch.cat(
                [
                    model.proposal.log_prob(x, {k: v[i : i + 1] for k, v in z.items()}, 0.8, False)
                    for i in range(64)
                ]
            )
            assert calls == {"p": 1, "q": 1}  # reused, not recomputed per particle
            # and the cached encoding equals a fresh per-particle one (no cache)
            fresh = model.log_joint_batch(
                EntityNLM.encode_batch(model, x.unsqueeze(0).expand(64, -1)), x.unsqueeze(0), z
            )
    finally:
        del model.encode_batch, model.proposal.encode_batch
    assert torch.allclose(batched_p, single_p, atol=ATOL) and torch.allclose(batched_q, single_q, atol=ATOL)
    assert torch.allclose(batched_p, fresh, atol=ATOL)


def test_dynamic_entity_update_follows_eqs_7_8(model):
    """After a mention token the entity's embedding is normalize(δ e + (1 − δ) h_t), δ = σ(h_t · W_δ e); others stay."""
    heads = model.heads
    memory = heads.initial_memory(2)
    h = torch.randn(2, heads.dim)
    with torch.no_grad():
        after = heads.update(memory, torch.tensor([0, -1]), torch.tensor([True, False]), h, t=3)
        e = heads.new_entity_embedding()
        gate = torch.sigmoid(h[0] @ (heads.delta.weight @ e))
        expected = torch.nn.functional.normalize(gate * e + (1 - gate) * h[0], dim=0)
    assert torch.allclose(after.embeddings[0, 0], expected, atol=1e-6)
    assert torch.equal(after.embeddings[0, 1], memory.embeddings[0, 1]) and torch.equal(
        after.embeddings[1], memory.embeddings[1]
    )
    assert after.count.tolist() == [1, 0] and after.last_seen[0, 0] == 3


def test_every_mention_token_changes_what_follows(model):
    """The same text with a 2-token vs a 1-token mention of one entity: the entity's second mention scores differ."""
    x = model.tokenize("anna saw her there")
    base = {"mention": [[1, 1, 1, 0]], "entity": [[0, 0, 0, -1]], "length": [[2, 1, 1, 1]]}
    short = {"mention": [[1, 0, 1, 0]], "entity": [[0, -1, 0, -1]], "length": [[1, 1, 1, 1]]}
    with torch.no_grad():
        a = model.log_joint(x, {k: torch.tensor(v) for k, v in base.items()})
        b = model.log_joint(x, {k: torch.tensor(v) for k, v in short.items()})
    assert torch.isfinite(a).all() and torch.isfinite(b).all() and not torch.allclose(a, b)


def test_bad_inputs_raise_clear_errors(model):
    x = model.tokenize(TEXT)
    with pytest.raises(ValueError, match="keys"):
        model.log_joint(x, {"mention": torch.zeros(1, 4, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"\[K, T=4\]"):
        model.log_joint(x, {k: torch.zeros(1, 3, dtype=torch.long) for k in LATENT_KEYS})
    with pytest.raises(ValueError, match="ids outside"):
        model.log_joint(torch.tensor([99]), {k: torch.zeros(1, 1, dtype=torch.long) for k in LATENT_KEYS})
    with pytest.raises(ValueError, match="temperature"):
        model.proposal.sample(x, 3, temperature=0.0)
    with pytest.raises(ValueError, match="beam_size"):
        model.proposal.beam(x, 0)


def test_tokenize_lower_cases_and_maps_unknown_words(model):
    """Words are lower-cased, unknown ones are <unk>, whitespace is no token (the empty document's log q = log p = 0
    is a contract property, tests/contract/)."""
    assert model.tokenize("").numel() == 0 and model.tokenize("   ").numel() == 0
    assert model.tokenize("ANNA zebra").tolist() == [model.word_to_id["anna"], model.unk_id]
    z, _ = model.proposal.sample(model.tokenize(""), 3)
    assert z["mention"].shape == (3, 0)


def test_save_load_round_trip(model, tmp_path):
    loaded = reloaded(model, tmp_path / "ckpt")
    x = model.tokenize(TEXT)
    (z, log_q), (z2, log_q2) = draws_with_one_seed([model, loaded], x, 16, 1.3, peek=False, seed=5)
    assert all(torch.equal(z[k], z2[k]) for k in LATENT_KEYS) and torch.equal(log_q, log_q2)
    with torch.no_grad():
        assert torch.equal(model.log_joint(x, z), loaded.log_joint(x, z))
    assert loaded.vocab == model.vocab and loaded.max_entities == 2


@pytest.mark.parametrize("max_entities,max_mention_length", [(2, 3), (3, 2)])
def test_six_token_documents_exact(max_entities, max_mention_length):
    """6 tokens (thousands of configurations): Σ q = 1, IS within 0.03 nats, beam exact on the full support."""
    model = tiny_entitynlm(seed=4, max_entities=max_entities, max_mention_length=max_mention_length)
    x = model.tokenize("anna saw her there anna saw")
    z = enumerate_latents(6, max_entities, max_mention_length)
    with torch.no_grad():
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 1.0, True), 0)) == pytest.approx(
            0, abs=ATOL
        )
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 0.7, False), 0)) == pytest.approx(
            0, abs=ATOL
        )
    exact = exact_log_marginal(model, x)
    lw = importance_log_weights(
        model, x, num_samples=50_000, temperature=1.0, peek=True, seed=0, document="six"
    )
    assert log_mean_exp(lw) == pytest.approx(exact, abs=0.03)
    N = z["mention"].shape[0]
    assert beam_log_marginal(model, x, N, "six") == pytest.approx(exact, abs=ATOL)


def test_proposal_reads_only_what_it_may(model):
    """Changing only the last word x_T: no-peeking q (labels z_t from x_<t) is unchanged, peeking q is not."""
    x = model.tokenize("anna saw her there")
    other = model.tokenize("anna saw her anna")
    z, _ = model.proposal.sample(x, 32, 1.0, True, torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(
            model.proposal.log_prob(x, z, peek=False), model.proposal.log_prob(other, z, peek=False)
        )
        assert not torch.allclose(
            model.proposal.log_prob(x, z, peek=True), model.proposal.log_prob(other, z, peek=True)
        )
