"""The shared tensor helpers: inverse-CDF draws, distinct rows, padded rows (lm_latent_eval/tensors.py)."""

from __future__ import annotations

import pytest
import torch

from lm_latent_eval.tensors import distinct_rows, inverse_cdf, log_normalizer, pad_rows, row_keys


def brute_force(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """min{i : Σ_{j≤i} w_j > u · Σ_j w_j}, row by row, by a Python scan of the cumulative sums (in weights' dtype)."""
    cdf = weights.cumsum(-1)
    targets = (u * cdf[:, -1]).tolist()
    return torch.tensor(
        [next(i for i, c in enumerate(row) if c > v) for row, v in zip(cdf.tolist(), targets)]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_cdf_is_the_first_index_past_u_times_the_total(dtype):
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(500, 7, generator=gen, dtype=dtype) * (torch.rand(500, 7, generator=gen) > 0.3)
    weights[:, 3] += 0.1  # every row has a positive weight
    u = torch.rand(500, generator=gen, dtype=dtype)
    drawn = inverse_cdf(weights, u)
    assert drawn.dtype == torch.long and drawn.shape == (500,)
    assert torch.equal(drawn, brute_force(weights, u))
    assert bool((weights.gather(1, drawn[:, None]) > 0).all())  # a zero weight is never drawn


def test_inverse_cdf_frequencies_follow_the_weights():
    weights = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    counts = torch.bincount(inverse_cdf(weights, u), minlength=4).double() / u.numel()
    assert counts[1] == 0 and torch.allclose(counts, weights, atol=5e-3)


def test_inverse_cdf_never_passes_the_last_positive_weight():
    weights = torch.tensor([[0.0, 2.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    u = torch.tensor([1.0, 0.5])  # u = 1 (out of range) and an all-zero row: the cap applies
    assert inverse_cdf(weights, u).tolist() == [2, 0]
    assert inverse_cdf(weights[:1], torch.tensor([0.0])).tolist() == [1]


def test_inverse_cdf_with_shared_weights_cached_cumulative_and_wider_u():
    gen = torch.Generator().manual_seed(2)
    weights = torch.rand(9, generator=gen, dtype=torch.float32)
    u = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    shared = inverse_cdf(weights, u)  # one weight vector serves every u: [4, 3]
    rows = inverse_cdf(weights.expand(12, 9), u.reshape(12)).view(4, 3)
    cached = inverse_cdf(None, u, cumulative=weights.cumsum(0))
    assert shared.shape == (4, 3) and torch.equal(shared, rows) and torch.equal(shared, cached)
    # the float32 cumulative sum is widened exactly; u keeps its float64 value
    cdf = weights.cumsum(0).double()
    assert torch.equal(shared, (cdf <= (u * cdf[-1]).unsqueeze(-1)).sum(-1))


def test_inverse_cdf_from_a_prefix_is_the_draw_from_the_prefix_alone():
    """A row's first n entries, drawn against their own total (``total``), give bit for bit the draw from those
    entries with the rest zeroed (KGLM's edge draw: a parent's edges at the start of slots padded with others'),
    whatever the rest holds, for every n from 1 to the row's length and edge-case uniforms (0 and rounding to 1)."""
    gen = torch.Generator().manual_seed(3)
    weights = torch.rand(400, 9, generator=gen, dtype=torch.float64).pow(4) * 50
    count = torch.randint(1, 10, (400,), generator=gen)
    u = torch.rand(400, generator=gen, dtype=torch.float64)
    u[:20], u[20:40] = 0.0, 1.0 - 2**-53
    cdf = weights.cumsum(-1)
    prefix = cdf.gather(1, (count - 1).unsqueeze(1)).squeeze(1)
    drawn = inverse_cdf(None, u, cumulative=cdf, total=prefix)
    zeroed = weights * (torch.arange(9) < count.unsqueeze(1))
    assert torch.equal(drawn, inverse_cdf(zeroed, u)) and bool((drawn < count).all())


def test_distinct_rows_and_pad_rows():
    rows = torch.tensor([[2, 1], [0, 0], [2, 1], [5, 5]])
    distinct, index = distinct_rows(rows, min_rows=4)
    assert distinct.tolist() == [[2, 1], [0, 0], [5, 5], [2, 1]] and index.tolist() == [0, 1, 0, 2]
    assert torch.equal(distinct[index], rows)
    assert pad_rows([[3, 4, 5], [6]]).tolist() == [[3, 4, 5], [6, -1, -1]]
    assert pad_rows([[]], pad=0).tolist() == [[0]] and pad_rows([]).shape == (0, 1)


def test_an_adapter_importing_distinct_rows_from_protocol_still_works_with_a_deprecation_warning():
    """Issue 34, item 16: distinct_rows moved from lm_latent_eval.protocol to lm_latent_eval.tensors without a word;
    the old import keeps working for a release, warning where the helper lives now."""
    with pytest.warns(DeprecationWarning, match="lm_latent_eval.tensors.distinct_rows"):
        from lm_latent_eval.protocol import distinct_rows as old

    assert old is distinct_rows
    with pytest.warns(DeprecationWarning, match="lm_latent_eval.tensors.row_keys"):
        from lm_latent_eval.protocol import row_keys as old_keys  # moved in the same commit

    assert old_keys is row_keys
    with pytest.raises(ImportError):
        from lm_latent_eval.protocol import no_such_helper  # noqa: F401


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_log_normalizer_in_blocks_gives_the_numbers_of_one_pass_over_every_row(threads):
    # blocks of 2 rows, or of 5; a lone last row joins the block before it (a CPU reduction of one row alone splits it
    # across threads and rounds differently in about one row of ten here); float32 and float64 sums of float32 and
    # bfloat16 logits
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        shapes = [(3, 40_000, 2)] * 12 + [(1, 40_000, 2), (2, 9, 2), (11, 33_278, 5), (65, 5_000, 5)]
        for rows, vocab, per_block in shapes:
            logits = torch.randn(rows, vocab, generator=gen) * 3
            for source in (torch.float32, torch.bfloat16):
                for dtype in (torch.float32, torch.float64):
                    x = logits.to(source)
                    blocks = log_normalizer(x, dtype, block_entries=per_block * vocab)
                    assert blocks.dtype == torch.float64 and blocks.shape == (rows,)
                    one_pass = x.to(dtype).logsumexp(-1).double()
                    assert torch.equal(blocks, one_pass), (rows, vocab, source, dtype)
        assert torch.equal(log_normalizer(logits.view(5, 13, -1)), logits.logsumexp(-1).double().view(5, 13))
    finally:
        torch.set_num_threads(saved)
