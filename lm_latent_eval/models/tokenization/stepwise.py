"""latent_tokenization byte-synchronously, for SMC: step t extends every particle's segmentation until it has spelled
the bytes of the first t + 1 canonical tokens.

x holds the canonical token ids [T]; b_t is the number of bytes x_0..x_t spell. At step t every particle that has
spelled fewer than b_t bytes draws tokens from the proposal q_τ (the lattice-restricted, tempered, canonical-mixed
next-token distribution of ``proposal.py``, computed the same way) until it has spelled at least b_t; its last token
may end past b_t (inside x), and a particle that already covers b_{t+1} draws nothing at step t + 1. The increment is

    log w_t = Σ_{tokens z_j drawn at step t} [log p(z_j | block context) − log q_τ(z_j | ·)]

(+ at the last step, for a segmentation longer than the context L, log p of its last block in lm-eval's last window
minus the same in its block context), so the increments of a particle sum to log p(x, z) − log q_τ(z | x). The
estimator therefore compares and resamples particles that have all spelled the same prefix of x: after step t the
weights target p(z_1..z_m) over the token sequences whose last token covers byte b_t of x (its sum over them is the
probability that the model's token stream spells x up to b_t and on, consistently with x, to the end of that token).

Random numbers: step 0 draws the [K, n] uniforms that ``proposal.sample`` draws (n bytes); slot k's j-th token ever
uses uniform (k, j). A slot's count does not restart when resampling gives it another history, so no uniform is used
twice, and without resampling the slots draw the segmentations of ``proposal.sample`` for the same seed. A step draws
at most b_t − b_{t−1} tokens per slot, so n uniforms suffice.

Particles with the same history share one node of a prefix tree: its next-token logits and key/value rows are
computed once, when it is first reached. The key/value rows live in one store, one row per node (every layer's keys
and values of its last token); a node's block context is the list of its ancestors' rows since the block start, its
own last. All the new nodes of a draw share one forward pass: their contexts gathered from the store, right-padded to
the longest, the padding masked out of the attention and each token at its own position (position ids), so a node's
logits are those of its unpadded context up to float32 rounding, whatever the lengths beside it.

Documents side by side (``protocol.DocumentBatchLM``): the particles of D texts are consecutive segments of one state
(one text is the case D = 1, ``smc_init``), the nodes of every text in one table, each node a text's. A draw of the
batch takes one token for every particle of every text that still needs one, in one pass over the stacked edge
tables; the new nodes of every text share that draw's one forward pass, so the network runs once per draw of the
batch instead of once per draw of each text. Each text uses its own uniforms (drawn from its own generator at step
0) at its own slots: its draws are those it makes alone, up to the float32 rounding of the network's products over a
larger, differently padded batch.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from ...tensors import inverse_cdf
from ..causal_lm import cache_step
from ..side_by_side import document_rows


@dataclass
class TokenizationParticles:
    """The particles of D ≥ 1 texts after their first t steps: text d's K_d particles are the d-th consecutive
    segment; node ids index the tables below, each node one text's."""

    lattices: list
    sizes: list[int]
    # T_d, the canonical tokens of each text
    lengths: list[int]
    temperature: float
    # [Σ T_d] b_t of every text, stacked; [Σ K_d] each particle's text's first and last row of it
    boundaries: torch.Tensor
    first: torch.Tensor
    last: torch.Tensor
    # [Σ E_d] the token of every lattice edge, text after text, position after position (their ends: on the host)
    edges: torch.Tensor
    # text d's first row of ``edges``
    edge_offsets: list[int]
    node: torch.Tensor  # [Σ K_d] node of each particle
    spelled: torch.Tensor  # [Σ K_d] bytes its node has spelled
    draws: torch.Tensor  # [Σ K_d] uniforms slot k has used
    # a text longer than the context L (a segmentation may then need lm-eval's last window): the sums below are kept
    windowed: bool
    # [Σ K_d] tokens, Σ log p(z_j | block context) (float64) and the same over the tokens before the current block
    count: torch.Tensor | None = None
    log_p: torch.Tensor | None = None
    block_log_p: torch.Tensor | None = None
    uniforms: torch.Tensor | None = None  # [Σ K_d, max n_d], drawn at step 0
    # node -> its text, tokens, bytes spelled, parent
    docs: dict[int, int] = field(default_factory=dict)
    histories: dict[int, tuple] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    parents: dict[int, int] = field(default_factory=dict)
    # node -> next-token logits [V] (before the end), and the store rows of its block context (its own last)
    logits: dict[int, torch.Tensor] = field(default_factory=dict)
    caches: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # [capacity, P, D] every layer's keys and values of one token per row (P: the layers' heads, keys then values,
    # layer after layer; heads per layer below); rows below ``used`` are taken
    store: torch.Tensor | None = None
    heads: list[int] = field(default_factory=list)
    used: int = 0
    next_node: int = 0
    t: int = 0


def edge_table(lm, lattice, x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """The tokens of the lattice's edges flat, [E] on the CPU, and per byte position p < n (its first row, its
    number of edges, the index among them of the canonical token starting at p or −1), cached on the lattice."""
    table = getattr(lattice, "edge_table", None)
    if table is None:
        canonical = lm.proposal._boundaries(x)
        flat, rows = [], []
        for p, out in enumerate(lattice.edges):
            j = next((j for j, (token, _) in enumerate(out) if token == canonical.get(p)), -1)
            rows.append((len(flat), len(out), j))
            flat.extend(token for token, _ in out)
        table = lattice.edge_table = (torch.tensor(flat, dtype=torch.long), rows)
    return table


@torch.no_grad()
def init_documents(lm, xs, num_particles, temperature: float, peek: bool) -> TokenizationParticles:
    """K_d particles at the root (no token) of each text spelled by xs[d] [T_d]; the root's logits are computed
    here (one forward pass of the prefix token, shared by the texts)."""
    if not peek:
        raise ValueError(
            "the segmentation proposal must read the text it spells: peek=false is not available"
        )
    lattices = [lm.lattice(x) for x in xs]
    for lattice in lattices:
        if not lattice.spellable:
            raise ValueError(f"text {lattice.data[:60]!r} cannot be spelled with the vocabulary")
    device, sizes, lengths = lm.device, [int(k) for k in num_particles], [int(x.numel()) for x in xs]
    tables = [edge_table(lm, lattice, x) for lattice, x in zip(lattices, xs)]
    spelled = [itertools.accumulate(len(lm.vocab[t]) for t in x.tolist()) for x in xs]
    first, last = document_rows(sizes, lengths, device)
    K = sum(sizes)
    state = TokenizationParticles(
        lattices, sizes, lengths, float(temperature),
        torch.tensor([b for row in spelled for b in row], dtype=torch.long, device=device), first, last,
        torch.cat([flat for flat, _ in tables]).to(device),
        list(itertools.accumulate((flat.shape[0] for flat, _ in tables[:-1]), initial=0)),
        torch.zeros(K, dtype=torch.long, device=device), torch.zeros(K, dtype=torch.long, device=device),
        torch.zeros(K, dtype=torch.long, device=device), any(lat.n > lm.max_length for lat in lattices),
    )  # fmt: skip
    if state.windowed:
        state.count = torch.zeros(K, dtype=torch.long, device=device)
        state.log_p = torch.zeros(K, dtype=torch.float64, device=device)
        state.block_log_p = torch.zeros(K, dtype=torch.float64, device=device)
    state.node = torch.arange(len(xs), device=device).repeat_interleave(torch.tensor(sizes, device=device))
    for d, lattice in enumerate(lattices):
        state.docs[d], state.histories[d], state.positions[d] = d, (), 0
    state.next_node = len(xs)
    if any(lattice.n for lattice in lattices):
        # one forward pass of one row, as alone: every root holds its logits and key/value rows
        forward_nodes(lm, state, [(0, None)])
        for d in range(1, len(xs)):
            state.logits[d], state.caches[d] = state.logits[0], state.caches[0]
    return state


def init_particles(
    lm, x: torch.Tensor, num_particles: int, temperature: float, peek: bool
) -> TokenizationParticles:
    """K particles at the root (no token) for the text spelled by x [T]: ``init_documents`` of one text."""
    return init_documents(lm, [x], [num_particles], temperature, peek)


@torch.no_grad()
def step_documents(
    lm, state: TokenizationParticles, t: int, generators
) -> tuple[TokenizationParticles, torch.Tensor]:
    """Step t of every text with t < T_d: extend each of its particles until it covers b_t bytes, drawing with the
    uniforms of the text's own generator (drawn at step 0: [K_d, n_d] each); (state, log p − log q_τ of the new
    tokens [Σ K_d], float64). A text that has ended draws nothing (its particles cover its last byte)."""
    if t != state.t or not 0 <= t < max(state.lengths):
        raise ValueError(f"smc_step: expected step {state.t} of {max(state.lengths)}, got t = {t}")
    device = state.node.device
    if t == 0:
        _draw_uniforms(state, generators)
    # [Σ K_d] b_t of each particle's text (its last boundary once it has ended)
    bound = state.boundaries[torch.minimum(state.first + t, state.last)]
    increment = torch.zeros(state.node.shape[0], dtype=torch.float64, device=device)
    while True:
        need = (state.spelled < bound).nonzero().squeeze(1)
        if need.numel() == 0:
            break
        increment.index_add_(0, need, _draw_tokens(lm, state, need))
    ending = [d for d, n in enumerate(state.lengths) if n == t + 1 and state.lattices[d].n > lm.max_length]
    if ending:
        increment += _last_window_correction(lm, state, ending)
    _forget_unreached(state)
    state.t = t + 1
    return state, increment


def step_particles(
    lm, state: TokenizationParticles, t: int, generator
) -> tuple[TokenizationParticles, torch.Tensor]:
    """smc_step: extend every particle until it covers b_t bytes; (state, log p − log q_τ of its new tokens [K])."""
    return step_documents(lm, state, t, [generator])


def _draw_uniforms(state: TokenizationParticles, generators) -> None:
    """Each text's [K_d, max(n_d, 1)] uniforms from its own generator (``proposal.sample``'s), side by side."""
    device, sizes = state.node.device, state.sizes
    blocks = []
    for k, lattice, generator in zip(sizes, state.lattices, generators):
        where = generator.device if generator is not None else torch.device("cpu")
        blocks.append(
            torch.rand((k, max(lattice.n, 1)), generator=generator, device=where, dtype=torch.float64)
        )
    if len(blocks) == 1:
        state.uniforms = blocks[0].to(device)
        return
    state.uniforms = torch.zeros(
        sum(sizes), max(b.shape[1] for b in blocks), dtype=torch.float64, device=device
    )
    for start, block in zip(itertools.accumulate(sizes, initial=0), blocks):
        state.uniforms[start : start + block.shape[0], : block.shape[1]] = block


def _edges(state: TokenizationParticles, nodes: list[int]):
    """(ids [M, W], invalid [M, W], canonical edge [M, 1] or None) of the lattice edges at each node's
    byte position, padded to the most edges among them (W); the canonical edge's index is −1 off a canonical
    boundary, and None when no node is on one."""
    device = state.node.device
    meta = []
    for i in nodes:
        d = state.docs[i]
        start, count, canonical = state.lattices[d].edge_table[1][state.positions[i]]
        meta.append((state.edge_offsets[d] + start, count, canonical))
    width = max(count for _, count, _ in meta)
    # [M, 3]: one copy to the device
    meta_t = torch.tensor(meta, dtype=torch.long, device=device)
    col = torch.arange(width, device=device)
    invalid = col >= meta_t[:, 1:2]
    ids = state.edges[(meta_t[:, :1] + col).clamp_max(state.edges.shape[0] - 1)]
    canonical = meta_t[:, 2:] if any(c >= 0 for _, _, c in meta) else None
    return ids, invalid, canonical


def _proposal_log_q(lm, state, logits, ids, invalid, canonical) -> torch.Tensor:
    """log q_τ [M, W] (float64) of every node's edges: the lattice-restricted tempered softmax, mixed with the
    canonical token, (1 − ε) q + ε · 1[canonical], at nodes on a canonical boundary (``_mix_canonical``)."""
    scores = logits.gather(1, ids).double()
    if state.temperature != 1.0:
        scores = scores / state.temperature
    node_log_q = torch.log_softmax(scores.masked_fill(invalid, float("-inf")), -1)
    eps = lm.canonical_mix
    if eps <= 0 or canonical is None:
        return node_log_q
    scaled = node_log_q.exp() * (1 - eps)
    col = torch.arange(ids.shape[1], device=ids.device)
    mixed = torch.where(col == canonical, scaled + eps, scaled).log()
    return torch.where(canonical >= 0, mixed, node_log_q)


def _draw_tokens(lm, state: TokenizationParticles, need: torch.Tensor) -> torch.Tensor:
    """One token for each particle in ``need`` [N] from its node's q_τ (as ``proposal._sample_chunk``): the particles
    move to the child nodes, whose logits are computed; returns log p − log q_τ of the tokens [N] (float64)."""
    nodes, inverse = torch.unique(state.node[need], return_inverse=True)
    nodes = nodes.tolist()
    ids, invalid, canonical = _edges(state, nodes)
    # [M, V]
    logits = torch.stack([state.logits[i] for i in nodes])
    node_log_q = _proposal_log_q(lm, state, logits, ids, invalid, canonical)
    u = state.uniforms[need, state.draws[need]]
    choice = inverse_cdf(None, u, cumulative=node_log_q.exp().cumsum(-1)[inverse])
    log_q = node_log_q[inverse, choice]
    log_p = torch.log_softmax(logits, -1)[inverse, ids[inverse, choice]].double()
    if state.windowed:
        count = state.count[need]
        # the token opens a new block of the windows
        starts_block = (count > 0) & (count % lm.max_length == 0)
        state.block_log_p[need] = torch.where(starts_block, state.log_p[need], state.block_log_p[need])
        state.log_p[need] += log_p
        state.count[need] = count + 1
    state.draws[need] += 1
    _move(lm, state, need, nodes, inverse * ids.shape[1] + choice, ids.shape[1])
    return log_p - log_q


def _move(lm, state: TokenizationParticles, need, nodes: list[int], edge: torch.Tensor, width: int) -> None:
    """Move the particles ``need`` [N] along their chosen edges (``edge`` = node row · W + edge index, [N]) to the
    child nodes, created once per (node, edge), with logits for those before the end of their text."""
    children, back = torch.unique(edge, return_inverse=True)
    made, new = [], []
    for key in children.tolist():
        parent = nodes[key // width]
        lattice = state.lattices[state.docs[parent]]
        token, end = lattice.edges[state.positions[parent]][key % width]
        child = child_node(state, parent, token, end)
        made.append((child, end))
        if end < lattice.n:
            new.append((child, parent))
    if new:
        forward_nodes(lm, state, new)
    # [N, 2] (node, bytes spelled)
    moved = torch.tensor(made, dtype=torch.long, device=state.node.device)[back]
    state.node[need] = moved[:, 0]
    state.spelled[need] = moved[:, 1]


def child_node(state: TokenizationParticles, parent: int, token: int, end: int) -> int:
    """A new node: ``parent``'s history and ``token``, which ends at byte ``end`` (no logits yet)."""
    child, state.next_node = state.next_node, state.next_node + 1
    state.docs[child], state.positions[child], state.parents[child] = state.docs[parent], end, parent
    state.histories[child] = (*state.histories[parent], token)
    return child


def forward_nodes(lm, state: TokenizationParticles, new: list[tuple[int, int | None]]) -> None:
    """Next-token logits and key/value rows of the new nodes (node, parent or None at the root), in the proposal's
    block context: the parent's context plus the node's last token (the prefix token at the root; the token alone at
    a block start). One forward pass for all of them, whichever text they are of: each node's context rows are
    gathered from the store, right-padded to the longest, the padding masked out of the attention and the token
    placed at its own position, so each node's numbers are those of its own unpadded context up to float32
    rounding."""
    device, L = state.node.device, lm.max_length
    first = _reserve_slots(state, len(new))
    contexts = [() if len(state.histories[node]) % L == 0 else state.caches[parent] for node, parent in new]
    width = max(map(len, contexts))
    # [M, 2 + width + 1]: token, position, the context's slots (−1: padding) and one column for the token itself
    packed = torch.tensor(
        [[state.histories[node][-1] if state.histories[node] else lm.prefix_token, len(c), *c,
          *([-1] * (width - len(c))), 0] for (node, _), c in zip(new, contexts)],
        dtype=torch.long, device=device,
    )  # fmt: skip
    tokens, positions, slots = packed[:, :1], packed[:, 1:2], packed[:, 2:]
    if width == 0:
        out, cache = cache_step(lm.model, tokens, DynamicCache(), position_ids=positions)
    else:
        dtype = state.store.dtype
        # [M, width, P, D]: every layer's keys and values of each context row
        rows = state.store[slots[:, :width].clamp_min(0)]
        mask = torch.where(slots < 0, torch.finfo(dtype).min, 0.0).to(dtype)[:, None, None, :]
        layers, start = [], 0
        for heads in state.heads:
            layers.append(tuple(rows[:, :, s : s + heads].transpose(1, 2) for s in (start, start + heads)))
            start += 2 * heads
        out, cache = cache_step(lm.model, tokens, DynamicCache(ddp_cache_data=layers), attention_mask=mask,
                                position_ids=positions)  # fmt: skip
    keys = [piece[:, :, -1] for layer in cache.layers for piece in (layer.keys, layer.values)]
    if state.store is None:
        state.heads = [layer.keys.shape[1] for layer in cache.layers]
        state.store = keys[0].new_empty(
            (max(2 * len(new), 256), sum(k.shape[1] for k in keys), keys[0].shape[-1])
        )
    torch.cat(keys, 1, out=state.store[first : first + len(new)])
    state.used = first + len(new)
    logits = out.logits[:, -1].float()
    for row, ((node, _), c) in enumerate(zip(new, contexts)):
        state.logits[node] = logits[row]
        state.caches[node] = (*c, first + row)


def _reserve_slots(state: TokenizationParticles, count: int) -> int:
    """The first of ``count`` free consecutive rows of the key/value store (0 before it exists). When the rows past
    the last used one do not suffice, the rows that a live node's context reads are moved to the front (in order)
    and the store grown to twice what they and the new rows need; the contexts are renumbered."""
    if state.store is None or state.used + count <= state.store.shape[0]:
        return state.used
    live = sorted(set().union(*state.caches.values()))
    capacity = max(state.store.shape[0], 2 * (len(live) + count))
    if live != list(range(len(live))) or capacity > state.store.shape[0]:
        store = state.store.new_empty((capacity, *state.store.shape[1:]))
        store[: len(live)] = state.store[torch.tensor(live, device=store.device)]
        state.store = store
        renumber = dict(zip(live, range(len(live))))
        state.caches = {node: tuple(map(renumber.__getitem__, c)) for node, c in state.caches.items()}
    state.used = len(live)
    return state.used


def _last_window_correction(lm, state: TokenizationParticles, ending: list[int]) -> torch.Tensor:
    """For the texts ``ending`` at this step, segmentations longer than L: log p of the last block in lm-eval's last
    window (up to L tokens of left context) minus its log p in the block context the steps used; 0 otherwise.
    float64 [Σ K_d], added to log_p."""
    correction = torch.zeros(state.node.shape[0], dtype=torch.float64, device=state.node.device)
    starts = list(itertools.accumulate(state.sizes, initial=0))
    rows = [
        starts[d] + k
        for d in ending
        for k, i in enumerate(state.node[starts[d] : starts[d + 1]].tolist())
        if len(state.histories[i]) > lm.max_length
    ]
    if rows:
        last = lm.score([list(state.histories[int(state.node[k])]) for k in rows], last_window_only=True)
        index = torch.tensor(rows, device=correction.device)
        correction[index] = last.to(correction.device) - (state.log_p[index] - state.block_log_p[index])
        state.log_p += correction
    return correction


def _forget_unreached(state: TokenizationParticles) -> None:
    """Drop the nodes (and key/value caches) that no particle holds any more."""
    live = set(state.node.tolist())
    forget(state, [i for i in state.histories if i not in live])


def forget(state: TokenizationParticles, nodes) -> None:
    """Drop ``nodes`` and their logits and key/value caches (the store rows only a dropped cache read are reused)."""
    for i in nodes:
        for table in (state.caches, state.logits, state.parents):
            table.pop(i, None)
        del state.histories[i], state.positions[i], state.docs[i]


def reorder_particles(state: TokenizationParticles, ancestors: torch.Tensor) -> TokenizationParticles:
    """Particle k takes the history (node and log p sums) of particle ancestors[k]; slot k keeps its uniforms."""
    a = ancestors.to(state.node.device)
    state.node, state.spelled = state.node.index_select(0, a), state.spelled.index_select(0, a)
    if state.windowed:
        state.count, state.log_p = state.count.index_select(0, a), state.log_p.index_select(0, a)
        state.block_log_p = state.block_log_p.index_select(0, a)
    _forget_unreached(state)
    return state


def particle_latents(model, state: TokenizationParticles) -> torch.Tensor:
    """The tokens drawn so far, [K, max(n, 1)] padded with −1 (``proposal.sample``'s format; n bytes bound the
    tokens, so the width does not depend on which particles survive)."""
    width = max(max(lattice.n, 1) for lattice in state.lattices)
    z = torch.full((state.node.shape[0], width), -1, dtype=torch.long)
    for k, i in enumerate(state.node.tolist()):
        z[k, : len(state.histories[i])] = torch.tensor(state.histories[i], dtype=torch.long)
    return z
