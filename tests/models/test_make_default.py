"""Every ``make_default`` script parses its arguments first: ``--help`` prints help, and nothing is written (let alone
the bundled checkpoint overwritten) unless an output folder is given."""

from __future__ import annotations

import importlib

import pytest

from lm_latent_eval.models import MODELS
from lm_latent_eval.paths import DATA_DIR

# every bundled checkpoint's maker, from the model table
SCRIPTS = sorted({row.maker for row in MODELS.values() if row.maker})


def _bundled_files() -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in DATA_DIR.rglob("*") if p.is_file()}


def _must_not_run(*args, **kwargs):
    raise AssertionError("the script started its work without an --output-dir")


@pytest.mark.parametrize("module", SCRIPTS)
def test_make_default_help_and_missing_output_dir_write_nothing(module, capsys, monkeypatch):
    before = _bundled_files()
    script = importlib.import_module(module)
    for name in dir(
        script
    ):  # a script that ignored its arguments must fail here, not retrain the bundled model
        if name.startswith(("train_", "make_corpus", "generate_")):
            monkeypatch.setattr(script, name, _must_not_run)
    main = script.main
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0
    assert "--output-dir" in capsys.readouterr().out
    with pytest.raises(SystemExit) as missing:
        main([])
    assert missing.value.code == 2
    assert "--output-dir" in capsys.readouterr().err
    assert _bundled_files() == before
