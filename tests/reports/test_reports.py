"""Reports from real lm_eval runs: leaderboard fields, estimate cards (and their reproduce command), compare."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from lm_eval_runs import HMM, hmm_run, run_lm_eval

import lm_latent_eval
from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import ExactEstimate, ISEstimate
from lm_latent_eval.models import checkpoint_hash, load_model
from lm_latent_eval.reports import card as card_mod
from lm_latent_eval.reports import compare as compare_mod
from lm_latent_eval.reports.card import render as card_render
from lm_latent_eval.reports.lm_eval_output import TaskRun, read_runs

LIMIT = "6"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the bundled HMM on the same 6 documents: IS without peeking and the exact marginal."""
    root = tmp_path_factory.mktemp("lm_eval_runs")
    return {
        "is": hmm_run(root / "is", "estimator=is,num_samples=64,seed=7,peek=false"),
        "exact": hmm_run(root / "exact", "estimator=exact"),
    }


def _results(folder: Path) -> dict:
    return json.loads(next(folder.rglob("results_*.json")).read_text())


def test_results_json_has_leaderboard_fields(runs):
    """model_name from pretrained; model_sha, model_dtype, model_num_parameters as lm-eval's hf backend fills them."""
    results = _results(runs["is"])
    cfg = results["config"]
    model, _ = load_model("hmm", HMM)
    assert results["model_name"] == str(HMM) and cfg["model_name"] == str(HMM)
    assert cfg["model_sha"] == checkpoint_hash(HMM) == cfg["checkpoint_sha256"]
    assert cfg["model_dtype"] == "torch.float32" and cfg["model_revision"] is None
    assert cfg["model_num_parameters"] == sum(p.numel() for p in model.parameters()) > 0
    assert cfg["estimator_settings"] == {
        "estimator": "is",
        "num_samples": 64,
        "temperature": 1.0,
        "peek": False,
        "seed": 7,
        "sample_block": 1024,
    }


def test_results_json_holds_no_stderr_of_a_stderr(runs):
    """Issue 34 (13): lm-eval files a ``<metric>_stderr`` key beside every metric, so ``perplexity_stderr`` (the
    Stderr of ``perplexity``, a metric of its own) brought a ``perplexity_stderr_stderr`` of N/A into the results.
    Every other key stays: perplexity's Stderr, and the N/A Stderr of the metrics that have none."""
    for run in runs.values():
        metrics = _results(run)["results"]["latent_ppl_tiny"]
        assert not [key for key in metrics if "_stderr_stderr" in key], sorted(metrics)
        assert "latent_perplexity_stderr,none" in metrics and "latent_perplexity,none" in metrics
        assert metrics["perplexity_upper_bound_stderr,none"] == "N/A"


def test_card_figures_match_lm_eval_and_bounds(runs, tmp_path):
    """Card values equal lm-eval's metrics; the exact run joins the card; kinds, settings and identity are stated."""
    all_runs = read_runs(runs["is"].parent)  # both runs side by side
    (peek,) = [r for r in all_runs if r.estimator == "is"]
    card = card_mod.build_card(peek, all_runs, beam_size=4, progress=False)
    figures = {f["name"]: f for f in card["figures"]}
    metrics = peek.metrics
    inst, corp = figures["instance-level perplexity (Eq. 5)"], figures["corpus-level perplexity (Eq. 6)"]
    assert inst["value"] == pytest.approx(metrics["instance_perplexity,none"], rel=1e-12)
    assert corp["value"] == pytest.approx(metrics["corpus_perplexity,none"], rel=1e-12)
    assert inst["kind"].startswith("stochastic upper bound")
    quoted, bound = figures["perplexity"], figures["certified upper bound (95%)"]
    assert quoted["value"] == pytest.approx(metrics["latent_perplexity,none"], rel=1e-12)
    assert bound["value"] == pytest.approx(metrics["perplexity_upper_bound,none"], rel=1e-12)
    assert bound["value"] > quoted["value"]
    lo, hi = quoted["interval"]
    assert (lo == 0.0 and hi == pytest.approx(bound["value"])) or lo < quoted["value"] < hi
    assert "measured coverage" in quoted["interval_note"] or "not measured" in quoted["interval_note"]
    assert card["uncertainty"]["sampling_stderr"] > 0
    exact = figures["exact perplexity"]["value"]
    (exact_run,) = [r for r in all_runs if r.estimator == "exact"]
    assert exact == pytest.approx(exact_run.metrics["instance_perplexity,none"], rel=1e-12)
    assert figures["exact perplexity"]["kind"] == "exact" and card["exact_perplexity"] == exact
    beam = figures["beam bound (k=4)"]
    assert beam["kind"].startswith("strict upper bound") and beam["value"] >= exact * (1 - 1e-12)
    assert card["model"]["checkpoint_sha256"] == checkpoint_hash(HMM) and card["model"]["dtype"] == "float32"
    assert card["settings"]["num_samples"] == 64 and card["settings"]["peek"] is False
    d = card["diagnostics"]
    assert d["num_documents"] == int(LIMIT) and 1 <= d["ess_min"] <= d["ess_mean"] <= 64
    assert d["verdict"].startswith(("Reliable", "UNRELIABLE"))
    assert (d["what_to_try"] == []) == d["verdict"].startswith("Reliable")


def test_report_cli_writes_cards_and_reproduce_command_reproduces(runs, tmp_path):
    """`lm-latent-eval report` writes .md/.json/.png; running the card's command gives the same numbers."""
    from lm_latent_eval.cli import main

    assert main(["report", str(runs["is"]), "--output", str(tmp_path / "cards")]) == 0
    (md,) = (tmp_path / "cards").glob("*.md")
    card = json.loads(  # strict JSON: an undefined figure is null, never a bare NaN
        md.with_suffix(".json").read_text(), parse_constant=lambda name: pytest.fail(f"the card holds {name}")
    )
    assert md.with_suffix(".png").stat().st_size > 1000 and "## Reproduce" in md.read_text()
    command = card["reproduce"].replace(
        '"$(lm-latent-eval tasks-path)"', shlex.quote(str(lm_latent_eval.tasks_path()))
    )
    argv = shlex.split(command)
    assert argv[0] == "lm_eval"
    argv[argv.index("OUT")] = str(tmp_path / "again")
    run_lm_eval(argv[1:])
    again, first = (
        _results(tmp_path / "again")["results"]["latent_ppl_tiny"],
        _results(runs["is"])["results"]["latent_ppl_tiny"],
    )
    for key in ("instance_perplexity,none", "corpus_perplexity,none", "is_ess_mean,none"):
        assert again[key] == first[key]


def test_reproduce_command_names_the_folder_of_a_users_task(tmp_path):
    """A user's copy of a task, in their own folder and keeping its name: the card's command includes that folder
    (lm-eval records the YAML it read as metadata.config_source), not the bundled tasks, and runs the same numbers."""
    mine = tmp_path / "my_tasks"
    mine.mkdir()
    yaml = (Path(lm_latent_eval.tasks_path()) / "latent_ppl_tiny" / "latent_ppl_tiny.yaml").read_text()
    (mine / "latent_ppl_tiny.yaml").write_text(yaml)
    out = tmp_path / "out"
    run_lm_eval(
        ["--model", "latent_hmm", "--model_args", f"pretrained={HMM},estimator=exact", "--tasks", "latent_ppl_tiny",
         "--include_path", str(mine), "--limit", "2", "--device", "cpu", "--output_path", str(out), "--log_samples"]
    )  # fmt: skip
    (run,) = read_runs(out)
    argv = shlex.split(card_mod.reproduce_command(run))
    assert argv[argv.index("--include_path") + 1] == str(mine)
    assert "tasks-path" not in card_mod.reproduce_command(run)
    argv[argv.index("OUT")] = str(tmp_path / "again")
    run_lm_eval(argv[1:])
    (again,) = read_runs(tmp_path / "again")
    assert again.results["configs"]["latent_ppl_tiny"]["metadata"]["config_source"] == str(
        mine / "latent_ppl_tiny.yaml"
    )
    assert again.metrics["latent_perplexity,none"] == run.metrics["latent_perplexity,none"]


def test_reproduce_command_names_a_relative_include_path_from_anywhere(tmp_path, monkeypatch):
    """Issue 34 (8): ``--include_path my_tasks`` (relative, as the docs write ``--include_path tasks``): lm-eval records
    the YAML as ``my_tasks/...``; the backend records the folder lm_eval ran in, so the card's command names the
    folder absolutely and runs from another folder (as ``report`` may)."""
    ran_in, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (ran_in / "my_tasks").mkdir(parents=True)
    elsewhere.mkdir()
    yaml = (Path(lm_latent_eval.tasks_path()) / "latent_ppl_tiny" / "latent_ppl_tiny.yaml").read_text()
    (ran_in / "my_tasks" / "latent_ppl_tiny.yaml").write_text(yaml)
    monkeypatch.chdir(ran_in)
    run_lm_eval(
        ["--model", "latent_hmm", "--model_args", f"pretrained={HMM},estimator=exact", "--tasks", "latent_ppl_tiny",
         "--include_path", "my_tasks", "--limit", "2", "--device", "cpu", "--output_path", "out", "--log_samples"]
    )  # fmt: skip
    monkeypatch.chdir(elsewhere)
    (run,) = read_runs(ran_in / "out")
    assert (
        run.results["configs"]["latent_ppl_tiny"]["metadata"]["config_source"]
        == "my_tasks/latent_ppl_tiny.yaml"
    )
    argv = shlex.split(card_mod.reproduce_command(run))
    assert argv[argv.index("--include_path") + 1] == str(ran_in / "my_tasks")
    assert card_mod.reproduce_note(run) is None
    argv[argv.index("OUT")] = str(tmp_path / "again")
    run_lm_eval(argv[1:])
    (again,) = read_runs(tmp_path / "again")
    assert again.metrics["latent_perplexity,none"] == run.metrics["latent_perplexity,none"]


def test_reproduce_command_names_a_relative_checkpoint_from_anywhere(tmp_path, monkeypatch):
    """Issue 53 (9): ``pretrained=my_hmm`` (a checkpoint folder relative to where lm_eval ran) stayed relative in the
    card's command, which then failed from another folder; it is now named absolutely, and the command run from
    elsewhere gives the same numbers."""
    ran_in, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    shutil.copytree(HMM, ran_in / "my_hmm")
    elsewhere.mkdir()
    monkeypatch.chdir(ran_in)
    run_lm_eval(
        ["--model", "latent_hmm", "--model_args", "pretrained=my_hmm,estimator=exact", "--tasks", "latent_ppl_tiny",
         "--include_path", str(lm_latent_eval.tasks_path()), "--limit", "2", "--device", "cpu",
         "--output_path", "out", "--log_samples"]
    )  # fmt: skip
    monkeypatch.chdir(elsewhere)
    (run,) = read_runs(ran_in / "out")
    command = card_mod.reproduce_command(run).replace(
        '"$(lm-latent-eval tasks-path)"', shlex.quote(str(lm_latent_eval.tasks_path()))
    )
    argv = shlex.split(command)
    model_args = dict(a.split("=", 1) for a in argv[argv.index("--model_args") + 1].split(","))
    assert model_args["pretrained"] == str(ran_in / "my_hmm")
    assert card_mod.reproduce_note(run) is None
    argv[argv.index("OUT")] = str(tmp_path / "again")
    run_lm_eval(argv[1:])
    (again,) = read_runs(tmp_path / "again")
    assert again.metrics["latent_perplexity,none"] == run.metrics["latent_perplexity,none"]


def test_reproduce_command_keeps_a_hub_id_and_says_where_an_older_runs_checkpoint_is():
    """A Hub id is kept as given (the recorded checkpoint is its snapshot, not the id); a relative checkpoint of a
    run that did not record its working_directory is kept relative, and the card says where to run the command."""
    config = {
        "model": "latent_hmm",
        "model_args": "pretrained=me/my-hmm",
        "checkpoint": "/cache/snapshots/abc",
    }
    run = TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", {"config": config}, [])
    run.results["configs"] = {"t": {"metadata": {"config_source": "/tasks/t.yaml"}}}
    assert "--model_args pretrained=me/my-hmm " in card_mod.reproduce_command(run)
    config |= {"model_args": "pretrained=my_hmm", "checkpoint": "my_hmm"}
    assert "--model_args pretrained=my_hmm " in card_mod.reproduce_command(run)
    note = card_mod.reproduce_note(run)
    assert note and "pretrained=my_hmm is relative to the folder lm_eval ran in" in note
    config["working_directory"] = "/home/me/project"
    assert "--model_args pretrained=/home/me/project/my_hmm " in card_mod.reproduce_command(run)
    assert card_mod.reproduce_note(run) is None


def test_reproduce_command_of_a_relative_include_path_without_the_working_directory_says_so():
    """A results file of an older run: a relative task YAML and no working_directory; the card says where to run it."""
    run = _synthetic_run([-3.0, -4.0], [2, 3])
    run.results["configs"] = {"t": {"metadata": {"config_source": "my_tasks/t.yaml"}}}
    assert " --include_path my_tasks " in card_mod.reproduce_command(run)
    note = card_mod.reproduce_note(run)
    assert note and "relative to the folder lm_eval ran in" in note


def test_reproduce_command_without_the_tasks_yaml_says_so():
    """A results file that does not name the task's YAML: the card says which folder its command assumes."""
    run = _synthetic_run([-3.0, -4.0], [2, 3])
    run.results["configs"] = {"t": {"metadata": {"version": 1}}}
    command = card_mod.reproduce_command(run)
    assert '--include_path "$(lm-latent-eval tasks-path)"' in command
    note = card_mod.reproduce_note(run)
    assert note and "does not name" in note and "--include_path" in note


def test_compare_is_vs_exact(runs, tmp_path):
    """Same documents: Δ equals the difference of lm-eval's log perplexities; outputs written."""
    from lm_latent_eval.cli import main

    a, b = compare_mod.select_run(runs["is"]), compare_mod.select_run(runs["exact"])
    c = compare_mod.paired_comparison(a, b, num_resamples=2000)
    expected = math.log(a.metrics["instance_perplexity,none"]) - math.log(
        b.metrics["instance_perplexity,none"]
    )
    assert c["delta_log_ppl"] == pytest.approx(expected, rel=1e-9) and c["unit"] == "model token"
    assert c["ci"][0] <= c["delta_log_ppl"] <= c["ci"][1] and 0 < c["p_value"] <= 1
    assert (
        main(
            [
                "compare",
                str(runs["is"]),
                str(runs["exact"]),
                "--output",
                str(tmp_path / "cmp"),
                "--resamples",
                "500",
            ]
        )
        == 0
    )
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 1000
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "paired bootstrap" in md
    # strict JSON (no bare NaN / Infinity): an undefined figure is null, and the table says N/A
    text = (tmp_path / "cmp" / "comparison.json").read_text()
    saved = json.loads(text, parse_constant=lambda name: pytest.fail(f"comparison.json holds {name}"))
    assert saved["a"]["monte_carlo_stderr"] is None  # IS here has no honest two-sided interval
    assert "nan" not in md.lower() and "| Monte Carlo stderr | " in md and "N/A" in md
    ess_row = next(line for line in md.splitlines() if line.startswith("| ess_mean |"))
    assert all(len(cell.split(".")[-1]) <= 2 for cell in ess_row.split("|")[2:4] if "." in cell)


def test_compare_refuses_different_documents(runs):
    a = compare_mod.select_run(runs["is"])
    b = compare_mod.select_run(runs["exact"])
    b.documents = b.documents[:-1]
    with pytest.raises(compare_mod.DocumentMismatch, match="different documents: A has 6 .* B has 5"):
        compare_mod.paired_comparison(a, b)


def _synthetic_run(log_likelihoods, num_tokens) -> TaskRun:
    docs = [
        ExactEstimate(f"doc {n}", int(t), float(ll))
        for n, (ll, t) in enumerate(zip(log_likelihoods, num_tokens))
    ]
    return TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", {"config": {}}, docs)


def test_paired_test_holds_its_level_and_detects_a_shift():
    """Under H0 (exchangeable noise on shared documents) p < 0.05 about 5% of the time; a real shift is detected."""
    rng = np.random.default_rng(0)
    rejections = []
    for _ in range(300):
        tokens = rng.integers(5, 40, size=40)
        base = -3.0 * tokens + rng.normal(0, 5, size=40)  # document difficulty, shared by both runs
        a = _synthetic_run(base + rng.normal(0, 1, size=40), tokens)
        b = _synthetic_run(base + rng.normal(0, 1, size=40), tokens)
        rejections.append(
            compare_mod.paired_comparison(a, b, num_resamples=1000, seed=int(rng.integers(1 << 30)))[
                "p_value"
            ]
            < 0.05
        )
    rate = float(np.mean(rejections))
    assert (
        abs(rate - 0.05) < 3 * math.sqrt(0.05 * 0.95 / 300) + 0.01
    )  # bootstrap p-values are slightly liberal
    tokens = rng.integers(5, 40, size=40)
    base = -3.0 * tokens + rng.normal(0, 5, size=40)
    shifted = compare_mod.paired_comparison(
        _synthetic_run(base, tokens), _synthetic_run(base - 0.1 * tokens, tokens)
    )
    assert shifted["delta_log_ppl"] == pytest.approx(-0.1) and shifted["p_value"] < 0.001


def test_card_names_ppl_and_upp_for_a_penalized_model():
    """KGLM-style samples (log weights with and without the unknown-word penalty) give four named figures."""
    rng = np.random.default_rng(0)
    docs = []
    for n in range(5):
        penalty = rng.integers(0, 3, size=32).astype(float)
        plain = rng.normal(-30.0, 1.0, size=32)
        docs.append(
            ISEstimate(
                f"doc {n}",
                10,
                float(np.logaddexp.reduce(plain - penalty) - np.log(32)),
                plain - penalty,
                unk_penalty=penalty,
            )
        )
    results = {
        "config": {
            "estimator_settings": {
                "estimator": "is",
                "num_samples": 32,
                "temperature": 1.0,
                "peek": True,
                "seed": 1,
            },
            "model": "latent_kglm",
        }
    }
    card = card_mod.build_card(
        TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "linked_wikitext2_tiny", results, docs),
        progress=False,
    )
    values = {f["name"]: f["value"] for f in card["figures"]}
    upp, ppl = (
        values["UPP (unknown-penalized): instance-level perplexity (Eq. 5)"],
        values["PPL (no unknown-word penalty): instance-level perplexity (Eq. 5)"],
    )
    expected_ppl = math.exp(
        -sum(float(np.logaddexp.reduce(d.log_weights_without_unk_penalty()) - np.log(32)) for d in docs) / 50
    )
    assert ppl == pytest.approx(expected_ppl) and upp > ppl
    assert "UPP (unknown-penalized): corpus-level perplexity (Eq. 6)" in values
    assert "PPL (no unknown-word penalty): certified upper bound (95%)" in values
    assert "PPL (no unknown-word penalty)" in card_mod.card_markdown(card)


@pytest.mark.parametrize(("estimator", "num_documents", "measured_at"), [("is", 150, 200), ("smc", 12, 10)])
def test_cards_quote_the_committed_coverage_benchmark(estimator, num_documents, measured_at):
    """The card's coverage sentence is the lowest and highest coverage the committed output of
    bench/interval_coverage.py measured for that estimator at the nearest corpus size (log scale)."""
    from lm_latent_eval.reports.coverage import COVERAGE_FILE, measured_coverage

    results = json.loads(COVERAGE_FILE.read_text(encoding="utf-8"))["results"]
    cov = [
        r["rows"][str(measured_at)]["coverage"]
        for r in results
        if r["setting"]["estimator"] == estimator
        and r["setting"]["smc_runs"] != 1
        and str(measured_at) in r["rows"]
    ]
    assert len(cov) >= 4
    sentence = measured_coverage(estimator, num_documents)
    assert f"at {measured_at} documents: {100 * min(cov):.0f}–{100 * max(cov):.0f}%" in sentence
    assert measured_coverage("beam", 10) == "coverage of beam statements not measured"


def test_compare_across_tokenizations_shows_the_unit_of_its_test(tmp_path):
    """A counts one token per word, B two: per token B looks better, per word A is. Every figure and the verdict are
    per word, and the page says so."""
    rng = np.random.default_rng(1)
    words = rng.integers(3, 12, size=20)
    texts = [" ".join(["w"] * int(n)) + f" d{i}" for i, n in enumerate(words)]  # unique texts, n + 1 words
    counts = np.array([len(t.split()) for t in texts])

    def run(tokens_per_word: int, nats_per_word: float) -> TaskRun:
        docs = [
            ExactEstimate(t, int(tokens_per_word * n), float(-nats_per_word * n + rng.normal(0, 0.1)))
            for t, n in zip(texts, counts)
        ]
        return TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", {"config": {}}, docs)

    with pytest.warns(UserWarning, match="per whitespace word"):
        c = compare_mod.paired_comparison(run(1, 2.5), run(2, 3.0), num_resamples=500)
    assert c["unit"] == "word" and c["delta_log_ppl"] < 0  # A better per word
    assert c["a"]["perplexity"] < c["b"]["perplexity"]  # the table agrees with the verdict
    assert c["a"]["perplexity"] == pytest.approx(math.exp(2.5), rel=0.01)
    text = compare_mod.comparison_markdown(c)
    assert "| perplexity per word |" in text and "A has the lower perplexity" in text
    fig = compare_mod.comparison_figure(c)  # the figure says what A and B are, and its unit
    assert fig._suptitle.get_text().startswith(f"A = {c['a']['label']}\nB = {c['b']['label']}\non t")
    scatter, bootstrap = fig.axes
    assert scatter.get_xlabel() == "A: log p̂ per word (nats)" and "nats per word" in bootstrap.get_xlabel()


def test_compare_folder_with_reruns_of_one_run_uses_the_newest(runs, tmp_path):
    """lm-eval writes a results file per run into the model's folder; a rerun must not make `compare` refuse."""
    import shutil

    from lm_latent_eval.cli import main

    folder = tmp_path / "is"
    shutil.copytree(runs["is"], folder)
    (results,) = folder.rglob("results_*.json")
    (samples,) = folder.rglob("samples_*.jsonl")
    stamp = results.stem.removeprefix("results_")
    later = "9999-01-01T00-00-00.000000"
    shutil.copy(results, results.with_name(f"results_{later}.json"))
    shutil.copy(samples, samples.with_name(samples.name.replace(stamp, later)))
    with pytest.warns(UserWarning, match=f"comparing the newest, results_{later}.json"):
        assert compare_mod.select_run(folder).results_file.name == f"results_{later}.json"
    assert (
        main(
            [
                "compare",
                str(folder),
                str(runs["exact"]),
                "--output",
                str(tmp_path / "c"),
                "--resamples",
                "200",
            ]
        )
        == 0
    )


def test_reproduce_command_names_the_device_used_and_the_models_pythonpath():
    """lm-eval records its --device default (cuda:0) for a CPU run; the card must say where the run ran, and give
    the PYTHONPATH a model class from the working directory needs."""
    config = {
        "model": "latent",
        "model_args": {"model": "my_model:MyLM", "device": "cuda:0"},
        "device": "cuda:0",
        "device_type": "cpu",
        "batch_size": "auto",
        "model_pythonpath": "/home/me/my project",
        "estimator_settings": {"estimator": "is", "num_samples": 8},
    }
    run = TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", {"config": config}, [])
    argv = shlex.split(card_mod.reproduce_command(run).replace('"$(lm-latent-eval tasks-path)"', "TASKS"))
    assert argv[:2] == ["PYTHONPATH=/home/me/my project", "lm_eval"]
    assert argv[argv.index("--device") + 1] == "cpu" and "cuda" not in " ".join(argv)


def test_import_root_is_the_folder_a_local_model_class_needs(tmp_path, monkeypatch):
    from lm_latent_eval.harness.provenance import import_root
    from lm_latent_eval.models.hmm import HMMLanguageModel

    (tmp_path / "local_model_pkg").mkdir()
    (tmp_path / "local_model_pkg" / "__init__.py").write_text("class MyLM:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from local_model_pkg import MyLM

    assert import_root(MyLM) == str(tmp_path)
    assert import_root(HMMLanguageModel) is None and import_root(np.ndarray) is None


def test_default_run_is_named_after_its_model_on_the_device_it_used(tmp_path, capsys):
    """No pretrained=: the output folder is the model's name (not lm-eval's random id, the same for every model), no
    CUDA warning for lm-eval's own --device default, and `report` lists only the files it wrote (no PNG for exact)."""
    import torch

    from lm_latent_eval.cli import main

    argv = ["--model", "latent_hmm", "--model_args", "estimator=exact", "--tasks", "latent_ppl_tiny",
            "--include_path", str(lm_latent_eval.tasks_path()), "--limit", "3",
            "--output_path", str(tmp_path / "out"), "--log_samples"]  # fmt: skip
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_lm_eval(argv)
    assert not [w for w in caught if "CUDA is not available" in str(w.message)]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["hmm"]
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert ".png" not in printed and not list((tmp_path / "out" / "cards").glob("*.png"))
    (card_file,) = (tmp_path / "out" / "cards").glob("hmm__latent_ppl_tiny__*.json")
    command = json.loads(card_file.read_text())["reproduce"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"--device {device}" in command and "model=hmm" in command


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_folder_without_perplexity_tasks_is_one_error_line(command, tmp_path, capsys):
    """Issue 34, item 15: ``report`` on a folder whose tasks are not perplexity tasks wrote no card and exited 0. Now
    it exits 2 with one line naming the tasks found (a real lm-eval layout: results and samples of arc_easy)."""
    from lm_latent_eval.cli import main

    run = tmp_path / "out" / "some__model"
    run.mkdir(parents=True)
    date = "2026-11-24T00-00-00.000000"
    (run / f"results_{date}.json").write_text(json.dumps({"results": {"arc_easy": {"acc,none": 0.5}}}))
    (run / f"samples_arc_easy_{date}.jsonl").write_text(json.dumps({"doc_id": 0, "acc": 1.0}) + "\n")
    folder = str(tmp_path / "out")
    argv = [command, folder] if command == "report" else [command, folder, folder]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no lm-latent-eval perplexity task among its results (arc_easy)" in err[0]
    assert not (tmp_path / "out" / "cards").exists()


@pytest.mark.parametrize(
    ("monte_carlo", "interval", "kind", "says", "never"),
    [
        (0.0094, 0.0120, "interval", "half-width / 1.96", "of the bound"),
        (0.34, math.nan, "bound", "not an interval on the true perplexity", "half-width"),
        (math.nan, math.nan, None, "lm-eval's Stderr is N/A", "half-width"),
    ],
)
def test_card_says_what_lm_evals_stderr_held(monte_carlo, interval, kind, says, never):
    """Issue 31: under estimator=elbo lm-eval's Stderr is the bound's own Monte Carlo error, and the card called it
    the 95% interval's half-width / 1.96 (an interval the ELBO never gives). The kind comes from the one decision
    that also fills lm-eval's Stderr (``CorpusEstimate.reported_stderr``)."""
    u = {"monte_carlo_stderr": monte_carlo, "interval_stderr": interval, "stderr_kind": kind, "level": 0.95,
         "normal_quantile": 1.959963984540054}  # fmt: skip
    line = card_render._stderr_line(u)
    assert says in line and never not in line


def test_comparison_figure_holds_every_label_inside_it(tmp_path):
    """Issue 34 (9): the figure's x label ran past its right edge (clipped). As drawn, every title, label and tick
    label lies inside the figure, and the two panels' texts do not overlap each other or the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rng = np.random.default_rng(2)
    tokens = rng.integers(5, 40, size=30)
    base = -3.0 * tokens + rng.normal(0, 5, size=30)
    a, b = (
        _synthetic_run(base + rng.normal(0, 1, size=30), tokens),
        _synthetic_run(base - 0.05 * tokens, tokens),
    )
    c = compare_mod.paired_comparison(a, b, num_resamples=300)
    c["unit"] = "model token"  # the longest unit a real run shows
    fig = compare_mod.comparison_figure(c)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    box = fig.bbox

    def drawn_ticks(ax):  # matplotlib keeps tick labels just outside the view; it does not draw them
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        return [t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1] + [
            t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1
        ]

    texts = [fig._suptitle] + [
        t
        for ax in fig.axes
        for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *drawn_ticks(ax))
        if t.get_text()
    ]
    for t in texts:
        e = t.get_window_extent(renderer)
        assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1 and box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1, (
            f"{t.get_text()!r} at {e} runs outside the figure {box}"
        )
    left, right = (ax.get_tightbbox(renderer) for ax in fig.axes)
    assert not left.overlaps(right), (left, right)
    title = fig._suptitle.get_window_extent(renderer)
    assert not any(title.overlaps(ax.get_tightbbox(renderer)) for ax in fig.axes)
    compare_mod.save_plot(c, tmp_path / "comparison.png")  # and saved as drawn
    assert (tmp_path / "comparison.png").stat().st_size > 1000


def _is_card_run(log_weights: list[np.ndarray]) -> TaskRun:
    """An IS run without peeking whose documents (10 tokens each) have these log weights."""
    docs = [
        ISEstimate(f"doc {n}", 10, float(np.logaddexp.reduce(lw) - np.log(lw.size)), lw)
        for n, lw in enumerate(log_weights)
    ]
    settings = {"estimator": "is", "num_samples": 64, "temperature": 1.0, "peek": False, "seed": 1}
    results = {"config": {"estimator_settings": settings}}
    return TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", results, docs)


def test_card_states_the_level_and_quantile_it_was_built_at():
    """Issue 42: ``report --level 0.9`` printed "95% interval", "half-width / 1.96" and "with 95% certainty" (fixed
    text) beside figures computed at 90%. The level and the normal quantile come from the run's policy."""
    from lm_latent_eval.estimators.policy import UncertaintyPolicy

    rng = np.random.default_rng(0)
    z = UncertaintyPolicy(level=0.9).normal_quantile
    # bounded weights: a two-sided interval (its Stderr line); heavy-tailed ones: the certified bound (the verdict)
    two_sided = _is_card_run([-30.0 + rng.uniform(0, 0.5, size=64) for _ in range(8)])
    one_sided = _is_card_run([rng.normal(-30.0, 4.0, size=64) for _ in range(8)])
    lines = []
    for run in (two_sided, one_sided):
        card = card_mod.build_card(run, level=0.9, progress=False)
        md = card_mod.card_markdown(card)
        # the coverage sentence quotes the benchmark of the 95% statements: not a statement of this card
        lines += [line for line in md.splitlines() if "measured coverage" not in line]
    text = "\n".join(lines)
    assert "| figure | value | 90% interval | what it is |" in text
    assert f"the 90% interval's half-width / {z:.4g}," in text and f"{z:.4g}" == "1.645"
    assert "Quote the certified bound: with 90% certainty" in text
    assert "95%" not in text and "1.96" not in text


def test_cards_what_to_try_is_the_estimators_own_advice():
    """The card asks the run's estimator what to try (``Estimator.advice``, the model not loaded) instead of testing
    which estimator it is: IS names SMC for a model with the stepwise part, then more samples, then peeking."""
    rng = np.random.default_rng(1)
    run = _is_card_run([rng.normal(-30.0, 4.0, size=64) for _ in range(8)])
    tries = card_mod.build_card(run, progress=False)["diagnostics"]["what_to_try"]
    assert tries == run.method.advice(run.estimator_settings, model=None)
    assert (
        tries[0].endswith("where the model has the stepwise part")
        and tries[-1] == "a peeking proposal (peek=true)"
    )


@pytest.mark.parametrize("change", ["delete a document's line", "edit the results' table"])
def test_report_refuses_samples_that_do_not_match_the_results(change, runs, tmp_path, capsys):
    """Issue 43, item 5: with one document's line deleted from the samples file, the card said 5 documents and figures
    the run's own table did not; a samples file whose document count, or whose recomputed instance-level perplexity,
    differs from the results file's is one error line naming both files."""
    from lm_latent_eval.cli import main

    folder = tmp_path / "run"
    shutil.copytree(runs["is"], folder)
    (samples,) = folder.rglob("samples_*.jsonl")
    (results_file,) = folder.rglob("results_*.json")
    if change == "delete a document's line":
        lines = samples.read_text().splitlines(keepends=True)
        samples.write_text("".join(lines[:2] + lines[3:]))
        expected = f"it holds {int(LIMIT) - 1} documents, the results' task 'latent_ppl_tiny' {LIMIT}"
    else:
        results = json.loads(results_file.read_text())
        results["results"]["latent_ppl_tiny"]["instance_perplexity,none"] *= 1.01
        results_file.write_text(json.dumps(results))
        expected = f"its {LIMIT} documents"
    assert main(["report", str(folder), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{samples} does not match {results_file.name}: " in err[0], err
    assert expected in err[0] and "rerun lm_eval with --log_samples" in err[0]
    assert not (tmp_path / "out").exists()


def test_the_card_counts_the_documents_computed_exactly_before_the_diagnostics_of_the_others():
    """exact_where_cheaper: the reliability section says how many documents were computed exactly, then describes
    the sampled ones; where every one was computed, that line alone."""
    smc = {"smc_runs": 4, "num_samples": 100, "ess_min": 12.0, "ess_mean": 33.4, "resampling_steps": 0.0}
    some = card_render._reliability_lines(smc | {"computed_exactly": 36, "num_documents": 44})
    assert some[0].startswith("- 36 of 44 documents computed exactly") and "describe the others" in some[0]
    assert some[1].startswith("- 4 independent runs") and len(some) == 2
    (whole,) = card_render._reliability_lines({"computed_exactly": 5, "num_documents": 5})
    assert whole.startswith("- 5 of 5 documents computed exactly") and "others" not in whole
    assert card_render._reliability_lines(smc | {"num_documents": 44})[0].startswith("- 4 independent runs")


def test_equal_estimates_compare_equal_whatever_each_runs_interval():
    """Issue 53 (3): one run's estimates got the bias correction + v̂/2 (its interval two-sided) and the other's not
    (its one-sided), so bit-for-bit equal log p̂ showed "Δ = 0.0001, p = 0.0001". One rule for both runs: Δ = 0,
    p = 1, and the comparison says that every estimate is equal."""
    rng = np.random.default_rng(0)
    two_sided = _is_card_run([-30.0 + rng.uniform(0, 0.5, size=64) for _ in range(8)])
    heavy = [rng.normal(-30.0, 4.0, size=64) for _ in range(8)]
    one_sided = _is_card_run(heavy)
    one_sided.results_file = Path("results_y.json")
    # the same log p̂ per document as the two-sided run, with heavy-tailed weights: no two-sided interval
    one_sided.documents = [
        dataclasses.replace(d, log_likelihood=t.log_likelihood)
        for d, t in zip(one_sided.documents, two_sided.documents)
    ]
    corpora = [compare_mod.corpus_estimate(r.documents) for r in (two_sided, one_sided)]
    assert [c.interval.two_sided for c in corpora] == [True, False]
    c = compare_mod.paired_comparison(two_sided, one_sided, num_resamples=500)
    assert c["delta_log_ppl"] == 0.0 and c["p_value"] == 1.0 and c["ci"] == [0.0, 0.0]
    assert c["identical"] and not c["same_run"] and not c["bias_corrected"]
    assert c["a_better_documents"] == c["b_better_documents"] == 0
    assert "the two runs drew the same estimates" in compare_mod.comparison_markdown(c)


def test_compare_a_run_with_itself_says_so(runs, tmp_path):
    from lm_latent_eval.cli import main

    assert (
        main(["compare", str(runs["is"]), str(runs["is"]), "--output", str(tmp_path), "--resamples", "200"])
        == 0
    )
    md = (tmp_path / "comparison.md").read_text()
    assert "**Every document's estimate is equal in A and B** (A and B are the same run)" in md
    assert "Δ = log PPL_A − log PPL_B = 0.0000" in md


def test_report_reads_the_document_of_each_row_in_either_releases_layout(runs, tmp_path):
    """Issue 53 (1): lm-eval 0.5 writes ``target: "0"`` and the text as the request's second argument; reading the
    target as the text made every document "0", one document for the certified bound (4.23 for an exact 16.73).
    Rewritten to 0.5's layout, the samples give the same documents, card and bound as the run lm-eval 0.4 wrote."""
    folder = tmp_path / "as_05"
    shutil.copytree(runs["is"], folder)
    (samples,) = folder.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for row in rows:
        row["target"] = "0"
        row["arguments"] = {"gen_args_0": {"arg_0": "", "arg_1": row["doc"]["text"]}}
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (before,), (after,) = read_runs(runs["is"]), read_runs(folder)
    assert [d.document for d in after.documents] == [r["doc"]["text"] for r in rows]
    assert [d.document for d in after.documents] == [d.document for d in before.documents]
    bounds = [
        {f["name"]: f for f in card_mod.build_card(r, progress=False)["figures"]}[
            "certified upper bound (95%)"
        ]
        for r in (before, after)
    ]
    assert bounds[0]["value"] == bounds[1]["value"]
    assert bounds[1]["value"] == pytest.approx(after.metrics["perplexity_upper_bound,none"], rel=1e-12)
    # a row none of whose fields holds the scored document (edited by hand) is one line naming file and line
    rows[2]["doc"]["text"] = rows[2]["arguments"]["gen_args_0"]["arg_1"] = "edited"
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(
        InputError, match=r"samples_.*\.jsonl: line 3: no field of the row holds the document"
    ):
        read_runs(folder)


def test_a_run_that_records_no_estimator_and_no_document_is_one_line(tmp_path):
    """Neither the results' settings nor a samples row names the estimator: one line, not an IndexError."""
    from lm_latent_eval.errors import InputError
    from lm_latent_eval.reports.lm_eval_output import TaskRun

    run = TaskRun(tmp_path / "results_x.json", tmp_path / "samples_t_x.jsonl", "t", {"config": {}})
    with pytest.raises(InputError, match="records no estimator and samples_t_x.jsonl holds no document"):
        _ = run.estimator
