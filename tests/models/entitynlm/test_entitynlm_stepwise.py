"""EntityNLM's stepwise (SMC) interface agrees with the whole-document path: for one generator seed, smc_step draws
the z that proposal.sample draws, and its increments sum to log p(x, z) − log q_τ(z | x), in both layouts of the
particles: one row per particle (the accelerator's, run here on the CPU) to 1e-9 against every draw scored at its
own row, and one row per distinct history (the CPU's) to float32 rounding, as log_joint, which scores each distinct z
once; reordering carries whole particle histories."""

from __future__ import annotations

import json

import pytest
import torch
from entitynlm_tiny import tiny_entitynlm

from lm_latent_eval import tensors
from lm_latent_eval.models.entitynlm import LATENT_KEYS, EntityNLM
from lm_latent_eval.paths import DATA_DIR

TOL = 1e-9  # increments against log p − log q with every draw scored at its own row, as the per-particle layout does
REGROUPED_TOL = (
    1e-6  # relative to max(1, |log w|): log_joint scores each distinct z once, at another row of a
)
# smaller batch, and float32 rows round differently at different positions (tests/models/entitynlm/test_entitynlm_pinned.py)


@pytest.fixture(scope="module")
def cases():
    bundled = EntityNLM.from_pretrained(str(DATA_DIR / "entitynlm")).eval()
    doc = " ".join(json.loads((DATA_DIR / "coref_tiny" / "test.jsonl").read_text().splitlines()[1])["tokens"])
    tiny = tiny_entitynlm(max_entities=2, max_mention_length=3)
    return {"bundled": (bundled, doc), "tiny": (tiny, "anna saw her there anna")}


def run_steps(model, x, K, temperature, peek, seed):
    state = model.smc_init(x, K, temperature, peek)
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros(K, dtype=torch.float64)
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        assert inc.dtype == torch.float64 and inc.shape == (K,)
        total += inc
    return state, total


@pytest.mark.parametrize("name", ["bundled", "tiny"])
@pytest.mark.parametrize("K", [1, 3, 200])
@pytest.mark.parametrize("peek,temperature", [(True, 1.0), (False, 0.7), (True, 1.6)])
@pytest.mark.parametrize("layout", ["distinct histories", "one row per particle"])
def test_increments_sum_to_the_whole_document_log_weight(
    cases, name, K, peek, temperature, layout, monkeypatch
):
    model, text = cases[name]
    x = model.tokenize(text)
    if layout == "one row per particle":
        monkeypatch.setattr(tensors, "SELECT_ROWS_ON", ())
    state, total = run_steps(model, x, K, temperature, peek, seed=5)
    assert (state.history is None) == (layout == "one row per particle")
    z = model.smc_latents(state)
    z_ref, log_q = model.proposal.sample(x, K, temperature, peek, torch.Generator().manual_seed(5))
    assert all(torch.equal(z[k], z_ref[k]) for k in LATENT_KEYS)
    with torch.no_grad():
        every_row = model.log_joint_batch(model.encode(x).unsqueeze(0), x.unsqueeze(0), z) - log_q
        whole = model.log_joint(x, z) - log_q
        assert torch.allclose(log_q, model.proposal.log_prob(x, z, temperature, peek), atol=1e-6)
    assert torch.isfinite(total).all()
    if layout == "one row per particle":
        assert total.tolist() == pytest.approx(every_row.tolist(), abs=TOL, rel=0)
    else:
        # one row per distinct z drawn
        assert state.context.shape[0] == len(torch.unique(torch.stack([z[k] for k in LATENT_KEYS], 1), dim=0))
    assert total.tolist() == pytest.approx(whole.tolist(), abs=REGROUPED_TOL, rel=REGROUPED_TOL)


def test_reorder_carries_whole_histories(cases):
    """After resampling mid-document, each particle's increments still sum to log p − log q of its own z."""
    model, text = cases["tiny"]
    x = model.tokenize(text)
    K = 64
    state = model.smc_init(x, K, 1.0, False)
    gen = torch.Generator().manual_seed(1)
    total = torch.zeros(K, dtype=torch.float64)
    for t in range(x.numel()):
        state, inc = model.smc_step(state, t, gen)
        total += inc
        if t in (1, 3):
            ancestors = torch.randint(0, K, (K,), generator=gen)
            before = model.smc_latents(state)
            state, total = model.smc_reorder(state, ancestors), total[ancestors]
            after = model.smc_latents(state)
            assert all(torch.equal(after[k], before[k][ancestors]) for k in LATENT_KEYS)
    z = model.smc_latents(state)
    with torch.no_grad():
        whole = model.log_joint(x, z) - model.proposal.log_prob(x, z, 1.0, False)
    assert total.tolist() == pytest.approx(
        whole.tolist(), abs=1e-6, rel=0
    )  # log q of a given z: float32 rescoring


def test_stepwise_errors_and_empty_document(cases):
    model, text = cases["tiny"]
    x = model.tokenize(text)
    state = model.smc_init(x, 4)
    with pytest.raises(ValueError, match="expected token t = 0"):
        model.smc_step(state, 1, None)
    with pytest.raises(ValueError, match="num_samples"):
        model.smc_init(x, 0)
    empty = model.smc_init(model.tokenize(""), 3)
    assert model.smc_latents(empty)["mention"].shape == (3, 0)


@pytest.mark.parametrize("name", ["bundled", "tiny"])
def test_all_rows_sampler_draws_what_the_cpu_row_selection_draws(cases, name, monkeypatch):
    """draw_step on an accelerator draws entity and length for every particle (no host sync); the CPU draws them
    for the particles starting a mention only. Both must give the same z and log q (run here on the CPU)."""
    from lm_latent_eval import tensors

    model, text = cases[name]
    x = model.tokenize(text)
    for peek, temperature in [(True, 1.0), (False, 0.7)]:
        z, log_q = model.proposal.sample(x, 300, temperature, peek, torch.Generator().manual_seed(11))
        with monkeypatch.context() as m:
            m.setattr(tensors, "SELECT_ROWS_ON", ())
            z_all, log_q_all = model.proposal.sample(
                x, 300, temperature, peek, torch.Generator().manual_seed(11)
            )
        assert all(torch.equal(z[k], z_all[k]) for k in LATENT_KEYS)
        assert torch.equal(log_q, log_q_all)
