"""The KGLM's stepwise (SMC) interface agrees with the whole-document path: with the same generator seed,
``smc_step`` draws the z of ``proposal.sample`` and its increments sum to log p(x, z) − log q_τ(z | x); reordering
moves whole particle histories; each increment is a proper conditional (Σ over z_t of q and of p(x_t, z_t | ·))."""

from __future__ import annotations

import json

import pytest
import torch
from kglm_tiny import tiny_kglm

from lm_latent_eval import tensors
from lm_latent_eval.models import load_model
from lm_latent_eval.models.kglm.enumerate import enumerate_latents, exact_log_marginal
from lm_latent_eval.paths import DATA_DIR

TOL = 1e-9


def _run(model, x, K, tau, peek, seed):
    gen = torch.Generator().manual_seed(seed)
    state = model.smc_init(x, K, tau, peek)
    increments = []
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        increments.append(inc)
    return model.smc_latents(state), torch.stack(increments, 1)


def _check_agreement(model, x, K, tau, peek, seed):
    z_step, inc = _run(model, x, K, tau, peek, seed)
    z, log_q = model.proposal.sample(x, K, tau, peek, torch.Generator().manual_seed(seed))
    for key in z:
        assert torch.equal(z_step[key], z[key]), key
    with torch.no_grad():
        log_p = model.log_joint(x, z)
        expected = log_p - model.proposal.log_prob(x, z, tau, peek)
    assert torch.isfinite(inc).all()
    assert inc.sum(1).tolist() == pytest.approx(expected.tolist(), abs=TOL, rel=0)
    assert inc.sum(1).tolist() == pytest.approx((log_p - log_q).tolist(), abs=TOL, rel=0)


@pytest.mark.parametrize("features", [False, True], ids=["plain-q", "q-with-nopeek-heads-and-alias-features"])
@pytest.mark.parametrize("peek,tau", [(True, 1.0), (False, 1.0), (True, 0.7), (False, 0.7)])
def test_tiny_stepwise_equals_whole_document(features, peek, tau):
    model = tiny_kglm(proposal_features=features)
    _check_agreement(model, model.tokenize("Ada Lovelace born London Ada King was"), 64, tau, peek, seed=1)


def test_bundled_stepwise_equals_whole_document():
    model, _ = load_model("kglm", None, device="cpu")
    record = json.loads((DATA_DIR / "linked_tiny" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])
    x = model.tokenize(" ".join(t for t in record["tokens"] if t != "@@START@@"))
    for peek, tau in [(True, 1.0), (False, 0.7)]:
        _check_agreement(model, x, 50, tau, peek, seed=2)


def test_reorder_moves_whole_histories():
    """Resampling mid-document: the reordered particles continue as their ancestors' copies and the final z scores
    as the sum of each lineage's increments."""
    model = tiny_kglm(cutoff=2)
    x = model.tokenize("Ada Lovelace born London Ada")
    K = 16
    gen = torch.Generator().manual_seed(5)
    state = model.smc_init(x, K, 1.0, True)
    lineage = torch.zeros(K, dtype=torch.float64)
    for t in range(x.numel()):
        if t == 2:
            ancestors = torch.randint(0, K, (K,), generator=torch.Generator().manual_seed(9))
            before = model.smc_latents(state)
            state = model.smc_reorder(state, ancestors)
            after = model.smc_latents(state)
            assert all(torch.equal(after[k], before[k][ancestors]) for k in after)
            lineage = lineage[ancestors]
        state, inc = model.smc_step(state, t, gen)
        lineage += inc
    z = model.smc_latents(state)
    with torch.no_grad():
        expected = model.log_joint(x, z) - model.proposal.log_prob(x, z, 1.0, True)
    assert lineage.tolist() == pytest.approx(expected.tolist(), abs=TOL, rel=0)


def test_increments_are_proper_conditionals():
    """Over every z with p > 0, exp of the summed stepwise log p terms adds up to p(x) (the exact marginal), and
    the q parts sum to one: checked by scoring the enumerated support through the step kernel."""
    from lm_latent_eval.models.kglm.latents import HeadTables
    from lm_latent_eval.models.kglm.stepwise import WindowState, score_step

    model = tiny_kglm(proposal_features=True)
    x = model.tokenize("Ada Lovelace born")
    z = enumerate_latents(model, x.numel())
    K = z["entity"].shape[0]
    with torch.no_grad():
        p_tabs = HeadTables.build(model.latent_heads(model.encode(x)), 1.0)
        q_tabs = HeadTables.build(model.proposal.heads(x, False), 0.7)
        alias = model.alias_tables()
        state = WindowState.empty(K, model.cutoff, x.device)
        log_p = torch.zeros(K, dtype=torch.float64)
        log_q = torch.zeros(K, dtype=torch.float64)
        for t in range(x.numel()):
            typ, ent, par = z["mention_type"][:, t], z["entity"][:, t], z["parent"][:, t]
            log_p += score_step(p_tabs, state, t, typ, ent, par)
            gen_t = tuple(v[t] for v in model.generate_table(p_tabs.heads.h_type, x))
            log_p += model.word_log_prob_step(p_tabs.heads.h_type[t], x[t], ent, alias, gen_t)
            log_q += score_step(q_tabs, state, t, typ, ent, par)
            state = state.advance(model.tables, typ, ent, par)
    assert float(torch.logsumexp(log_q, 0)) == pytest.approx(0.0, abs=1e-9)
    assert float(torch.logsumexp(log_p, 0)) == pytest.approx(exact_log_marginal(model, x), abs=1e-9)


@pytest.mark.parametrize("row_table", [False, True], ids=["lane-or-product", "row-table"])
@pytest.mark.parametrize("peek", [True, False])
def test_sync_free_kernel_equals_cpu_kernel(peek, row_table, monkeypatch):
    """The GPU-style kernel (every particle through every head, masked, no host sync) draws the same z with the same
    log q as the CPU kernel (only "related" particles through the parent and edge heads), from the same uniforms;
    also where the parent logits come from the [T, rows] table of a large graph."""
    from lm_latent_eval.models.kglm import latents
    from lm_latent_eval.models.kglm.stepwise import WindowState, sample_step

    if row_table:
        monkeypatch.setattr(latents, "_ROW_TABLE_MIN_SLOT_ROWS", 0)
    model = tiny_kglm(proposal_features=True)
    x = model.tokenize("Ada Lovelace born London Ada King was")
    K = 256
    tabs = model.proposal.head_tables(x, 0.8, peek)
    assert tabs.row_table == row_table
    gen = torch.Generator().manual_seed(4)
    states = [WindowState.empty(K, model.cutoff, x.device) for _ in range(2)]
    related = 0
    for t in range(x.numel()):
        u = torch.rand(K, 4, generator=gen, dtype=torch.float64)
        draws = []
        for select_rows in (
            False,
            True,
        ):  # every particle, masked (the accelerator path), then the related ones
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(tensors, "SELECT_ROWS_ON", ("cpu",) if select_rows else ())
                draws.append(sample_step(tabs, states[len(draws)], t, u))
        for a, b in zip(*draws):
            assert torch.equal(a, b) if a.dtype == torch.long else torch.allclose(a, b, atol=1e-12, rtol=0)
        related += int((draws[0][0] == 2).sum())
        states = [s.advance(model.tables, *d[:3]) for s, d in zip(states, draws)]
    assert related > 0


@pytest.mark.parametrize("parent", ["product", "row-table"])
def test_large_graph_fallbacks_give_the_same_distribution(monkeypatch, parent):
    """Without the per-document tables (as for a graph too large for them) sampling, scoring and stepping compute
    every factor on demand, or read a large graph's parent logits from its [T, rows] table: the same numbers up to
    float32 rounding of differently shaped products."""
    from lm_latent_eval.models.kglm import latents, words

    model = tiny_kglm(proposal_features=True)
    x = model.tokenize("Ada Lovelace born London Ada King was")
    with torch.no_grad():
        z_ref, log_q_ref = model.proposal.sample(x, 128, 0.8, True, torch.Generator().manual_seed(6))
        log_p_ref = model.log_joint(x, z_ref)
    monkeypatch.setattr(latents, "_LANE_TABLE_LIMIT", 0)
    monkeypatch.setattr(latents, "new_entity_table_fits", lambda *sizes: False)
    monkeypatch.setattr(words, "_GEN_TABLE_LIMIT", 0)
    if parent == "row-table":
        monkeypatch.setattr(latents, "_ROW_TABLE_MIN_SLOT_ROWS", 0)
    model.eval()  # drop the cached tables
    assert model.head_tables(x).row_table == (parent == "row-table")
    with torch.no_grad():
        assert torch.allclose(model.proposal.log_prob(x, z_ref, 0.8, True), log_q_ref, atol=1e-5, rtol=0)
        assert torch.allclose(model.log_joint(x, z_ref), log_p_ref, atol=1e-5, rtol=0)
        z, log_q = model.proposal.sample(x, 128, 0.8, True, torch.Generator().manual_seed(6))
        assert torch.allclose(model.proposal.log_prob(x, z, 0.8, True), log_q, atol=1e-5, rtol=0)
    z_step, inc = _run(model, x, 128, 0.8, True, 6)
    with torch.no_grad():
        expected = model.log_joint(x, z_step) - model.proposal.log_prob(x, z_step, 0.8, True)
    assert torch.allclose(inc.sum(1), expected, atol=1e-5, rtol=0)


def test_new_entity_table_in_chunks_of_positions():
    """Under a memory budget whose quarter holds fewer positions' new-entity logits than the document has, the
    [T, rows] table is built a chunk of positions at a time: the one-call table's numbers to float32 rounding."""
    from lm_latent_eval.models.kglm import latents

    model = tiny_kglm(proposal_features=True)
    x = model.tokenize("Ada Lovelace born London Ada King was")
    with torch.no_grad():
        heads = model.proposal.heads(x, True)
        whole = latents.new_entity_table(heads, 0.8)
        rows = model.tables.num_rows
        heads.memory_budget = 4 * 3 * latents.new_entity_row_bytes(rows, 4)  # 3 positions a chunk
        chunked = latents.new_entity_table(heads, 0.8)
    assert x.numel() > 3 and chunked.shape == whole.shape == (x.numel(), rows)
    assert torch.allclose(chunked, whole, atol=1e-6, rtol=0)


def test_parent_edges_name_each_parents_edges():
    """``HeadTables.parent_edges``' slots (edges first + j, read from the per-edge tables' padded windows) name
    exactly the parent's edges in its valid slots, whatever the parent's place in the list (the last parent's window
    runs into the padding); a particle without a parent has none."""
    from lm_latent_eval.models.kglm.latents import expand_edges

    model = tiny_kglm()
    x = model.tokenize("Ada Lovelace born London Ada King was")
    tabs, tables = model.head_tables(x), model.tables
    parents = torch.arange(tables.num_entities)
    ok = tables.degree[parents] > 0
    first, valid, relations, elog = tabs.parent_edges(torch.zeros_like(parents), parents, ok)
    tails = tables.edge_windows(tables.edge_tail_padded, first)
    assert ok.any() and (~ok).any() and tables.edge_tail_padded.numel() == tables.num_edges + valid.shape[1]
    for k in range(parents.numel()):
        expected, _ = expand_edges(parents[k : k + 1], tables)
        named = first[k] + torch.arange(valid.shape[1])[valid[k]]
        assert named.tolist() == (expected.tolist() if ok[k] else [])
        assert tails[k][valid[k]].tolist() == tables.edge_tail[named].tolist()
        assert relations[k][valid[k]].tolist() == tables.edge_relation_row[named].tolist()
        assert torch.isneginf(elog[k][~valid[k]]).all() and torch.isfinite(elog[k][valid[k]]).all()


def test_reach_from_the_tails_slots_is_the_masked_logsumexp():
    """The draw's log-sum over the parent's edges reaching the drawn entity, from the slots of those edges
    (``GraphTables.edge_tail_slots``), is bit for bit the logsumexp of the parent's padded edge logits with every
    other edge masked, for every edge of the bundled graph (some parents have two edges to one tail)."""
    from lm_latent_eval.models.kglm.stepwise import _reach

    model, _ = load_model("kglm")
    x = model.tokenize("the album was released by the band")
    tables = model.tables
    assert tables.edge_tail_slots.shape[1] == 2
    parent = tables.edge_source
    with torch.no_grad():
        tabs = model.proposal.head_tables(x, 0.7, True)
        t = torch.arange(parent.numel()) % x.numel()
        first, valid, _, elog = tabs.parent_edges(t, parent, torch.ones_like(parent, dtype=torch.bool))
    edge = torch.arange(parent.numel())
    tails = tables.edge_windows(tables.edge_tail_padded, first)
    elsewhere = ~valid | (tails != tables.edge_tail[edge].unsqueeze(1))
    masked = elog.masked_fill(elsewhere, -torch.inf).logsumexp(-1)
    reaching = tables.edge_tail_slots[edge]
    assert torch.equal(_reach(elog.gather(1, reaching.clamp(min=0)), reaching), masked)
    assert torch.isfinite(masked).all()


@pytest.mark.parametrize("extreme", [0.0, torch.inf], ids=["underflow", "overflow"])
def test_edge_weights_out_of_range_are_refused(extreme):
    """Where every edge weight of a parent underflows to 0 (or overflows) at the proposal's temperature, the edge was
    not drawn from q: a related draw's log q is not finite, which the estimators refuse naming the document, never a
    finite number for a draw from other weights."""
    from lm_latent_eval.estimators import importance_log_weights
    from lm_latent_eval.models.kglm.latents import RELATED

    model = tiny_kglm()
    x = model.tokenize("Ada Lovelace born London Ada King was")
    with torch.no_grad():
        tabs = model.proposal.head_tables(x, 1.0, False)
        tabs._relation_weights = torch.full_like(tabs.relation_weights, extreme)
        z, log_q = model.proposal.sample(x, 64, 1.0, False, torch.Generator().manual_seed(0))
    related = (z["mention_type"] == RELATED).any(1)
    assert related.any() and (~related).any()
    assert not torch.isfinite(log_q[related]).any() and torch.isfinite(log_q[~related]).all()
    with pytest.raises(ValueError, match="'extreme': proposal returned .* non-finite log q"):
        importance_log_weights(
            model, x, num_samples=64, temperature=1.0, peek=False, seed=0, document="extreme"
        )


def test_tail_slots_list_each_edges_run_of_edges_to_its_tail():
    """``GraphTables.edge_tail_slots``: for each edge, the slots of its source's edges to its tail (itself included,
    in edge order), then −1; one column of none without edges."""
    from lm_latent_eval.models.kglm.graph import KnowledgeGraph
    from lm_latent_eval.models.kglm.latents import GraphTables

    graph = KnowledgeGraph(["a", "b"], ["r", "s"], {0: [(0, 1)], 1: [(0, 0), (1, 0), (0, 1), (1, 0)]}, {})
    assert GraphTables(graph).edge_tail_slots.tolist() == [
        [0, -1, -1],
        [0, 1, 3],
        [0, 1, 3],
        [2, -1, -1],
        [0, 1, 3],
    ]
    assert GraphTables(KnowledgeGraph(["a"], [], {}, {})).edge_tail_slots.shape == (0, 1)
