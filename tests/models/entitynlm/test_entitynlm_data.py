"""EntityNLM data: the CoNLL-2012 JSONL reader (original fixture and crafted records) -> gold z, the synthetic
corpus, the trainer (a short run lowers validation perplexity and saves a loadable checkpoint) and the bundled
checkpoint (loads by name, small, finite IS estimates on its bundled test set)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_latent_eval.estimators import importance_log_weights, log_mean_exp
from lm_latent_eval.models import load_model
from lm_latent_eval.models.entitynlm import LATENT_KEYS, EntityNLM, build_vocabulary
from lm_latent_eval.models.entitynlm.conll import (
    document_from_record,
    gold_latents,
    read_coref_jsonl,
    write_coref_jsonl,
)
from lm_latent_eval.models.entitynlm.synthetic import SyntheticConfig, generate_corpus
from lm_latent_eval.models.entitynlm.train import TrainConfig, train_entitynlm
from lm_latent_eval.paths import DATA_DIR

FIXTURE = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model" / "conll2012.jsonl"


def test_gold_latents_encode_mentions_entities_and_remaining_lengths():
    record = {
        "tokens": ["@@START@@", "the", "old", "king", "saw", "anna", ".", "he", "smiled"],
        "clusters": {"7": [[1, 4], [7, 8]], "3": [[5, 6]]},
    }
    doc = document_from_record(record, "crafted")
    assert (
        doc.tokens[0] == "the" and len(doc.tokens) == 8
    )  # the leading @@START@@ is the encoder's start symbol
    z = gold_latents(doc)
    assert z["mention"].tolist() == [[1, 1, 1, 0, 1, 0, 1, 0]]
    assert z["entity"].tolist() == [
        [0, 0, 0, -1, 1, -1, 0, -1]
    ]  # numbered by first mention, not by cluster id
    assert z["length"].tolist() == [[3, 2, 1, 1, 1, 1, 1, 1]]
    assert doc.to_json()["clusters"] == {"0": [[0, 3], [6, 7]], "1": [[4, 5]]}


def test_nested_crossing_and_shared_spans_are_resolved_with_warnings():
    record = {
        "tokens": list("abcdefgh"),
        "clusters": {"x": [[0, 4]], "y": [[1, 2], [5, 7]], "z": [[6, 8]], "w": [[5, 7]]},
    }
    with pytest.warns(UserWarning) as caught:
        doc = document_from_record(record, "doc-7")
    messages = " ".join(str(w.message) for w in caught)
    assert "doc-7" in messages and "merged" in messages and "dropped 2" in messages
    assert doc.mentions == [(0, 4, 0), (5, 7, 1)]  # outer kept; the later of two crossing mentions dropped


@pytest.mark.parametrize(
    "record,match",
    [
        ({"tokens": ["a", "b"], "clusters": {"1": [[1, 3]]}}, "outside"),
        ({"tokens": ["a", "b"], "clusters": {"1": [[1]]}}, "not \\[start, end\\]"),
        ({"tokens": "a b", "clusters": {}}, "list of strings"),
    ],
)
def test_malformed_records_raise_naming_the_document(record, match):
    with pytest.raises(ValueError, match=f"doc-3.*{match}"):
        document_from_record(record, "doc-3")


@pytest.mark.skipif(
    not FIXTURE.is_file(), reason="../shared/fixtures/kglm-model/conll2012.jsonl not available"
)
def test_original_conll_fixture_reads_into_valid_gold_latents():
    """The original code base's CoNLL-2012 JSONL: every gold z is in the support of a model large enough for it."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        docs = list(read_coref_jsonl(FIXTURE))
    raw = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    assert len(docs) == len(raw) == 2
    for doc, rec in zip(docs, raw):
        assert len(doc.tokens) == len(rec["tokens"]) - 1  # leading @@START@@ removed
        starts = [s for s, _, _ in doc.mentions]
        assert starts == sorted(starts) and all(
            e1 <= s2 for (_, e1, _), (s2, _, _) in zip(doc.mentions, doc.mentions[1:])
        )
        firsts = {}
        for s, _, e in doc.mentions:
            firsts.setdefault(e, s)
        assert list(firsts) == list(range(doc.num_entities))  # entity ids follow first mention
        for (
            s,
            e,
            ent,
        ) in doc.mentions:  # each kept mention is a span of the original annotation, shifted by one
            assert any([s + 1, e + 1] in spans for spans in rec["clusters"].values())
    model = EntityNLM(
        build_vocabulary(d.tokens for d in docs),
        dim=8,
        hidden_size=8,
        num_layers=1,
        max_entities=max(d.num_entities for d in docs),
        max_mention_length=max(d.longest_mention for d in docs),
    ).eval()
    with torch.no_grad():
        for doc in docs:
            x, z = model.token_ids(doc.tokens), gold_latents(doc)
            assert torch.isfinite(model.log_joint(x, z)).all()
            assert torch.isfinite(model.proposal.log_prob(x, z, peek=False)).all()


def test_synthetic_corpus_is_deterministic_and_round_trips(tmp_path):
    a, b = (
        generate_corpus(SyntheticConfig(num_documents=12), seed=3),
        generate_corpus(SyntheticConfig(num_documents=12), seed=3),
    )
    assert [d.to_json() for d in a] == [d.to_json() for d in b]
    assert [d.to_json() for d in a] != [
        d.to_json() for d in generate_corpus(SyntheticConfig(num_documents=12), seed=4)
    ]
    write_coref_jsonl(a, tmp_path / "c.jsonl")
    back = list(read_coref_jsonl(tmp_path / "c.jsonl"))
    assert [d.mentions for d in back] == [d.mentions for d in a] and [d.tokens for d in back] == [
        d.tokens for d in a
    ]
    assert all(2 <= d.num_entities <= 4 and d.longest_mention <= 3 for d in a)


def test_trainer_lowers_validation_perplexity_and_saves_a_loadable_checkpoint(tmp_path):
    docs = generate_corpus(SyntheticConfig(num_documents=40), seed=1)
    config = TrainConfig(dim=12, hidden_size=16, num_layers=1, epochs=2, batch_size=8, valid_samples=4)
    model, history = train_entitynlm(docs[8:], docs[:8], config, tmp_path / "ckpt", progress=False)
    assert history[0]["epoch"] == 0 and history[-1]["final"]
    assert history[-1]["valid_joint_ppl"] < history[0]["valid_joint_ppl"]
    assert (
        math.isfinite(history[-1]["valid_is_ppl"])
        and history[-1]["valid_is_ppl"] <= history[-1]["valid_joint_ppl"] * 1.5
    )
    loaded = EntityNLM.from_pretrained(str(tmp_path / "ckpt")).eval()
    x = loaded.tokenize(docs[0].text())
    z = {k: v for k, v in gold_latents(docs[0]).items()}
    with torch.no_grad():
        assert torch.allclose(loaded.log_joint(x, z), model.log_joint(x, z))
    assert json.loads((tmp_path / "ckpt" / "training.json").read_text())["config"]["epochs"] == 2


def test_trainer_rejects_documents_beyond_the_model_limits():
    docs = generate_corpus(SyntheticConfig(num_documents=4), seed=0)
    with pytest.raises(ValueError, match="train document .* entities > max_entities=1"):
        train_entitynlm(
            docs,
            [],
            TrainConfig(dim=4, hidden_size=4, num_layers=1, max_entities=1, epochs=1),
            progress=False,
        )


@pytest.mark.skipif(
    not (DATA_DIR / "entitynlm" / "config.json").is_file(), reason="bundled checkpoint not built"
)
def test_bundled_checkpoint_loads_and_estimates():
    model, path = load_model("lm_latent_eval.models.entitynlm:EntityNLM", DATA_DIR / "entitynlm")
    size = sum(f.stat().st_size for f in Path(path).iterdir())
    assert size < 1_000_000
    docs = list(read_coref_jsonl(DATA_DIR / "coref_tiny" / "test.jsonl"))
    doc = docs[0]
    x = model.tokenize(doc.text())
    assert (x != model.unk_id).all()
    lw = importance_log_weights(model, x, num_samples=64, seed=0, document=doc.text())
    with torch.no_grad():
        gold = float(model.log_joint(x, gold_latents(doc))[0])
        assert np.isfinite(lw).all() and log_mean_exp(lw) >= gold  # p̂(x) sums over z; gold z is one term
        assert (
            model.proposal.log_prob(x, gold_latents(doc)).exp().item() > 1e-3
        )  # q has learned the annotation
    assert set(LATENT_KEYS) == set(model.proposal.beam(x, 4))


@pytest.mark.skipif(
    not (DATA_DIR / "entitynlm" / "config.json").is_file(), reason="bundled checkpoint not built"
)
def test_generic_lm_eval_backend_runs_the_bundled_model():
    """``--model latent --model_args model=lm_latent_eval.models.entitynlm:EntityNLM`` (and ``--model
    latent_entitynlm``, which must give the same numbers): rolling and conditional
    log-likelihoods are finite, and the beam estimator is a lower bound on what IS reports for a whole text."""
    from lm_eval.api.instance import Instance

    from lm_latent_eval.harness.backends import LatentEntityNLMEval, LatentLMEval

    docs = [d.text() for d in read_coref_jsonl(DATA_DIR / "coref_tiny" / "test.jsonl")][:2]
    spec = {
        "model": "lm_latent_eval.models.entitynlm:EntityNLM",
        "pretrained": str(DATA_DIR / "entitynlm"),
        "device": "cpu",
    }
    lm = LatentLMEval(estimator="is", **spec, num_samples=32, batch_size="64")
    rolling = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (t,), 0) for t in docs], disable_tqdm=True
    )
    (cond,) = lm.loglikelihood([Instance("loglikelihood", {}, ("anna saw", " bob ."), 0)], disable_tqdm=True)
    assert all(math.isfinite(v) and v < 0 for v in rolling) and math.isfinite(cond[0]) and cond[0] < 0
    beam = LatentLMEval(**spec, estimator="beam", beam_size=4)
    low = beam.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (docs[0],), 0)], disable_tqdm=True
    )
    assert low[0] <= rolling[0] + 0.5  # beam ≤ log p; IS is within noise of log p for this well-fit q
    named = LatentEntityNLMEval(
        estimator="is", num_samples=32, batch_size="64", device="cpu"
    )  # --model latent_entitynlm
    assert (
        named.loglikelihood_rolling(
            [Instance("loglikelihood_rolling", {}, (t,), 0) for t in docs], disable_tqdm=True
        )
        == rolling
    )


def test_padded_training_batches_score_like_single_documents():
    """batch_log_probs on documents of different lengths (padded, masked) equals log p / log q of each alone."""
    from lm_latent_eval.models.entitynlm.train import batch_log_probs, prepare

    docs = generate_corpus(SyntheticConfig(num_documents=3), seed=5)
    torch.manual_seed(0)
    model = EntityNLM(
        build_vocabulary(d.tokens for d in docs),
        dim=8,
        hidden_size=8,
        num_layers=2,
        max_entities=4,
        max_mention_length=3,
    ).eval()
    data = prepare(docs, model, "test")
    assert len({x.numel() for _, x, _ in data}) == 3
    with torch.no_grad():
        log_p, q_peek, q_nopeek, n = batch_log_probs(model, data)
        assert n == sum(x.numel() for _, x, _ in data)
        for i, (_, x, z) in enumerate(data):
            assert float(log_p[i]) == pytest.approx(float(model.log_joint(x, z)[0]), abs=1e-4)
            assert float(q_peek[i]) == pytest.approx(
                float(model.proposal.log_prob(x, z, peek=True)[0]), abs=1e-4
            )
            assert float(q_nopeek[i]) == pytest.approx(
                float(model.proposal.log_prob(x, z, peek=False)[0]), abs=1e-4
            )
