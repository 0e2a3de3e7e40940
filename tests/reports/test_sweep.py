"""`lm-latent-eval sweep` on the bundled HMM: the tables respect the bounds the math guarantees."""

import json
import math

import pytest

from lm_latent_eval.cli import main
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.paths import DATA_DIR
from lm_latent_eval.reports.sweep import (
    SweepResult,
    convergence_figure,
    run_sweep,
    table1_markdown,
    table2_markdown,
)


@pytest.fixture(scope="module")
def sweep_result():
    model, _ = load_model("hmm")
    docs = read_documents(DATA_DIR / "corpus" / "tiny_test.jsonl")[:4]
    return run_sweep(
        model, docs, temperatures=(1.0, 2.0), beam_sizes=(1, 4, 16), num_samples=32, progress=False
    )


def test_beam_bounds_are_below_the_exact_likelihood_and_grow_with_k(sweep_result):
    beams = sweep_result.beam_rows
    for row in beams:
        assert row["ppl_upper_bound"] >= sweep_result.exact_perplexity * (1 - 1e-9)
    lls = [row["log_likelihood"] for row in beams]
    assert lls == sorted(lls)  # top-k sets are nested, so the bound only tightens


def test_table1_rows_and_convergence_curves(sweep_result):
    rows = sweep_result.is_rows
    assert {(r["peek"], r["temperature"]) for r in rows} == {
        (True, 1.0),
        (True, 2.0),
        (False, 1.0),
        (False, 2.0),
    }
    for r in rows:
        assert r["convergence_k"] == [1, 2, 4, 8, 16, 32]
        assert r["instance_ppl"] == pytest.approx(r["convergence_instance_ppl"][-1])
        assert r["corpus_ppl"] == pytest.approx(r["convergence_corpus_ppl"][-1])
        assert 1.0 <= r["mean_ess"] <= 32.0
    table = table1_markdown(sweep_result)
    assert "No peeking, τ = 2" in table and "Exact" in table
    assert table2_markdown(sweep_result).count("\n") == 4


def test_read_documents_rejects_records_without_text(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": "a"}\n')
    with pytest.raises(ValueError, match="no 'text' field"):
        read_documents(bad)


def _run_sweep_cli(tmp_path, num_documents: int, *options: str):
    """``lm-latent-eval sweep`` on the first documents of the bundled test corpus (one per line of a text file) with
    ``options``; it must return 0. The output folder."""
    data = tmp_path / "docs.txt"
    data.write_text("\n".join(read_documents(DATA_DIR / "corpus" / "tiny_test.jsonl")[:num_documents]))
    out = tmp_path / "out"
    assert main(["sweep", "--data", str(data), *options, "--output", str(out)]) == 0
    return out


def test_cli_writes_tables_json_and_plot(tmp_path, capsys):
    out = _run_sweep_cli(tmp_path, 2, "--num-samples", "8", "--temperatures", "1.0", "--beam-sizes", "1,2")
    text = (out / "sweep.json").read_text()
    # strict JSON: an undefined figure (k̂ of tied weights, the stderr of a one-sided row) is null, never bare NaN
    result = json.loads(text, parse_constant=lambda name: pytest.fail(f"sweep.json holds bare {name}"))
    assert result["num_documents"] == 2 and len(result["is"]) == 2 and "null" in text
    assert (out / "convergence.png").stat().st_size > 10_000
    assert "Table 2" in capsys.readouterr().out


def test_smc_rows_beside_the_is_rows(sweep_result):
    """The HMM is stepwise, so the sweep adds one SMC row per IS proposal, each with its honest 95% statement."""
    from lm_latent_eval.reports.sweep import smc_table_markdown

    rows = sweep_result.smc_rows
    assert {(r["peek"], r["temperature"]) for r in rows} == {
        (r["peek"], r["temperature"]) for r in sweep_result.is_rows
    }
    for r in rows:
        assert r["smc_runs"] == 4 and math.isfinite(
            r["corpus_ppl"]
        )  # run r of every document: one corpus sample
        assert 1.0 <= r["min_ess"] <= r["mean_ess"] <= 32.0 and r["mean_resampling_steps"] >= 0
        lo, hi = r["perplexity_interval"]
        assert r["perplexity_upper_bound"] > r["instance_ppl"] and hi <= r["perplexity_upper_bound"] * (
            1 + 1e-12
        )
        assert (lo == 0.0 and math.isnan(r["monte_carlo_stderr"])) or lo < r["perplexity"] < hi
    assert max(r["mean_resampling_steps"] for r in rows) > 0
    table = smc_table_markdown(sweep_result)
    assert "SMC, no peeking, τ = 2" in table and "Exact" in table


def test_cli_without_smc_rows(tmp_path):
    options = ("--num-samples", "4", "--temperatures", "1.0", "--beam-sizes", "1", "--no-smc")
    out = _run_sweep_cli(tmp_path, 1, *options)
    assert "smc" not in json.loads((out / "sweep.json").read_text())


def test_documents_side_by_side_give_the_same_sweep(sweep_result):
    """``workers`` = 2 (each setting's documents in two forked processes, a repeated text estimated once): the sweep
    of one process, every figure equal."""
    model, _ = load_model("hmm")
    docs = read_documents(DATA_DIR / "corpus" / "tiny_test.jsonl")[:4]
    side_by_side = run_sweep(model, docs, temperatures=(1.0, 2.0), beam_sizes=(1, 4, 16), num_samples=32,
                             progress=False, workers=2)  # fmt: skip
    assert json.dumps(side_by_side.to_json(), sort_keys=True) == json.dumps(
        sweep_result.to_json(), sort_keys=True
    )
    repeated = run_sweep(model, docs[:2] + docs[:1], temperatures=(1.0,), peek_modes=(True,), beam_sizes=(1,),
                         num_samples=8, progress=False, workers=2)  # fmt: skip
    alone = run_sweep(model, docs[:2] + docs[:1], temperatures=(1.0,), peek_modes=(True,), beam_sizes=(1,),
                      num_samples=8, progress=False)  # fmt: skip
    assert repeated.num_documents == 3 and json.dumps(repeated.to_json()) == json.dumps(alone.to_json())


def test_cli_rejects_a_worker_count_below_one(tmp_path, capsys):
    assert main(["sweep", "--workers", "0", "--output", str(tmp_path / "out")]) != 0
    assert "--workers must be a positive integer, got 0" in capsys.readouterr().err


def _synthetic_sweep(finals: dict[float, tuple[float, float]], exact: float | None) -> SweepResult:
    """A sweep result whose peeking IS curves (K = 1..64) fall to the given (instance, corpus) finals."""
    ks = [1, 2, 4, 8, 16, 32, 64]
    rows = [
        {
            "peek": True,
            "temperature": t,
            "num_samples": 64,
            "convergence_k": ks,
            "convergence_instance_ppl": [inst * (1 + 0.5 / k - 0.5 / 64) for k in ks],
            "convergence_corpus_ppl": [corp * (1 + 0.5 / k - 0.5 / 64) for k in ks],
        }
        for t, (inst, corp) in finals.items()
    ]
    result = {
        "num_documents": 50,
        "num_tokens": 420,
        "is": rows,
        "beam": [{"beam_size": 100, "ppl_upper_bound": 5.2235}],
    }
    result["config"] = {"model": "rnng", "pretrained": None, "data": "data/ptb_tiny/test.txt", "seed": 1234}
    return SweepResult.from_json(result | ({"exact_ppl": exact} if exact is not None else {}))


def test_convergence_figure_is_readable_where_the_estimates_are_compared():
    """RNNG-like: curves end in 5.21–5.31, one blows up to 5.8. The y axis must resolve the 0.1 band (not a log axis
    labelled only 6 and 7), draw the exact value, name the blown-up curve, and keep title and legend off the data."""
    finals = {0.5: (5.275, 5.304), 1.0: (5.231, 5.275), 2.0: (5.217, 5.248), 5.0: (5.223, 5.794)}
    fig = convergence_figure(_synthetic_sweep(finals, exact=5.2234))
    (ax,) = fig.axes
    bottom, top = ax.get_ylim()
    assert ax.get_yscale() == "linear" and bottom < 5.2234 and 5.304 < top < 5.4
    assert any(
        abs(line.get_ydata()[0] - 5.2234) < 1e-9 for line in ax.get_lines() if len(line.get_ydata()) == 2
    )
    assert "τ = 5: corpus 5.794" in " ".join(t.get_text() for t in ax.texts)
    assert ax.get_legend() is None and fig.legends
    title = fig._suptitle.get_text()
    assert "rnng" in title and "ptb_tiny/test.txt" in title and "seed 1234" in title


def test_ctrl_c_after_a_row_writes_the_rows_finished(tmp_path, monkeypatch, capsys):
    """Issue 53, item 7: Ctrl-C in ``sweep`` wrote nothing; the rows finished before it are written and said to be
    partial, with the exit status of an interrupt."""
    from lm_latent_eval.reports.sweep import compute

    estimates, calls = compute._estimates, []

    def stopped_at_the_third_setting(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return estimates(*args)

    monkeypatch.setattr(compute, "_estimates", stopped_at_the_third_setting)
    argv = ["sweep", "--model", "hmm", "--num-samples", "8", "--temperatures", "1,2", "--beam-sizes", "1",
            "--no-smc", "--output", str(tmp_path)]  # fmt: skip
    assert main(argv) == 130
    assert "interrupted; wrote the rows finished" in capsys.readouterr().err
    written = SweepResult.from_json(json.loads((tmp_path / "sweep.json").read_text()))
    assert written.interrupted and len(written.is_rows) == 2 and written.beam_rows == []
    assert (tmp_path / "tables.md").read_text().startswith("Interrupted (Ctrl-C)")


def test_a_model_without_a_bundled_corpus_needs_data(capsys):
    """A model named by its class has no bundled test set: the sweep once scored the HMM's corpus in its place."""
    model = "lm_latent_eval.models.hmm:HMMLanguageModel"
    assert main(["sweep", "--model", model, "--pretrained", str(DATA_DIR / "hmm")]) == 2
    assert "--data: " in capsys.readouterr().err
