"""KGLM's memory budget: every temporary that grows with K, T or the graph is planned from its shape and fits.

- The paper's workload at full size (bench/full_size.py: 41,059 entity rows, out-degrees up to 1,000, cutoff 30,
  De = 256), its longest document (10,561 tokens) and K = 10,000: the plan of one ``log_joint`` call and one sampler
  step fits the default 8 GiB and a 1 GiB budget; the parent head, run on the meta device (shapes only) over more
  related pairs than any call sends it, never makes a temporary over the budget (today's main: its einsum's window
  embeddings [P, C, De] were one tensor, 95.94 GiB on an H100).
- The plan describes the code: on the bundled model with budgets small enough to bind, every storage that
  ``log_joint`` and the sampler allocate (``TemporaryRecorder``) fits the budget, and the bytes alive at once stay
  within what the plan says the chunked computations hold.
- Chunking changes no number beyond float32 rounding (bit for bit here at τ = 1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.models.kglm.latents import LatentHeads, related_pair_bytes
from lm_latent_eval.models.memory_plan import DEFAULT_MEMORY_BUDGET, GIB, TemporaryRecorder, rows_per_chunk
from lm_latent_eval.paths import DATA_DIR

PAPER_K = 10_000
MiB = 2**20


@pytest.fixture(scope="module")
def full_kglm():
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    import full_size

    model = full_size.kglm()
    lengths = full_size.document_lengths(full_size.WT2_TEST_ARTICLES, full_size.WT2_TEST_TOKENS, 0.6)
    return model, max(lengths)


@pytest.fixture(scope="module")
def bundled():
    model, _ = load_model("kglm")
    doc = max(read_documents(DATA_DIR / "linked_tiny" / "test.jsonl"), key=len)
    return model, model.tokenize(doc)


@pytest.mark.parametrize("budget", [DEFAULT_MEMORY_BUDGET, GIB])
def test_full_size_plan_fits_the_budget_at_the_papers_k(full_kglm, budget):
    model, T = full_kglm
    plan = model.memory_plan(T, PAPER_K, budget)
    assert T == 10_561 and model.tables.num_rows == 41_059 and int(model.tables.degree.max()) == 1000
    assert plan.fits(), (plan.held, plan.largest)
    assert 1 <= plan.particles_per_call < PAPER_K
    assert plan.particles_per_call == model.max_particles_per_call(T, budget)


@pytest.mark.parametrize("budget", [DEFAULT_MEMORY_BUDGET, GIB])
def test_full_size_parent_head_temporaries_fit_on_meta(full_kglm, budget):
    # the parent head of p at full size, shapes only: more related pairs than one log_joint call sends it (every
    # token of the particles of one call related, at most a million) must not make a temporary over the budget
    model, T = full_kglm
    De, C = model.entity_dim, model.cutoff
    per_call = model.max_particles_per_call(T, budget)
    pairs = min(per_call * T, 1_000_000)
    assert rows_per_chunk(related_pair_bytes(C, 1000), budget // 4) <= pairs
    meta = torch.device("meta")
    heads = LatentHeads(
        torch.empty(T, model.token_dim, device=meta),
        torch.empty(T, De, device=meta),
        torch.empty(T, De, device=meta),
        model.mention_type.to(meta),
        model.entity_embedding.weight.to(meta),
        model.relation_embedding.weight.to(meta),
        None,
        model.tables,
        C,
        memory_budget=budget,
    )
    t = torch.empty(pairs, dtype=torch.long, device=meta)
    rows = torch.empty(pairs, C, dtype=torch.long, device=meta)
    with TemporaryRecorder() as rec:
        out = heads.parent_logits(t, rows)
    assert out.shape == (pairs, C) and out.dtype == torch.float64
    assert rec.largest <= budget // 4 or rec.largest == out.numel() * 8, (rec.largest, rec.largest_op)
    assert rec.largest <= budget


@pytest.mark.parametrize("row_table", [False, True], ids=["lane", "row-table"])
@pytest.mark.parametrize("tau", [1.0, 5.0])
@pytest.mark.parametrize("budget", [MiB, 4 * MiB])
def test_recorded_log_joint_temporaries_fit_the_plan(bundled, tau, budget, row_table, monkeypatch):
    """What log_joint holds is within its plan, and the plan (the document's tables in it) within the budget; also
    where the parent logits come from the [T, rows] table of a large graph."""
    from lm_latent_eval.models.kglm import latents

    model, x = bundled
    T, K = x.numel(), 500
    if row_table:
        monkeypatch.setattr(latents, "_ROW_TABLE_MIN_SLOT_ROWS", 0)
        model.eval()  # drop the cached tables
    with torch.no_grad():
        z, _ = model.proposal.sample(x, K, tau, True, torch.Generator().manual_seed(0))
        model.memory_budget = budget
        try:
            model.log_joint(x, {k: v[:8] for k, v in z.items()})  # the per-document tables, cached
            plan = model.memory_plan(T, K)
            assert plan.particles_per_call < K  # the budget binds
            assert model.head_tables(x).row_table == row_table
            tables = {t.name for t in plan.temporaries if t.name.startswith("tables:")}
            assert len(tables) == 1 + row_table, tables
            with TemporaryRecorder() as rec:
                model.log_joint(x, z)
        finally:
            model.memory_budget = DEFAULT_MEMORY_BUDGET
            model.eval()
    assert rec.largest <= budget, (rec.largest, rec.largest_op)
    assert rec.peak <= plan.held <= budget, (rec.peak, rec.at_peak, plan.held)


def test_recorded_sampler_temporaries_fit_the_budget(bundled):
    model, x = bundled
    model.memory_budget = 4 * MiB
    try:
        with torch.no_grad():
            model.proposal.sample(x, 8, 5.0, True, torch.Generator().manual_seed(0))
            with TemporaryRecorder() as rec:
                z, _ = model.proposal.sample(x, 500, 5.0, True, torch.Generator().manual_seed(1))
                model.log_joint(x, z)
    finally:
        model.memory_budget = DEFAULT_MEMORY_BUDGET
    assert rec.largest <= 4 * MiB, (rec.largest, rec.largest_op)


@pytest.mark.parametrize(("tau", "peek"), [(1.0, True), (5.0, True), (1.0, False)])
def test_chunking_changes_no_number(bundled, tau, peek):
    model, x = bundled
    with torch.no_grad():
        z, _ = model.proposal.sample(x, 2000, tau, peek, torch.Generator().manual_seed(2))
        whole = model.log_joint(x, z)
        model.memory_budget = MiB
        try:
            assert model.max_particles_per_call(x.numel()) < 2000
            chunked = model.log_joint(x, z)
            log_q = model.proposal.log_prob(x, z, tau, peek)
        finally:
            model.memory_budget = DEFAULT_MEMORY_BUDGET
        log_q_whole = model.proposal.log_prob(x, z, tau, peek)
    assert torch.equal(torch.isneginf(whole), torch.isneginf(chunked))
    assert torch.allclose(whole, chunked, rtol=1e-6, atol=1e-5), float((whole - chunked).abs().max())
    assert torch.equal(log_q, log_q_whole)
    if tau == 1.0:
        assert torch.equal(whole, chunked)


def test_bad_budget_is_one_clean_error(bundled):
    model, _ = bundled
    for bad in (0, -1, "8GiB", float("nan"), True):
        with pytest.raises(ValueError, match="memory_budget"):
            model.memory_budget = bad
    assert model.memory_budget == DEFAULT_MEMORY_BUDGET
