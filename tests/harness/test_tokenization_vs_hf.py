"""``--model latent_tokenization`` through real lm_eval runs: canonical = lm-eval's ``hf`` backend, marginals above it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from test_builtin_tasks import local_copy_of
from tiny_models import make_tiny_bpe_gpt2

import lm_latent_eval.harness.backends  # noqa: F401  (registers --model latent_tokenization)
from lm_latent_eval.harness.backends import LatentTokenizationEval


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Context length 16: wikitext pages (hundreds of BPE tokens) need many rolling windows."""
    return make_tiny_bpe_gpt2(tmp_path_factory.mktemp("bpe") / "gpt2", n_positions=16)


def run(model: str, model_args: str, task: str, manager, batch_size=1) -> dict:
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[task], task_manager=manager,
                                   device="cpu", batch_size=batch_size, bootstrap_iters=0, log_samples=True)  # fmt: skip


def per_request(out: dict, task: str) -> list:
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    return [resp for s in samples for resp in s["resps"]]


@pytest.mark.parametrize("hf_batch_size", [1, 4])
def test_canonical_reproduces_hf_on_wikitext_rolling_windows(model_dir, tmp_path, hf_batch_size):
    manager = local_copy_of("wikitext/wikitext.yaml", "wikitext_tok", "wikitext_document_level",
                            ["train", "validation", "test"], tmp_path)  # fmt: skip
    hf = run("hf", f"pretrained={model_dir},dtype=float32", "wikitext_tok", manager, hf_batch_size)
    ours = run("latent_tokenization", f"pretrained={model_dir},estimator=canonical", "wikitext_tok", manager)
    hf_docs, our_docs = per_request(hf, "wikitext_tok"), per_request(ours, "wikitext_tok")
    assert len(hf_docs) == 3
    for a, b in zip(hf_docs, our_docs):
        assert b[0] == pytest.approx(a[0], abs=1e-6)
        assert a[0] < -100  # hundreds of tokens in many windows of 16
    for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours["results"]["wikitext_tok"][metric] == pytest.approx(
            hf["results"]["wikitext_tok"][metric], rel=1e-9
        )
    assert ours["config"]["estimator_settings"] == {"estimator": "canonical"}


@pytest.mark.parametrize("hf_batch_size", [1, 4])
def test_canonical_reproduces_hf_on_arc_easy_multiple_choice(model_dir, tmp_path, hf_batch_size):
    manager = local_copy_of(
        "arc/arc_easy.yaml", "arc_tok", "ai2_arc_easy", ["train", "validation", "test"], tmp_path
    )
    hf = run("hf", f"pretrained={model_dir},dtype=float32", "arc_tok", manager, hf_batch_size)
    ours = run("latent_tokenization", f"pretrained={model_dir},estimator=canonical", "arc_tok", manager)
    hf_reqs, our_reqs = per_request(hf, "arc_tok"), per_request(ours, "arc_tok")
    assert len(hf_reqs) == 15  # 4 questions, 3-4 choices each
    for (a, greedy_a), (b, greedy_b) in (
        ([r[0][0], r[0][1]], [s[0][0], s[0][1]]) for r, s in zip(hf_reqs, our_reqs)
    ):
        assert b == pytest.approx(a, abs=1e-6)
        assert greedy_a == greedy_b
    for metric in ("acc,none", "acc_norm,none"):
        assert ours["results"]["arc_tok"][metric] == hf["results"]["arc_tok"][metric]


def test_beam_bound_on_wikitext_is_never_below_canonical(model_dir, tmp_path):
    """Rolling task through lm_eval: beam (canonical always in the beam) ≥ canonical, document by document."""
    manager = local_copy_of("wikitext/wikitext.yaml", "wikitext_tok", "wikitext_document_level",
                            ["train", "validation", "test"], tmp_path)  # fmt: skip
    canonical = per_request(run("latent_tokenization", f"pretrained={model_dir},estimator=canonical", "wikitext_tok",
                                manager), "wikitext_tok")  # fmt: skip
    beam = per_request(run("latent_tokenization", f"pretrained={model_dir},estimator=beam,beam_size=2", "wikitext_tok",
                           manager), "wikitext_tok")  # fmt: skip
    for c, b in zip(canonical, beam):
        assert b[0] >= c[0] - 1e-4  # float32 rounding of batched vs window-by-window forward passes


def test_marginal_loglikelihood_is_a_conditional_probability(model_dir):
    """exact: log P(ctx ⊕ cont spelled | text starts with ctx) from enumeration (≤ 0), context whitespace moved as hf."""
    lm = LatentTokenizationEval(pretrained=str(model_dir), estimator="exact", device="cpu")
    requests = [SimpleNamespace(args=(c, k)) for c, k in [("the ", "cat"), ("a", " dog"), ("", "sat.")]]
    with pytest.warns(UserWarning, match="is_greedy"):
        results = lm.loglikelihood(requests)
    model, context_model = lm.model, lm.model.with_cover_end()
    for (ctx, cont), (value, greedy) in zip([r.args for r in requests], results):
        moved_ctx = ctx.rstrip()
        joint = model.log_marginal(model.tokenize(ctx + cont))
        start = context_model.log_marginal(context_model.tokenize(moved_ctx)) if moved_ctx else 0.0
        assert value == pytest.approx(joint - start, abs=1e-9)
        assert value < 0 and not greedy


def test_generate_until_samples_from_the_model_and_stops(model_dir):
    lm = LatentTokenizationEval(pretrained=str(model_dir), device="cpu", seed=3)
    request = SimpleNamespace(args=("the cat", {"until": ["."], "max_gen_toks": 12}))
    first, again = lm.generate_until([request]), lm.generate_until([request])
    assert first == again and "." not in first[0]


def test_importance_sampling_runs_multiple_choice_through_lm_eval(model_dir, tmp_path):
    """arc_easy with estimator=is: every request answered (context and context ⊕ continuation estimated), config
    records the proposal, and a rerun with another lm-eval batch size gives identical numbers (seeded per text)."""
    manager = local_copy_of(
        "arc/arc_easy.yaml", "arc_tok", "ai2_arc_easy", ["train", "validation", "test"], tmp_path
    )
    args = f"pretrained={model_dir},estimator=is,num_samples=8,seed=1"
    first = run("latent_tokenization", args, "arc_tok", manager, batch_size=1)
    again = run("latent_tokenization", args, "arc_tok", manager, batch_size=3)
    values = [r[0][0] for r in per_request(first, "arc_tok")]
    assert len(values) == 15 and all(math.isfinite(v) for v in values)
    assert values == [r[0][0] for r in per_request(again, "arc_tok")]
    assert first["config"]["estimator_settings"]["canonical_mix"] == 0.9


def test_bfloat16_network_stays_close_to_float32(model_dir):
    from lm_latent_eval.estimators import EstimatorSettings, estimate_document
    from lm_latent_eval.models import load_model

    settings = EstimatorSettings(estimator="is", num_samples=20, seed=0)
    values = []
    for dtype in (torch.float32, torch.bfloat16):
        lm, _ = load_model("tokenization", str(model_dir), dtype=dtype)
        assert next(lm.model.parameters()).dtype == dtype
        values.append(estimate_document(lm, "the cat sat on the mat.", settings).log_likelihood)
    assert values[1] == pytest.approx(values[0], abs=0.5)


def test_unreliable_marginal_loglikelihood_logs_the_shared_warning(model_dir, caplog):
    """The tokenization backend's own loglikelihood path also reports unreliable IS estimates (one warning)."""
    from lm_latent_eval.harness import backends

    lm = LatentTokenizationEval(
        pretrained=str(model_dir),
        estimator="is",
        num_samples=32,
        temperature=5.0,
        canonical_mix=0.0,
        seed=1,
        device="cpu",
    )
    requests = [
        SimpleNamespace(args=(c, k)) for c, k in [("the cat sat on the", " mat."), ("a dog ran", " quickly.")]
    ]
    with caplog.at_level("WARNING", logger=backends.__name__), pytest.warns(UserWarning, match="is_greedy"):
        lm.loglikelihood(requests, disable_tqdm=True)
    (record,) = [r for r in caplog.records if "no two-sided interval" in r.getMessage()]
    assert "these 4 documents" in record.getMessage()  # two joint texts and two contexts
