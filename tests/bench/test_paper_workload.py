"""bench/full_size.py (the paper's model sizes) and bench/paper_workload.py (Figures 3 and 4 of Logan et al. 2020).

The workload's numbers depend on the documents only: a subset, a time budget or two processes under
``accelerate launch`` (gloo on the CPU) give every document the numbers of one full single-process run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from python_subprocess import accelerate_launch, run_checked

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import full_size
import paper_workload
from limit import flops

SMALL = ["--source", "bundled", "--device", "cpu", "--max-k", "8", "--repeats", "3", "--repeat-k", "2"]


def test_lengths_and_documents_have_the_test_sets_sizes():
    for docs, total, sigma in ((60, 236_062, 0.6), (348, 161_368, 0.8), (2_416, 56_684, 0.5)):
        lengths = full_size.document_lengths(docs, total, sigma)
        assert len(lengths) == docs and sum(lengths) == total and min(lengths) >= 1
    assert full_size.CONLL_TEST_TOKENS == 161_368
    words = full_size.word_list(50, ("<unk>",))
    docs = full_size.zipf_documents(words[1:], [3, 5])
    assert [len(d.split()) for d in docs] == [3, 5] and all(w in words for d in docs for w in d.split())


def test_full_size_entitynlm_and_rnng_have_the_papers_sizes():
    enlm = full_size.entitynlm()
    assert (enlm.dim, enlm.max_entities, enlm.max_mention_length, len(enlm.vocab)) == (300, 100, 100, 10_000)
    assert enlm.vocab_output.weight is not enlm.token_embedding.weight  # untied, as the original
    assert len(full_size.conll2012_corpus(enlm)) == 348
    rnng = full_size.rnng()
    assert [c.hidden_size for c in rnng.stack_lstm.cells] == [650, 650] and rnng.proposal.hidden_size == 256


def test_full_size_kglm_layers_have_the_papers_sizes():
    model = full_size.kglm(vocab_size=500, num_entities=300, num_relations=20)  # the real sizes take 10 s
    sizes = [(layer.input_size, layer.hidden_size) for layer in model.encoder.layers]
    assert sizes == [(400, 1150), (1150, 1150), (1150, 400 + 2 * 256)]
    assert model.entity_embedding.weight.shape[1] == model.relation_embedding.weight.shape[1] == 256
    assert model.cutoff == 30 and model.generate.weight is model.token_embedding.weight
    with torch.no_grad():
        probs = model.proposal.mention_type.bias.softmax(-1)
    assert probs[0] == pytest.approx(1 - full_size.MENTION_RATE)


def test_flops_count_every_index_once():
    assert flops([("kd,vd->kv", (3, 4), (5, 4))]) == 2 * 3 * 4 * 5
    assert flops([("d,kmd->km", (4,), (2, 3, 4)), ("ti,gi->tg", (1, 2), (3, 2))]) == 2 * 24 + 2 * 6


def test_k_grid_and_repeat_groups():
    assert (
        paper_workload.k_grid(10_000)[:5] == [1, 2, 5, 10, 20] and paper_workload.k_grid(10_000)[-1] == 10_000
    )
    assert paper_workload.k_grid(8) == [1, 2, 5, 8]
    lw = np.log(np.array([1.0, 3.0, 2.0, 2.0]))
    assert paper_workload.group_log_means(lw, 2) == pytest.approx([math.log(2.0), math.log(2.0)])


@pytest.mark.parametrize("model", ["entitynlm", "kglm"])
def test_figures_depend_on_the_documents_only(model, capsys):
    whole = paper_workload.main(["--model", model, *SMALL, "--settings", "1.0,5.0,nopeek"])
    part = paper_workload.main(
        ["--model", model, *SMALL, "--settings", "1.0,5.0,nopeek", "--time-budget", "0"]
    )
    text = capsys.readouterr().out
    assert whole["documents_measured"] == whole["documents_total"] == 20
    assert (
        part["documents_measured"] == 1 and "tokens ratio" in text
    )  # stopped after one document, extrapolated
    (one,) = part["records"]
    same = next(r for r in whole["records"] if r["index"] == one["index"])
    assert [s["figure3"] for s in same["settings"]] == [s["figure3"] for s in one["settings"]]
    assert [s["figure4"] for s in same["settings"]] == [s["figure4"] for s in one["settings"]]
    figure3 = whole["figures"]["figure3"]
    assert list(figure3) == ["τ=1", "τ=5", "τ=1, no peeking"] and all(len(v) == 4 for v in figure3.values())
    assert all(len(v) == 3 for v in whole["figures"]["figure4"].values())
    assert whole["whole_workload_flops"] > 0 and whole["limits"]["float32"]["ratio"] > 0
    if model == "kglm":
        assert all(s["word_pairs"] > 0 for r in whole["records"] for s in r["settings"])


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_equal_one_process(tmp_path):
    pytest.importorskip("accelerate")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    script = str(REPO / "bench" / "paper_workload.py")
    args = ["--model", "entitynlm", *SMALL, "--settings", "1.0,nopeek", "--documents", "6"]
    one = tmp_path / "one.json"
    subprocess.run([sys.executable, script, *args, "--output", str(one)], env=env, check=True, timeout=600)
    two = tmp_path / "two.json"
    run_checked([*accelerate_launch(2), script, *args, "--output", str(two)], env=env, timeout=600, tail=4000)
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["processes"] == 2 and {r["rank"] for r in b["records"]} == {0, 1}
    assert [r["index"] for r in a["records"]] == [r["index"] for r in b["records"]]
    assert a["figures"] == b["figures"]
    for ra, rb in zip(a["records"], b["records"]):
        for sa, sb in zip(ra["settings"], rb["settings"]):
            assert (sa["figure3"], sa["figure4"], sa["flops"]) == (sb["figure3"], sb["figure4"], sb["flops"])
