"""KGLM behind lm-eval (``--model latent_kglm``), its text sampler, and the no-peeking proposal's own heads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hook_site import hook_site_dir
from kglm_tiny import tiny_kglm
from python_subprocess import run_python

from lm_latent_eval.models import default_checkpoint
from lm_latent_eval.models.kglm.enumerate import exact_log_marginal
from lm_latent_eval.models.kglm.latents import latent_log_prob

REPO = Path(__file__).resolve().parents[3]
bundled = pytest.mark.skipif(default_checkpoint("kglm") is None, reason="bundled KGLM checkpoint not built")


@pytest.fixture(scope="module")
def model():
    return tiny_kglm(proposal_features=True)


def test_proposal_reads_only_what_it_may(model):
    """No-peeking q(z_t | ·) is unchanged by x_≥t; peeking q(z_t | ·) by x_>t (the alias features read x_t only).

    x_3.. is changed: no-peeking labels of t ≤ 3 and peeking labels of t ≤ 2 stay put; the next one moves."""
    x = model.tokenize("Ada Lovelace was born in London")
    z, _ = model.proposal.sample(x, 64, 1.0, True, torch.Generator().manual_seed(0))
    other = x.clone()
    other[3:] = model.tokenize("King King London")
    with torch.no_grad():
        for peek, first_changed in ((False, 4), (True, 3)):
            a = latent_log_prob(model.proposal.heads(x, peek), z, per_position=True)
            b = latent_log_prob(model.proposal.heads(other, peek), z, per_position=True)
            assert torch.equal(a[:, :first_changed], b[:, :first_changed])
            assert not torch.equal(a[:, first_changed], b[:, first_changed])


def test_nopeek_heads_are_not_the_peeking_heads(model):
    """With its own heads, no-peeking q is a different distribution from the peeking network on shifted states."""
    x = model.tokenize("Ada Lovelace was born in London")
    z, _ = model.proposal.sample(x, 32, 1.0, False, torch.Generator().manual_seed(1))
    with torch.no_grad():
        own = model.proposal.log_prob(x, z, peek=False)
        saved = model.proposal.nopeek_projection
        model.proposal.nopeek_projection = (
            None  # the original code's no-peeking: peeking heads, shifted input
        )
        try:
            misapplied = model.proposal.log_prob(x, z, peek=False)
        finally:
            model.proposal.nopeek_projection = saved
    assert not torch.allclose(own, misapplied)


def test_sample_text_first_word_follows_the_exact_marginal(model):
    """Ancestral first words match p(x_1 = w) = Σ_z p(w, z) by enumeration for every vocabulary word (chi-square).

    Out-of-vocabulary strings share one bin: the sampler writes @@UNKNOWN@@ for a generated unknown word and the
    alias word for a copied one, while log_joint scores *each* unknown string with p(@@UNKNOWN@@) − unk_penalty
    (the original's convention), so per-string probabilities of unknown words do not sum with the rest to one."""
    from scipy.stats import chisquare

    words = model.vocab + model.extended_words
    known = [i for i in range(len(model.vocab)) if i != model.unk_id]
    exact = np.array([math.exp(exact_log_marginal(model, torch.tensor([i]))) for i in known])
    assert exact.sum() < 1
    gen = torch.Generator().manual_seed(0)
    n = 1500
    index = {words[i]: j for j, i in enumerate(known)}
    counts = np.zeros(len(known) + 1)
    for _ in range(n):
        counts[index.get(model.sample_text("", 1, generator=gen), len(known))] += 1
    probs = np.append(exact, 1 - exact.sum())
    keep = probs * n >= 5
    observed, expected = counts[keep], probs[keep] * n
    if (~keep).any():  # rare words in one bin
        observed, expected = (
            np.append(observed, counts[~keep].sum()),
            np.append(expected, probs[~keep].sum() * n),
        )
    assert chisquare(observed, expected).pvalue > 1e-4


def test_sample_text_is_seeded_and_stops(model):
    gen = lambda: torch.Generator().manual_seed(4)
    a = model.sample_text("Ada Lovelace was", 12, generator=gen())
    assert a == model.sample_text("Ada Lovelace was", 12, generator=gen())
    assert a.startswith(" ") and len(a.split()) == 12
    stop = a.split()[2]
    cut = model.sample_text("Ada Lovelace was", 12, generator=gen(), stop=[stop])
    assert stop not in cut and a.startswith(cut)


@bundled
def test_bundled_proposals_peek_beats_own_nopeek_beats_misapplied_nopeek():
    """Trained q: IS perplexity with peeking < with the no-peeking heads < with the peeking network on shifted states
    (the original code's no-peeking), on the bundled test articles."""
    from lm_latent_eval.estimators import EstimatorSettings, estimate_document
    from lm_latent_eval.models import load_model
    from lm_latent_eval.models.kglm.linked_wikitext import read_linked_jsonl

    m, path = load_model("kglm")
    docs = [d.text for d in read_linked_jsonl(path.parent / "linked_tiny" / "test.jsonl")][:4]

    def ppl(peek):
        est = [estimate_document(m, d, EstimatorSettings("is", 50, 1.0, peek, seed=0)) for d in docs]
        return math.exp(-sum(e.log_likelihood for e in est) / sum(e.num_tokens for e in est))

    peeking, own = ppl(True), ppl(False)
    saved, m.proposal.nopeek_projection = m.proposal.nopeek_projection, None
    try:
        misapplied = ppl(False)
    finally:
        m.proposal.nopeek_projection = saved
    assert peeking < own < misapplied


@bundled
@pytest.mark.slow
def test_lm_eval_cli_runs_latent_kglm_on_linked_wikitext2_tiny(tmp_path):
    """`lm_eval --model latent_kglm --tasks linked_wikitext2_tiny --include_path tasks` in a fresh interpreter that
    sees the package only through the start-up hook (as after pip install)."""
    out = tmp_path / "out"
    code = (
        f"import site, sys; site.addsitedir({str(hook_site_dir(tmp_path))!r})\n"
        "from lm_eval.__main__ import cli_evaluate\n"
        f"sys.argv = ['lm_eval', '--model', 'latent_kglm', '--model_args', 'estimator=is,num_samples=8,seed=3',"
        f" '--tasks', 'linked_wikitext2_tiny', '--include_path', 'tasks', '--limit', '3', '--device', 'cpu',"
        f" '--output_path', {str(out)!r}]\n"
        "cli_evaluate()\n"
    )
    run_python(code, cwd=REPO, pythonpath=[REPO])
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    metrics = results["results"]["linked_wikitext2_tiny"]
    assert (
        1 < metrics["instance_perplexity,none"] < math.inf
        and 1 < metrics["corpus_perplexity,none"] < math.inf
    )
    assert results["config"]["model"] == "latent_kglm"


@bundled
def test_sweep_reads_linked_jsonl_articles():
    from lm_latent_eval.models.corpora import read_documents
    from lm_latent_eval.models.kglm.linked_wikitext import read_linked_jsonl

    path = default_checkpoint("kglm").parent / "linked_tiny" / "test.jsonl"
    assert read_documents(path) == [d.text for d in read_linked_jsonl(path)]


def test_train_cli_lists_kglm_with_boolean_switches():
    import argparse

    from lm_latent_eval.models import training as train

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    args = parser.parse_args(["kglm", "--synthetic", "d", "--output", "o", "--no-proposal-alias-features"])
    assert (
        args.model == "kglm" and args.proposal_alias_features is False and args.proposal_nopeek_heads is True
    )


@bundled
def test_latent_kglm_backend_model_files(tmp_path):
    """Extra model files must exist, apply only to original archives, and enter the provenance by sha256."""
    from lm_latent_eval.harness.backends import LatentKGLMEval

    with pytest.raises(FileNotFoundError, match="alias_database"):
        LatentKGLMEval(alias_database=str(tmp_path / "missing.pkl"))
    alias = tmp_path / "alias.pkl"
    alias.write_bytes(b"not used")
    with pytest.raises(ValueError, match="only apply to an original"):
        LatentKGLMEval(alias_database=str(alias))
    lm = LatentKGLMEval(estimator="is", num_samples=4, device="cpu")
    info = lm.get_model_info()
    assert info["latent_model"].endswith(":KGLM") and "model_files_sha256" not in info
    from lm_eval.api.instance import Instance

    req = Instance(
        request_type="generate_until", doc={}, arguments=("the", {"until": ["."], "max_gen_toks": 30}), idx=0
    )
    (out,) = lm.generate_until([req])
    assert isinstance(out, str) and "." not in out and len(out.split()) <= 30
    assert lm.generate_until([req]) == [out]  # seeded from (seed, context)
