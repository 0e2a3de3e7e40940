"""``exact_where_cheaper``: a sampling estimator computes exactly the documents whose exact program costs no more than
their K samples (the model's ``exact_marginal_cost``); ``auto`` turns it on where the model states that cost (the
masked LMs: (2^T − 1) / T samples' worth of network rows)."""

from __future__ import annotations

import numpy as np
import pytest

from lm_latent_eval.documents import read_texts
from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import EstimatorSettings, adaptive, resolve
from lm_latent_eval.estimators.adaptive import _allocation, _History, estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import estimate_from_json, recorded_settings
from lm_latent_eval.estimators.smc import SMCEstimate, SMCRun, smc_diagnostics
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.corpus import TEST_FILE
from lm_latent_eval.protocol import exact_marginal_cost, has


@pytest.fixture(scope="module")
def masked():
    model, _ = load_model("masked")
    return model


@pytest.fixture(scope="module")
def held_out():
    return list(dict.fromkeys(read_texts(TEST_FILE)))


def _cheap(model, text, k) -> bool:
    return exact_marginal_cost(model, model.tokenize(text)) <= k


def test_the_masked_lm_states_the_rows_of_its_program_per_particle(masked):
    """(2^T − 1) rows of the program over T rows of one particle; a deterministic policy's one order is one
    particle; models without the statement (the HMM) have no cost, and auto leaves their documents sampled."""
    x = masked.tokenize("the cat sat on the mat")
    assert exact_marginal_cost(masked, x) == pytest.approx((2 ** x.numel() - 1) / x.numel())
    hmm, _ = load_model("hmm")
    assert not has(hmm, "exact_marginal_cost") and exact_marginal_cost(hmm, hmm.tokenize("the cat")) is None


def test_auto_computes_the_short_documents_exactly_and_samples_the_others(masked, held_out):
    """Under auto every document of at most 9 tokens ((2^9 − 1) / 9 = 56.8 ≤ K = 100) is computed: its log p is the
    dynamic program's, bit for bit, with v = 0 and proven; a longer one is sampled at stage 0, and any document
    whose K has grown past its cost at the last stage is computed there."""
    run = resolve(EstimatorSettings(seed=3), masked)
    assert run.settings.exact_where_cheaper and "computed exactly" in run.reason
    assert recorded_settings(run.settings)["exact_where_cheaper"] is True
    texts = held_out
    first = run.estimate_documents(texts)
    assert [e.computed_exactly for e in first] == [masked.tokenize(t).numel() <= 9 for t in texts]
    assert any(e.computed_exactly for e in first) and not all(e.computed_exactly for e in first)
    estimates = estimate_corpus(run, texts, progress=False)
    for text in texts:
        est, x = estimates[text], masked.tokenize(text)
        assert est.computed_exactly == _cheap(masked, text, est.num_samples)
        if est.computed_exactly:
            assert est.log_likelihood == masked.log_marginal(x) and not est.sampled
            err = est.error()
            assert err.relative_variance == 0.0 and err.exact and err.trusted
            assert est.diagnostic_items() == {}
    corpus = corpus_estimate([estimates[t] for t in texts])
    truth = sum(masked.log_marginal(masked.tokenize(t)) for t in texts)
    assert corpus.interval.two_sided and corpus.interval.lower <= truth <= corpus.interval.upper


def test_a_corpus_computed_whole_states_its_exact_value_and_stops(masked, held_out):
    """Where every document is computed, the statement is the exact S (a point), after stage 0 alone."""
    short = [t for t in held_out if masked.tokenize(t).numel() <= 6]
    run = resolve(EstimatorSettings(seed=0), masked)
    estimates = estimate_corpus(run, short, progress=False)
    assert all(e.computed_exactly and len(e.stage_log_likelihoods) == 1 for e in estimates.values())
    corpus = corpus_estimate(list(estimates.values()))
    truth = sum(masked.log_marginal(masked.tokenize(t)) for t in short)
    assert corpus.interval.lower == corpus.interval.upper == pytest.approx(truth, abs=0.0)


def test_an_estimator_named_by_the_user_samples_every_document(masked, held_out):
    """estimator=smc as requested keeps its meaning (sampling every document) unless exact_where_cheaper is asked for;
    IS then computes the same documents exactly, without importance weights for its diagnostics."""
    text = min(held_out, key=len)
    smc = resolve(EstimatorSettings("smc", 100, seed=1), masked)
    assert not smc.settings.exact_where_cheaper and smc.estimate(text).sampled
    importance = resolve(EstimatorSettings("is", 100, seed=1, exact_where_cheaper=True), masked)
    est = importance.estimate(text)
    assert est.computed_exactly and est.importance_weights is None and est.num_samples == 100
    assert est.log_likelihood == masked.log_marginal(masked.tokenize(text))


def test_a_computed_document_reads_back_from_json_as_computed(masked, held_out):
    text = min(held_out, key=len)
    est = resolve(EstimatorSettings(seed=1), masked).estimate(text)
    back = estimate_from_json(est.to_json())
    assert back.computed_exactly and back.error() == est.error() and back.log_likelihood == est.log_likelihood


def test_the_setting_is_a_boolean():
    with pytest.raises(InputError, match="exact_where_cheaper must be true or false"):
        EstimatorSettings(exact_where_cheaper="yes")


def _sampled(spread: float, k: int, text: str) -> SMCEstimate:
    """An SMC estimate of 4 runs of k / 4 particles whose p̂_r are e^{±spread}."""
    runs = [SMCRun(np.full(k // 4, s), float(s), 0, [], 0.0) for s in (spread, -spread, spread, -spread)]
    diag = smc_diagnostics(runs, [k // 4] * 4, 0.0)
    return SMCEstimate(
        text, 12, diag.log_likelihood, np.concatenate([r.log_weights for r in runs]), diagnostics=diag
    )


def test_the_per_document_cap_counts_the_sampled_documents_only(masked):
    """Computed documents add nothing to Σ v or to the remainder R = Σ v^{3/2}, so the cap max v ≤ cap(N) that keeps
    G = R / √Σ v small counts the N sampled ones: one sampled document beside 99 computed ones is held to cap(1),
    not cap(100); a computed document keeps its K and, having nothing to disagree with, is never in doubt."""
    settings = EstimatorSettings(
        "smc", 100, target_se=10.0
    )  # a loose target: only the per-document cap binds
    smc = resolve(settings, masked).estimator
    computed = [smc.known(f"t{i}", 5, -7.0, settings, masked) for i in range(99)]
    sampled = _sampled(3.0, 100, "long")
    assert sampled.error().trusted
    c = sampled.error().relative_variance * 100
    earlier = [_History() for _ in range(100)]
    # v̂ = 0.33 ≤ cap(1) = 0.35: the target is met, and the computed documents keep their K
    met = _allocation([sampled, *computed], earlier, settings, lambda v: v, 1.0)
    assert met.sizes == [100] * 100 and met.reason == ""
    assert all(h.variance_per_sample == 0.0 and h.last is None for h in earlier[1:])
    # counted as 100 documents, the same one would be short of c / cap(100) samples
    short = _allocation([sampled, *computed], [_History() for _ in range(100)], settings, lambda v: v, 100.0)
    assert short.sizes[0] >= c / DEFAULT_POLICY.document_variance_cap(100.0) and short.sizes[1:] == [100] * 99
    assert short.reason.endswith("1 above the per-document cap 0.035 by their largest c = v̂ K")


def test_each_stage_counts_its_sampled_documents_for_the_cap(masked, held_out, monkeypatch):
    """The precision target hands the allocation the number of documents sampled at that stage."""
    seen = []

    def recording(estimates, earlier, settings, all_reduce, documents, policy=DEFAULT_POLICY):
        seen.append((documents, sum(e.sampled for e in estimates)))
        return original(estimates, earlier, settings, all_reduce, documents, policy)

    original = adaptive._allocation
    monkeypatch.setattr(adaptive, "_allocation", recording)
    texts = sorted(held_out, key=len)[::4]
    estimate_corpus(resolve(EstimatorSettings(seed=5), masked), texts, progress=False)
    assert seen and all(documents == sampled < len(texts) for documents, sampled in seen)
