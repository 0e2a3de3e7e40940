"""Contrastive entropy: closed forms on unigram models, metric = formulas, lm-eval task = direct scoring."""

from __future__ import annotations

import math

import numpy as np
import pytest
from metric_helpers import (
    TASKS_DIR,
    block_network,
    load_metric_offline,
    readme_doctests,
    run_doctests,
    task_utils,
)

from lm_latent_eval.contrastive.channel import corpus_vocabulary, split_sentences
from lm_latent_eval.contrastive.entropy import (
    causal_lm_scorer,
    contrastive_entropy,
    contrastive_entropy_from_scorer,
    contrastive_entropy_report,
    latent_lm_scorer,
    make_scorer,
    report_from_sentence_scores,
)
from lm_latent_eval.estimators import EstimatorSettings


@pytest.fixture
def no_network(monkeypatch):
    block_network(monkeypatch)


def unigram_scorer(log_p: dict, per_word_constant: float = 0.0, per_sentence_constant: float = 0.0):
    """log p̃(s) = Σ_w (log p(w) + c_word) + c_sentence: an unnormalized unigram model when a constant is nonzero."""
    return lambda texts: [
        sum(log_p[w] + per_word_constant for w in t.split()) + per_sentence_constant for t in texts
    ]


def test_hand_computed_values():
    # two sentences, 3 + 2 words: (−4 − 3) − (−6 − 5) = 4 nats over 5 words
    assert contrastive_entropy([-4.0, -3.0], [-6.0, -5.0], 5) == pytest.approx(0.8, abs=1e-15)
    report = contrastive_entropy_report(
        [-4.0, -3.0], {0.1: [[-5.0, -3.0], [-4.0, -4.0]], 0.3: [[-6.0, -5.0], [-8.0, -5.0]]}, 5
    )
    assert report["contrastive_entropy_per_distortion"][0.1] == pytest.approx([0.2, 0.2])
    assert report["contrastive_entropy_per_distortion"][0.3] == pytest.approx([0.8, 1.2])
    assert report["contrastive_entropy"][0.3] == pytest.approx(1.0)
    assert report["contrastive_entropy_std"][0.3] == pytest.approx(math.sqrt(0.08))
    assert report["ratio"] == pytest.approx({0.1: 1.0, 0.3: 5.0})
    assert report["ratio_std"][0.3] == pytest.approx(np.std([4.0, 6.0], ddof=1))


def test_uniform_unigram_model_has_zero_contrastive_entropy():
    # every sentence of n words scores n log(1/V) whatever the distortion: H_C = 0 exactly, ratios undefined
    vocab = [f"w{i}" for i in range(20)]
    log_p = {w: -math.log(len(vocab)) for w in vocab}
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(vocab, size=rng.integers(1, 12))) for _ in range(50)]
    with pytest.warns(UserWarning, match="ratios are undefined|ratio_std is NaN"):
        report = contrastive_entropy_from_scorer(texts, unigram_scorer(log_p), num_distortions=3)
    for d in (0.1, 0.3, 0.5):
        assert abs(report["contrastive_entropy"][d]) < 1e-12
        assert math.isnan(report["ratio"][d])


def test_unigram_expectation_matches_the_closed_form():
    """Test words all have probability p_A; replacements are uniform over V. Swaps never change a unigram score and
    every replaced word had log p_A, so each word adds X = 1[replace] (log p_A − log p(v)), v ~ U(V), i.i.d.:
    E[H_C(d)] = (d/2)(log p_A − mean_v log p(v)) and E[X²] = (d/2) mean_v (log p_A − log p(v))²."""
    rng = np.random.default_rng(1)
    test_words = [f"a{i}" for i in range(10)]
    other = [f"b{i}" for i in range(40)]
    probs = np.concatenate([np.full(10, 0.05), rng.dirichlet(np.ones(40)) * 0.5])
    log_p = dict(zip(test_words + other, np.log(probs)))
    vocab = test_words + other
    texts = [" ".join(rng.choice(test_words, size=20)) for _ in range(150)]  # N = 3000 words
    r = 10
    report = contrastive_entropy_from_scorer(
        texts, unigram_scorer(log_p), num_distortions=r, vocabulary=vocab, seed=3
    )
    gap = math.log(0.05) - np.log(probs)
    for d in (0.1, 0.3, 0.5):
        mean, second = d / 2 * gap.mean(), d / 2 * (gap**2).mean()
        se = math.sqrt((second - mean**2) / (3000 * r))
        assert abs(report["contrastive_entropy"][d] - mean) < 5 * se, (
            d,
            report["contrastive_entropy"][d],
            mean,
            se,
        )
        # the spread over distortions is the standard deviation of a mean of N i.i.d. X's
        assert report["contrastive_entropy_std"][d] == pytest.approx(
            math.sqrt((second - mean**2) / 3000), rel=0.6
        )
    assert report["ratio"][0.5] == pytest.approx(5.0, rel=0.15)
    assert report["ratio"][0.3] == pytest.approx(3.0, rel=0.15)


def test_unnormalized_scores_cancel():
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(30)]
    log_p = dict(zip(vocab, np.log(rng.dirichlet(np.ones(30)))))
    texts = [" ".join(rng.choice(vocab, size=rng.integers(1, 15))) for _ in range(40)]
    base = contrastive_entropy_from_scorer(texts, unigram_scorer(log_p), num_distortions=4)
    per_word = contrastive_entropy_from_scorer(
        texts, unigram_scorer(log_p, per_word_constant=7.5), num_distortions=4
    )
    per_sentence = contrastive_entropy_from_scorer(
        texts, unigram_scorer(log_p, per_sentence_constant=-123.0), num_distortions=4, unit="sentence"
    )
    base_sentence = contrastive_entropy_from_scorer(
        texts, unigram_scorer(log_p), num_distortions=4, unit="sentence"
    )
    for d in (0.1, 0.3, 0.5):
        assert per_word["contrastive_entropy"][d] == pytest.approx(base["contrastive_entropy"][d], abs=1e-10)
        assert per_sentence["contrastive_entropy"][d] == pytest.approx(
            base_sentence["contrastive_entropy"][d], abs=1e-10
        )
        n_words = sum(len(t.split()) for t in texts)
        assert base_sentence["contrastive_entropy"][d] == pytest.approx(
            base["contrastive_entropy"][d] * n_words / len(texts)
        )


def formulas(original, grid, num_words, levels, base):
    """The metric's outputs written out: H_C[d][r] = (Σ_s o_s − Σ_s g[s, d, r]) / Σ_s n_s, then mean, std, ratios."""
    o, g, n = np.asarray(original), np.asarray(grid), float(np.sum(num_words))
    hc = {d: (o.sum() - g[:, j, :].sum(axis=0)) / n for j, d in enumerate(levels)}
    return {
        "contrastive_entropy": {d: hc[d].mean() for d in levels},
        "contrastive_entropy_std": {d: hc[d].std(ddof=1) for d in levels},
        "ratio": {d: hc[d].mean() / hc[base].mean() for d in levels},
        "ratio_std": {d: (hc[d] / hc[base]).std(ddof=1) for d in levels},
    }


def test_metric_equals_the_formulas_on_random_inputs(no_network):
    metric = load_metric_offline("contrastive_entropy")
    rng = np.random.default_rng(4)
    levels = [0.1, 0.3, 0.5]
    for s, r in [(7, 4), (30, 10)]:
        original = rng.normal(-30, 5, size=s)
        grid = original[:, None, None] - rng.gamma(2.0, size=(s, 3, r)) * np.array(levels)[None, :, None] * 10
        num_words = rng.integers(1, 20, size=s)
        out = metric.compute(
            original_score=original.tolist(),
            distorted_scores=grid.tolist(),
            num_words=num_words.tolist(),
            levels=levels,
        )
        want = formulas(original, grid, num_words, levels, 0.1)
        for key, values in want.items():
            for d in levels:
                assert out[key][d] == pytest.approx(values[d], rel=1e-12, abs=1e-12), (key, d)
        assert out["num_units"] == num_words.sum() and out["num_distortions"] == r


def test_bad_input_names_the_sentence_and_level():
    with pytest.raises(
        ValueError, match="level 0.3, distortion 1: distorted scores: sentence 1 has a non-finite"
    ):
        contrastive_entropy_report(
            [-1.0, -2.0], {0.1: [[-1.0, -3.0]] * 2, 0.3: [[-1.0, -3.0], [-1.0, math.nan]]}, 3
        )
    with pytest.raises(ValueError, match="sentence 1: distorted scores must be"):
        report_from_sentence_scores([-1.0, -2.0], [[[-1.0], [-2.0]], [[-1.0]]], [1, 1], levels=[0.1, 0.3])
    with pytest.raises(ValueError, match="base level 0.2 is not among"):
        contrastive_entropy_report([-1.0], {0.1: [[-2.0]]}, 1, base_level=0.2)
    with pytest.raises(ValueError, match="positive integer"):
        contrastive_entropy([-1.0], [-2.0], 0)
    with pytest.raises(ValueError, match="2 original but 1 distorted"):
        contrastive_entropy([-1.0, -1.0], [-2.0], 3)


def test_readme_and_docstring_examples_run(no_network, capfd):
    run_doctests("contrastive_entropy")
    capfd.readouterr()
    readme_doctests("contrastive_entropy")
    assert "scoring sentences" not in capfd.readouterr().err  # the card's example prints no progress bar


# ---------------------------------------------------------------- from models and through lm-eval


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    from tiny_models import make_tiny_gpt2

    return str(make_tiny_gpt2(tmp_path_factory.mktemp("gpt2")))


def test_causal_lm_scorer_is_the_chain_rule(tiny_gpt2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(tiny_gpt2), AutoModelForCausalLM.from_pretrained(tiny_gpt2)
    texts = ["the cat sat on the mat", "a dog", "the dog ran quickly under a log ."]
    got = causal_lm_scorer(tiny_gpt2, batch_size=2)(texts)  # batches mix lengths: padding must not leak
    for text, value in zip(texts, got):
        ids = torch.tensor([[tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"]]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
        assert value == pytest.approx(float(logp.gather(-1, ids[0, 1:, None]).sum()), abs=1e-4)
    with pytest.raises(ValueError, match="over the model's 64"):
        causal_lm_scorer(tiny_gpt2)([" ".join(["the"] * 70)])


LIMIT = 15  # sentences scored through lm-eval (the distortion vocabulary is still that of the whole split)


def _direct_report(bundled_test_texts, scorer):
    """The task's numbers computed without lm-eval: same sentences, vocabulary, levels, distortions and seed."""
    utils_task = task_utils()
    sentences = [s for t in bundled_test_texts for s in split_sentences(t)]
    return contrastive_entropy_from_scorer(
        sentences[:LIMIT],
        scorer,
        levels=utils_task.LEVELS,
        num_distortions=utils_task.NUM_DISTORTIONS,
        seed=utils_task.SEED,
        vocabulary=corpus_vocabulary(sentences),
    )


def _lm_eval_metrics(model, model_args, **kwargs):
    import lm_eval
    from lm_eval.tasks import TaskManager

    out = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=["contrastive_entropy_tiny"],
        task_manager=TaskManager(include_path=str(TASKS_DIR / "contrastive_entropy"), include_defaults=False),
        bootstrap_iters=0,
        limit=LIMIT,
        **kwargs,
    )
    return out["results"]["contrastive_entropy_tiny"]


def _assert_task_matches(results, report):
    for d in (0.1, 0.3, 0.5):
        assert results[f"contrastive_entropy_d{d},none"] == pytest.approx(
            report["contrastive_entropy"][d], rel=1e-4, abs=1e-5
        )
        assert results[f"contrastive_entropy_std_d{d},none"] == pytest.approx(
            report["contrastive_entropy_std"][d], rel=1e-3, abs=1e-5
        )
    for d in (0.3, 0.5):
        assert results[f"ratio_d{d},none"] == pytest.approx(report["ratio"][d], rel=1e-3)


def test_lm_eval_task_with_hf_backend_equals_direct_scoring(tiny_gpt2, bundled_test_texts):
    results = _lm_eval_metrics("hf", f"pretrained={tiny_gpt2},dtype=float32", device="cpu", batch_size=32)
    report = _direct_report(bundled_test_texts, causal_lm_scorer(tiny_gpt2, batch_size=32))
    _assert_task_matches(results, report)


def test_lm_eval_task_with_latent_hmm_backend_equals_exact_scoring(bundled_hmm, bundled_test_texts):
    from lm_latent_eval.harness.backends import LatentHMMEval

    results = _lm_eval_metrics(LatentHMMEval(estimator="exact", device="cpu"), None)
    report = _direct_report(
        bundled_test_texts, latent_lm_scorer(bundled_hmm, EstimatorSettings(estimator="exact"))
    )
    _assert_task_matches(results, report)
    # a trained model tells text from noise, more so the noisier the text
    h = report["contrastive_entropy"]
    assert 0 < h[0.1] < h[0.3] < h[0.5]


def test_make_scorer_dispatches(bundled_hmm, tiny_gpt2):
    settings = EstimatorSettings(estimator="exact")
    text = ["the dog slept ."]
    by_name = make_scorer("hmm", settings)(text)
    by_instance = make_scorer(bundled_hmm, settings)(text)
    assert by_name == pytest.approx(by_instance)
    assert by_instance[0] == pytest.approx(float(bundled_hmm.log_marginal(bundled_hmm.tokenize(text[0]))))
    assert make_scorer(tiny_gpt2)(text) == pytest.approx(causal_lm_scorer(tiny_gpt2)(text))
    with pytest.raises(TypeError):
        make_scorer(3.0)
