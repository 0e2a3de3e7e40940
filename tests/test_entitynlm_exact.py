"""EntityNLM exactness on tiny cases: enumeration of every latent configuration gives log p(x) (and Σ_x p(x) = 1);
q sums to one over the same support; samples stay in it with q's frequencies and report their exact log q; IS
converges to the exact value and p̂ is unbiased; beam marginalization is a lower bound that becomes exact once the
beam covers the support; K particles scored at once equal K single-particle passes over one shared encoding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from is_checks import (
    assert_frequencies_match,
    assert_is_unbiased_on,
    exact_is_standard_error,
    randomize_weights,
)

from lm_latent_eval.estimators import beam_log_marginal, importance_log_weights, log_mean_exp
from lm_latent_eval.models.entitynlm import LATENT_KEYS, EntityNLM, build_vocabulary
from lm_latent_eval.models.entitynlm.enumerate import enumerate_latents, exact_log_marginal

TEXT = "anna saw her there"
ATOL = 1e-6  # float32 network math, float64 accumulation


def tiny_entitynlm(seed: int = 0, max_entities: int = 2, max_mention_length: int = 2) -> EntityNLM:
    """Random weights (std 0.7) so that every factor matters; q = p's encoder and heads plus noise (std 0.3)."""
    torch.manual_seed(seed)
    model = EntityNLM(build_vocabulary([["anna", "saw", "her", "there"]]), dim=6, hidden_size=7, num_layers=2,
                      max_entities=max_entities, max_mention_length=max_mention_length, chunk_size=3)
    return randomize_weights(model, std=0.7)


@pytest.fixture(scope="module")
def model():
    return tiny_entitynlm()


def _keys(z):
    return [tuple(r) for r in torch.stack([z[k] for k in LATENT_KEYS], -1).reshape(z["mention"].shape[0], -1).tolist()]


def test_enumerated_support_equals_brute_force_support(model):
    """log_joint > −inf exactly on the enumerated configurations, over every (R, E, L) assignment incl. invalid ones."""
    x = model.tokenize("anna saw her")
    per_token = list(itertools.product(range(2), range(-1, 3), range(4)))  # R, E ∈ −1..M, L ∈ 0..ℓ_max+1
    combos = torch.tensor(list(itertools.product(per_token, repeat=3)))  # [N, 3, 3]
    z = {k: combos[..., i] for i, k in enumerate(LATENT_KEYS)}
    with torch.no_grad():
        finite = torch.isfinite(model.log_joint(x, z))
        q_finite = torch.isfinite(model.proposal.log_prob(x, z, 1.0, True)) & torch.isfinite(model.proposal.log_prob(x, z, 0.5, False))
    brute = {tuple(r) for r in combos[finite].reshape(-1, 9).tolist()}
    enum = enumerate_latents(3, 2, 2)
    assert brute == set(_keys(enum)) and len(brute) == enum["mention"].shape[0] > 30
    assert torch.equal(finite, q_finite)  # q's support is p's support


def test_p_is_a_distribution_over_texts(model):
    """Σ_x Σ_z p(x, z) = 1 over all texts of 1 and of 2 tokens (prefix probabilities, no end event)."""
    V = len(model.vocab)
    for T in (1, 2):
        logs = [exact_log_marginal(model, torch.tensor(x)) for x in itertools.product(range(V), repeat=T)]
        assert float(torch.logsumexp(torch.tensor(logs, dtype=torch.float64), 0)) == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("peek", [True, False])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_proposal_sums_to_one_over_the_support(model, peek, temperature):
    x = model.tokenize(TEXT)
    z = enumerate_latents(x.numel(), model.max_entities, model.max_mention_length)
    with torch.no_grad():
        log_q = model.proposal.log_prob(x, z, temperature, peek)
    assert torch.isfinite(log_q).all()
    assert float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=ATOL)


@pytest.mark.parametrize("peek,temperature", [(True, 1.0), (False, 0.5), (True, 2.0)])
def test_samples_follow_q_report_exact_log_q_and_stay_in_the_support(model, peek, temperature):
    """20,000 draws on a 3-token document: every draw has p > 0, its log q is q.log_prob, frequencies match q."""
    x = model.tokenize("anna saw her")
    support = enumerate_latents(3, model.max_entities, model.max_mention_length)
    index = {k: i for i, k in enumerate(_keys(support))}
    with torch.no_grad():
        probs = model.proposal.log_prob(x, support, temperature, peek).exp().numpy()
        z, log_q = model.proposal.sample(x, 20_000, temperature, peek, torch.Generator().manual_seed(11))
        assert torch.isfinite(model.log_joint(x, z)).all()
        assert torch.allclose(log_q, model.proposal.log_prob(x, z, temperature, peek), atol=ATOL)
    counts = np.bincount([index[k] for k in _keys(z)], minlength=len(index))
    assert_frequencies_match(counts, probs)


def test_importance_sampling_converges_to_exact(model):
    x = model.tokenize(TEXT)
    exact = exact_log_marginal(model, x)
    support = enumerate_latents(x.numel(), model.max_entities, model.max_mention_length)
    for peek, temperature in [(True, 1.0), (False, 1.0), (True, 2.0), (False, 0.7)]:
        lw = importance_log_weights(model, x, num_samples=16_384, temperature=temperature, peek=peek, seed=3, document=TEXT)
        assert np.isfinite(lw).all()
        se = exact_is_standard_error(model, x, support, temperature, peek, exact, lw.size)
        assert se < 0.1
        assert log_mean_exp(lw) == pytest.approx(exact, abs=4 * se)


def test_importance_estimate_is_unbiased(model):
    """Mean of p̂/p over 300 independent runs of K = 4 is 1 within 3 standard errors; E[log p̂] <= log p."""
    assert_is_unbiased_on(model, TEXT, exact_log_marginal(model, model.tokenize(TEXT)))


def test_beam_is_a_lower_bound_and_exact_once_it_covers_the_support(model):
    x = model.tokenize(TEXT)
    exact = exact_log_marginal(model, x)
    support = enumerate_latents(x.numel(), model.max_entities, model.max_mention_length)
    N = support["mention"].shape[0]
    values = [beam_log_marginal(model, x, k, TEXT) for k in (1, 5, 20, 60)]
    assert all(v <= exact + ATOL for v in values)
    assert values[0] < exact - 1e-3
    z = model.proposal.beam(x, N + 10)
    assert z["mention"].shape[0] == N and len(set(_keys(z))) == N  # distinct configurations: the whole support
    assert beam_log_marginal(model, x, N + 10, TEXT) == pytest.approx(exact, abs=ATOL)
    # beam size 1 is the greedy path of q: at each step the most probable continuation
    with torch.no_grad():
        best = model.proposal.log_prob(x, support).max()
        greedy = model.proposal.log_prob(x, model.proposal.beam(x, 1))
    assert float(greedy[0]) <= float(best) + ATOL


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
            single_p = torch.cat([model.log_joint(x, {k: v[i : i + 1] for k, v in z.items()}) for i in range(64)])
            single_q = torch.cat([model.proposal.log_prob(x, {k: v[i : i + 1] for k, v in z.items()}, 0.8, False)
                                  for i in range(64)])
            assert calls == {"p": 1, "q": 1}  # reused, not recomputed per particle
            # and the cached encoding equals a fresh per-particle one (no cache)
            fresh = model.log_joint_batch(EntityNLM.encode_batch(model, x.unsqueeze(0).expand(64, -1)), x.unsqueeze(0), z)
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
    assert torch.equal(after.embeddings[0, 1], memory.embeddings[0, 1]) and torch.equal(after.embeddings[1], memory.embeddings[1])
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


def test_tokenize_and_empty_documents(model):
    assert model.tokenize("").numel() == 0 and model.tokenize("   ").numel() == 0
    assert model.tokenize("ANNA zebra").tolist() == [model.word_to_id["anna"], model.unk_id]
    empty = model.tokenize("")
    z, log_q = model.proposal.sample(empty, 3)
    assert z["mention"].shape == (3, 0) and torch.equal(log_q, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(model.log_joint(empty, z), torch.zeros(3, dtype=torch.float64))
    assert exact_log_marginal(model, empty) == 0.0


def test_save_load_round_trip(model, tmp_path):
    model.save_pretrained(tmp_path / "ckpt")
    loaded = EntityNLM.from_pretrained(str(tmp_path / "ckpt")).eval()
    x = model.tokenize(TEXT)
    z, log_q = model.proposal.sample(x, 16, 1.3, False, torch.Generator().manual_seed(5))
    z2, log_q2 = loaded.proposal.sample(x, 16, 1.3, False, torch.Generator().manual_seed(5))
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
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 1.0, True), 0)) == pytest.approx(0, abs=ATOL)
        assert float(torch.logsumexp(model.proposal.log_prob(x, z, 0.7, False), 0)) == pytest.approx(0, abs=ATOL)
    exact = exact_log_marginal(model, x)
    lw = importance_log_weights(model, x, num_samples=50_000, temperature=1.0, peek=True, seed=0, document="six")
    assert log_mean_exp(lw) == pytest.approx(exact, abs=0.03)
    N = z["mention"].shape[0]
    assert beam_log_marginal(model, x, N, "six") == pytest.approx(exact, abs=ATOL)


def test_proposal_reads_only_what_it_may(model):
    """Changing only the last word x_T: no-peeking q (labels z_t from x_<t) is unchanged, peeking q is not."""
    x = model.tokenize("anna saw her there")
    other = model.tokenize("anna saw her anna")
    z, _ = model.proposal.sample(x, 32, 1.0, True, torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model.proposal.log_prob(x, z, peek=False), model.proposal.log_prob(other, z, peek=False))
        assert not torch.allclose(model.proposal.log_prob(x, z, peek=True), model.proposal.log_prob(other, z, peek=True))
