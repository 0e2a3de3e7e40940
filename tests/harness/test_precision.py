"""model_args ``precision`` (issue 45, item 4): validated once, applied while a backend estimates, recorded in the
results' config and the estimate card. On the CPU bfloat16 moves log p̂ by about the rounding that
bench/precision_shift.py measured (never not at all), and float32, the default, leaves every number as it was."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from lm_latent_eval.estimators import EstimatorSettings, ISEstimate, resolve
from lm_latent_eval.estimators.diagnostics import log_mean_exp
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.harness.backends import LatentEntityNLMEval, LatentHMMEval, LatentKGLMEval
from lm_latent_eval.harness.model_args import ModelArgsError, parse_backend_args
from lm_latent_eval.harness.provenance import NAMING_KEYS, run_identity
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.precision import matmul_precision
from lm_latent_eval.reports import card as card_mod
from lm_latent_eval.reports.lm_eval_output import TaskRun

REPO = Path(__file__).resolve().parents[2]
MEASURED = REPO / "bench" / "precision_shift" / "README.md"
BACKENDS = {"kglm": LatentKGLMEval, "entitynlm": LatentEntityNLMEval}


def measured(name: str, *columns: str) -> float:
    """A figure of bench/precision_shift/README.md's bfloat16 row for ``name``: the row whose leading cells are
    ``name, *columns[:-1]``, read in the column headed ``columns[-1]``."""
    *lead, column = columns
    for table in re.split(r"\n\n", MEASURED.read_text(encoding="utf-8")):
        rows = [
            [c.strip() for c in line.strip("|").split("|")]
            for line in table.splitlines()
            if line.startswith("|")
        ]
        if not rows or column not in rows[0]:
            continue
        for row in rows[2:]:
            if row[: len(lead) + 1] == [name, *lead] and "bfloat16" in row:
                return float(row[rows[0].index(column)])
    raise AssertionError(f"{MEASURED} has no bfloat16 row for {name} {lead} under {column!r}")


def test_a_bad_precision_is_one_line_naming_the_setting_and_its_values():
    with pytest.raises(ModelArgsError) as err:
        parse_backend_args("LatentHMMEval", "hmm", {"precision": "fp16", "device": "cpu"})
    assert str(err.value) == "model_args precision must be one of float32, tf32, bfloat16, got 'fp16'"
    given = {"device": "cpu"}
    assert parse_backend_args("LatentHMMEval", "hmm", given).precision == "float32"
    assert parse_backend_args("LatentHMMEval", "hmm", {**given, "precision": "TF32"}).precision == "tf32"


def test_the_precision_in_effect_is_recorded_and_keys_the_run():
    """tf32 has no effect on the CPU: recorded as asked for (a naming key) and float32 in effect, so the results
    store's key is float32's; bfloat16 changes the numbers and the key."""
    infos = {
        p: LatentHMMEval(
            estimator="exact", device="cpu", **({} if p is None else {"precision": p})
        ).get_model_info()
        for p in (None, "float32", "tf32", "bfloat16")
    }
    assert [infos[p]["precision"] for p in infos] == ["float32", "float32", "float32", "bfloat16"]
    assert infos["tf32"]["precision_requested"] == "tf32" and "precision_requested" in NAMING_KEYS
    assert run_identity(infos[None]) == run_identity(infos["float32"]) == run_identity(infos["tf32"])
    assert run_identity(infos["bfloat16"]) != run_identity(infos["float32"])


def test_the_card_states_the_precision():
    lw = np.linspace(-31.0, -30.0, 64)
    doc = ISEstimate("doc", 10, log_mean_exp(lw), lw)
    settings = {"estimator": "is", "num_samples": 64, "temperature": 1.0, "peek": True, "seed": 1}
    config = {"estimator_settings": settings, "precision": "bfloat16", "dtype": "float32"}
    run = TaskRun(Path("results_x.json"), Path("samples_x.jsonl"), "t", {"config": config}, [doc])
    card = card_mod.build_card(run, progress=False)
    assert card["model"]["precision"] == "bfloat16"
    assert "| precision | bfloat16 |" in card_mod.card_markdown(card)


def test_the_context_restores_torchs_settings_after_an_error():
    before = torch.backends.mkldnn.enabled, torch.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError), matmul_precision("bfloat16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and not torch.backends.mkldnn.enabled
        raise RuntimeError("inside")
    assert (torch.backends.mkldnn.enabled, torch.is_autocast_enabled("cpu")) == before


@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
def test_bfloat16_moves_log_p_by_the_measured_rounding(name):
    """float32's IS draws scored again in bfloat16: every document's log p̂ moves (the setting is applied), by at
    most twice the largest shift bench/precision_shift.py measured on the bundled corpus (the rounding, not noise)."""
    model, _ = load_model(name)
    bound = 2 * measured(name, "max abs(δ log p̂) per document")
    shifts = []
    with torch.no_grad():
        for n, text in enumerate(bundled_documents(name)[:3]):
            x = model.tokenize(text)
            z, _ = model.proposal.sample(x, 64, generator=torch.Generator().manual_seed(n))
            lw = {}
            for p in ("float32", "bfloat16"):
                with matmul_precision(p, "cpu"):
                    lw[p] = (model.log_joint(x, z) - model.proposal.log_prob(x, z)).numpy()
            shifts.append(log_mean_exp(lw["bfloat16"]) - log_mean_exp(lw["float32"]))
    assert all(s != 0 for s in shifts), shifts
    assert max(abs(s) for s in shifts) <= bound, (shifts, bound)


@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
def test_float32_leaves_every_number_as_it_was(name):
    """The default: the estimates inside ``precision=float32`` are the estimates without any context, bit for bit,
    whatever ran at another precision in between (cached encodings are keyed by the precision)."""
    model, _ = load_model(name)
    texts = bundled_documents(name)[:2]
    for estimator in ("is", "smc"):
        run = resolve(EstimatorSettings(estimator, num_samples=32, seed=5, target_se=0), model)
        plain = [run.estimate(t).log_weights for t in texts]
        with matmul_precision("bfloat16", "cpu"):
            lowered = [run.estimate(t).log_weights for t in texts]
        with matmul_precision("float32", "cpu"):
            again = [run.estimate(t).log_weights for t in texts]
        assert all(np.array_equal(a, b) for a, b in zip(plain, again))
        assert not all(np.array_equal(a, b) for a, b in zip(plain, lowered))


def test_the_backend_runs_bfloat16_in_its_forked_workers_and_float32_by_default():
    """EntityNLM's backend: precision=bfloat16 gives the same numbers in two forked processes as in one (they inherit
    autocast), within twice the largest same-seed shift the bench measured for IS at its K (in Monte Carlo standard errors)
    of float32's, and not float32's; no precision and precision=float32 are the same run."""
    from lm_eval.api.instance import Instance

    texts = bundled_documents("entitynlm")[:4]
    requests = [Instance("loglikelihood_rolling", {}, (t,), n) for n, t in enumerate(texts)]
    common = {"estimator": "is", "num_samples": 1000, "seed": 1234, "target_se": 0, "device": "cpu"}
    values = {
        key: BACKENDS["entitynlm"](**common, **given).loglikelihood_rolling(requests, disable_tqdm=True)
        for key, given in {
            "default": {"workers": 1},
            "float32": {"workers": 2, "precision": "float32"},
            "bf16 one": {"workers": 1, "precision": "bfloat16"},
            "bf16 two": {"workers": 2, "precision": "bfloat16"},
        }.items()
    }
    assert values["default"] == values["float32"]
    assert values["bf16 one"] == values["bf16 two"]
    model, _ = load_model("entitynlm")
    run = resolve(EstimatorSettings("is", num_samples=1000, seed=1234, target_se=0), model)
    stderr = np.array([np.sqrt(run.estimate(t).error(DEFAULT_POLICY).relative_variance) for t in texts])
    shift = np.abs(np.array(values["bf16 one"]) - np.array(values["default"]))
    assert (shift > 0).any()
    assert (shift <= 2 * measured("entitynlm", "is", "max abs(Δ) / stderr") * stderr).all(), (shift, stderr)
