"""bench/masked_value.py --coverage in chunks (issue 52, item 2): a chunk's file names its seeds, and ``--pool``
joins one setting's chunks into the figures of all their seeds, refusing chunks of other texts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import masked_value


def chunk(seeds, covered, texts=4) -> dict:
    runs = [
        {
            "seed": s,
            "two_sided": True,
            "covered": s in covered,
            "bound_holds": True,
            "network_rows": 100 * (s + 1),
            "seconds": 2.0 * s,
            "perplexity_upper_bound": 30.0 + s,
        }
        for s in seeds
    ]
    return {"head_fit_seconds": 1.0, "truth": -50.0, "length": 8, "texts": texts, "model_args": {"peek": "true"},
            "resolved": "auto", "runs": runs}  # fmt: skip


def write(output: Path, seeds: range, covered, texts=4) -> None:
    path = masked_value.coverage_name(8, True, True, seeds)
    (output / path.name).write_text(json.dumps(chunk(seeds, covered, texts)))


def test_chunk_names_and_pooled_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(masked_value, "OUTPUT", tmp_path)
    assert masked_value.coverage_name(8, True, True, range(100)).name == "value_coverage_oracle_peek_T8.json"
    assert (
        masked_value.coverage_name(8, True, True, range(4)).name
        == "value_coverage_oracle_peek_T8_seeds0_3.json"
    )
    write(tmp_path, range(4), covered={0, 1, 2})
    write(tmp_path, range(50, 52), covered={50})
    # a chunk still running: its part file is not pooled
    (tmp_path / "value_coverage_oracle_peek_T8_seeds4_5.part0.json").write_text(json.dumps(chunk([4], {4})))
    path = masked_value.pooled_chunks(8, True, True)
    assert path.name == "value_coverage_oracle_peek_T8_pooled.json"
    out = json.loads(path.read_text())
    assert [r["seed"] for r in out["runs"]] == [0, 1, 2, 3, 50, 51]
    assert (out["seeds"], out["two_sided"], out["covered"], out["bound_held"]) == (6, 6, 4, 6)
    # network rows per token: the mean over the seeds, over 4 texts of 8 tokens
    assert out["rows_per_token"] == pytest.approx((100 + 200 + 300 + 400 + 5100 + 5200) / 6 / 32)
    assert out["truth"] == -50.0
    assert out["seconds_per_seed"] == pytest.approx(2 * 107 / 6)
    assert out["perplexity_bound_mean"] == pytest.approx(30 + 107 / 6)
    # a stage-1 K other than the default's is named
    assert (
        masked_value.coverage_name(8, True, True, range(4), 400).name
        == "value_coverage_oracle_peek_T8_K400_seeds0_3.json"
    )
    # and a precision target other than the default's, in the model_args the runs pass
    assert (
        masked_value.coverage_name(8, True, True, range(100), target_se=0.01).name
        == "value_coverage_oracle_peek_T8_se0.01.json"
    )
    assert masked_value.coverage_args(True, target_se=0.01)["target_se"] == "0.01"


def test_chunks_of_other_texts_are_not_pooled(tmp_path, monkeypatch):
    monkeypatch.setattr(masked_value, "OUTPUT", tmp_path)
    write(tmp_path, range(2), covered={0})
    write(tmp_path, range(2, 4), covered={2}, texts=3)
    with pytest.raises(SystemExit, match="differ in their texts"):
        masked_value.pooled_chunks(8, True, True)


def test_chunks_of_seeds_0_to_99_make_the_100_seed_file(tmp_path, monkeypatch):
    monkeypatch.setattr(masked_value, "OUTPUT", tmp_path)
    write(tmp_path, range(50), covered=set(range(50)))
    write(tmp_path, range(50, 100), covered=set(range(50, 99)))
    path = masked_value.pooled_chunks(8, True, True)
    assert path.name == "value_coverage_oracle_peek_T8.json"
    assert json.loads(path.read_text())["covered"] == 99


def test_conditionals_under_the_head_are_held_to_the_exact_value(tmp_path, monkeypatch):
    """``--conditionals L``: the questions of ``masked_length --conditionals`` under the oracle's head (here an unfitted
    one: the fit is the slow part), each length's statement over the seeds held to the exact Σ log p(choice |
    context), rendered by ``masked_length.conditionals_table``; the workers' part files are removed."""
    from lm_latent_eval.models.masked.oracle import make_oracle_model
    from lm_latent_eval.models.masked.value import ValueHead

    def unfitted():
        oracle = make_oracle_model()
        oracle.value_head = ValueHead.seeded(0, width=8).double()
        return oracle

    monkeypatch.setattr(masked_value, "OUTPUT", tmp_path)
    monkeypatch.setattr(masked_value, "oracle_with_head", unfitted)
    results = masked_value.conditionals_runs([2, 10], range(2), workers=1, peek=True)
    assert [r["length"] for r in results] == [2, 10] and not list(tmp_path.iterdir())
    short, longer = results
    assert short["covered"] == short["two_sided"] == 2  # two tokens per choice: computed exactly
    assert longer["model_args"] == {"resample_threshold": "0.5", "peek": "true"} and longer["bound_held"] >= 1
    assert all(run["network_rows"] > 0 for run in longer["runs"])
    table = masked_value.conditionals_table(results, "cmd", "the statement named")
    assert "`cmd`" in table[0] and "by the statement named" in table[0] and table[-1].startswith("| 10 | 2 |")
