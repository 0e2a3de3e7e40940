"""KGLM generative model and proposal: contract, support, exact log q, shared encoder, checkpoints, archive shapes."""

from __future__ import annotations

import itertools
import json
import math
import tarfile
from pathlib import Path

import pytest
import torch
from kglm_tiny import tiny_graph, tiny_kglm

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.kglm import KGLM, KnowledgeGraph
from lm_latent_eval.models.kglm.latents import CONTINUING, NEW, NONE, RELATED
from lm_latent_eval.protocol import Proposal, has

ARCHIVE = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model" / "kglm.model.tar.gz"
TEXT = "Ada Lovelace born London"


@pytest.fixture(scope="module")
def model():
    return tiny_kglm()


def z_of(types, ents, pars):
    z = {
        "mention_type": torch.tensor([types]),
        "entity": torch.tensor([ents]),
        "parent": torch.tensor([pars]),
    }
    z["relation"] = torch.full_like(z["entity"], -1)
    return z


def test_contract_and_tokenizer(model):
    assert has(model, "latent_lm") and isinstance(model.proposal, Proposal)
    assert model.tokenize("").shape == (0,)
    assert model.tokenize("   ").shape == (0,)
    x = model.tokenize("Ada zebra Lovelace")
    assert x[0] == model.word_to_id["Ada"]
    assert x[1] == model.unk_id  # unknown everywhere
    assert x[2] >= len(model.vocab)  # out of vocabulary but copyable from an alias
    assert model.detokenize(model.tokenize("Ada Lovelace")) == "Ada Lovelace"
    assert (
        model.log_joint(
            model.tokenize(""),
            z_of([], [], [])[0:0]
            if False
            else {
                k: torch.zeros(3, 0, dtype=torch.long)
                for k in ("mention_type", "entity", "parent", "relation")
            },
        ).tolist()
        == [0.0] * 3
    )


def test_graph_json_round_trip(tmp_path):
    kg = tiny_graph()
    kg.to_json(tmp_path / "kg.json")
    back = KnowledgeGraph.from_json(tmp_path / "kg.json")
    assert back.to_dict() == kg.to_dict()
    assert back.out_edges(back.entity_id("Q1")) == [(0, 1), (1, 1), (2, 2)]
    with pytest.raises(ValueError):
        KnowledgeGraph(["a"], [], {0: [(0, 0)]})  # unknown relation id


def test_impossible_configurations_have_zero_probability(model):
    x = model.tokenize(TEXT)
    q1, q2, q3 = (model.graph.entity_id(n) for n in ("Q1", "Q2", "Q3"))
    good = z_of([NEW, CONTINUING, NONE, RELATED], [q1, q1, -1, q2], [-1, -1, -1, q1])
    assert torch.isfinite(model.log_joint(x, good)).all()
    bad = [
        z_of(
            [CONTINUING, NONE, NONE, NONE], [q1, -1, -1, -1], [-1, -1, -1, -1]
        ),  # continuing with no mention before
        z_of(
            [NEW, CONTINUING, NONE, NONE], [q1, q2, -1, -1], [-1, -1, -1, -1]
        ),  # continuation switches entity
        z_of([RELATED, NONE, NONE, NONE], [q2, -1, -1, -1], [q1, -1, -1, -1]),  # parent never mentioned
        z_of(
            [NEW, NONE, NONE, RELATED], [q1, -1, -1, q2], [-1, -1, -1, q1]
        ),  # parent outside the cutoff (2) window
        z_of([NEW, RELATED, NONE, NONE], [q2, q3, -1, -1], [-1, q2, -1, -1]),  # parent without edges
        z_of([NEW, RELATED, NONE, NONE], [q1, q1, -1, -1], [-1, q1, -1, -1]),  # no edge Q1 -> Q1
        z_of([NONE, NONE, NONE, NONE], [q1, -1, -1, -1], [-1, -1, -1, -1]),  # entity on a non-mention
    ]
    for z in bad:
        assert model.log_joint(x, z).item() == -math.inf
        assert model.proposal.log_prob(x, z).item() == -math.inf
    with pytest.raises(ValueError):
        model.log_joint(x, z_of([5, 0, 0, 0], [-1] * 4, [-1] * 4))
    with pytest.raises(ValueError):
        model.log_joint(x, z_of([0, 0, 0], [-1] * 3, [-1] * 3))  # wrong length


def test_relation_label_does_not_change_probability(model):
    """p sums over every edge parent -> entity: Q1 -born_in-> Q2 and Q1 -lives_in-> Q2 give one configuration."""
    x = model.tokenize(TEXT)
    q1, q2 = model.graph.entity_id("Q1"), model.graph.entity_id("Q2")
    z = z_of([NEW, CONTINUING, RELATED, NONE], [q1, q1, q2, -1], [-1, -1, q1, -1])
    a = model.log_joint(x, z)
    z["relation"][0, 2] = model.graph.relation_id("lives_in")
    assert model.log_joint(x, z).item() == a.item()


@pytest.mark.parametrize("peek", [True, False])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_samples_have_positive_probability_and_exact_log_q(model, peek, temperature):
    x = model.tokenize(TEXT)
    gen = torch.Generator().manual_seed(7)
    z, log_q = model.proposal.sample(x, 400, temperature, peek, gen)
    assert set(z) == {"mention_type", "entity", "parent", "relation"} and z["entity"].shape == (400, 4)
    assert torch.isfinite(log_q).all() and torch.isfinite(model.log_joint(x, z)).all()
    rescored = model.proposal.log_prob(x, z, temperature, peek)
    assert torch.allclose(rescored, log_q, atol=1e-5, rtol=0)
    assert (z["mention_type"] == RELATED).any() and (z["mention_type"] == NEW).any()
    related = z["mention_type"] == RELATED
    assert (z["relation"][related] >= 0).all() and (z["relation"][~related & (z["parent"] < 0)] == -1).all()


def test_sampling_is_reproducible_and_temperature_changes_q(model):
    x = model.tokenize(TEXT)
    a = model.proposal.sample(x, 50, 1.0, True, torch.Generator().manual_seed(3))
    b = model.proposal.sample(x, 50, 1.0, True, torch.Generator().manual_seed(3))
    assert all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and torch.equal(a[1], b[1])
    assert not torch.allclose(model.proposal.log_prob(x, a[0], 2.0), a[1])
    assert not torch.allclose(model.proposal.log_prob(x, a[0], 1.0, peek=False), a[1])


def test_shared_encoder_equals_per_particle_computation(model):
    """The token LSTM is run once per document; scoring particles one by one (cache cleared) gives the same numbers."""
    x = model.tokenize(TEXT)
    z, _ = model.proposal.sample(x, 64, 1.0, True, torch.Generator().manual_seed(0))
    with torch.no_grad():
        batched = model.log_joint(x, z)
        single = []
        for k in range(64):
            model.eval()  # clears the document cache: the encoder runs again for this particle
            single.append(model.log_joint(x, {key: v[k : k + 1] for key, v in z.items()}))
    # equal up to float32 rounding (batched matrix products round differently from single rows)
    assert torch.allclose(batched, torch.cat(single), atol=1e-5, rtol=0)


def test_state_carries_across_chunks():
    """Encoding in chunks of 2 tokens carries (h, c): the same numbers as one pass over the whole document."""
    a, b = tiny_kglm(), tiny_kglm()
    b.chunk_size = 1000
    x = a.tokenize("Ada was born in the city London")
    with torch.no_grad():
        assert torch.allclose(a.encode(x), b.encode(x), atol=1e-6)


def test_log_joint_is_differentiable_for_training(model):
    model.train()
    try:
        x = model.tokenize(TEXT)
        q1 = model.graph.entity_id("Q1")
        z = z_of([NEW, CONTINUING, NONE, NONE], [q1, q1, -1, -1], [-1, -1, -1, -1])
        loss = -(model.log_joint(x, z).sum() + model.proposal.log_prob(x, z).sum())
        loss.backward()
        assert (
            model.alias_encoder.weight_ih_l0.grad is not None
            and model.proposal.mention_type.weight.grad is not None
        )
    finally:
        model.zero_grad()
        model.eval()


def test_save_load_round_trip(tmp_path, model):
    model.save_pretrained(tmp_path / "ckpt")
    files = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"config.json", "model.safetensors", "knowledge_graph.json"} <= files
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert "knowledge_graph" not in config and config["cutoff"] == 2 and config["vocab"] == model.vocab
    loaded = KGLM.from_pretrained(tmp_path / "ckpt")
    x = model.tokenize(TEXT)
    z, log_q = model.proposal.sample(x, 30, 1.3, False, torch.Generator().manual_seed(5))
    z2, log_q2 = loaded.proposal.sample(x, 30, 1.3, False, torch.Generator().manual_seed(5))
    assert all(torch.equal(z[k], z2[k]) for k in z) and torch.equal(log_q, log_q2)
    assert torch.equal(model.log_joint(x, z), loaded.log_joint(x, z))
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    # the graph may also be given by path
    again = KGLM.from_pretrained(
        tmp_path / "ckpt", knowledge_graph=str(tmp_path / "ckpt" / "knowledge_graph.json")
    )
    assert torch.equal(again.log_joint(x, z), loaded.log_joint(x, z))


def test_estimators_run_on_kglm(model):
    est = estimate_document(model, TEXT, EstimatorSettings("is", num_samples=64, temperature=1.0, seed=1))
    assert est.num_tokens == 4 and math.isfinite(est.log_likelihood)
    beam = estimate_document(model, TEXT, EstimatorSettings(estimator="beam", beam_size=5))
    assert math.isfinite(beam.log_likelihood)


ORIGINAL_TO_OURS = {
    "_token_embedder.weight": "token_embedding.weight",
    "_entity_embedder.weight": "entity_embedding.weight",
    "_relation_embedder.weight": "relation_embedding.weight",
    "_fc_mention_type.weight": "mention_type.weight",
    "_fc_mention_type.bias": "mention_type.bias",
    "_fc_condense.weight": "condense.weight",
    "_fc_condense.bias": "condense.bias",
    "_fc_generate.weight": "generate.weight",
    "_fc_generate.bias": "generate.bias",
    "_fc_copy.weight": "copy.weight",
    "_fc_copy.bias": "copy.bias",
}


def _map_name(name: str) -> str | None:
    if name in ORIGINAL_TO_OURS:
        return ORIGINAL_TO_OURS[name]
    if name.startswith("_alias_encoder._module."):
        return "alias_encoder." + name.split(".")[-1]
    if name.startswith("_rnn._rnns."):
        i = name.split(".")[2]
        if name.endswith("weight_hh_l0_raw"):
            return f"encoder.layers.{i}.weight_hh_l0"
        if ".module.weight_hh_l0" in name:
            return None  # the dropped copy of the raw weight
        return f"encoder.layers.{i}." + name.split(".")[-1]
    raise AssertionError(f"unmapped original parameter {name}")


@pytest.mark.skipif(not ARCHIVE.is_file(), reason="original KGLM archive fixture absent")
def test_original_archive_parameters_fit_the_module(tmp_path):
    """Every weight of the original AllenNLP archive has a parameter of the same shape here (docstring mapping)."""
    with tarfile.open(ARCHIVE) as tar:
        tar.extract("weights.th", tmp_path, filter="data")
        tar.extract("config.json", tmp_path, filter="data")
    weights = torch.load(tmp_path / "weights.th", map_location="cpu", weights_only=True)
    cfg = json.loads((tmp_path / "config.json").read_text())["model"]
    V = weights["_token_embedder.weight"].shape[0]
    vocab = ["@@PADDING@@", "@@UNKNOWN@@", "@@START@@"] + [f"w{i}" for i in range(V - 3)]
    ours = KGLM(
        vocab,
        None,
        token_dim=weights["_token_embedder.weight"].shape[1],
        entity_dim=weights["_entity_embedder.weight"].shape[1],
        hidden_size=cfg["hidden_size"],
        num_layers=cfg["num_layers"],
        cutoff=cfg["cutoff"],
        new_entity_bias=not cfg["use_shortlist"],
        num_entity_rows=weights["_entity_embedder.weight"].shape[0],
        num_relation_rows=weights["_relation_embedder.weight"].shape[0],
    )
    params = dict(ours.named_parameters(remove_duplicate=False))  # generate.weight is tied to token_embedding
    mapped = {}
    for name, tensor in weights.items():
        target = _map_name(name)
        if target is None:
            continue
        assert target in params, name
        assert params[target].shape == tensor.shape, (name, tuple(tensor.shape), tuple(params[target].shape))
        mapped[target] = tensor
    missing = {n for n in params if not n.startswith("proposal.")} - set(mapped)
    assert not missing, missing
    with torch.no_grad():
        for target, tensor in mapped.items():
            params[target].copy_(tensor)
    ours.eval()
    x = torch.tensor([3, 4, 1, 5])
    none = {
        k: torch.full((1, 4), v)
        for k, v in (("mention_type", 0), ("entity", -1), ("parent", -1), ("relation", -1))
    }
    assert torch.isfinite(ours.log_joint(x, none)).all()


def test_candidate_slots_keep_the_last_occurrence_of_each_row_with_edges(model):
    """candidate_slots equals its definition (distinct rows with KG edges, last occurrence) on random windows."""
    from lm_latent_eval.models.kglm.latents import candidate_slots

    tables = model.tables
    gen = torch.Generator().manual_seed(0)
    for shape in [(50, 6), (3, 4, 5), (20, 1), (2, 0)]:
        window = torch.randint(0, tables.num_rows, shape, generator=gen)
        expected = torch.zeros(shape, dtype=torch.bool)
        for idx in itertools.product(*(range(n) for n in shape[:-1])):
            row = window[idx].tolist()
            for c, r in enumerate(row):
                expected[idx + (c,)] = r > 0 and bool(tables.row_has_edges[r]) and r not in row[c + 1 :]
        assert torch.equal(candidate_slots(window, tables), expected)


def test_large_graphs_encode_aliases_in_batches_with_the_per_entity_numbers(model, monkeypatch):
    """Graphs beyond ``_ALIAS_BATCH_ENTITIES`` entities encode their aliases many forms per LSTM call: the same flat
    table as one call per entity, up to float32 rounding."""
    from lm_latent_eval.models.kglm import words

    with torch.no_grad():
        per_entity = model.alias_tables()
        model._alias_cache = {}
        monkeypatch.setattr(words, "_ALIAS_BATCH_ENTITIES", 0)
        monkeypatch.setattr(words, "_ALIAS_FORMS_PER_CALL", 2)  # forms of one entity split across calls
        batched = model.alias_tables()
    assert per_entity[4] == batched[4]
    for a, b in zip(per_entity[1:4], batched[1:4]):
        assert torch.equal(a, b)
    assert torch.allclose(per_entity[0], batched[0], atol=1e-6)
