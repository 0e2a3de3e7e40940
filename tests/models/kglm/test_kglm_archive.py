"""Import of an original AllenNLP KGLM archive (../shared/fixtures/kglm-model/kglm.model.tar.gz)."""

from __future__ import annotations

import io
import json
import math
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

from lm_latent_eval.estimators import EstimatorSettings, estimate_document
from lm_latent_eval.models.kglm import KGLM
from lm_latent_eval.models.kglm.archive import PARAMETER_MAP, map_state_dict, read_archive
from lm_latent_eval.models.kglm.linked_wikitext import document_tensors, read_linked_jsonl

FIXTURES = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "kglm-model"
ARCHIVE = FIXTURES / "kglm.model.tar.gz"
WIKI = FIXTURES / "enhanced-wikitext-test"
pytestmark = pytest.mark.skipif(not ARCHIVE.is_file(), reason="../shared/fixtures/kglm-model not present")


def _load():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # shortlist + no-proposal warnings are tested below
        return KGLM.from_pretrained(
            ARCHIVE, knowledge_graph=WIKI / "knowledge_graph.pkl", alias_database=WIKI / "alias.pkl"
        )


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return _load()


def test_every_original_weight_is_consumed_and_every_parameter_set():
    arch = read_archive(ARCHIVE)
    assert arch.model_type == "kglm" and len(arch.state_dict) == 30
    mapped = map_state_dict(arch.state_dict, num_layers=3)  # raises on any leftover tensor
    assert len(mapped) == 27  # 30 tensors - 3 dropped W_hh copies; generate.weight is tied to token_embedding
    model = _load()
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, tensor in mapped.items():
        assert torch.equal(params[name].detach(), tensor), name
    # a weights file with one extra tensor is refused
    state = dict(arch.state_dict, **{"_fc_extra.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match="_fc_extra.weight"):
        map_state_dict(state, num_layers=3)


def test_loading_warns_about_shortlist_and_missing_proposal():
    with pytest.warns(UserWarning) as record:
        KGLM.from_pretrained(
            ARCHIVE, knowledge_graph=WIKI / "knowledge_graph.pkl", alias_database=WIKI / "alias.pkl"
        )
    text = " ".join(str(w.message) for w in record)
    assert "use_shortlist" in text and "no proposal archive" in text


def test_encoder_matches_the_original_weights(model):
    """h_t of our encoder = a plain LSTM stack built directly from weights.th (raw W_hh), fed @@START@@ x_<t."""
    state = read_archive(ARCHIVE).state_dict
    doc = next(read_linked_jsonl(WIKI / "train.jsonl"))
    x = model.tokenize(doc.text)
    inputs = torch.cat([torch.tensor([model.bos_id]), model.input_ids(x)[:-1]])
    h = torch.nn.functional.embedding(inputs, state["_token_embedder.weight"]).unsqueeze(0)
    for i in range(3):
        w_ih = state[f"_rnn._rnns.{i}.module.weight_ih_l0"]
        lstm = torch.nn.LSTM(w_ih.shape[1], w_ih.shape[0] // 4, batch_first=True)
        lstm.load_state_dict(
            {
                "weight_ih_l0": w_ih,
                "weight_hh_l0": state[f"_rnn._rnns.{i}.weight_hh_l0_raw"],
                "bias_ih_l0": state[f"_rnn._rnns.{i}.module.bias_ih_l0"],
                "bias_hh_l0": state[f"_rnn._rnns.{i}.module.bias_hh_l0"],
            }
        )
        h, _ = lstm(h)
    with torch.no_grad():
        ours = model.encode(x)
    assert torch.allclose(ours, h[0], atol=1e-6)
    # word scores: _fc_generate(_fc_condense([h_token; E_entity])) with the original tensors
    h_tok = h[0, :, :10]
    e = state["_entity_embedder.weight"][5].expand(h_tok.shape[0], -1)
    cond = torch.cat([h_tok, e], -1) @ state["_fc_condense.weight"].t() + state["_fc_condense.bias"]
    scores = cond @ state["_fc_generate.weight"].t() + state["_fc_generate.bias"]
    with torch.no_grad():
        mine = model.generate(
            model.condense(
                torch.cat([ours[:, :10], model.entity_embedding.weight[5].expand(ours.shape[0], -1)], -1)
            )
        )
    assert torch.allclose(mine, scores, atol=1e-5)


def test_unknown_word_penalty_is_log_of_unk_types(model):
    assert model.unk_penalty == pytest.approx(math.log(92))  # vocabulary/tokens_unk.txt has 92 types


def test_gold_log_joint_and_is_estimates_are_finite(model):
    docs = list(read_linked_jsonl(WIKI / "train.jsonl"))
    assert len(docs) == 3
    for doc in docs:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every fixture annotation lies in the model's support unchanged
            x, z, changes = document_tensors(doc, model)
        assert not changes
        with torch.no_grad():
            log_p = float(model.log_joint(x, z)[0])
            log_q = float(model.proposal.log_prob(x, z)[0])
        assert math.isfinite(log_p) and log_p < 0 and math.isfinite(log_q)
        est = estimate_document(model, doc.text, EstimatorSettings("is", num_samples=16, seed=3))
        assert est.num_tokens == len(doc.tokens)
        assert math.isfinite(est.log_likelihood) and all(math.isfinite(w) for w in est.log_weights)
        # a sane per-token value (the archive is a 2-epoch toy model over 20 words)
        assert -20 < est.log_likelihood / est.num_tokens < 0


def _retyped_archive(tmp_path: Path, model_type: str) -> Path:
    out = tmp_path / "other.tar.gz"
    with tarfile.open(ARCHIVE) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("config.json"):
                config = json.loads(data)
                config["model"]["type"] = model_type
                data = json.dumps(config).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def test_archive_of_another_model_type_is_refused(tmp_path):
    other = _retyped_archive(tmp_path, "entitynlm")
    with pytest.raises(ValueError, match="'entitynlm'.*expected a 'kglm' archive"):
        KGLM.from_pretrained(
            other, knowledge_graph=WIKI / "knowledge_graph.pkl", alias_database=WIKI / "alias.pkl"
        )


def test_missing_knowledge_graph_and_bad_files(tmp_path):
    with pytest.raises(ValueError, match="knowledge_graph="):
        KGLM.from_pretrained(ARCHIVE)
    bogus = tmp_path / "model.tar.gz"
    bogus.write_bytes(b"not a tar file")
    with pytest.raises(ValueError, match="not a"):
        read_archive(bogus)


def test_parameter_map_covers_the_model_names(model):
    names = set(dict(model.named_parameters(remove_duplicate=False)))
    for dst in PARAMETER_MAP.values():
        assert dst.format(i=0) in names or dst == "new_entity_bias", dst


def test_from_pretrained_and_load_model_accept_the_original_archive(model):
    """``KGLM.from_pretrained`` / ``load_model`` route a ``.tar.gz`` to the archive importer (same weights)."""
    from lm_latent_eval.models import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded, path = load_model(
            "kglm", ARCHIVE, knowledge_graph=WIKI / "knowledge_graph.pkl", alias_database=WIKI / "alias.pkl"
        )
    assert isinstance(loaded, KGLM) and path == ARCHIVE and not loaded.training
    reference = model.state_dict()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, reference[name]), name
    with pytest.raises(ValueError, match="knowledge_graph"):
        KGLM.from_pretrained(str(ARCHIVE))
