"""LDA models of scikit-learn, gensim, tomotopy and MALLET read as ours (each test skips without its library), and
the figures those libraries print for the same Φ and α (``peers.py``)."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch

from lm_latent_eval.models import load_model
from lm_latent_eval.models.lda import LDA, peers
from lm_latent_eval.models.lda.loaders import detect_format

DOCS = [
    "apples and pears are fruit, pears are sweet",
    "the cat sat with the dog; a dog chased the cat",
    "fruit salad: apples, pears, cherries and a dog",
    "cats and dogs sleep, the dog barks at cats",
    "cherries apples pears fruit fruit",
    "the dog and the cat and the apples",
]


def test_sklearn_pipeline_file(tmp_path):
    """Φ = components_ normalized, α = doc_topic_prior_, the vectorizer's tokens; and scikit-learn's own perplexity
    for the loaded model equals the fitted LDA's ``perplexity`` on the same documents."""
    pytest.importorskip("sklearn")
    import joblib
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.pipeline import make_pipeline

    pipe = make_pipeline(
        CountVectorizer(), LatentDirichletAllocation(n_components=3, random_state=0, max_iter=20)
    )
    pipe.fit(DOCS)
    joblib.dump(pipe, tmp_path / "lda.joblib")
    model, _ = load_model("lda", tmp_path / "lda.joblib")
    vectorizer, lda = pipe.steps[0][1], pipe.steps[1][1]
    lam = lda.components_
    assert torch.allclose(model.phi, torch.tensor(lam / lam.sum(1, keepdims=True)), atol=1e-15)
    assert torch.allclose(model.alpha, torch.full((3,), lda.doc_topic_prior_, dtype=torch.float64))
    assert (
        model.vocab == list(vectorizer.get_feature_names_out()) and float(model.eta) == lda.topic_word_prior_
    )
    analyzer = vectorizer.build_analyzer()
    assert [model.vocab[i] for i in model.tokenize(DOCS[2]).tolist()] == analyzer(DOCS[2])
    figure = peers.sklearn_perplexity(model, DOCS)
    assert figure.perplexity == pytest.approx(lda.perplexity(vectorizer.transform(DOCS)), rel=1e-9)
    without = math.exp(
        math.log(figure.perplexity) + figure.parts["global_term_nats"] / figure.parts["test_tokens"]
    )
    assert figure.parts["without_global_term"] == pytest.approx(without) and without < figure.perplexity
    other, _ = load_model("lda", tmp_path / "lda.joblib", topic_estimate="exp_expected_log")
    assert torch.allclose(other.phi.sum(1), torch.ones(3, dtype=torch.float64)) and not torch.equal(
        other.phi, model.phi
    )


def test_a_sklearn_file_through_lm_eval_and_lda_peers(tmp_path, capsys):
    """``--model latent_lda --model_args pretrained=FILE`` reads it; ``lda-peers --pretrained FILE`` prints what
    scikit-learn's own perplexity call gives for it, next to the exact value."""
    pytest.importorskip("sklearn")
    import joblib
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.pipeline import make_pipeline

    from lm_latent_eval.cli import main
    from lm_latent_eval.harness.backends import LatentLDAEval

    pipe = make_pipeline(
        CountVectorizer(), LatentDirichletAllocation(n_components=2, random_state=0, max_iter=10)
    )
    pipe.fit(DOCS)
    joblib.dump(pipe, tmp_path / "lda.joblib")
    lm = LatentLDAEval(pretrained=str(tmp_path / "lda.joblib"), estimator="exact", device="cpu")
    request = type("Request", (), {"args": (DOCS[0],)})()
    assert lm.loglikelihood_rolling([request], disable_tqdm=True)[0] == pytest.approx(
        lm.model.log_marginal(lm.model.tokenize(DOCS[0]))
    )
    (tmp_path / "docs.txt").write_text("\n".join(DOCS) + "\n")
    args = ["lda-peers", "--pretrained", str(tmp_path / "lda.joblib"), "--data", str(tmp_path / "docs.txt")]
    assert main([*args, "--num-samples", "8", "--output", str(tmp_path / "out")]) == 0
    rows = {r["tool"]: r for r in json.loads((tmp_path / "out" / "results.json").read_text())}
    vectorizer, lda = pipe.steps[0][1], pipe.steps[1][1]
    own = lda.perplexity(vectorizer.transform(DOCS))
    assert rows["scikit-learn"]["perplexity"] == pytest.approx(own, rel=1e-9)
    assert "scikit-learn#20032" in rows["scikit-learn"]["cause"] and "scikit-learn" in capsys.readouterr().out


def test_bare_sklearn_lda_needs_a_vocabulary(tmp_path):
    pytest.importorskip("sklearn")
    import joblib
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer()
    lda = LatentDirichletAllocation(n_components=2, random_state=0).fit(vectorizer.fit_transform(DOCS))
    joblib.dump(lda, tmp_path / "bare.joblib")
    with pytest.raises(ValueError, match="vocabulary=words.txt"):
        load_model("lda", tmp_path / "bare.joblib")
    (tmp_path / "words.txt").write_text("\n".join(vectorizer.get_feature_names_out()) + "\n")
    model, _ = load_model("lda", tmp_path / "bare.joblib", vocabulary=str(tmp_path / "words.txt"))
    assert model.num_topics == 2 and len(model.vocab) == lda.components_.shape[1]


def test_gensim_ldamodel_file(tmp_path):
    """λ = state.get_lambda() (Φ = get_topics()), α and η; gensim's own bound for the loaded model equals the
    original model's log_perplexity (up to its E-step's convergence threshold)."""
    pytest.importorskip("gensim")
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    texts = [
        [w for w in d.replace(",", " ").replace(";", " ").replace(":", " ").split() if len(w) > 1]
        for d in DOCS
    ]
    dictionary = Dictionary(texts)
    corpus = [dictionary.doc2bow(t) for t in texts]
    lda = LdaModel(
        corpus, id2word=dictionary, num_topics=3, alpha="asymmetric", eta=0.1, passes=5, random_state=0
    )
    lda.save(str(tmp_path / "model.gensim"))
    assert detect_format(tmp_path / "model.gensim") == "gensim"
    model, _ = load_model("lda", tmp_path / "model.gensim")
    assert torch.allclose(model.phi, torch.tensor(lda.get_topics(), dtype=torch.float64), atol=1e-6)
    assert torch.allclose(model.alpha, torch.tensor(lda.alpha, dtype=torch.float64))
    assert model.vocab == [dictionary[i] for i in range(len(dictionary))]
    bound = peers.gensim_perplexity(model, DOCS).parts["per_word_bound"]
    assert bound == pytest.approx(lda.log_perplexity(corpus), abs=0.02)


def test_tomotopy_model_file(tmp_path):
    tp = pytest.importorskip("tomotopy")
    mdl = tp.LDAModel(k=2, alpha=0.3, eta=0.05, seed=0)
    for d in DOCS:
        mdl.add_doc(d.replace(",", " ").split())
    mdl.train(50, workers=1)
    mdl.save(str(tmp_path / "model.bin"))
    model, _ = load_model("lda", tmp_path / "model.bin")
    expected = np.stack([mdl.get_topic_word_dist(k) for k in range(2)])
    assert torch.allclose(model.phi, torch.tensor(expected, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(model.alpha, torch.tensor(mdl.alpha, dtype=torch.float64)) and model.vocab == list(
        mdl.used_vocabs
    )


def test_mallet_weights_file(tmp_path):
    """Φ = weights normalized per topic; α from alpha= or from the state file's header (which gives β too)."""
    weights = tmp_path / "weights.txt"
    rows = [
        (k, w, 0.01 + (k + 1) * (i + 1) % 5) for k in range(2) for i, w in enumerate(["cat", "dog", "pear"])
    ]
    weights.write_text("".join(f"{k}\t{w}\t{v}\n" for k, w, v in rows))
    with pytest.raises(ValueError, match="has no α"):
        load_model("lda", weights)
    model, _ = load_model("lda", weights, alpha="0.1:0.3")
    assert model.alpha.tolist() == [0.1, 0.3] and model.vocab == ["cat", "dog", "pear"]
    from lm_latent_eval.harness.backends import LatentLDAEval

    info = LatentLDAEval(pretrained=str(weights), alpha="0.1:0.3", device="cpu").get_model_info()
    assert info["model_options"] == {
        "alpha": "0.1:0.3"
    }  # part of the run's identity (results_dir, --use_cache)
    assert model.phi[1].tolist() == pytest.approx([v / sum(r[2] for r in rows[3:]) for *_, v in rows[3:]])
    state = tmp_path / "state.gz"
    with gzip.open(state, "wt") as fh:
        fh.write("#doc source pos typeindex type topic\n#alpha : 0.25 0.5 \n#beta : 0.01 \n0 NA 0 0 cat 1\n")
    model, _ = load_model("lda", weights, mallet_state=str(state))
    assert model.alpha.tolist() == [0.25, 0.5] and float(model.eta) == 0.01
    weights.write_text("0\tcat\tnot-a-number\n")
    with pytest.raises(ValueError, match="cannot tell which LDA library"):
        load_model("lda", weights, alpha="0.1")


def test_asymmetric_alpha_has_no_sklearn_figure():
    model = LDA.from_parameters(
        torch.ones(2, 3), [0.1, 0.2], ["a1", "b2", "c3"], pseudocounts=torch.ones(2, 3), eta=0.5
    )
    with pytest.raises(ValueError, match="asymmetric"):
        peers.sklearn_lda(model)
    with pytest.raises(ValueError, match="no topic-word pseudo-counts"):
        peers.sklearn_lda(LDA.from_parameters(torch.ones(2, 3), 0.1, ["a1", "b2", "c3"]))
