"""What only the LDA has: the exact dynamic program against brute force (zeros in Φ, asymmetric α, K = 1..4), its
refusal beyond its cost limit, the unknown-word policy, parameter checks, checkpoints and the bundled model."""

from __future__ import annotations

import math

import pytest
import torch
from lda_tiny import TEXT, WORDS, tiny_lda

from lm_latent_eval.estimators import EstimatorSettings, estimate_document, resolve
from lm_latent_eval.models import load_model
from lm_latent_eval.models.lda import LDA
from lm_latent_eval.models.lda.corpus import CORPUS_DIR, completion_halves, read_texts
from lm_latent_eval.models.lda.exact import all_assignments, exact_work, log_marginal_brute_force
from lm_latent_eval.models.lda.urn import log_prior


@pytest.mark.parametrize("topics", [1, 2, 3, 4])
@pytest.mark.parametrize("zeros", [False, True])
def test_dynamic_program_equals_brute_force(topics, zeros):
    """log p(x) by the DP over topic counts = logsumexp of log p(x, z) over all K^T assignments (T ≤ 6)."""
    gen = torch.Generator().manual_seed(topics)
    phi = -torch.log(torch.rand(topics, 4, generator=gen, dtype=torch.float64))
    if zeros and topics > 1:
        phi[0, :2] = 0.0
    alpha = 0.2 + torch.rand(topics, generator=gen, dtype=torch.float64) * 2
    model = LDA.from_parameters(phi, alpha, WORDS)
    for text in ("apple", "apple banana", "cherry apple date apple banana banana"):
        x = model.tokenize(text)
        assert model.log_marginal(x) == pytest.approx(log_marginal_brute_force(model, x), abs=1e-12)


def test_log_joint_is_the_polya_urn_times_the_topics():
    """log p(x, z) = log Γ(Σα) − log Γ(T + Σα) + Σ_k log Γ(n_k + α_k)/Γ(α_k) + Σ_t log Φ[z_t, x_t], and the chain rule
    Π_t (n_{z_t}^{<t} + α_{z_t}) / (t + Σα) gives the same p(z); −inf where some Φ[z_t, x_t] = 0."""
    model = tiny_lda(zeros=True)
    x = model.tokenize(TEXT)
    z = all_assignments(x.numel(), 3)
    alpha = model.alpha
    chain = torch.zeros(z.shape[0], dtype=torch.float64)
    counts = torch.zeros(z.shape[0], 3, dtype=torch.float64)
    for t in range(x.numel()):
        chain += torch.log(counts.gather(1, z[:, t : t + 1]).squeeze(1) + alpha[z[:, t]]) - math.log(
            t + alpha.sum()
        )
        counts[torch.arange(z.shape[0]), z[:, t]] += 1
    assert torch.allclose(log_prior(counts, alpha), chain, atol=1e-12)
    expected = chain + torch.log(model.phi[z, x]).sum(1)
    log_p = model.log_joint(x, z)
    assert torch.equal(torch.isinf(log_p), torch.isinf(expected)) and torch.isinf(log_p).any()
    finite = torch.isfinite(expected)
    assert torch.allclose(log_p[finite], expected[finite], atol=1e-12)


def test_zeros_in_phi_keep_every_estimator_right():
    """With Φ[k, w] = 0 for some pairs the peeking proposal never draws them, the urn proposal draws them with weight
    0, and IS at K = 16,384 still converges to the exact value; the beam keeps only configurations with p > 0."""
    from lm_latent_eval.estimators import importance_log_weights, log_mean_exp

    model = tiny_lda(zeros=True)
    x = model.tokenize(TEXT)
    exact = model.log_marginal(x)
    z, _ = model.proposal.sample(x, 2000, peek=True, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(model.log_joint(x, z)).all()
    for peek in (True, False):
        lw = importance_log_weights(model, x, num_samples=16_384, peek=peek, seed=1, document=TEXT)
        assert float(log_mean_exp(lw)) == pytest.approx(exact, abs=0.05)
    beam = model.proposal.beam(x, 1000)
    assert torch.isfinite(model.log_joint(x, beam)).all()
    assert float(torch.logsumexp(model.log_joint(x, beam), 0)) == pytest.approx(exact, abs=1e-12)


def test_exact_refuses_beyond_its_cost_and_auto_picks_smc():
    model = tiny_lda(max_exact_work=exact_work(4, 3))
    assert model.log_marginal(model.tokenize("apple banana cherry date")) < 0
    with pytest.raises(ValueError, match="raise max_exact_work"):
        model.log_marginal(model.tokenize(TEXT))
    with pytest.raises(ValueError, match="max_exact_work.*; use estimator=auto"):
        estimate_document(model, TEXT, EstimatorSettings("exact"))
    run = resolve(EstimatorSettings(), model)
    settings, why = run.settings, run.reason
    assert settings.estimator == "smc" and "SMC" in why


def test_unknown_words_are_dropped_or_refused():
    model = tiny_lda()
    assert model.tokenize("Apple, kiwi and BANANA!").tolist() == [0, 1]
    assert model.tokenizer.unknown("Apple, kiwi and BANANA!") == ["kiwi", "and"]
    strict = tiny_lda(unknown_words="error")
    with pytest.raises(ValueError, match="2 words outside the LDA vocabulary.*'kiwi'"):
        strict.tokenize("Apple, kiwi and BANANA!")
    assert strict.tokenize("apple banana").tolist() == [0, 1]
    with pytest.raises(ValueError, match="unknown_words must be one of"):
        tiny_lda(unknown_words="keep")
    assert tiny_lda().tokenize("").shape == (0,)


@pytest.mark.parametrize(
    "phi,alpha,message",
    [
        (torch.ones(2, 4), [1.0, 1.0, 1.0], "shape"),
        (torch.ones(3, 4), [1.0, 0.0, 1.0], "α must be"),
        (-torch.ones(3, 4), 1.0, "≥ 0"),
        (torch.tensor([[1.0, 0, 1, 1]] * 3), 1.0, "probability 0 under every topic"),
    ],
)
def test_bad_parameters_are_refused(phi, alpha, message):
    with pytest.raises(ValueError, match=message):
        tiny_lda().set_parameters(phi, alpha)


def test_checkpoint_round_trip_and_model_args(tmp_path):
    """save_pretrained / from_pretrained keep Φ, α, λ, η and the tokenizer; model_args override the policy."""
    model = LDA.from_parameters(
        torch.rand(3, 4) + 0.1, [0.5, 1, 2], WORDS, pseudocounts=torch.rand(3, 4) + 0.1, eta=0.1
    )
    model.save_pretrained(tmp_path / "ckpt")
    loaded, _ = load_model("lda", tmp_path / "ckpt")
    for name in ("phi", "alpha", "pseudocounts"):
        assert torch.equal(getattr(loaded, name), getattr(model, name))
    assert float(loaded.eta) == 0.1
    assert loaded.vocab == WORDS and loaded.tokenizer.unknown_words == "drop"
    strict, _ = load_model("lda", tmp_path / "ckpt", unknown_words="error")
    assert strict.tokenizer.unknown_words == "error"
    with pytest.raises(ValueError, match="apply to models of LDA libraries"):
        load_model("lda", tmp_path / "ckpt", alpha="0.1")


def test_bundled_model_and_split():
    """The bundled LDA (4 topics, trained on the bundled train split) and its 20 held-out paragraphs: exact held-out
    perplexity pinned; each paragraph's halves join back to its words."""
    model, _ = load_model("lda")
    assert model.num_topics == 4 and float(model.eta) == 0.05 and model.pseudocounts.shape[0] == 4
    texts = read_texts(CORPUS_DIR / "test.jsonl")
    assert len(texts) == 20 and len(read_texts(CORPUS_DIR / "train.jsonl")) == 2588
    estimates = [estimate_document(model, t, EstimatorSettings("exact")) for t in texts]
    tokens = sum(e.num_tokens for e in estimates)
    assert tokens == 441
    assert math.exp(-sum(e.log_likelihood for e in estimates) / tokens) == pytest.approx(548.828, abs=1e-3)
    first, second = completion_halves(texts[0])
    assert (first + second).split() == texts[0].split() and second.startswith(" ")


def test_a_dtype_leaves_the_topics_in_float64():
    model, _ = load_model("lda", dtype=torch.bfloat16)
    assert model.phi.dtype == torch.float64 and model.alpha.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gives_the_cpu_numbers():
    """The same z scores alike on CUDA and CPU; the device sampler reports its own log q; the DP agrees."""
    cpu, _ = load_model("lda")
    cuda, _ = load_model("lda", device="cuda")
    text = read_texts(CORPUS_DIR / "test.jsonl")[0]
    x = cpu.tokenize(text)
    z, log_q = cpu.proposal.sample(x, 64, generator=torch.Generator().manual_seed(0))
    xc, zc = x.cuda(), z.cuda()
    assert torch.allclose(cuda.log_joint(xc, zc).cpu(), cpu.log_joint(x, z), atol=1e-9)
    assert torch.allclose(cuda.proposal.log_prob(xc, zc).cpu(), log_q, atol=1e-9)
    zg, log_qg = cuda.proposal.sample(xc, 256, generator=torch.Generator(device="cuda").manual_seed(0))
    assert zg.device.type == "cuda" and torch.allclose(cuda.proposal.log_prob(xc, zg), log_qg, atol=1e-9)
    assert cuda.log_marginal(xc) == pytest.approx(cpu.log_marginal(x), abs=1e-9)
    est = estimate_document(cuda, text, EstimatorSettings("smc", num_samples=4096), device="cuda")
    assert est.log_likelihood == pytest.approx(cpu.log_marginal(x), abs=0.05)
