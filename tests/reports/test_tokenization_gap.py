"""``python -m lm_latent_eval.reports.tokenization_gap --output gap.json`` writes what docs/models.md says it does."""

from __future__ import annotations

import json

from lm_latent_eval.reports import tokenization_gap


def test_output_writes_the_json_and_the_printed_table_beside_it(tmp_path, capsys):
    """Issue 53 (9): docs/models.md quotes the table from gap.md beside gap.json, which the command did not write; the
    JSON names bundled files by their package path, not this machine's."""
    out = tmp_path / "bench" / "gap.json"
    tokenization_gap.main(["--limit", "2", "--num-samples", "4", "--seeds", "2", "--output", str(out)])
    printed = capsys.readouterr().out
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert table.startswith("2 documents, ") and "| canonical (= lm-eval hf) |" in table
    assert printed == table
    settings = json.loads(out.read_text(encoding="utf-8"))["settings"]
    assert settings["data"] == "lm_latent_eval/data/corpus/tiny_test.jsonl"
    assert settings["checkpoint"] == "lm_latent_eval/data/tokenization"
