"""Errors of our own command line and of our lm-eval backends arrive as one line and a non-zero exit, never as a
traceback; every other exception keeps its traceback (it may be a bug)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lm_latent_eval.cli import main
from lm_latent_eval.errors import InputError, UnsupportedError, UserError, excepthook
from lm_latent_eval.models import default_checkpoint

REPO = Path(__file__).resolve().parents[1]
KGLM = default_checkpoint("kglm")


def _one_error_line(text: str, prefix: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert "Traceback" not in text, text[-3000:]
    assert len(lines) == 1 and lines[0].startswith(prefix), text[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sweep", "--data", "/nope/docs.jsonl"], "/nope/docs.jsonl: no such file"),
        # the flag the user typed (issue 43, item 11: check-model said pretrained=, the model_arg's spelling)
        (["sweep", "--model", "hmm", "--pretrained", "/nope"], "--pretrained=/nope: no such folder"),
        (["check-model", "--model", "hmm", "--pretrained", "/nope"], "--pretrained=/nope: no such folder"),
        (["sweep", "--model", "no_such_pkg.mod:Cls"], "cannot import model class 'no_such_pkg.mod:Cls'"),
        (["report", "/nope"], "/nope: no lm-eval results_*.json"),
        (["compare", "/nope", "/nope"], "/nope: no lm-eval results_*.json"),
        (["sweep", "--temperatures", "0"], "temperature must be a finite number > 0"),
        (
            ["train", "kglm", "--output", "TMP/out", "--train", "/nope.jsonl"],
            "a knowledge graph is required",
        ),
        (
            ["distortion", "--reference", "/nope", "--model", "/nope", "--output", "TMP/out"],
            "--reference=/nope: no such folder",
        ),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a command writes stays here
    assert main([a.replace("TMP", str(tmp_path)) for a in argv]) == 2
    captured = capsys.readouterr()
    line = _one_error_line(captured.err, f"lm-latent-eval {argv[0]}: error: ")
    assert expected in line


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only our errors are shortened: an unexpected exception (here a TypeError from inside sweep) propagates."""
    from lm_latent_eval.reports.sweep import cli as sweep_cli

    def broken(args):
        raise TypeError("a bug")

    monkeypatch.setattr(sweep_cli, "run", broken)
    with pytest.raises(TypeError, match="a bug"):
        main(["sweep"])


def test_ctrl_c_during_a_subcommand_is_one_line(monkeypatch, capsys):
    """Issue 53, item 7: Ctrl-C during ``sweep`` was a KeyboardInterrupt traceback and wrote nothing, unsaid; it is one
    line saying what was kept, and the exit status of an interrupt (130)."""
    from lm_latent_eval.reports.sweep import cli as sweep_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_cli, "run", interrupted)
    assert main(["sweep"]) == 130
    line = _one_error_line(capsys.readouterr().err, "lm-latent-eval sweep: interrupted; nothing written")
    assert "fewer --temperatures, --beam-sizes or --num-samples make a shorter run" in line


def test_excepthook_prints_user_errors_in_one_line_and_passes_the_rest_on(capsys):
    seen = []
    excepthook(InputError, InputError("bad\nvalue"), None, previous=lambda *a: seen.append(a))
    assert capsys.readouterr().err.endswith("error: bad value\n") and seen == []
    excepthook(KeyError, KeyError("x"), None, previous=lambda *a: seen.append(a))
    assert len(seen) == 1 and capsys.readouterr().err == ""
    assert issubclass(InputError, ValueError) and issubclass(InputError, UserError)


def _lm_eval(model_args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    from hook_site import hook_site_dir

    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(
        f"import site\nsite.addsitedir({str(hook_site_dir(tmp_path))!r})\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{boot}{os.pathsep}{REPO}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-m", "lm_eval", "--model", "latent_hmm", "--model_args", model_args,
            "--tasks", "latent_ppl_tiny", "--include_path", str(REPO / "tasks"), "--limit", "2"]  # fmt: skip
    return subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize(
    ("model_args", "expected"),
    [
        ("num_sample=10", "did you mean num_sample → num_samples?"),
        pytest.param(
            "pretrained=/nope",
            "pretrained=/nope: no such folder (/nope), and it is not a Hugging Face Hub id",
            marks=pytest.mark.slow,  # the same path as above; load_model's message is tested in tests/models
        ),
        # issue 53 (7): another model's checkpoint was a ValueError traceback from HMMLanguageModel.__init__
        (
            f"pretrained={KGLM}",
            "a checkpoint of model kglm (by its config.json), not of model hmm; use model kglm",
        ),
        # the same paths as the in-process table below
        pytest.param("device=tpu", "device=tpu: not a torch device", marks=pytest.mark.slow),
        pytest.param(
            "estimator=smc,num_samples=100,max_samples=10",
            "max_samples=10 is below num_samples=100",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_lm_eval_with_bad_model_args_prints_one_error_line(model_args, expected, tmp_path):
    proc = _lm_eval(model_args, tmp_path)
    assert proc.returncode != 0
    errors = "\n".join(
        line for line in proc.stderr.splitlines() if " INFO " not in line and " WARNING " not in line
    )
    assert expected in _one_error_line(errors, "lm_eval: error: ")


def test_an_estimator_the_model_cannot_serve_is_one_line_when_the_backend_is_built():
    """Issue 34, item 5: estimator=exact on KGLM was a 61-line traceback at the first request; it is refused when the
    backend is built, as a UserError (lm_eval prints it as one line), naming auto and the estimators KGLM serves."""
    from lm_latent_eval.errors import UnsupportedError
    from lm_latent_eval.harness.backends import LatentKGLMEval

    with pytest.raises(UnsupportedError) as caught:
        LatentKGLMEval(estimator="exact", device="cpu")
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message
    assert message == "KGLM has no exact log_marginal(x); use estimator=auto, or one of smc, is, beam"


@pytest.fixture
def damaged(tmp_path) -> dict[str, Path]:
    """Copies of the bundled HMM checkpoint with a file cut off, and an empty folder."""
    import shutil

    folders = {name: tmp_path / name for name in ("EMPTY", "TRUNCATED", "CUT")}
    folders["EMPTY"].mkdir()
    for name in ("TRUNCATED", "CUT"):
        shutil.copytree(default_checkpoint("hmm"), folders[name])
    with open(folders["TRUNCATED"] / "model.safetensors", "r+b") as fh:
        fh.truncate(1000)
    config = folders["CUT"] / "config.json"
    config.write_bytes(config.read_bytes()[:40])
    return folders


@pytest.mark.parametrize(
    ("backend", "model_args", "expected"),
    [
        (
            "LatentHMMEval",
            {"pretrained": str(KGLM)},
            (
                f"pretrained={KGLM}: a checkpoint of model kglm (by its config.json), not of model hmm; use model kglm "
                "(--model latent_kglm), or name a checkpoint of hmm"
            ),
        ),
        (
            "LatentHMMEval",
            {"pretrained": "EMPTY"},
            "pretrained=EMPTY: an empty folder; name a checkpoint folder (config.json, model.safetensors)",
        ),
        (
            "LatentHMMEval",
            {"pretrained": "TRUNCATED"},
            (
                "pretrained=TRUNCATED: TRUNCATED/model.safetensors is cut off or damaged (Error while deserializing "
                "header: incomplete metadata, file not fully covered); copy or download the checkpoint again"
            ),
        ),
        (
            "LatentHMMEval",
            {"pretrained": "CUT"},
            (
                "pretrained=CUT: CUT/config.json is not valid JSON (Unterminated string starting at: line 4 column 3 "
                "(char 37)): cut off or damaged; copy or download the checkpoint again"
            ),
        ),
        pytest.param(
            "LatentHMMEval",
            {"device": "mps"},
            "device=mps: not available on this machine; use cpu",
            marks=pytest.mark.skipif(
                torch.backends.mps.is_available() or torch.cuda.is_available(), reason="has mps or cuda"
            ),
        ),
        (
            "LatentHMMEval",
            {"device": "tpu"},
            "device=tpu: not a torch device; use cpu, cuda or cuda:N (mps on a Mac)",
        ),
        (
            "LatentMaskedEval",
            {"policy_temperature": -1},
            "policy_temperature must be a finite number >= 0 (0: deterministic), got -1.0",
        ),
        ("LatentLDAEval", {"unknown_words": "foo"}, "unknown_words must be one of drop, error, got 'foo'"),
        (
            "LatentHMMEval",
            {"estimator": "smc", "num_samples": 100, "max_samples": 10},
            (
                "bad model_args for LatentHMMEval: max_samples=10 is below num_samples=100: the precision target starts "
                "from num_samples and grows up to max_samples; raise max_samples or lower num_samples"
            ),
        ),
    ],
)
def test_a_bad_checkpoint_or_model_arg_is_one_line_naming_it(backend, model_args, expected, damaged):
    """Issue 53, items 7 and 8: another model's checkpoint, an empty folder, a cut-off model.safetensors or
    config.json, a device torch does not know or this machine lacks, a negative policy_temperature, an unknown
    unknown_words, and max_samples below num_samples were each a traceback (or, for max_samples, a run of 10
    particles blamed on SMC); each is a UserError (one line under lm_eval) naming the file or setting and what to do."""
    from lm_latent_eval.harness import backends

    folders = {name: str(path) for name, path in damaged.items()}
    given = {k: folders.get(v, v) if isinstance(v, str) else v for k, v in model_args.items()}
    with pytest.raises(UserError) as caught:
        getattr(backends, backend)(**{"device": "cpu", **given})
    for name, path in folders.items():
        expected = expected.replace(name, path)
    assert str(caught.value) == expected


def test_apply_chat_template_is_refused_in_one_line(tmp_path):
    """Issue 53, item 7: ``--apply_chat_template`` raised lm-eval's NotImplementedError (a traceback); our backends
    have no chat template and say so as a UserError."""
    from lm_eval_runs import run_lm_eval

    from lm_latent_eval.harness.model_args import NO_CHAT_TEMPLATE

    argv = ["--model", "latent_hmm", "--tasks", "latent_ppl_tiny", "--include_path", str(REPO / "tasks"),
            "--limit", "1", "--device", "cpu", "--output_path", str(tmp_path), "--apply_chat_template"]  # fmt: skip
    with pytest.raises(UnsupportedError) as caught:
        run_lm_eval(argv)
    assert str(caught.value) == NO_CHAT_TEMPLATE


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sweep", "--num-smaples", "10"], "unrecognized arguments: --num-smaples 10 (did you mean --num-smaples → --num-samples?)"),
        (["sweep", "--num-smaples=10"], "(did you mean --num-smaples → --num-samples?)"),
        (["report", "out", "--beam-szie", "3"], "(did you mean --beam-szie → --beam-size?)"),
        (["compare", "a", "b", "--resamles", "5"], "(did you mean --resamles → --resamples?)"),
        (["lda-peers", "--pretraind", "x"], "(did you mean --pretraind → --pretrained?)"),
        # an option of one model's trainer (a sub-parser of train)
        (["train", "hmm", "--train", "x", "--output", "y", "--num-stats", "4"], "(did you mean --num-stats → --num-states?)"),
        # a misspelled required option: argparse says it is missing before it says what it did not recognize
        (["train", "hmm", "--train", "x", "--outptu", "y"], "required: --output (did you mean --outptu → --output?)"),
        (["distortion", "--refrence", "x", "--model", "y", "--output", "o"], "required: --reference (did you mean --refrence → --reference?)"),
        (["check-model", "--modle", "x"], "required: --model (did you mean --modle → --model?)"),
        (["sweeep"], "invalid choice: 'sweeep'"),
        (["sweeep"], "(did you mean sweep?)"),
        (["train", "hmmm", "--output", "x"], "(did you mean hmm?)"),
        # issue 53 (7): a math domain error and an empty bootstrap's IndexError before
        (["report", "out", "--level", "95"], "argument --level: expected a number strictly between 0 and 1 (e.g. 0.95), got '95'"),
        (["report", "out", "--level", "1.5"], "argument --level: expected a number strictly between 0 and 1"),
        (["compare", "a", "b", "--resamples", "0"], "argument --resamples: expected a whole number of at least 1, got '0'"),
    ],
)  # fmt: skip
def test_a_misspelled_cli_flag_gets_a_did_you_mean(argv, expected, capsys):
    """Issue 34, item 15: a misspelled model_arg got "did you mean", a misspelled flag of a subcommand did not; it now
    does for every subcommand, as ``--flag value`` or ``--flag=value``, where the flag is required and for a misspelled
    subcommand."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert expected in err[-1] and "error: " in err[-1]


@pytest.mark.parametrize("command", ["sweep", "distortion"])
@pytest.mark.parametrize("spelling", [["--output-dir", "OUT"], ["--output-dir=OUT"]])
def test_the_former_output_dir_still_works_with_a_deprecation_warning(command, spelling, monkeypatch, capsys):
    """Issue 34, item 15: the subcommands mixed ``--output`` and ``--output-dir``. ``--output-dir`` (sweep's and
    distortion's former name) is still accepted, as ``--output``, with a warning naming the new spelling."""
    import importlib

    from lm_latent_eval.cli import COMMANDS

    seen = {}
    module = importlib.import_module(COMMANDS[command][0])
    monkeypatch.setattr(module, "run", lambda args: seen.setdefault("args", args) and 0)
    required = ["--reference", "r", "--model", "m"] if command == "distortion" else []
    with pytest.warns(FutureWarning, match="--output-dir is deprecated .*use --output"):
        assert main([command, *required, *spelling]) == 0
    assert str(seen["args"].output_dir) == "OUT"
    assert "usage" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("loader", "argument"),
    [
        ("lm_latent_eval.harness.perplexity_task:load_corpus", "data_file"),
        ("lm_latent_eval.models.rnng.treebank:load_ptb", "data_file"),
        ("lm_latent_eval.models.entitynlm.conll:load_conll2012", "data_file"),
        ("lm_latent_eval.models.kglm.linked_wikitext:load_linked_wikitext2", "data_dir"),
        ("lm_latent_eval.models.lda.corpus:load_pydoc_topics", "data_file"),
        ("lm_latent_eval.models.lda.corpus:load_pydoc_completion", "data_file"),
    ],
)
def test_every_task_loader_refuses_a_missing_file_as_a_user_error(loader, argument, tmp_path):
    """Issue 34, item 15: ptb_rnng with a data_file that does not exist printed a 54-line FileNotFoundError (it read
    the file to sniff its format before checking it). Every task's custom_dataset gives a UserError (one line under
    lm_eval) that names the path."""
    import importlib

    module, name = loader.split(":")
    missing = tmp_path / "nope" / "test.txt"
    with pytest.raises(UserError, match=str(missing).replace("\\", "\\\\")) as caught:
        getattr(importlib.import_module(module), name)(**{argument: str(missing)})
    assert "\n" not in str(caught.value)


NOT_UTF8 = b"\xff\xfe not utf-8\n"


@pytest.mark.parametrize(
    ("loader", "argument", "first_line"),
    [
        ("lm_latent_eval.harness.perplexity_task:load_corpus", "data_file", b'{"text": "a b"}\n'),
        ("lm_latent_eval.models.rnng.treebank:load_ptb", "data_file", b"(S (NP the cat) (VP sat))\n"),
        ("lm_latent_eval.models.rnng.treebank:read_sentences", "path", b"the cat sat\n"),
        ("lm_latent_eval.models.entitynlm.conll:load_conll2012", "data_file", b"\n"),
        ("lm_latent_eval.models.kglm.linked_wikitext:load_linked_wikitext2", "data_dir", b"\n"),
        ("lm_latent_eval.models.lda.corpus:load_pydoc_topics", "data_file", b"a b\n"),
        ("lm_latent_eval.models.corpora:read_documents", "path", b"(S (NP the cat) (VP sat))\n"),
    ],
)
def test_every_data_loader_names_the_file_and_line_that_is_not_utf8(loader, argument, first_line, tmp_path):
    """Issue 43, item 8: the task loaders that read a file themselves (treebanks, CoNLL-2012, Linked WikiText-2, the
    sweep's documents) gave a UnicodeDecodeError traceback naming no file or line; every one reads through
    ``documents.text_lines`` now."""
    import importlib

    module, name = loader.split(":")
    bad = tmp_path / ("test.jsonl" if "load_corpus" in loader or "conll" in loader else "test.txt")
    if argument == "data_dir":
        for split in ("train", "valid", "test"):
            (tmp_path / f"{split}.jsonl").write_bytes(first_line + NOT_UTF8)
        bad, value = tmp_path / "valid.jsonl", tmp_path
    else:
        bad.write_bytes(first_line + NOT_UTF8)
        value = bad
    with pytest.raises(InputError) as caught:
        getattr(importlib.import_module(module), name)(**{argument: str(value)})
    assert str(caught.value) == f"{bad}:2: not UTF-8 text (byte 0xff at column 1); save the file as UTF-8"


def _leaf_parsers(parser: argparse.ArgumentParser):
    """``parser``, or each of its sub-parsers where it has some (``train <model>``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for sub in action.choices.values():
            yield from _leaf_parsers(sub)


@pytest.mark.parametrize(
    "command", ["sweep", "report", "compare", "train", "lda-peers", "distortion", "fit-value-head"]
)
def test_every_subcommand_that_writes_files_takes_output(command):
    """Issue 34, item 15: the subcommands mixed ``--output`` and ``--output-dir``. Every one that writes files takes
    ``--output`` (``--output-dir``, a former name, is a deprecated alias: the test above)."""
    import importlib

    from lm_latent_eval.cli import COMMANDS

    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    for leaf in _leaf_parsers(parser):
        options = [set(a.option_strings) for a in leaf._actions]
        assert any("--output" in o for o in options), f"{command}: {leaf.prog}"
        assert all("--output" in o for o in options if "--output-dir" in o), f"{command}: {leaf.prog}"


def test_ctrl_c_says_how_to_resume(capsys, tmp_path, monkeypatch):
    """Issue 34, item 17: a Ctrl-C gave lm-eval's 40-line traceback with no hint that results_dir= makes a run
    resumable. Under lm-eval's command line the backend sets the hint on the hook it installs; the hook prints it as
    one line instead of the traceback."""
    from lm_latent_eval import errors
    from lm_latent_eval.harness.backends import LatentHMMEval

    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    LatentHMMEval(device="cpu")
    assert sys.excepthook is sys.__excepthook__  # a user's script keeps its own hook
    monkeypatch.setattr(errors, "_program", lambda: "lm_eval")  # as if run by lm_eval
    LatentHMMEval(device="cpu")
    capsys.readouterr()  # what building the backend logged (a handler an earlier test closed may complain here)
    hint = sys.excepthook.interrupt_hint
    excepthook(KeyboardInterrupt, KeyboardInterrupt(), None, interrupt_hint=hint)
    line = _one_error_line(capsys.readouterr().err.split(": ", 1)[1], "interrupted; add results_dir=DIR")
    assert "a rerun of the same command then loads every document already estimated" in line
    lm = LatentHMMEval(device="cpu", results_dir=str(tmp_path))
    capsys.readouterr()
    excepthook(KeyboardInterrupt, KeyboardInterrupt(), None, interrupt_hint=sys.excepthook.interrupt_hint)
    line = _one_error_line(capsys.readouterr().err.split(": ", 1)[1], "interrupted; rerun the same command")
    assert str(lm.results_store.folder) in line


def test_a_negative_integer_model_arg_gets_the_settings_rule_not_a_type_error():
    """Issue 43, item 9: lm-eval's command line hands ``num_samples=-5`` over as the float -5.0, which was refused as
    "must be an integer, got -5.0" (and ``seed=-1`` with it, though a script's ``LatentHMMEval(seed=-1)`` was
    accepted). A whole float is that integer; the rule on each setting is EstimatorSettings' alone: K > 0, a seed of
    any sign (it is hashed with the document's text), a fraction refused."""
    from lm_latent_eval.errors import InputError
    from lm_latent_eval.estimators import EstimatorSettings
    from lm_latent_eval.harness.backends import LatentHMMEval

    with pytest.raises(UserError) as caught:
        LatentHMMEval(device="cpu", num_samples=-5.0)
    assert (
        str(caught.value)
        == "bad model_args for LatentHMMEval: num_samples must be a positive integer, got -5"
    )
    assert (
        LatentHMMEval(device="cpu", seed=-1.0).settings.seed
        == -1
        == LatentHMMEval(device="cpu", seed=-1).settings.seed
    )
    with pytest.raises(UserError, match="num_samples must be an integer, got 2.5"):
        LatentHMMEval(device="cpu", num_samples=2.5)
    with pytest.raises(InputError, match=r"seed must be an integer \(any sign\), got 1.5"):
        EstimatorSettings(seed=1.5)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (
            None,
            "no lm-latent-eval backend answered this task's requests. This task needs one (--model latent_hmm",
        ),
        ("documents", "the lm-latent-eval backend estimated 1 other texts in its latest batch (e.g. '')"),
        (
            "conditionals",
            "answered loglikelihood requests, not loglikelihood_rolling ones: a perplexity task needs ",
        ),
    ],
)
def test_a_missing_estimate_names_its_cause(batch, expected):
    """Issue 43, item 9: "This task needs an lm-latent-eval backend" was said when the backend was ours and the cause
    was the task's output_type or requests that carry another text (as lm-eval 0.5's ("", text)); the reason now
    follows from what the backend's latest batch holds."""
    from lm_latent_eval.estimators import EstimatorSettings, ExactEstimate
    from lm_latent_eval.harness.exchange import Conditional, EstimateExchange, NoEstimateError

    exchange = EstimateExchange.begin(EstimatorSettings("exact"))
    if batch == "documents":
        exchange.put_documents({"": ExactEstimate("", 0, 0.0)})
    elif batch == "conditionals":
        exchange.put_conditionals({("the", " cat"): Conditional(-1.0, 1)})
    with pytest.raises(NoEstimateError) as caught:
        exchange.document("the cat sat", -3.0)
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message and expected in message
    assert ("needs one" in message) == (batch is None)


def test_a_data_file_that_is_not_utf8_or_is_a_folder_is_one_line_naming_it(tmp_path):
    """Issue 43, items 8 and 11: a non-UTF-8 data file was a UnicodeDecodeError traceback naming no file or line, and
    a folder given as data_file got "no such file"."""
    from lm_latent_eval.documents import read_texts

    bad = tmp_path / "docs.txt"
    bad.write_bytes(b"a good line\n\xff\xfe not utf-8\n")
    with pytest.raises(InputError) as caught:
        read_texts(bad)
    assert str(caught.value) == f"{bad}:2: not UTF-8 text (byte 0xff at column 1); save the file as UTF-8"
    with pytest.raises(UserError) as caught:
        read_texts(tmp_path)
    assert str(caught.value) == f"{tmp_path}: a folder, not a file; name a file in it"


def test_report_on_a_damaged_samples_file_is_one_line_naming_the_line(tmp_path, capsys):
    """Issue 43, item 8: a corrupted samples jsonl given to ``report`` was a JSONDecodeError traceback."""
    run = tmp_path / "out" / "some__model"
    run.mkdir(parents=True)
    date = "2026-11-24T00-00-00.000000"
    (run / f"results_{date}.json").write_text(json.dumps({"results": {"latent_ppl_tiny": {}}}))
    samples = run / f"samples_latent_ppl_tiny_{date}.jsonl"
    samples.write_text('\n{"doc_id": 1, "corpus_perplex\n')
    assert main(["report", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err, "lm-latent-eval report: error: ")
    assert f"{samples}:2: not a JSON line (" in line and "damaged" in line


def test_results_dir_on_a_file_and_an_unknown_lda_format_are_one_line(tmp_path):
    """Issue 43, item 8: ``results_dir=`` naming a file was a NotADirectoryError traceback from mkdir, and
    ``lda_format=foo`` a ValueError traceback from the loader; both are user errors (one line under lm_eval)."""
    from lm_latent_eval.harness.backends import LatentHMMEval
    from lm_latent_eval.models import load_model

    a_file = tmp_path / "afile"
    a_file.write_text("")
    with pytest.raises(UserError) as caught:
        LatentHMMEval(estimator="exact", device="cpu", results_dir=str(a_file))
    message = str(caught.value)
    assert message.startswith(f"results_dir={a_file}: cannot keep results there") and "\n" not in message
    assert "name a folder you can write" in message
    with pytest.raises(UserError, match=r"lda_format must be auto or one of \(.*\), got 'foo'"):
        load_model("lda", lda_format="foo")


@pytest.mark.parametrize("backend", ["LatentHMMEval", "LatentKGLMEval"])
def test_a_num_samples_that_cannot_fit_memory_is_one_line_before_any_work(backend, monkeypatch):
    """Issue 43, item 8: ``num_samples=1000000000`` was a 7.45 GiB allocation error (a traceback) at the first
    document under an 8 GB cap; it is refused when the backend is built, naming the setting, the memory it needs and
    what fits, from what a run holds at least (K log weights; KGLM's memory_plan for its sampler). A reasonable K
    (10,000, or 10⁶ on the HMM) is never refused."""
    from lm_latent_eval.estimators import registry
    from lm_latent_eval.harness import backends

    monkeypatch.setattr(registry, "available_memory", lambda device: 8 * 2**30)  # as under an 8 GB cap
    cls = getattr(backends, backend)
    with pytest.raises(UserError) as caught:
        cls(estimator="is", num_samples=1_000_000_000, device="cpu")
    message = str(caught.value)
    assert (
        "\n" not in message
        and "num_samples=1000000000 needs 29.8 GiB for a document's log weights" in message
    )
    assert (
        "more than the 8.0 GiB of memory left; use a smaller num_samples (at most about 270,000,000 fit"
        in message
    )
    cls(estimator="is", num_samples=10_000, device="cpu")
    if backend == "LatentHMMEval":
        cls(estimator="smc", num_samples=1_000_000, device="cpu")
