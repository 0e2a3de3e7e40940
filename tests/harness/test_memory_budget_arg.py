"""model_args ``memory_budget`` (GiB; issue 45, item 3): accepted by the backends whose model plans its temporaries
(latent_kglm, latent_entitynlm), validated once with one line for a bad value, set on the model, recorded in the
results' config and joining the run's identity (chunks move a value within float32 rounding)."""

from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_latent_eval.harness.backends import LatentEntityNLMEval, LatentKGLMEval
from lm_latent_eval.harness.model_args import (
    ModelArgsError,
    backend_args_doc,
    parse_backend_args,
)
from lm_latent_eval.harness.provenance import run_identity
from lm_latent_eval.models.memory_plan import DEFAULT_MEMORY_BUDGET, GIB


@pytest.mark.parametrize("backend", [LatentKGLMEval, LatentEntityNLMEval])
def test_the_budget_reaches_the_model_and_the_results(backend):
    plain = backend(estimator="is", num_samples=4, device="cpu")
    small = backend.create_from_arg_string("estimator=is,num_samples=4,memory_budget=0.5", {"device": "cpu"})
    assert plain.model.memory_budget == DEFAULT_MEMORY_BUDGET and small.model.memory_budget == GIB // 2
    info, small_info = plain.get_model_info(), small.get_model_info()
    assert info["memory_budget_gib"] == DEFAULT_MEMORY_BUDGET / GIB and small_info["memory_budget_gib"] == 0.5
    assert run_identity(info) != run_identity(small_info)


@pytest.mark.parametrize("bad", ["-1", "0", "abc", "nan", "inf", True])
def test_a_bad_budget_is_one_line_naming_it(bad):
    with pytest.raises(ModelArgsError) as err:
        parse_backend_args("LatentEntityNLMEval", "entitynlm", {"memory_budget": bad, "device": "cpu"})
    message = str(err.value)
    assert "\n" not in message and message.startswith("model_args memory_budget must be a")


def test_only_models_with_a_plan_accept_it():
    given = {"memory_budget": 4, "device": "cpu"}
    assert parse_backend_args("LatentKGLMEval", "kglm", given).memory_budget == 4 * GIB
    with pytest.raises(ModelArgsError, match=r"unknown model_args \['memory_budget'\] for LatentHMMEval"):
        parse_backend_args("LatentHMMEval", "hmm", given)
    assert "memory_budget (float)" in backend_args_doc("entitynlm")
    assert "memory_budget" not in backend_args_doc("hmm")
