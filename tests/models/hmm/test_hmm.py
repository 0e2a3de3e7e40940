"""The HMM reference model against independent computations (probability-space products, the prefix property),
its tokenizer, sample_text, save/load, EM training and the bundled default. Enumeration, the proposal and the beam
are checked by the contract table (tests/contract/)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from hmm_tiny import make_tiny_hmm, probs
from scipy.stats import chisquare

from lm_latent_eval.models.hmm import HMMLanguageModel, split_words
from lm_latent_eval.models.hmm.train import batches, em_step, perplexity, read_texts, train_hmm
from lm_latent_eval.paths import DATA_DIR
from lm_latent_eval.protocol import has

# ---------------------------------------------------------------- tokenizer


def test_tokenizer_handles_lm_eval_text_unknown_words_and_empty(bundled_hmm):
    assert split_words("Question: Who saw the dog?\nAnswer: don't") == [
        "question",
        ":",
        "who",
        "saw",
        "the",
        "dog",
        "?",
        "answer",
        ":",
        "don't",
    ]
    x = bundled_hmm.tokenize("The dog saw Zyxwvut <unk> .")
    unk = bundled_hmm.vocab.index("<unk>")
    assert x.dtype == torch.long and x.tolist()[3:5] == [unk, unk]
    assert bundled_hmm.detokenize(x) == "the dog saw <unk> <unk>."
    empty = bundled_hmm.tokenize("")
    assert empty.dtype == torch.long and empty.shape == (0,)
    assert bundled_hmm.tokenize(" \n\t ").shape == (0,)


def test_detokenize_inverts_tokenize_on_known_text(bundled_hmm):
    text = "the old dog saw a cat near the river. did anna see the king?"
    assert bundled_hmm.detokenize(bundled_hmm.tokenize(text)) == text


# ---------------------------------------------------------------- log_joint / log_marginal


def test_log_joint_is_the_product_of_probabilities(tiny_hmm):
    pi, A, B = probs(tiny_hmm.hmm)
    x = tiny_hmm.tokenize("a b c <unk> a")
    z = torch.tensor([[0, 1, 2, 2, 0], [2, 2, 2, 2, 2]])
    lj = tiny_hmm.log_joint(x, z)
    assert lj.dtype == torch.float64 and lj.shape == (2,)
    for k in range(2):
        zk, xs = z[k].tolist(), x.tolist()
        p = (
            pi[zk[0]]
            * B[zk[0], xs[0]]
            * np.prod([A[zk[t - 1], zk[t]] * B[zk[t], xs[t]] for t in range(1, 5)])
        )
        assert lj[k].item() == pytest.approx(math.log(p), abs=1e-5)
    assert (
        tiny_hmm.log_joint(torch.zeros(0, dtype=torch.long), torch.zeros(3, 0, dtype=torch.long)).tolist()
        == [0.0] * 3
    )


def test_log_marginal_is_a_prefix_probability(tiny_hmm):
    """No end event: Σ_w p(x ⊕ w) = p(x), and Σ_w p(w) = 1."""
    x = tiny_hmm.tokenize("a b b")
    extended = [tiny_hmm.log_marginal(torch.cat([x, torch.tensor([w])])) for w in range(4)]
    assert math.exp(torch.logsumexp(torch.tensor(extended), 0).item()) == pytest.approx(
        math.exp(tiny_hmm.log_marginal(x))
    )
    assert sum(math.exp(tiny_hmm.log_marginal(torch.tensor([w]))) for w in range(4)) == pytest.approx(1.0)


def test_bad_shapes_and_ids_raise(tiny_hmm):
    x = tiny_hmm.tokenize("a b")
    with pytest.raises(ValueError, match="shape"):
        tiny_hmm.log_joint(x, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="states"):
        tiny_hmm.log_joint(x, torch.full((1, 2), 3))
    with pytest.raises(ValueError, match="token ids"):
        tiny_hmm.log_marginal(torch.tensor([0, 9]))


# ---------------------------------------------------------------- proposal


def test_proposal_is_reproducible_and_rejects_bad_arguments(tiny_hmm):
    x = tiny_hmm.tokenize("a b c")
    a = tiny_hmm.proposal.sample(x, 8, 1.0, True, torch.Generator().manual_seed(5))
    b = tiny_hmm.proposal.sample(x, 8, 1.0, True, torch.Generator().manual_seed(5))
    assert a[0].shape == (8, 3) and a[0].dtype == torch.long and a[1].dtype == torch.float64
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for k, tau in [(0, 1.0), (-2, 1.0), (4, 0.0), (4, -1.0), (4, float("nan"))]:
        with pytest.raises(ValueError):
            tiny_hmm.proposal.sample(x, k, tau, True)
    z, log_q = tiny_hmm.proposal.sample(torch.zeros(0, dtype=torch.long), 4)
    assert z.shape == (4, 0) and log_q.tolist() == [0.0] * 4


# ---------------------------------------------------------------- sample_text


def test_sample_text_next_word_follows_the_conditional(tiny_hmm):
    """One sampled word after a prefix has distribution p(w | prefix) = p(prefix ⊕ w) / p(prefix)."""
    prefix = "a c c"
    x = tiny_hmm.tokenize(prefix)
    gen = torch.Generator().manual_seed(0)
    n = 3000
    words = [tiny_hmm.sample_text(prefix, 1, gen) for _ in range(n)]
    assert all(w.startswith(" ") for w in words)
    counts = np.bincount([int(tiny_hmm.tokenize(w)[0]) for w in words], minlength=4)
    log_p = tiny_hmm.log_marginal(x)
    cond = np.array(
        [math.exp(tiny_hmm.log_marginal(torch.cat([x, torch.tensor([w])])) - log_p) for w in range(4)]
    )
    assert cond.sum() == pytest.approx(1.0)
    assert chisquare(counts, n * cond).pvalue > 1e-4


def test_sample_text_stops_and_is_seeded(bundled_hmm):
    a = bundled_hmm.sample_text("The old dog", 30, torch.Generator().manual_seed(1))
    b = bundled_hmm.sample_text("The old dog", 30, torch.Generator().manual_seed(1))
    assert a == b and len(bundled_hmm.tokenize(a)) == 30
    full = bundled_hmm.sample_text("The old dog", 200, torch.Generator().manual_seed(1))
    cut = bundled_hmm.sample_text("The old dog", 200, torch.Generator().manual_seed(1), stop=[".", "?"])
    end = min(full.find(s) for s in ".?" if s in full)
    assert cut == full[:end]  # the same draws, cut before the first stop string
    # stop strings match case-insensitively (lm-eval's "Question:" against the model's lower-case words)
    cased, lower = (
        bundled_hmm.sample_text("The old dog", 200, torch.Generator().manual_seed(1), stop=[".", "?", did])
        for did in ("Did ", "did ")
    )
    assert cased == lower
    assert isinstance(bundled_hmm.sample_text("", 5, torch.Generator().manual_seed(2)), str)
    assert bundled_hmm.sample_text("The dog", 0) == ""


# ---------------------------------------------------------------- save / load / train


def test_save_pretrained_round_trip(tmp_path, tiny_hmm):
    tiny_hmm.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["vocab"] == tiny_hmm.vocab
    loaded = HMMLanguageModel.from_pretrained(str(tmp_path))
    x = tiny_hmm.tokenize("a b c c a")
    assert loaded.log_marginal(x) == tiny_hmm.log_marginal(x)
    a = tiny_hmm.proposal.sample(x, 10, 1.0, True, torch.Generator().manual_seed(0))
    b = loaded.proposal.sample(x, 10, 1.0, True, torch.Generator().manual_seed(0))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_from_pretrained_refuses_a_checkpoint_missing_the_proposal(tmp_path, tiny_hmm):
    from safetensors.torch import save_file

    tiny_hmm.save_pretrained(tmp_path)
    save_file(
        {k: v for k, v in tiny_hmm.state_dict().items() if k.startswith("hmm.")},
        str(tmp_path / "model.safetensors"),
    )
    with pytest.raises(RuntimeError, match="proposal"):
        HMMLanguageModel.from_pretrained(str(tmp_path))


def test_em_increases_the_likelihood_and_batching_does_not_change_it():
    texts = read_texts(DATA_DIR / "corpus" / "tiny_train.jsonl")[:60]
    model = train_hmm(texts, iterations=0, proposal_iterations=0, num_states=6, progress=False)
    data = batches([model.tokenize(t) for t in texts], batch_size=16)
    whole = batches([model.tokenize(t) for t in texts], batch_size=1000)
    assert len(data) == 4 and len(whole) == 1
    assert perplexity(model, data) == pytest.approx(perplexity(model, whole), rel=1e-12)
    lls = [em_step(model, data, pseudo_count=1e-3) for _ in range(8)]
    assert all(b >= a - 1e-6 * abs(a) for a, b in itertools.pairwise(lls))
    assert lls[-1] > lls[0] + 0.1 * abs(lls[0])


def test_train_cli_writes_a_loadable_checkpoint(tmp_path, capsys):
    from lm_latent_eval.cli import main

    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in ["the dog ran.", "a cat sat.", "the cat ran."] * 5)
    )
    out = tmp_path / "ckpt"
    rc = main(
        [
            "train",
            "hmm",
            "--train",
            str(train),
            "--valid",
            str(train),
            "--output",
            str(out),
            "--num-states",
            "3",
            "--iterations",
            "4",
            "--proposal-iterations",
            "2",
        ]
    )
    assert rc == 0 and "validation perplexity" in capsys.readouterr().out
    model = HMMLanguageModel.from_pretrained(str(out))
    assert model.num_states == 3 and "dog" in model.vocab
    assert (out / "README.md").read_text().count("lm-latent-eval train hmm") == 1


# ---------------------------------------------------------------- the bundled default


def test_bundled_checkpoint_and_corpus(bundled_hmm, bundled_test_texts):
    from lm_latent_eval.data.make_default_hmm import make_corpus

    size = sum(f.stat().st_size for f in (DATA_DIR / "hmm").iterdir())
    assert size < 1_000_000 and 8 <= bundled_hmm.num_states <= 16 and bundled_hmm.vocab[0] == "<unk>"
    train, test = make_corpus()  # the committed script regenerates exactly the bundled files
    assert test == bundled_test_texts
    assert train == read_texts(DATA_DIR / "corpus" / "tiny_train.jsonl")
    assert 20 <= len(bundled_test_texts) <= 40
    assert has(bundled_hmm, "latent_lm") and not has(bundled_hmm.proposal, "latent_lm")
    assert has(bundled_hmm, "exact_marginal") and has(bundled_hmm, "text_sampler")
    # proposal is mismatched but covers the support: finite, different from the model
    assert not torch.allclose(bundled_hmm.proposal.log_probs()[2], bundled_hmm.hmm.log_probs()[2])
    assert all(torch.isfinite(t).all() for t in bundled_hmm.proposal.log_probs())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_same_numbers_on_cuda(tiny_hmm):
    from lm_latent_eval.estimators import EstimatorSettings, estimate_document

    cuda = make_tiny_hmm().to("cuda")
    for settings in (EstimatorSettings(estimator="exact"), EstimatorSettings(estimator="beam", beam_size=81)):
        a = estimate_document(tiny_hmm, "a b c a", settings).log_likelihood
        assert estimate_document(cuda, "a b c a", settings, device="cuda").log_likelihood == pytest.approx(a)
    est = estimate_document(cuda, "a b c a", EstimatorSettings("is", num_samples=5000), device="cuda")
    assert est.log_likelihood == pytest.approx(tiny_hmm.log_marginal(tiny_hmm.tokenize("a b c a")), abs=0.05)
    assert isinstance(cuda.sample_text("a b", 5, torch.Generator("cuda").manual_seed(0)), str)
