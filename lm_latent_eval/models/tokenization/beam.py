"""The byte-synchronous beam over segmentations, for several texts side by side, on ``stepwise``'s prefix tree.

A hypothesis is a partial segmentation z_1..z_m ending at byte position i, scored by log p(z) = Σ_j log p(z_j | block
context) (the proposal's contexts: the full blocks of the rolling windows). At byte position i of every text the
``beam_size`` hypotheses of highest score that end there are kept and extended by every lattice edge leaving i; the
rest are dropped. The kept hypotheses of all the texts get their next-token logits from one forward pass
(``stepwise.forward_nodes``: each node's context rows gathered from the key/value store, padded and masked), so a
batch of texts costs one pass per byte position of the longest. A node's key/value rows are released once no
hypothesis can still extend it (a token spells at most ``reach`` bytes). The canonical segmentation is always among
the result, so the beam bound is never below the canonical one.
"""

from __future__ import annotations

import torch

from . import stepwise


@torch.no_grad()
def beam_documents(lm, xs: list[torch.Tensor], beam_size: int) -> list[list[list[int]]]:
    """Per text x_d [T_d] (canonical ids), up to ``beam_size`` distinct segmentations of highest log p(z) that
    spell it, best first, the canonical one among them."""
    state = stepwise.init_documents(lm, xs, [1] * len(xs), 1.0, True)
    lattices = state.lattices
    # per text: byte position -> {node ending there: its score}
    pools = [{0: {d: 0.0}} for d in range(len(xs))]
    reach = max(len(b) for b in lm.vocab if b)
    extended: list[tuple[int, int]] = []
    for i in range(max(lattice.n for lattice in lattices)):
        chosen = _prune(state, pools, i, beam_size)
        if not chosen:
            continue
        new = [(node, state.parents[node]) for _, node, _ in chosen if node not in state.logits]
        if new:
            stepwise.forward_nodes(lm, state, new)
        logits = torch.stack([state.logits.pop(node) for _, node, _ in chosen])
        log_p = torch.log_softmax(logits.double(), -1).cpu()
        for (d, node, score), row in zip(chosen, log_p):
            for token, end in lattices[d].edges[i]:
                child = stepwise.child_node(state, node, token, end)
                pools[d].setdefault(end, {})[child] = score + float(row[token])
        extended += [(i, node) for _, node, _ in chosen]
        stepwise.forget(state, [node for at, node in extended if at <= i - reach])
        extended = [(at, node) for at, node in extended if at > i - reach]
    return [
        _best(state, pools[d].get(lat.n), lat, x, beam_size) for d, (lat, x) in enumerate(zip(lattices, xs))
    ]


def _prune(state, pools, i: int, beam_size: int) -> list[tuple[int, int, float]]:
    """(text, node, score) of the ``beam_size`` best hypotheses of each text ending at byte i (before its end); the
    others are dropped."""
    chosen = []
    for d, lattice in enumerate(state.lattices):
        pool = pools[d].pop(i, None) if i < lattice.n else None
        if pool:
            ranked = sorted(pool.items(), key=lambda kv: -kv[1])
            chosen += [(d, node, score) for node, score in ranked[:beam_size]]
            stepwise.forget(state, [node for node, _ in ranked[beam_size:]])
    return chosen


def _best(state, pool: dict | None, lattice, x: torch.Tensor, beam_size: int) -> list[list[int]]:
    """The best ``beam_size`` complete segmentations of one text, the canonical one in place of the last when
    missing."""
    ranked = sorted((pool or {}).items(), key=lambda kv: -kv[1])[:beam_size]
    rows = [list(state.histories[node]) for node, _ in ranked]
    canonical = x.tolist()
    if lattice.contains(canonical) and canonical not in rows:
        rows = [*rows[: beam_size - 1], canonical]
    return rows
