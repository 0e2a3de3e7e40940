"""EntityNLM's memory budget: every temporary of ``log_joint`` that grows with K or T is planned from its shape, fits,
and bounds what a call really holds.

- The paper's workload at full size (bench/full_size.py: d = 300, M = 100 entity slots, mentions of ≤ 100 tokens,
  V = 10,000), the longest document of the synthetic CoNLL-2012 test set (4,058 tokens) and K = 10,000: the plan of
  one ``log_joint`` call fits the default 8 GiB and 1 GiB (main before this test: one call over all K particles,
  [T, K, M] int64 slot positions of 30 GiB); the sampler's state [K, M, D] fits the default budget.
- The plan describes the code: with budgets small enough to bind, every storage ``log_joint`` allocates
  (``TemporaryRecorder``) fits the budget and the bytes alive at once stay within the plan, for drawn
  configurations and for the worst case (every token starting a mention).
- Chunking moves a value within float32 rounding at most (a draw scored at another row of a smaller batch, as
  ``log_joint``'s distinct rows already do), and never which values are −inf.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lm_latent_eval.errors import InputError
from lm_latent_eval.estimators import registry
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.models.entitynlm import EntityNLM
from lm_latent_eval.models.entitynlm import memory_plan as plan_module
from lm_latent_eval.models.memory_plan import DEFAULT_MEMORY_BUDGET, GIB, TemporaryRecorder
from lm_latent_eval.paths import DATA_DIR

PAPER_K = 10_000


@pytest.fixture(scope="module")
def full_entitynlm():
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    import full_size

    model = full_size.entitynlm()
    lengths = full_size.document_lengths(full_size.CONLL_TEST_DOCUMENTS, full_size.CONLL_TEST_TOKENS, 0.8)
    return model, max(lengths)


@pytest.fixture(scope="module")
def bundled():
    model, _ = load_model("entitynlm")
    doc = max(read_documents(DATA_DIR / "coref_tiny" / "test.jsonl"), key=len)
    return model, model.tokenize(doc)


def small_model(dim: int) -> EntityNLM:
    """A random EntityNLM of the paper's shape, narrower (d = 300 rows are not ``rows_apart``; d = 64 rows are)."""
    torch.manual_seed(0)
    vocab = ["@@UNKNOWN@@", "@@START@@", *(f"w{i}" for i in range(2998))]
    return EntityNLM(
        vocab, dim=dim, hidden_size=dim, num_layers=1, max_entities=100, max_mention_length=100
    ).eval()


def every_token_starts(K: int, T: int) -> dict:
    """K distinct configurations in which every token starts a one-token mention (the entity head's worst case)."""
    entity = (torch.arange(K).unsqueeze(1) >> (torch.arange(T) % 16)) & 1
    entity[:, 0] = 0
    ones = torch.ones(K, T, dtype=torch.long)
    return {"mention": ones, "entity": entity, "length": ones.clone()}


@pytest.mark.parametrize("budget", [DEFAULT_MEMORY_BUDGET, GIB])
def test_full_size_plan_fits_the_budget_at_the_papers_k(full_entitynlm, budget):
    model, T = full_entitynlm
    assert T == 4058 and model.dim == 300 and model.max_entities == 100 and len(model.vocab) == 10_000
    plan = model.memory_plan(T, PAPER_K, budget)
    assert 1 <= plan.particles_per_call < PAPER_K
    assert plan.particles_per_call == model.max_particles_per_call(T, budget)
    assert plan.held <= budget
    scorer = [t for t in plan.temporaries if t.name.startswith("log_joint")]
    assert len(scorer) >= 6 and all(t.nbytes <= budget for t in scorer), max(scorer, key=lambda t: t.nbytes)
    # one call over all K particles (main before this plan) would hold 30 GiB of slot positions alone
    assert PAPER_K * T * model.max_entities * 8 > 30 * GIB
    if budget == DEFAULT_MEMORY_BUDGET:
        assert plan.fits(), (plan.held, plan.largest)
    else:
        # what is over 1 GiB is the sampler's state at K = 10,000 (its sample block), not the budget's to chunk
        assert {t.name for t in plan.temporaries if t.nbytes > budget} == {
            "sampler: entity memory [K, M, D] (state)"
        }


def test_a_sample_block_over_the_budget_is_refused_before_any_work(full_entitynlm, monkeypatch):
    """On a GPU (sample blocks of 16,384 particles) K = 10,000 particles hold a 1.118 GiB entity memory that no
    budget can chunk: under memory_budget = 1 GiB the run is refused in one line naming both; 8 GiB runs."""
    model, _ = full_entitynlm
    monkeypatch.setattr(registry, "sample_block", lambda device: 16_384)
    monkeypatch.setattr(model, "memory_budget", GIB)
    with pytest.raises(
        InputError, match=r"num_samples=10000 needs 1\.1 GiB for the 10,000 particles .* memory_budget"
    ):
        registry.check_sample_memory(PAPER_K, model)
    registry.check_sample_memory(8_000, model)
    monkeypatch.setattr(model, "memory_budget", DEFAULT_MEMORY_BUDGET)
    registry.check_sample_memory(PAPER_K, model)


def test_plan_grows_with_the_document_and_not_with_k(full_entitynlm):
    model, T = full_entitynlm
    short, long = model.max_particles_per_call(400), model.max_particles_per_call(T)
    assert short > 5 * long
    assert model.memory_plan(T, 10 * PAPER_K).held == model.memory_plan(T, PAPER_K).held


@pytest.mark.parametrize("dim", [32, 64, 300])
@pytest.mark.parametrize("kind", ["drawn", "worst"])
def test_recorded_log_joint_temporaries_fit_the_plan(bundled, dim, kind):
    model = bundled[0] if dim == 32 else small_model(dim)
    T, K = (bundled[1].numel(), 96) if dim == 32 else (120, 48)
    x = (
        bundled[1]
        if dim == 32
        else torch.randint(2, len(model.vocab), (T,), generator=torch.Generator().manual_seed(1))
    )
    with torch.no_grad():
        if kind == "drawn":
            z, _ = model.proposal.sample(x, K, 5.0, True, torch.Generator().manual_seed(0))
        else:
            z = every_token_starts(K, T)
        model.log_joint(x, {k: v[:4] for k, v in z.items()})  # the encoder's states, cached
        budget = plan_module.call_bytes(model, T, K // 3)
        model.memory_budget = budget
        try:
            plan = model.memory_plan(T, K)
            assert plan.particles_per_call < K  # the budget binds
            with TemporaryRecorder() as rec:
                model.log_joint(x, z)
        finally:
            model.memory_budget = DEFAULT_MEMORY_BUDGET
    assert rec.largest <= budget, (rec.largest, rec.largest_op)
    assert rec.peak <= plan.held <= budget, (rec.peak, rec.at_peak, plan.held)


@pytest.mark.parametrize("tau", [1.0, 5.0])
@pytest.mark.parametrize("peek", [True, False])
def test_chunking_changes_no_number_beyond_float32_rounding(bundled, tau, peek):
    model, x = bundled
    with torch.no_grad():
        z, _ = model.proposal.sample(x, 600, tau, peek, torch.Generator().manual_seed(2))
        whole = model.log_joint(x, z)
        model.memory_budget = plan_module.call_bytes(model, x.numel(), 50)
        try:
            assert model.max_particles_per_call(x.numel()) < 100
            chunked = model.log_joint(x, z)
        finally:
            model.memory_budget = DEFAULT_MEMORY_BUDGET
    assert torch.equal(torch.isneginf(whole), torch.isneginf(chunked))
    finite = torch.isfinite(whole)
    # float32 rounding of each token's terms, summed in float64
    tolerance = 4 * torch.finfo(torch.float32).eps * whole[finite].abs() + 1e-6
    assert bool(((whole - chunked)[finite].abs() <= tolerance).all()), float(
        (whole - chunked)[finite].abs().max()
    )


def test_chunks_of_fewer_than_four_rows(bundled):
    # a last chunk of 1–3 particles is padded to four rows, as a small K is: the values of the whole call
    model, x = bundled
    with torch.no_grad():
        z, _ = model.proposal.sample(x, 9, 1.0, True, torch.Generator().manual_seed(3))
        whole = model.log_joint(x, z)
        model.memory_budget = 2**20
        try:
            assert model.max_particles_per_call(x.numel()) < 9
            chunked = model.log_joint(x, z)
        finally:
            model.memory_budget = DEFAULT_MEMORY_BUDGET
    assert torch.allclose(whole, chunked, rtol=1e-6, atol=1e-5)


def test_memory_budget_from_pretrained_and_bad_budget_is_one_clean_error(bundled):
    model, _ = bundled
    for bad in (0, -1, "8GiB", float("nan"), True):
        with pytest.raises(ValueError, match="memory_budget"):
            model.memory_budget = bad
    assert model.memory_budget == DEFAULT_MEMORY_BUDGET
    loaded = EntityNLM.from_pretrained(DATA_DIR / "entitynlm", memory_budget=GIB)
    assert loaded.memory_budget == GIB
    with pytest.raises(ValueError, match="memory_budget"):
        EntityNLM.from_pretrained(DATA_DIR / "entitynlm", memory_budget=-1)
