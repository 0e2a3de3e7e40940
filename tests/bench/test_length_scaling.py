"""bench/length_scaling.py (every model's cost against text length, issue 52 item 5): its command line refuses bad
input in one line, and one small cell fills its row: the statement, the particles, the cost line the precision
target logged after stage 1, parsed, beside what its stages then drew. No timing is asserted (the cell's budget
is far above what it takes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from length_scaling import fold, main, measure, row


class Bar:
    """Stands in for the progress bar."""

    def set_postfix_str(self, text: str) -> None:
        pass


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for option in ("--models", "--lengths", "--texts", "--seconds", "--output", "--render"):
        assert option in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--models", "hmm,nope"], "unknown model ['nope']"),
        (["--lengths", "16,-4"], "comma-separated positive integers"),
        (["--models", "masked", "--lengths", "16,128"], "the masked LM reads at most 64 positions"),
        (["--seconds", "0"], "--seconds must be positive"),
        (["--render", "no/such/run.json"], "no such file"),
    ],
)
def test_bad_input_is_one_line(argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert said in error


def test_a_small_cell_fills_its_row():
    # the continuous-latent user model (importance sampling only) on 2 texts of 16 words: a few seconds
    record = fold(measure("user_is_gaussian", 16, 2, 600.0, Bar()))
    assert record["finished"] and not record["stopped"] and record["error"] is None
    assert record["estimator"] == "is" and record["tokens"] == [16, 16]
    result = record["result"]
    assert result["bound"] >= result["perplexity"] > 0 and "exact" in result
    assert len(record["stages"]) >= 2 and record["samples_per_document"] >= 100
    assert record["samples_tokens_per_token"] >= 2 * 100
    # every cost line the precision target logged was read, with what the stages it spoke of drew
    said = [line for line in record["log"] if line["message"].startswith("precision target: the next")]
    assert said and all("draw_at_least" in line and line["drew"] >= line["draw_at_least"] for line in said)
    cells = row(record).split(" | ")
    assert cells[0] == "| user_is_gaussian" and cells[1] == "16" and "after stage 1: ≥" in cells[-1]


@pytest.mark.slow
def test_the_user_models_default_statement_covers_over_100_seeds():
    """The continuous-latent user model's 16-word cell (importance sampling, the precision target): one seed's
    interval missed the exact value in the bench's table; over 100 seeds at least 90 are two-sided and cover it (under
    a true coverage of 95% fewer happens with probability 0.011)."""
    from is_checks import default_statement_coverage
    from length_scaling import build, texts_of

    model, exact = build("user_is_gaussian")
    texts = texts_of("user_is_gaussian", exact, 16, 4)
    truth = sum(float(exact.log_marginal(exact.tokenize(t))) for t in texts)
    covered, run = default_statement_coverage(model, texts, truth)
    assert run.settings.estimator == "is"
    assert covered >= 90
