"""latent_tokenization on a tiny GPT-2 with a byte-level BPE tokenizer trained here, beyond the contract table
(tests/contract/): enumeration against a brute force over every split, the canonical term and bound, log p of drawn
particles, lm-eval's rolling windows, particle batches, clear errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from is_checks import assert_unbiased
from tiny_models import make_tiny_bpe_gpt2

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.tokenization import TokenizationLM, windows

TEXTS = ["the cat", "théo sat.", "a dog,"]  # é is two bytes: segmentations may split it


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    path = make_tiny_bpe_gpt2(tmp_path_factory.mktemp("bpe") / "gpt2", n_positions=64)
    return TokenizationLM.from_pretrained(str(path), canonical_mix=0.0).eval()


@torch.no_grad()
def brute_force_log_p(lm, data: bytes, cover_end: bool = False) -> float:
    """log Σ_z p(z) over every split of data into vocabulary byte strings, each scored by its own forward pass.

    With cover_end the last piece may be any token whose bytes start with the rest of data (proper prefix probability).
    """
    index = {b: t for t, b in enumerate(lm.vocab) if b}
    terms = []

    def score(tokens):
        ids = torch.tensor([[lm.prefix_token, *tokens]])
        logp = torch.log_softmax(lm.model(ids).logits[0].double(), -1)
        return logp[:-1].gather(-1, torch.tensor(tokens)[:, None]).sum().item(), logp[-1]

    n = len(data)
    for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, n), r) for r in range(n)):
        bounds = [0, *cuts, n]
        pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
        if all(p in index for p in pieces):
            terms.append(score([index[p] for p in pieces])[0])
        if cover_end:  # the last piece replaced by a token that strictly extends it
            head = pieces[:-1]
            if all(p in index for p in head):
                extending = [
                    t for b, t in index.items() if b.startswith(pieces[-1]) and len(b) > len(pieces[-1])
                ]
                if extending:
                    value, last = score([index[p] for p in head]) if head else (0.0, None)
                    if last is None:
                        last = torch.log_softmax(
                            lm.model(torch.tensor([[lm.prefix_token]])).logits[0, -1].double(), -1
                        )
                    terms.append(value + torch.logsumexp(last[extending], 0).item())
    return float(torch.logsumexp(torch.tensor(terms, dtype=torch.float64), 0))


@pytest.mark.parametrize("text", TEXTS)
def test_enumeration_equals_brute_force_over_all_splits(lm, text):
    x = lm.tokenize(text)
    assert lm.text_bytes(x) == text.encode()
    assert lm.log_marginal(x) == pytest.approx(brute_force_log_p(lm, text.encode()), abs=1e-5)
    view = lm.with_cover_end()
    assert view.log_marginal(x) == pytest.approx(
        brute_force_log_p(lm, text.encode(), cover_end=True), abs=1e-5
    )
    assert view.log_marginal(x) >= lm.log_marginal(x)  # P(starts with x) ≥ P(token stream spells x)


def test_canonical_segmentation_is_one_term_of_the_marginal(lm):
    x = lm.tokenize("théo sat.")
    support = lm.segmentations(x)
    assert support.shape[0] == lm.lattice(x).count() > 1
    assert any(torch.equal(row[row >= 0], x) for row in support)
    log_p = lm.log_joint(x, support)
    assert float(torch.logsumexp(log_p, 0)) > float(lm.log_joint(x, x[None])[0])
    not_spelling = torch.tensor([[x[0].item()]])
    assert lm.log_joint(x, not_spelling)[0] == -math.inf


def test_sampled_log_p_equals_log_joint(lm):
    x = lm.tokenize("a dog,")
    z, _ = lm.proposal.sample(x, 50, generator=torch.Generator().manual_seed(1))
    rows = [r[r >= 0].tolist() for r in z]
    assert torch.allclose(lm.log_joint(x, z), lm.score(rows), atol=1e-5)


def test_beam_is_never_below_the_canonical_segmentation(lm):
    """The canonical segmentation is always in the beam: canonical ≤ beam ≤ exact, a larger beam never loses mass,
    and the beam over the whole lattice is exact."""
    for text in TEXTS:
        x = lm.tokenize(text)
        exact, canonical = lm.log_marginal(x), float(lm.log_joint(x, x[None])[0])
        previous = -math.inf
        for k in (1, 2, 4, 8):
            beam = estimate_document(
                lm, text, EstimatorSettings(estimator="beam", beam_size=k)
            ).log_likelihood
            assert canonical - 1e-9 <= beam <= exact + 1e-9
            assert beam >= previous - 1e-9
            previous = beam
        full = lm.lattice(x).count()
        beam = estimate_document(lm, text, EstimatorSettings(estimator="beam", beam_size=full)).log_likelihood
        assert beam == pytest.approx(
            exact, abs=1e-6
        )  # log p of drawn particles come from the incremental decoder


def test_beams_of_several_texts_side_by_side_are_those_found_alone(lm):
    """One forward pass per byte position for every text's hypotheses (``beam_documents``) finds each text's beam
    alone, texts longer than the context (the block contexts restart) among them; the estimator's side-by-side
    path gives each document its own beam sum, the whole lattice's sum being exact."""
    from lm_latent_eval.estimators import resolve
    from lm_latent_eval.estimators.adaptive import estimate_corpus

    texts = [*TEXTS, " ".join(["the cat sat on the mat."] * 12)]
    xs = [lm.tokenize(t) for t in texts]
    assert xs[-1].numel() > lm.max_length
    for k in (1, 4):
        together = lm.proposal.beam_documents(xs, k)
        assert all(torch.equal(z, lm.proposal.beam(x, k)) for x, z in zip(xs, together))
    run = resolve(EstimatorSettings(estimator="beam", beam_size=4), lm)
    assert run.estimator.batches_documents(lm)
    found = estimate_corpus(run, texts, progress=False)
    for text in texts:
        alone = estimate_document(lm, text, EstimatorSettings(estimator="beam", beam_size=4))
        assert found[text].log_likelihood == pytest.approx(alone.log_likelihood, abs=1e-5)
    full = max(lm.lattice(x).count() for x in xs[:3])
    run = resolve(EstimatorSettings(estimator="beam", beam_size=full), lm)
    found = estimate_corpus(run, TEXTS, progress=False)
    for text in TEXTS:
        assert found[text].log_likelihood == pytest.approx(lm.log_marginal(lm.tokenize(text)), abs=1e-6)


def test_windows_are_lm_evals_rolling_windows():
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    for n, L in [(1, 4), (4, 4), (5, 4), (9, 4), (23, 5), (7, 1)]:
        tokens = list(range(100, 100 + n))
        ids = [0, *tokens]
        ours = [(ids[lo:e], ids[s + 1 : e + 1]) for s, e, lo in windows(n, L)]
        theirs = [make_disjoint_window(w) for w in get_rolling_token_windows(tokens, 0, L, 1)]
        assert len(ours) == len(theirs)
        for (inp, tgt), (ctx, pred) in zip(ours, theirs):  # hf feeds (ctx + pred)[-(L + 1):][:-1]
            assert (inp, tgt) == ((ctx + pred)[-(L + 1) :][:-1], pred)


def test_long_text_uses_rolling_windows_and_stays_unbiased(tmp_path):
    """L = 4: segmentations longer than L are scored in hf's windows; IS stays unbiased against enumeration."""
    path = make_tiny_bpe_gpt2(tmp_path / "gpt2", n_positions=4)
    lm = TokenizationLM.from_pretrained(str(path)).eval()
    text = "the mat."
    x = lm.tokenize(text)
    support = lm.segmentations(x)
    assert max(int((r >= 0).sum()) for r in support) > 4
    exact = lm.log_marginal(x)
    z, log_q = lm.proposal.sample(x, 30, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(log_q, lm.proposal.log_prob(x, z), atol=1e-6)
    assert torch.allclose(lm.log_joint(x, z), lm.score([r[r >= 0].tolist() for r in z]), atol=1e-5)
    estimates = [estimate_document(lm, text, EstimatorSettings(estimator="is", num_samples=10, seed=s)).log_likelihood
                 for s in range(200)]  # fmt: skip
    assert_unbiased(estimates, exact)
    lm.memo = {}  # beam values below come from the windowed forward pass only
    canonical = float(lm.log_joint(x, x[None])[0])
    for k in (1, 3, support.shape[0]):  # the beam's cached block contexts restart every L tokens
        beam = estimate_document(lm, text, EstimatorSettings(estimator="beam", beam_size=k)).log_likelihood
        assert canonical - 1e-9 <= beam <= exact + 1e-9
    assert beam == pytest.approx(exact, abs=1e-9)


def test_results_do_not_depend_on_particle_batch(lm):
    x = lm.tokenize("théo sat.")
    draws = []
    for batch in (3, 256):
        lm.particle_batch = batch
        draws.append(lm.proposal.sample(x, 20, generator=torch.Generator().manual_seed(5)))
    lm.particle_batch = 256
    assert torch.equal(draws[0][0], draws[1][0])
    assert torch.allclose(draws[0][1], draws[1][1], atol=1e-9)


def test_clear_errors_for_unsupported_tokenizers_and_impossible_requests(lm, tmp_path):
    from tiny_models import make_tiny_gpt2

    word_level = make_tiny_gpt2(tmp_path / "word")
    with pytest.raises(NotImplementedError, match="byte-level BPE"):
        TokenizationLM.from_pretrained(str(word_level))
    x = lm.tokenize("the cat sat on the mat and the dog ran under the log quickly")
    limit, lm.enumeration_limit = lm.enumeration_limit, 10
    try:
        with pytest.raises(ValueError, match="exceed the enumeration limit"):
            lm.log_marginal(x)
    finally:
        lm.enumeration_limit = limit
    with pytest.raises(ValueError, match="peek=false"):
        lm.proposal.sample(x, 2, peek=False)
    empty = estimate_document(lm, "", EstimatorSettings(estimator="is", num_samples=4))
    assert empty.num_tokens == 0 and empty.log_likelihood == 0.0


def test_the_proposal_and_beam_use_the_current_cache_api(lm):
    """transformers 5.x deprecates ``past_key_values`` with a FutureWarning on every forward call; the proposal and
    the beam pass their KV cache as ``cache=`` where the model names it so (``models.causal_lm.cache_step``)."""
    import warnings

    x = lm.tokenize("a dog,")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        lm.proposal.sample(x, 4, generator=torch.Generator().manual_seed(0))
        lm.proposal.beam(x, 2)
