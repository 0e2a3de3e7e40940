"""KGLM data I/O: restricted pickles, AllenNLP vocabularies, Linked WikiText-2 JSONL, synthetic corpus."""

from __future__ import annotations

import collections
import json
import os
import pickle
import warnings
from pathlib import Path

import pytest

from lm_latent_eval.models.kglm.graph import KnowledgeGraph
from lm_latent_eval.models.kglm.linked_wikitext import (
    CONTINUING,
    NEW,
    NONE,
    RELATED,
    document_to_json,
    parse_document,
    read_linked_jsonl,
    tokenize_alias,
    write_linked_jsonl,
)
from lm_latent_eval.models.kglm.pickles import (
    knowledge_graph_from_pickles,
    load_alias_pickle,
    load_knowledge_graph_pickle,
    load_plain_pickle,
)
from lm_latent_eval.models.kglm.synthetic import SyntheticConfig, generate_corpus, write_corpus
from lm_latent_eval.models.kglm.vocabulary import Vocabulary

FIXTURES = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model"
WIKI = FIXTURES / "enhanced-wikitext-test"
needs_fixtures = pytest.mark.skipif(not WIKI.is_dir(), reason="../shared/fixtures/kglm-model not present")


# --- restricted unpickler ----------------------------------------------------------------------------------------
class _MakeDir:
    """Unpickling this would create a directory (stands in for any code-running pickle)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_plain_containers_load(tmp_path):
    data = {"Q1": [("P31", "Q2"), ("R:P31", "Q3")], "Q2": [], "n": 3, "x": 1.5, "s": {"a"}}
    dd = collections.defaultdict(list, {"Q1": [("P1", "Q2")]})
    for obj, expected in (
        (data, data),
        (dd, {"Q1": [("P1", "Q2")]}),
        (collections.OrderedDict(a=[1]), {"a": [1]}),
    ):
        for protocol in (2, 3, pickle.HIGHEST_PROTOCOL):
            path = tmp_path / "ok.pkl"
            path.write_bytes(pickle.dumps(obj, protocol=protocol))
            loaded = load_plain_pickle(path)
            assert loaded == expected and type(loaded) is dict


@pytest.mark.parametrize("payload", ["mkdir", "class_instance", "defaultdict_factory", "eval"])
def test_other_globals_are_refused(tmp_path, payload):
    target = tmp_path / "pwned"
    if payload == "mkdir":
        obj = {"Q1": [_MakeDir(str(target))]}
    elif payload == "class_instance":
        obj = {"Q1": collections.Counter("abc")}
    elif payload == "defaultdict_factory":
        obj = collections.defaultdict(KnowledgeGraph)
    else:
        obj = None
    path = tmp_path / "bad.pkl"
    if payload == "eval":  # hand-written protocol-0 pickle calling builtins.eval
        path.write_bytes(b"cbuiltins\neval\n(S'1+1'\ntR.")
    else:
        path.write_bytes(pickle.dumps(obj))
    with pytest.raises(pickle.UnpicklingError, match="refusing|not allowed"):
        load_plain_pickle(path)
    assert not target.exists()
    with pytest.raises(pickle.UnpicklingError):
        load_alias_pickle(path)


def test_alias_pickle_type_errors(tmp_path):
    path = tmp_path / "alias.pkl"
    path.write_bytes(pickle.dumps({"Q1": ["ok", 3]}))
    with pytest.raises(ValueError, match="Q1"):
        load_alias_pickle(path)
    path.write_bytes(pickle.dumps({"Q1": [("P1",)]}))
    with pytest.raises(ValueError, match="Q1"):
        load_knowledge_graph_pickle(path)


@needs_fixtures
def test_original_pickles_load_into_knowledge_graph():
    edges = load_knowledge_graph_pickle(
        WIKI / "knowledge_graph.pkl"
    )  # a collections.defaultdict(list) pickle
    aliases = load_alias_pickle(WIKI / "alias.pkl")
    assert len(edges) == 18 and sum(len(v) for v in edges.values()) == 1814
    assert ("@@REFLEXIVE@@", "Q317557") in edges["Q317557"]
    graph = knowledge_graph_from_pickles(WIKI / "knowledge_graph.pkl", WIKI / "alias.pkl")
    assert sum(len(v) for v in graph.edges.values()) == 1814
    q1223 = graph.entity_id("Q1223")
    # the original keeps the first 4 aliases, each tokenized
    assert graph.entity_aliases(q1223) == [
        ["Washington"],
        ["Evergreen", "State"],
        ["WA"],
        ["State", "of", "Washington"],
    ]
    assert len(aliases["Q1223"]) == 6
    assert graph.entity_aliases(graph.entity_id("Q7592779")) == [
        ["St", "Ceinwen", "'s", "Church", ",", "Cerrigceinwen"]
    ]
    rel, tail = graph.out_edges(graph.entity_id("Q317557"))[1]
    assert (graph.relations[rel], graph.entities[tail]) == ("R:P31", "Q493133")


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("Benton County, Washington", ["Benton", "County", ",", "Washington"]),
        ("cable-stayed bridge", ["cable", "-", "stayed", "bridge"]),
        ("Washington (state)", ["Washington", "(", "state", ")"]),
        ("U.S. Route 12 in Washington", ["U.S.", "Route", "12", "in", "Washington"]),
        ("U.S.A. state", ["U.S.A.", "state"]),
        ("St Ceinwen's Church", ["St", "Ceinwen", "'s", "Church"]),
        ("Benton City – Kiona Bridge", ["Benton", "City", "–", "Kiona", "Bridge"]),
        ("27.05-mile road", ["27.05-mile", "road"]),
        ("  ", []),
    ],
)
def test_tokenize_alias(text, tokens):
    assert tokenize_alias(text) == tokens


@needs_fixtures
def test_alias_tokens_match_the_corpus_spans():
    """Every fixture mention whose text is a whole alias is tokenized exactly as the corpus tokenizes it."""
    graph = knowledge_graph_from_pickles(WIKI / "knowledge_graph.pkl", WIKI / "alias.pkl")
    matched = 0
    for doc in read_linked_jsonl(WIKI / "train.jsonl"):
        for start, end, entity in doc.mentions():
            if entity not in graph.entity_to_id:
                continue
            span = doc.tokens[start:end]
            forms = graph.entity_aliases(graph.entity_id(entity))
            joined = [" ".join(f) for f in forms]
            if " ".join(span) in joined:
                matched += 1
    assert (
        matched >= 8
    )  # e.g. "Benton City – Kiona Bridge", "cable - stayed bridge", "St Ceinwen 's Church , ..."


# --- vocabulary ---------------------------------------------------------------------------------------------------
@needs_fixtures
def test_vocabulary_files():
    vocab = Vocabulary.from_files(WIKI / "vocab")
    assert vocab.size("tokens") == 20 and vocab.size("entity_ids") == 22 and vocab.size("relations") == 145
    assert vocab.token(0, "tokens") == "@@PADDING@@" and vocab.token(1, "tokens") == "@@UNKNOWN@@"
    assert vocab.index("the", "tokens") == 4 and vocab.index("never-seen", "tokens") == 1
    assert not vocab.is_padded("tokens_unk") and vocab.token(0, "tokens_unk") == "State"
    with pytest.raises(KeyError):
        vocab.index("never-seen", "tokens_unk")
    with pytest.raises(KeyError, match="no namespace"):
        vocab.size("labels")


def test_vocabulary_format_rules(tmp_path):
    (tmp_path / "non_padded_namespaces.txt").write_text("*tags\n*labels\n")
    (tmp_path / "tokens.txt").write_text("@@UNKNOWN@@\nline@@NEWLINE@@break\nword")  # no final newline
    (tmp_path / "pos_tags.txt").write_text("NN\nVB\n")
    vocab = Vocabulary.from_files(tmp_path)
    assert vocab.tokens["tokens"] == ["@@PADDING@@", "@@UNKNOWN@@", "line\nbreak", "word"]
    assert vocab.tokens["pos_tags"] == ["NN", "VB"]
    (tmp_path / "entities.txt").write_text("Q1\nQ2\n")
    with pytest.raises(ValueError, match="entities"):
        Vocabulary.from_files(tmp_path)


# --- Linked WikiText-2 JSONL --------------------------------------------------------------------------------------
@needs_fixtures
def test_reader_gold_annotations_follow_the_original_reader():
    docs = list(read_linked_jsonl(WIKI / "train.jsonl"))
    assert [len(d.tokens) for d in docs] == [67, 68, 46]  # @@START@@ is context, not a predicted token
    doc = docs[0]
    # "state highway" (span [17, 19) in the file) is a new mention of Q831285
    assert doc.tokens[16:18] == ["state", "highway"]
    assert doc.mention_type[15:19] == [NONE, NEW, CONTINUING, NONE]
    assert doc.entity[16] == doc.entity[17] == "Q831285"
    # "Washington" is related to two recent entities by P131
    assert doc.tokens[27] == "Washington" and doc.mention_type[27] == RELATED
    assert doc.parents[27] == ("Q831285", "Q3046581") and doc.relations[27] == ("P131", "P131")
    # continuing tokens of a related mention keep its explanations (as in the original reader)
    assert doc.tokens[43:45] == ["Garfield", "County"] and doc.mention_type[44] == CONTINUING
    assert doc.relations[44] == ("P150", "R:P131")
    counts = collections.Counter(t for d in docs for t in d.mention_type)
    assert counts[NEW] + counts[RELATED] == sum(
        len(json.loads(line)["annotations"]) for line in (WIKI / "train.jsonl").read_text().splitlines()
    )


@needs_fixtures
def test_jsonl_round_trip(tmp_path):
    original = [json.loads(line) for line in (WIKI / "train.jsonl").read_text().splitlines()]
    docs = list(read_linked_jsonl(WIKI / "train.jsonl"))
    write_linked_jsonl(docs, tmp_path / "out.jsonl")
    again = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    for a, b in zip(original, again):
        assert a["tokens"] == b["tokens"]
        strip = lambda anns: [{k: v for k, v in x.items() if k != "source"} for x in anns]
        assert strip(a["annotations"]) == strip(b["annotations"])


def _doc(annotations, tokens=("@@START@@", "a", "b", "c", "d")):
    return {"title": "T", "tokens": list(tokens), "annotations": annotations}


def test_reader_errors_name_the_document():
    bad_span = _doc([{"id": "Q1", "relation": ["@@NEW@@"], "parent_id": ["Q1"], "span": [3, 9]}])
    with pytest.raises(ValueError, match=r"doc7 \('T'\).*span"):
        parse_document(bad_span, "doc7")
    start = _doc([{"id": "Q1", "relation": ["@@NEW@@"], "parent_id": ["Q1"], "span": [0, 2]}])
    with pytest.raises(ValueError, match="START"):
        parse_document(start, "doc7")
    mismatch = _doc([{"id": "Q1", "relation": ["P1", "P2"], "parent_id": ["Q2"], "span": [1, 2]}])
    with pytest.raises(ValueError, match="2 relations for 1 parents"):
        parse_document(mismatch, "doc7")
    with pytest.raises(ValueError, match="tokens"):
        parse_document({"title": "x"}, "doc7")


def test_reader_warns_on_skipped_and_overlapping_annotations():
    skipped = _doc([{"id": "X9", "relation": ["@@NEW@@"], "parent_id": ["X9"], "span": [1, 2]}])
    with pytest.warns(UserWarning, match="doc3.*X9"):
        doc = parse_document(skipped, "doc3")
    assert doc.mention_type == [NONE] * 4
    dates = _doc([{"id": "T1999", "relation": ["@@NEW@@"], "parent_id": ["T1999"], "span": [1, 2]}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_document(dates, "d").entity[0] == "T1999"
    overlap = _doc(
        [
            {"id": "Q1", "relation": ["@@NEW@@"], "parent_id": ["Q1"], "span": [1, 4]},
            {"id": "Q2", "relation": ["P1"], "parent_id": ["Q1"], "span": [1, 2]},
        ]
    )
    with pytest.warns(UserWarning, match="doc4.*overlapping"):
        doc = parse_document(overlap, "doc4")
    # the later annotation wins on token 0; tokens 1-2 of Q1 become a mention of their own
    assert doc.mention_type == [RELATED, NEW, CONTINUING, NONE]
    assert doc.entity == ["Q2", "Q1", "Q1", None]


# --- synthetic corpus ---------------------------------------------------------------------------------------------
def test_synthetic_corpus_is_deterministic_and_consistent():
    config = SyntheticConfig(num_documents=30)
    graph, docs = generate_corpus(config, seed=5)
    graph2, docs2 = generate_corpus(config, seed=5)
    assert graph.to_dict() == graph2.to_dict() and [d.tokens for d in docs] == [d.tokens for d in docs2]
    assert generate_corpus(config, seed=6)[1][0].tokens != docs[0].tokens
    assert all(len(f) >= 1 for e in range(graph.num_entities) for f in graph.entity_aliases(e))
    assert any(len(f) >= 2 for e in range(graph.num_entities) for f in graph.entity_aliases(e))
    kinds = collections.Counter()
    for doc in docs:
        last_seen = {}
        for start, end, entity in doc.mentions():
            aliases = graph.entity_aliases(graph.entity_id(entity))
            assert doc.tokens[start:end] in aliases  # every mention copies a whole alias
            kind = doc.mention_type[start]
            kinds[kind] += 1
            if kind == RELATED:
                assert doc.parents[start]
                for parent, relation in zip(doc.parents[start], doc.relations[start]):
                    edge = (graph.relation_id(relation), graph.entity_id(entity))
                    assert edge in graph.out_edges(graph.entity_id(parent))  # explained by a KG edge
                    assert start - last_seen[parent] <= config.cutoff  # parent mentioned within the cutoff
            last_seen[entity] = end - 1
        assert doc.tokens[-1] == "@@END@@"
    assert kinds[NEW] > 30 and kinds[RELATED] > 30


def test_synthetic_corpus_files_round_trip(tmp_path):
    paths = write_corpus(tmp_path, SyntheticConfig(num_documents=20), seed=1)
    graph, docs = generate_corpus(SyntheticConfig(num_documents=20), seed=1)
    read = [d for split in ("train", "valid", "test") for d in read_linked_jsonl(paths[split])]
    assert [d.tokens for d in read] == [d.tokens for d in docs]
    assert [d.mention_type for d in read] == [d.mention_type for d in docs]
    assert [d.parents for d in read] == [d.parents for d in docs]
    assert KnowledgeGraph.from_json(paths["knowledge_graph"]).to_dict() == graph.to_dict()
    first = json.loads(paths["train"].read_text().splitlines()[0])
    assert first["tokens"][0] == "@@START@@" and set(first["annotations"][0]) == {
        "source",
        "id",
        "relation",
        "parent_id",
        "span",
    }
    assert document_to_json(docs[0])["tokens"][1:] == docs[0].tokens


# --- task datasets ------------------------------------------------------------------------------------------------
def test_linked_wikitext2_task_data(tmp_path, monkeypatch):
    from lm_latent_eval.models.kglm.linked_wikitext import load_linked_wikitext2

    monkeypatch.delenv("LINKED_WIKITEXT2_DIR", raising=False)
    with pytest.raises(ValueError, match="data_dir.*LINKED_WIKITEXT2_DIR"):
        load_linked_wikitext2(version=1.0)
    _graph, docs = generate_corpus(SyntheticConfig(num_documents=6), seed=0)
    write_linked_jsonl(docs[:3], tmp_path / "valid.jsonl")
    with pytest.raises(FileNotFoundError, match="test"):
        load_linked_wikitext2(data_dir=str(tmp_path))
    write_linked_jsonl(docs[3:], tmp_path / "test.jsonl")
    monkeypatch.setenv("LINKED_WIKITEXT2_DIR", str(tmp_path))
    data = load_linked_wikitext2(version=1.0)  # lm-eval passes the task metadata as keywords
    assert data["test"]["text"] == [" ".join(d.tokens) for d in docs[3:]]
    assert data["validation"]["title"] == [d.title for d in docs[:3]]
    assert "@@START@@" not in data["test"]["text"][0]
