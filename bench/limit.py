"""Distance to the limit: the throughput of the arithmetic an estimate needs, as plain einsums, on the same device.

``reference_throughput(once, per_token, num_particles, num_tokens)`` times a list of einsums run once per document
(encoders, per-position tables) plus a list run at every token for all K particles (the heads), with random float32
operands of the given shapes, and returns particles·tokens per second. A model's benchmark lists the products of
its own arithmetic (``kglm_arithmetic`` below) and prints ours / reference measured in the same run. The reference
has no masking, softmax or sampling, and a read of n table entries is an elementwise product of n values (no
indexing), so it is a lower bound on the time of any implementation.
"""

from __future__ import annotations

import math
import time

import torch

Product = tuple[
    str, tuple[int, ...], tuple[int, ...]
]  # (einsum equation, shape of operand 1, shape of operand 2)


def _operands(products: list[Product], device) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    return [
        (eq, torch.randn(a, generator=gen).to(device), torch.randn(b, generator=gen).to(device))
        for eq, a, b in products
    ]


def reference_seconds(
    once: list[Product], per_token: list[Product], num_tokens: int, device="cpu", repeats: int = 3
) -> float:
    """Best-of-``repeats`` seconds of ``once`` + ``num_tokens`` × ``per_token`` einsums (one document)."""
    ops_once, ops_step = _operands(once, device), _operands(per_token, device)
    best = float("inf")
    for _ in range(repeats + 1):  # the first pass warms up
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for eq, a, b in ops_once:
            torch.einsum(eq, a, b)
        for _ in range(num_tokens):
            for eq, a, b in ops_step:
                torch.einsum(eq, a, b)
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def reference_throughput(
    once: list[Product],
    per_token: list[Product],
    num_particles: int,
    num_tokens: int,
    device="cpu",
    repeats: int = 3,
) -> float:
    """particles·tokens per second of the reference arithmetic of one document (see the module docstring)."""
    return num_particles * num_tokens / reference_seconds(once, per_token, num_tokens, device, repeats)


def encoder_products(model, T: int) -> tuple[list[Product], list[Product]]:
    """p's and q's LSTM stacks over T tokens: input projections once ([T, in] × [4H, in]), recurrences per token
    ([H] × [4H, H])."""
    once, step = [], []
    for encoder in (model.encoder, model.proposal.encoder):
        for layer in encoder.layers:
            four_h, inp = layer.weight_ih_l0.shape
            once.append(("ti,gi->tg", (T, inp), (four_h, inp)))
            step.append(("i,gi->g", (four_h // 4,), (four_h, four_h // 4)))
    return once, step


def flops(products: list[Product]) -> int:
    """Floating-point operations of einsums: 2 × the product of the sizes of all their indices (one multiply and one
    add per term), summed."""
    total = 0
    for eq, a, b in products:
        sizes = {}
        for letters, shape in zip(eq.split("->")[0].split(","), (a, b)):
            sizes.update(zip(letters, shape))
        total += 2 * math.prod(sizes.values())
    return total


def product_bytes(products: list[Product], bytes_per_value: int = 4) -> int:
    """Bytes the einsums move at the least: each operand read once and the result written once, float32 by default
    (the bytes side of the floor, beside ``flops``: a fused kernel can move no less).

    Examples
    --------
    >>> product_bytes([("kd,ed->ke", (2, 3), (5, 3))])
    124
    """
    total = 0
    for eq, a, b in products:
        inputs, output = eq.split("->")
        sizes = {}
        for letters, shape in zip(inputs.split(","), (a, b)):
            sizes.update(zip(letters, shape))
        total += bytes_per_value * (math.prod(a) + math.prod(b) + math.prod(sizes[c] for c in output))
    return total


def document_flops(once: list[Product], per_token: list[Product], num_tokens: int) -> int:
    """FLOPs of one document: ``once`` + ``num_tokens`` × ``per_token`` (what ``reference_seconds`` times)."""
    return flops(once) + num_tokens * flops(per_token)


def kglm_arithmetic(
    model, T: int, K: int, word_pairs: int | None = None, related: tuple[int, int] | None = None
) -> tuple[list[Product], list[Product]]:
    """The products an IS estimate of a T-token document with K particles needs from a KGLM.

    Once: p's and q's encoders (recurrences counted per token), q's and p's per-position tables (type, new-entity,
    parent and relation logits), p's generate head for ``word_pairs`` (position, entity) pairs (default: every
    (position, entity row) pair, the bundled model's table; a full-size model needs only the distinct pairs its
    particles drew) and the alias-copy scores of every alias token. Per token, for all K particles, in q: the parent
    logits of the ``cutoff`` window slots and the relation logits of the parent's edges padded to the largest
    out-degree (as the GPU's sampler reads them, every particle whatever it draws); in p the copy scores of the
    particle's entity's alias tokens, read from theirs. p reads the parent and edge logits only where z_t is
    "related": ``related`` = (the document's related (particle, position) pairs, the sum of their parents'
    out-degrees), each pair's window and each of those edges read once; None: every particle at every position,
    padded, as q (a bound). A read of n table entries is written as the elementwise product of n values with their n
    indices ("kc,kc->kc": 2n FLOPs, each value and index read once and the result written: 12 bytes an entry at
    float32), the least a gather moves."""
    tables = model.tables
    D, De, C = model.token_dim, model.entity_dim, max(model.cutoff, 1)
    R, Rr = tables.num_rows, int(model.relation_embedding.weight.shape[0])
    V = len(model.vocab)
    d_max = max(int(tables.degree.max()) if tables.degree.numel() else 1, 1)
    lengths = [
        sum(len(f) for f in model.graph.entity_aliases(e) if f) for e in range(model.graph.num_entities)
    ]
    L_total, L_max = (
        sum(lengths) + 1,
        max(lengths + [1]),
    )  # alias tokens of all entities, of the longest entity
    once, step = encoder_products(model, T)
    for _ in range(2):  # q and p
        once += [
            ("td,cd->tc", (T, D), (4, D)),
            ("td,rd->tr", (T, De), (R, De)),
            ("td,rd->tr", (T, De), (R, De)),
            ("td,rd->tr", (T, De), (Rr, De)),
        ]
    step += [("kc,kc->kc", (K, C), (K, C)), ("km,km->km", (K, d_max), (K, d_max))] * (1 if related else 2)
    if related:
        related_pairs, related_edges = related
        once += [
            ("pc,pc->pc", (related_pairs, C), (related_pairs, C)),
            ("e,e->e", (related_edges,), (related_edges,)),
        ]
    pairs = T * R if word_pairs is None else word_pairs
    once += [
        ("ni,oi->no", (pairs, D + De), (D, D + De)),
        ("ni,oi->no", (pairs, D), (V, D)),
        ("td,ld->tl", (T, D), (L_total, D)),
    ]
    step += [("kl,kl->kl", (K, L_max), (K, L_max))]
    return once, step


def entitynlm_arithmetic(
    model, T: int, K: int, starts: int | None = None
) -> tuple[list[Product], list[Product]]:
    """The products an IS estimate of a T-token document with K particles needs from an EntityNLM.

    Once: p's and q's encoders, and in p and q the type logits and entity queries W_ent h_t of every position. Per
    token, for all K particles, in q (as the GPU's sampler runs them, every particle whatever it draws): entity
    scores over the M slots ([D] · [K, M, D]) and the length head ([K, 2D] · [ℓ_max, 2D]); in q and in p the update
    gate W_δ e ([K, D] · [D, D]); in p the word head W_e e_t and the vocabulary logits ([K, D] · [V, D]). p needs
    the entity scores and the length head only where a mention starts: ``starts``, the document's (particle,
    position) pairs that start one; None: every particle at every position, as q (a bound)."""
    D, M, L, V = model.dim, model.max_entities, model.max_mention_length, len(model.vocab)
    once, step = encoder_products(model, T)
    choice = [("d,kmd->km", (D,), (K, M, D)), ("kc,lc->kl", (K, 2 * D), (L, 2 * D))]
    for side in ("q", "p"):
        once += [("td,cd->tc", (T, D), (2, D)), ("td,ed->te", (T, D), (D, D))]
        step += [("kd,ed->ke", (K, D), (D, D))]
        if side == "q" or starts is None:
            step += choice
        else:
            once += [("d,smd->sm", (D,), (starts, M, D)), ("sc,lc->sl", (starts, 2 * D), (L, 2 * D))]
    step += [("kd,ed->ke", (K, D), (D, D)), ("kd,vd->kv", (K, D), (V, D))]
    return once, step


def hmm_arithmetic(model, T: int, K: int) -> tuple[list[Product], list[Product]]:
    """The products an IS estimate of a T-token document with K particles needs from the HMM: q's forward filter
    once ([T, S] × [S, S]); per token, q's K conditional rows of S states (drawn from) and p's K transition and
    emission lookups."""
    S = model.num_states
    return [("ts,sr->tr", (T, S), (S, S))], [("ks,ks->k", (K, S), (K, S)), ("k,k->k", (K,), (K,))]


def rnng_arithmetic(model, T: int, K: int) -> tuple[list[Product], list[Product]]:
    """The products an IS estimate of a T-word sentence with K trees needs from the RNNG (2 actions per word).

    Once, in q: the BiLSTM encoder's input projections and the span MLP over the T² spans. Per word, in q: the two
    encoder recurrences; in p for all K trees: two stack-LSTM steps (every layer), two action heads, one tree-LSTM
    composition and the word head ([K, H] · [V, H])."""
    q = model.proposal
    d, Hq = q.embedding.weight.shape[1], q.hidden_size
    once = [("ti,gi->tg", (T, d), (4 * Hq, d))] * 2 + [
        ("ni,oi->no", (T * T, 2 * Hq), (2 * Hq, 2 * Hq)),
        ("ni,oi->no", (T * T, 2 * Hq), (1, 2 * Hq)),
    ]
    step = [("i,gi->g", (Hq,), (4 * Hq, Hq))] * 2
    for cell in model.stack_lstm.cells:
        four_h, inp = cell.weight_ih.shape
        step += [
            ("ki,gi->kg", (K, inp), (four_h, inp)),
            ("kh,gh->kg", (K, four_h // 4), (four_h, four_h // 4)),
        ] * 2
    H, D, V = model.hidden_size, model.dim, len(model.vocab)
    step += [("kh,ah->ka", (K, H), (2, H))] * 2 + [
        ("ki,oi->ko", (K, 2 * D), (5 * D, 2 * D)),
        ("kh,vh->kv", (K, H), (V, H)),
    ]
    return once, step
