"""``cuda_graphs``: KGLM's and EntityNLM's samplers with their per-token step replayed from a CUDA graph.

On the CPU (always run): the setting is parsed, ``auto`` (the default) resolves per model as docs/speed.md says
(on a CUDA device: graphs for KGLM, eager for EntityNLM; never on the CPU), the setting is accepted as a model_arg and recorded in the run's provenance, changes
no number, and the static-buffer step that a graph captures (``sample_static`` / ``sample_latents_static`` run
without capture) draws eager's z with eager's log q, bit for bit. On a GPU (skipped without one): the captured
graph gives eager's z and log q, for both models, peeking or not, at τ ≠ 1, and over an IS estimate.
"""

from __future__ import annotations

import pytest
import torch

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.harness.provenance import NAMING_KEYS
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents
from lm_latent_eval.models.cuda_graphs import graphs_in_effect, parse_cuda_graphs, resolve_cuda_graphs
from lm_latent_eval.models.entitynlm.drawing import sample_latents_static

SETTINGS = [(1.0, True), (2.0, True), (0.5, False)]  # (τ, peek)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def documents(name, n=3):
    return bundled_documents(name)[:n]


@torch.no_grad()
def static_sample(model, x, k, tau, peek, generator, capture):
    """The static-buffer sampler of either model (the code path a CUDA graph captures)."""
    q = model.proposal
    if hasattr(q, "sample_static"):  # KGLM
        return q.sample_static(q.head_tables(x, tau, peek), k, x.numel(), generator, capture)
    heads, h_label, h_update = q.views(q.encode(x).unsqueeze(0), peek)
    return sample_latents_static(heads, h_label, h_update, k, tau, generator, capture)


def assert_same_draws(a, b):
    (za, qa), (zb, qb) = a, b
    assert za.keys() == zb.keys()
    for key in za:
        assert torch.equal(za[key], zb[key]), key
    assert torch.equal(qa, qb), float((qa - qb).abs().max())


def test_setting_is_parsed():
    assert parse_cuda_graphs(None) == "auto"
    assert [parse_cuda_graphs(v) for v in (True, "TRUE", 1, "on", False, "no", "auto")] == [
        "true", "true", "true", "true", "false", "false", "auto",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="cuda_graphs must be one of"):
        parse_cuda_graphs("sometimes")


def test_resolver_follows_the_documented_rule():
    # docs/speed.md "CUDA graphs": true forces graphs on CUDA, false never, auto = the model's measured choice there;
    # nothing on the CPU
    for auto in (True, False):
        assert not any(resolve_cuda_graphs(s, "cpu", auto) for s in ("true", "auto", "false"))
        assert resolve_cuda_graphs("true", "cuda", auto) and resolve_cuda_graphs(
            "true", torch.device("cuda:1"), auto
        )
        assert not resolve_cuda_graphs("false", "cuda:0", auto)
        assert resolve_cuda_graphs("auto", "cuda:0", auto) is auto
        assert resolve_cuda_graphs(None, "cuda", auto) is auto  # the default is auto


@pytest.mark.parametrize(("name", "on_cuda"), [("kglm", True), ("entitynlm", False)])
def test_auto_resolves_per_model_from_the_measured_figures(name, on_cuda):
    # KGLM: graphs 16% faster on an H100 (on by default on CUDA); EntityNLM: no gain (off); the CPU: off for both
    model, _ = load_model(name)
    assert model.cuda_graphs == "auto"
    assert not graphs_in_effect(model, "cpu") and not graphs_in_effect(model.proposal, "cpu")
    assert (
        graphs_in_effect(model, "cuda") is on_cuda and graphs_in_effect(model.proposal, "cuda:0") is on_cuda
    )
    model.cuda_graphs = "true"
    assert graphs_in_effect(model, "cuda") and not graphs_in_effect(model, "cpu")
    model.cuda_graphs = "false"
    assert not graphs_in_effect(model, "cuda")
    assert not graphs_in_effect(object(), "cuda")  # a model without the setting


@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
@pytest.mark.parametrize(("tau", "peek"), SETTINGS)
def test_static_step_draws_eager_z_and_log_q_on_cpu(name, tau, peek):
    model, _ = load_model(name)
    for i, doc in enumerate(documents(name)):
        x = model.tokenize(doc)
        with torch.no_grad():
            eager = model.proposal.sample(x, 50, tau, peek, torch.Generator().manual_seed(i))
        static = static_sample(model, x, 50, tau, peek, torch.Generator().manual_seed(i), capture=False)
        assert_same_draws(eager, static)


@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
def test_setting_is_accepted_and_changes_nothing_on_cpu(name):
    eager, _ = load_model(name, cuda_graphs="false")
    graphed, _ = load_model(name, cuda_graphs="true")
    assert eager.cuda_graphs == "false" and graphed.cuda_graphs == "true"
    doc = documents(name, 1)[0]
    x = eager.tokenize(doc)
    for tau, peek in SETTINGS:
        a = importance_log_weights(eager, x, num_samples=40, temperature=tau, peek=peek, document=doc)
        b = importance_log_weights(graphed, x, num_samples=40, temperature=tau, peek=peek, document=doc)
        assert (a == b).all()
    with pytest.raises(ValueError, match="cuda_graphs"):
        load_model(name, cuda_graphs="maybe")


@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
def test_model_arg_is_recorded_in_the_run_identity(name):
    pytest.importorskip("lm_eval")
    from lm_latent_eval.harness.backends import LatentEntityNLMEval, LatentKGLMEval

    backend = {"kglm": LatentKGLMEval, "entitynlm": LatentEntityNLMEval}[name]
    plain = backend(num_samples=4, device="cpu").get_model_info()
    info = backend(
        num_samples=4, device="cpu", cuda_graphs=True
    ).get_model_info()  # lm-eval parses true as bool
    assert info["cuda_graphs_requested"] == "true" and plain["cuda_graphs_requested"] == "auto"
    assert "cuda_graphs_requested" in NAMING_KEYS  # names the run; what it changes is "cuda_graphs"
    assert "cuda_graphs" not in info  # not in effect on the CPU: the results store's key is unchanged
    key = {k: v for k, v in info.items() if k not in NAMING_KEYS}
    assert key == {k: v for k, v in plain.items() if k not in NAMING_KEYS}


# --- on a GPU -------------------------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
@pytest.mark.parametrize(("tau", "peek"), SETTINGS)
def test_cuda_graph_draws_eager_z_and_log_q(name, tau, peek):
    model, _ = load_model(name, device="cuda")
    for i, doc in enumerate(documents(name)):
        x = model.tokenize(doc)
        for k in (1, 100, 3000):
            gens = [torch.Generator(device="cuda").manual_seed(i) for _ in range(3)]
            model.cuda_graphs = "false"
            with torch.no_grad():
                eager = model.proposal.sample(x, k, tau, peek, gens[0])
            static = static_sample(model, x, k, tau, peek, gens[1], capture=False)
            model.cuda_graphs = "true"
            with torch.no_grad():
                graphed = model.proposal.sample(x, k, tau, peek, gens[2])
            assert_same_draws(eager, static)
            assert_same_draws(eager, graphed)
            # the generator advanced exactly as in eager mode
            assert torch.equal(gens[0].get_state(), gens[2].get_state())


@needs_cuda
@pytest.mark.parametrize("name", ["entitynlm", "kglm"])
def test_cuda_graph_importance_weights_equal_eager(name):
    eager, _ = load_model(name, device="cuda", cuda_graphs="false")
    graphed, _ = load_model(name, device="cuda", cuda_graphs="true")
    for doc in documents(name):
        x = eager.tokenize(doc)
        a = importance_log_weights(eager, x, num_samples=2000, document=doc, device="cuda")
        b = importance_log_weights(graphed, x, num_samples=2000, document=doc, device="cuda")
        assert (a == b).all()
