"""Documents advanced side by side in one particle filter (``protocol.DocumentBatchLM``, ``smc.smc_lanes``): a
document's SMC estimate does not depend on which documents share its steps, its length, its sample size or how the
documents are chunked (bit for bit on the HMM, the KGLM, the RNNG, LDA and the bundled masked LM, whose network rows do
not depend on their batch on the CPU; to float32 rounding on EntityNLM's one-row-per-particle layout, whose products
run on a batch of other rows, on the tokenization LM, whose network runs the new nodes of several documents in one
forward pass, and on a Hugging Face masked LM)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lm_latent_eval import tensors
from lm_latent_eval.estimators import EstimatorSettings, importance, smc
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.smc import Lane, smc_lanes
from lm_latent_eval.models import default_checkpoint, load_model
from lm_latent_eval.models.corpora import bundled_documents, read_documents
from lm_latent_eval.paths import DATA_DIR
from lm_latent_eval.protocol import has


@pytest.fixture(scope="module")
def kglm():
    return load_model("kglm")[0]


def alone(run, texts, sizes):
    return {t: run.sized(k).estimate(t) for t, k in zip(texts, sizes)}


def assert_same(together: dict, separately: dict, atol: float = 0.0) -> None:
    for text, e in separately.items():
        got = together[text]
        assert got.num_samples == e.num_samples and got.diagnostics.run_sizes == e.diagnostics.run_sizes
        if atol == 0.0:
            assert np.array_equal(got.log_weights, e.log_weights), text[:40]
            assert got.diagnostics.ess_min == e.diagnostics.ess_min
        else:
            np.testing.assert_allclose(got.log_weights, e.log_weights, rtol=0, atol=atol)


@pytest.mark.parametrize("budget", [40, 700, 1 << 20])
def test_hmm_documents_side_by_side_equal_each_alone(bundled_hmm, bundled_test_texts, monkeypatch, budget):
    """Chunks of 1, a few and all documents, each document with its own K (one above the sample block: several
    lanes of one document), give every document the weights and diagnostics it gets alone, bit for bit."""
    texts = bundled_test_texts[:9]
    sizes = [40, 64, 1500, 40, 97, 40, 64, 40, 200]
    run = resolve(EstimatorSettings("smc", 40, seed=3, target_se=None), bundled_hmm)
    assert has(bundled_hmm, "document_batches") and run.estimator.batches_documents(bundled_hmm)
    monkeypatch.setattr(smc, "side_by_side_particles", lambda device="cpu", length=None: budget)
    together = dict(zip(texts, run.estimate_documents(texts, sizes)))
    assert_same(together, alone(run, texts, sizes))


def test_kglm_corpus_side_by_side_equals_each_document_alone(kglm):
    """The bundled KGLM's test documents (lengths 20 to 140 tokens) through ``estimate_corpus``, which hands them
    to one step as chunks of similar length, against each alone: bit for bit, peeking and not, τ = 1 and 2."""
    texts = list(dict.fromkeys(bundled_documents("kglm")))[:10]
    for peek, tau in ((True, 1.0), (False, 2.0)):
        run = resolve(EstimatorSettings("smc", 300, temperature=tau, peek=peek, seed=7, target_se=None), kglm)
        assert_same(estimate_corpus(run, texts, progress=False), alone(run, texts, [300] * len(texts)))


@pytest.mark.parametrize("row_table", [False, True], ids=["lane-or-product", "row-table"])
def test_kglm_side_by_side_on_the_accelerator_paths(kglm, monkeypatch, row_table):
    """With the accelerator's code paths (every particle through the parent and edge heads, masked), the same; also
    with the parent logits of a large graph's [T, rows] tables, each document's own stacked."""
    from lm_latent_eval.models.kglm import latents

    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    if row_table:
        monkeypatch.setattr(latents, "_ROW_TABLE_MIN_SLOT_ROWS", 0)
        kglm = load_model("kglm")[0]
    texts = list(dict.fromkeys(bundled_documents("kglm")))[:6]
    run = resolve(EstimatorSettings("smc", 200, seed=2, target_se=None), kglm)
    assert_same(estimate_corpus(run, texts, progress=False), alone(run, texts, [200] * len(texts)))
    assert kglm.head_tables(kglm.tokenize(texts[0])).row_table == row_table


def test_entitynlm_side_by_side_on_the_accelerator_layout(monkeypatch):
    """EntityNLM batches documents in its one-row-per-particle layout (an accelerator's): each document's weights
    equal its own to float32 rounding (its heads' products run on other rows beside it); on the CPU's
    distinct-history layout it runs documents one at a time (``smc_init_documents`` declines)."""
    model = load_model("entitynlm")[0]
    texts = list(dict.fromkeys(bundled_documents("entitynlm")))[:5]
    xs = [model.tokenize(t) for t in texts]
    assert model.smc_init_documents(xs, [8] * len(xs)) is None
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    assert model.smc_init_documents(xs, [8] * len(xs)) is not None
    run = resolve(EstimatorSettings("smc", 200, seed=4, target_se=None), model)
    assert_same(estimate_corpus(run, texts, progress=False), alone(run, texts, [200] * len(texts)), atol=1e-4)


@pytest.mark.parametrize(
    ("count_eos", "peek", "tau"),
    [(True, True, 1.0), (True, False, 2.0), (False, True, 0.7), (False, False, 1.0)],
)
def test_rnng_side_by_side_on_the_accelerator_layout(monkeypatch, count_eos, peek, tau):
    """The RNNG batches sentences in its one-row-per-particle layout (an accelerator's), sentences of 4 to 12 words
    side by side, each with its own K (several lanes of one sentence among them), in chunks: every sentence's
    weights and diagnostics equal its own alone, bit for bit, peeking and not, with </s> counted and not (the
    sentences that end earlier close while the others draw); on the CPU's distinct-history layout it declines."""
    model = load_model("rnng")[0]
    monkeypatch.setattr(model, "count_eos", count_eos)
    texts = list(dict.fromkeys(bundled_documents("rnng")))[:8]
    xs = [model.tokenize(t) for t in texts]
    assert model.smc_init_documents(xs, [8] * len(xs)) is None
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    assert model.smc_init_documents(xs, [8] * len(xs)) is not None
    monkeypatch.setattr(smc, "side_by_side_particles", lambda device="cpu", length=None: 400)
    sizes = [40, 64, 300, 40, 97, 40, 64, 41]
    run = resolve(EstimatorSettings("smc", 40, temperature=tau, peek=peek, seed=3, target_se=None), model)
    assert run.estimator.batches_documents(model)
    together = dict(zip(texts, run.estimate_documents(texts, sizes)))
    assert_same(together, alone(run, texts, sizes))


def test_rnng_side_by_side_checks_the_sentences(monkeypatch):
    """Inner </s> or <s> and ids outside the vocabulary: the errors of ``smc_init``."""
    model = load_model("rnng")[0]
    monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    x = model.tokenize("the cat sat")
    inner = torch.cat([x[:1], x.new_tensor([model.eos_id]), x])
    with pytest.raises(ValueError, match="inside the sentence"):
        model.smc_init_documents([x, inner], [4, 4])
    with pytest.raises(ValueError, match="outside"):
        model.smc_init_documents([x, x.new_tensor([len(model.vocab)])], [4, 4])


def test_a_model_that_declines_runs_its_documents_one_at_a_time(bundled_hmm, bundled_test_texts, monkeypatch):
    """``smc_init_documents`` returning None: every lane alone, the same runs."""
    texts = bundled_test_texts[:3]
    lanes = [
        Lane(bundled_hmm.tokenize(t), [16, 16], torch.Generator().manual_seed(i), t)
        for i, t in enumerate(texts)
    ]
    settings = EstimatorSettings("smc", 32)
    together = smc_lanes(bundled_hmm, lanes, settings)
    for lane in lanes:
        lane.generator.manual_seed(texts.index(lane.doc))
    monkeypatch.setattr(type(bundled_hmm), "smc_init_documents", lambda self, *a, **k: None)
    declined = smc_lanes(bundled_hmm, lanes, settings)
    assert [[r.log_likelihood for r in runs] for runs in together] == [
        [r.log_likelihood for r in runs] for runs in declined
    ]


@pytest.mark.parametrize("peek", [True, False])
def test_kglm_importance_sampling_draws_documents_side_by_side(kglm, monkeypatch, peek):
    """IS on the KGLM: the proposal draws a chunk's sample blocks side by side (``sample_documents``), several
    blocks per document among them; every document's log weights, unknown-word penalties and distinct draws equal
    its own alone, bit for bit."""
    monkeypatch.setattr(importance, "side_by_side_particles", lambda device="cpu": 2500)
    texts = list(dict.fromkeys(bundled_documents("kglm")))[:6]
    sizes = [300, 1100, 300, 2100, 64, 300]
    run = resolve(EstimatorSettings("is", 300, peek=peek, seed=5, target_se=None), kglm)
    assert run.estimator.batches_documents(kglm)
    together = dict(zip(texts, run.estimate_documents(texts, sizes)))
    for text, e in alone(run, texts, sizes).items():
        got = together[text]
        assert np.array_equal(got.log_weights, e.log_weights), text[:40]
        assert (got.unk_penalty is None and e.unk_penalty is None) or np.array_equal(
            got.unk_penalty, e.unk_penalty
        )
        assert got.distinct_draws == e.distinct_draws


def test_importance_sampling_falls_back_where_the_proposal_declines(kglm, monkeypatch):
    texts = list(dict.fromkeys(bundled_documents("kglm")))[:3]
    run = resolve(EstimatorSettings("is", 50, seed=6, target_se=None), kglm)
    expected = alone(run, texts, [50] * 3)
    monkeypatch.setattr(type(kglm.proposal), "sample_documents", lambda self, *a, **k: None)
    for text, e in zip(texts, run.estimate_documents(texts)):
        assert np.array_equal(e.log_weights, expected[text].log_weights)


def test_a_subclass_that_changes_the_step_is_not_batched_with_its_parents_numbers(
    bundled_hmm, bundled_test_texts
):
    """A model that overrides ``smc_step`` but inherits its parent's side-by-side methods would be stepped with the
    parent's numbers side by side: it runs its documents one at a time instead (and likewise a proposal that
    overrides ``_sample`` but inherits ``sample_documents``)."""
    from lm_latent_eval.models.hmm.model import HMMLanguageModel

    class Tilted(HMMLanguageModel):
        def smc_step(self, state, t, generator=None):
            state, inc = super().smc_step(state, t, generator)
            return state, inc - 0.5

    tilted = Tilted.from_pretrained(str(default_checkpoint("hmm"))).eval()
    assert has(bundled_hmm, "document_batches") and not has(tilted, "document_batches")
    texts = bundled_test_texts[:4]
    run = resolve(EstimatorSettings("smc", 32, seed=1, target_se=None), tilted)
    together = estimate_corpus(run, texts, progress=False)
    for text in texts:
        own = run.estimate(text)
        assert np.array_equal(together[text].log_weights, own.log_weights)
        tokens = bundled_hmm.tokenize(text).numel()
        base = resolve(EstimatorSettings("smc", 32, seed=1, target_se=None), bundled_hmm).estimate(text)
        assert own.log_likelihood == pytest.approx(base.log_likelihood - 0.5 * tokens, abs=1e-9)
    kglm_model = load_model("kglm")[0]

    class Other(type(kglm_model.proposal)):
        def _sample(self, *args, **kwargs):
            return super()._sample(*args, **kwargs)

    assert has(kglm_model, "document_sampler")
    original = type(kglm_model.proposal)
    kglm_model.proposal.__class__ = Other
    try:
        assert not has(kglm_model, "document_sampler")
    finally:
        kglm_model.proposal.__class__ = original


def test_tokenization_corpus_side_by_side_equals_each_document_alone():
    """The bundled tokenization LM's test documents side by side (one node table, the new nodes of every text in
    shared forward passes) against each alone: the same draws, the weights equal to the float32 rounding of the
    network's products over a larger batch; τ = 1 and 1.5, and with a context of L = 8 tokens (lm-eval's last window
    corrects the segmentations longer than L at each text's own last step)."""
    from lm_latent_eval.models.tokenization import TokenizationLM

    model = load_model("tokenization")[0]
    texts = list(dict.fromkeys(read_documents(DATA_DIR / "corpus/tiny_test.jsonl")))[:8]
    assert has(model, "document_batches")
    for tau in (1.0, 1.5):
        run = resolve(EstimatorSettings("smc", 64, temperature=tau, seed=3, target_se=None), model)
        assert_same(
            estimate_corpus(run, texts, progress=False), alone(run, texts, [64] * len(texts)), atol=1e-4
        )
    short = TokenizationLM(model.model, model.tokenizer, max_length=8).eval()
    run = resolve(EstimatorSettings("smc", 32, seed=5, target_se=None), short)
    assert_same(estimate_corpus(run, texts[:4], progress=False), alone(run, texts[:4], [32] * 4), atol=1e-4)


@pytest.mark.parametrize("lookahead", ["cvb0", "none"])
def test_lda_corpus_side_by_side_equals_each_document_alone(monkeypatch, lookahead):
    """The bundled LDA's test documents side by side against each alone, bit for bit: the lookahead's twist (its
    sums are running sums, unchanged by the zeros that pad a shorter text's row), τ = 1 and 2, and the urn proposal
    without peeking, and documents of several sample blocks; where the padded base tables would be too large, the
    texts run one at a time."""
    from lm_latent_eval.models.lda import stepwise as lda_stepwise

    model = load_model("lda")[0]
    monkeypatch.setattr(model, "lookahead", lookahead)
    texts = list(dict.fromkeys(read_documents(DATA_DIR / "pydoc_topics/test.jsonl")))[:10]
    for peek, tau in ((True, 1.0), (True, 2.0), (False, 1.0)):
        run = resolve(
            EstimatorSettings("smc", 200, temperature=tau, peek=peek, seed=8, target_se=None), model
        )
        assert_same(estimate_corpus(run, texts, progress=False), alone(run, texts, [200] * len(texts)))
    # several sample blocks of one document (one tensor: its tables built once, shared by its blocks)
    run = resolve(EstimatorSettings("smc", 200, seed=9, target_se=None), model)
    sizes = [200, 1500, 64, 1100, 200]
    assert_same(dict(zip(texts, run.estimate_documents(texts[:5], sizes))), alone(run, texts[:5], sizes))
    xs = [model.tokenize(t) for t in texts]
    monkeypatch.setattr(lda_stepwise, "SIDE_BY_SIDE_BASE_ENTRIES", 10)
    assert (model.smc_init_documents(xs, [4] * len(xs)) is None) == (lookahead == "cvb0")


def masked_texts(model, per_length: int = 2) -> list[str]:
    """Held-out sentences of the bundled masked LM (``masked/corpus.py``), up to ``per_length`` of each length."""
    from lm_latent_eval.models.masked.corpus import TEST_FILE

    seen: dict[int, int] = {}
    texts = []
    for text in dict.fromkeys(read_documents(TEST_FILE)):
        n = model.tokenize(text).numel()
        if seen.get(n, 0) < per_length:
            seen[n] = seen.get(n, 0) + 1
            texts.append(text)
    return texts


@pytest.fixture(scope="module")
def masked():
    return load_model("masked")[0]


def forward_calls(model):
    """A counter of the network's forward calls (a list of one int) and the hook's handle."""
    calls = [0]
    handle = model.predictor.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls, handle


def test_masked_network_rows_do_not_depend_on_their_batch(masked):
    """The bundled network on the CPU: a state's row run among the states of other texts of its length, in one call,
    is bit for bit the row run alone (what makes side by side, and the row cache, change no number)."""
    from lm_latent_eval.models.masked.conditionals import scored_rows

    texts = [t for t in masked_texts(masked, 4) if masked.tokenize(t).numel() == 7]
    xs = torch.stack([masked.tokenize(t) for t in texts])
    generator = torch.Generator().manual_seed(0)
    revealed = torch.rand(len(texts), 5, 7, generator=generator) < 0.5
    with torch.no_grad():  # the estimators' mode (the encoder's fast path)
        token, conf = scored_rows(masked, xs.repeat_interleave(5, 0), revealed.reshape(-1, 7))
        for d in range(len(texts)):
            for k in range(5):
                alone_token, alone_conf = scored_rows(masked, xs[d], revealed[d, k : k + 1])
                assert torch.equal(token[5 * d + k], alone_token[0])
                assert torch.equal(conf[5 * d + k], alone_conf[0])


def test_the_bundled_network_pads_a_call_of_few_rows_on_the_cpu():
    """A call of 1 to 16 texts of 5 tokens gives each text the logits it has in a call of 200: below a dozen rows the
    CPU's matrix product sums another way, so the network pads such calls (``CPU_MIN_POSITIONS``)."""
    from lm_latent_eval.models.masked.network import MaskPredictor

    net = MaskPredictor(vocab_size=20).eval()
    ids = torch.randint(0, 20, (200, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        together = net(ids)
        for B in range(1, 17):
            assert torch.equal(net(ids[:B]), together[:B]), B


@pytest.mark.parametrize(
    ("peek", "tau", "threshold", "cached"),
    [(False, 1.0, 0.0, True), (True, 1.0, 0.5, True), (False, 2.0, 0.5, False), (True, 0.7, 0.0, True)],
)
def test_masked_corpus_side_by_side_equals_each_document_alone(
    masked, monkeypatch, peek, tau, threshold, cached
):
    """The bundled masked LM's held-out sentences (2 to 13 words, two of each length) side by side against each
    alone, bit for bit: the model's defaults (uniform orders, no resampling), peeking with resampling, τ = 2 and 0.7,
    with the row cache and without it; the texts of one length share the network's forward calls (fewer calls,
    the same rows run)."""
    if not cached:
        monkeypatch.setattr(masked.row_cache, "max_entries", 0)
    texts = masked_texts(masked)
    assert has(masked, "document_batches") and len({masked.tokenize(t).numel() for t in texts}) > 5
    settings = EstimatorSettings(
        "smc", 48, temperature=tau, peek=peek, resample_threshold=threshold, seed=9, target_se=None
    )
    run = resolve(settings, masked)
    calls, handle = forward_calls(masked)
    try:
        figures = {}
        for label, estimate in (
            ("together", lambda: estimate_corpus(run, texts, progress=False)),
            ("alone", lambda: alone(run, texts, [48] * len(texts))),
        ):
            masked.row_cache.clear()
            calls[0], rows = 0, masked.network_rows
            figures[label] = (estimate(), calls[0], masked.network_rows - rows)
    finally:
        handle.remove()
    assert_same(figures["together"][0], figures["alone"][0])
    assert figures["together"][2] == figures["alone"][2]
    assert figures["together"][1] < figures["alone"][1] / 1.5


def test_masked_side_by_side_reads_the_row_cache_and_chunks_freely(masked, monkeypatch):
    """Rows an earlier run kept are read back under each text's own key (no forward call at all), and chunks of a
    few documents with their own K (several sample blocks of one sentence among them) give the same weights."""
    texts = masked_texts(masked)[:10]
    run = resolve(EstimatorSettings("smc", 40, peek=False, seed=2, target_se=None), masked)
    sizes = [40, 64, 1100, 40, 97, 40, 64, 41, 40, 50]
    masked.row_cache.clear()
    expected = alone(run, texts, sizes)
    calls, handle = forward_calls(masked)
    read = masked.row_cache.rows_read
    try:
        for budget in (90, 1 << 20):
            monkeypatch.setattr(smc, "side_by_side_particles", lambda device="cpu", length=None, b=budget: b)
            assert_same(dict(zip(texts, run.estimate_documents(texts, sizes))), expected)
    finally:
        handle.remove()
    assert calls[0] == 0 and masked.row_cache.rows_read > read


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_masked_sample_blocks_of_one_text_share_its_rows(masked, threshold):
    """Two lanes (sample blocks) of one text beside another text of the same length: each (text, S) runs once and
    is kept once under the text's key, every kept row is the network's row for its state, and every lane's runs
    equal its own alone."""
    from lm_latent_eval.models.masked.conditionals import scored_rows

    x, y = [t for t in (masked.tokenize(t) for t in masked_texts(masked, 3)) if t.numel() == 7][:2]
    settings = EstimatorSettings("smc", 100, peek=False, resample_threshold=threshold)

    def lanes():
        return [
            Lane(t, [k], torch.Generator().manual_seed(i))
            for i, (t, k) in enumerate(zip((x, y, x), (64, 20, 16)))
        ]

    masked.row_cache.clear()
    together = smc_lanes(masked, lanes(), settings)
    for text in (x, y):
        cached = masked.row_cache.texts[masked.row_cache.key(masked, text, False)]
        states = torch.tensor(
            np.unpackbits(
                np.frombuffer(b"".join(cached.index), dtype=np.uint8).reshape(len(cached.index), -1), 1
            )[:, : text.numel()]
        ).bool()
        with torch.no_grad():  # the estimators' mode (the encoder's fast path)
            token, conf = scored_rows(masked, text, states)
        rows = cached.table[list(cached.index.values())]
        assert torch.equal(rows[:, 0], token) and torch.equal(rows[:, 1], conf)
    masked.row_cache.clear()
    for lane, runs in zip(lanes(), together):
        assert np.array_equal(smc_lanes(masked, [lane], settings)[0][0].log_weights, runs[0].log_weights)


def test_masked_texts_read_in_windows_run_one_at_a_time(masked, monkeypatch):
    """A text longer than the network reads (windows) is not batched: ``smc_init_documents`` declines, and a batch
    state is no single text's particles."""
    texts = masked_texts(masked)
    xs = [masked.tokenize(t) for t in texts]
    state = masked.smc_init_documents(xs, [4] * len(xs))
    assert state is not None
    with pytest.raises(TypeError, match="side-by-side"):
        masked.smc_latents(state)
    monkeypatch.setattr(masked, "max_length", 8)
    masked.notices_given.discard("windows")
    with pytest.warns(UserWarning, match="windows"):
        state = masked.smc_init_documents(xs, [4] * len(xs))
    assert state is None


def test_hugging_face_masked_lm_side_by_side_equals_each_alone(tmp_path, monkeypatch):
    """A Hugging Face masked LM inherits the side-by-side part (``"document_batches"``) and each text's weights
    equal its own alone (to float32 rounding: its rows are run among other texts' rows)."""
    from tiny_models import make_tiny_bert

    from lm_latent_eval.models.masked.hf import HFMaskedLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = HFMaskedLM.from_pretrained(str(make_tiny_bert(tmp_path / "bert"))).eval()
    assert has(model, "document_batches")
    texts = ["the cat sat", "a dog ran", "the dog sat on a cat", "a cat ran", "the cat"]
    for peek in (False, True):
        run = resolve(EstimatorSettings("smc", 32, peek=peek, seed=4, target_se=None), model)
        model.row_cache.clear()
        together = estimate_corpus(run, texts, progress=False)
        model.row_cache.clear()
        assert_same(together, alone(run, texts, [32] * len(texts)), atol=1e-5)


@pytest.mark.parametrize(
    ("policy", "policy_temperature", "dtype"),
    [
        ("confidence", 0.5, torch.float64),
        ("block_margin", 1.0, torch.float32),
        ("uniform", 1.0, torch.float32),
    ],
)
def test_masked_order_policies_side_by_side_equal_each_alone(policy, policy_temperature, dtype):
    """Tiny masked LMs under a confidence policy, a deterministic block policy and the uniform one in float32: texts
    of 2 to 8 tokens side by side equal each alone, peeking and not, to the rounding of the network's dtype (this
    small network's rows, unlike the bundled one's, depend on how many rows share its call, alone as well)."""
    from lm_latent_eval.models.masked import tiny_masked_lm

    model = tiny_masked_lm(seed=1, policy=policy, policy_temperature=policy_temperature, dtype=dtype)
    model.policy_block = 3
    texts = ["a b", "b a", "c d a", "a a b c", "d c b a", "b c d a b", "a b c d a b c", "d d c c b b a a"]
    for peek in (False, True):
        run = resolve(EstimatorSettings("smc", 24, peek=peek, seed=6, target_se=None), model)
        model.row_cache.clear()
        together = estimate_corpus(run, texts, progress=False)
        model.row_cache.clear()
        assert_same(
            together, alone(run, texts, [24] * len(texts)), atol=1e-9 if dtype == torch.float64 else 1e-4
        )
