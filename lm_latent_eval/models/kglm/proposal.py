"""q(z | x): the discriminative KGLM twin (same encoder and latent heads as p, no word head), for IS and beam search.

The encoder reads ``@@START@@ x_1 .. x_T``. With ``peek=True`` z_t is labelled from the state after reading x_t
(the original kglm-disc); with ``peek=False`` from the state after x_<t (q then sees only the past, like p's
prior). The original code draws its no-peeking samples by feeding the peeking network the shifted input
(``offset=True``); that network was trained to label the token it has just read, so it is misapplied there.
With ``nopeek_heads=True`` q has its own no-peeking heads (a projection of the state after x_<t, a mention-type
layer and a new-entity bias) trained on the no-peeking objective log q(z_t | x_<t, z_<t); without them (archives
of the original code) no-peeking uses the peeking heads on the shifted states, as the original does.

With ``alias_index`` (token id -> entities that have an alias starting with that token) the peeking q also adds
learned multiples of three indicator features of the token it has just read: "x_t starts an alias of e" to e's
new-entity logit and to the logit of every edge reaching e, and "the candidate parent has an edge to such an e"
to the parent logit. They only sharpen logits, so q's support (and exact log q) is unchanged.

Every logit is divided by the temperature τ, and ``sample`` returns log q_τ(z | x) of exactly what it drew.
q uses the same factorization and masks as p (``latents.py``), so its support equals p's support: every drawn z
has p(x, z) > 0, and every z with p(x, z) > 0 can be drawn (so IS is unbiased).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...protocol import CheckedProposal, check_proposal_args
from ..cuda_graphs import DEFAULT_CUDA_GRAPHS, TokenLoop, copy_fields, graphs_in_effect
from ..encoder_cache import DocumentCache
from ..memory_plan import DEFAULT_MEMORY_BUDGET
from .awd_lstm import AWDLSTMDropouts, embedding_dropout
from .latents import (
    CONTINUING,
    NEW,
    NONE,
    NUM_TYPES,
    RELATED,
    GraphTables,
    HeadTables,
    LatentHeads,
    allowed_types,
    candidate_slots,
    canonical_relation,
    expand_edges,
    latent_log_prob,
    segment_logsumexp,
)
from .stepwise import WindowState, sample_documents, sample_step

# the original KGLM's
ORIGINAL_DROPOUTS = AWDLSTMDropouts(dropout=0.4, dropouti=0.65, dropoute=0.1, wdrop=0.5)


class KGLMProposal(CheckedProposal, nn.Module):
    """q_τ(z | x) = Π_t q(type_t | ·) q(entity_t | type_t, ·) from its own AWD-LSTM over x (peeking or not)."""

    # "true", "false" or "auto": the sampler's per-token step in a CUDA graph (models/cuda_graphs.py)
    cuda_graphs = DEFAULT_CUDA_GRAPHS
    # what "auto" means on a CUDA device: faster with graphs at full size (docs/speed.md, CUDA graphs)
    CUDA_GRAPHS_AUTO = True
    # bytes the chunked heads may hold at once (models/memory_plan.py; KGLM.memory_budget sets it)
    memory_budget = DEFAULT_MEMORY_BUDGET

    def __init__(
        self,
        vocab_size: int,
        unk_id: int,
        bos_id: int,
        tables: GraphTables,
        token_dim: int,
        entity_dim: int,
        hidden_size: int,
        num_layers: int,
        cutoff: int,
        new_entity_bias: bool,
        num_entity_rows: int,
        num_relation_rows: int,
        dropouts: AWDLSTMDropouts = ORIGINAL_DROPOUTS,
        chunk_size: int = 70,
        nopeek_heads: bool = False,
        alias_index: dict[int, list[int]] | None = None,
    ):
        super().__init__()
        # owned (and moved across devices) by the KGLM
        object.__setattr__(self, "_tables", tables)
        self.vocab_size, self.unk_id, self.bos_id = vocab_size, unk_id, bos_id
        self.token_dim, self.entity_dim, self.cutoff, self.chunk_size = (
            token_dim,
            entity_dim,
            cutoff,
            chunk_size,
        )
        self.dropoute = dropouts.dropoute
        self.token_embedding = nn.Embedding(vocab_size, token_dim)
        self.entity_embedding = nn.Embedding(num_entity_rows, entity_dim)
        self.relation_embedding = nn.Embedding(num_relation_rows, entity_dim)
        self.encoder = dropouts.encoder(token_dim, hidden_size, token_dim + 2 * entity_dim, num_layers)
        self.mention_type = nn.Linear(token_dim, NUM_TYPES)
        self.new_entity_bias = nn.Parameter(torch.zeros(num_entity_rows)) if new_entity_bias else None
        nn.init.uniform_(self.token_embedding.weight, -0.1, 0.1)
        width = token_dim + 2 * entity_dim
        self.nopeek_projection = self.nopeek_mention_type = self.nopeek_new_entity_bias = None
        if nopeek_heads:
            self.nopeek_projection = nn.Linear(width, width)
            nn.init.eye_(self.nopeek_projection.weight)
            nn.init.zeros_(self.nopeek_projection.bias)
            self.nopeek_mention_type = nn.Linear(token_dim, NUM_TYPES)
            if new_entity_bias:
                self.nopeek_new_entity_bias = nn.Parameter(torch.zeros(num_entity_rows))
        self.alias_index = alias_index
        # weights of the alias-match features: (new entity, parent, edge tail)
        self.alias_weight = nn.Parameter(torch.full((3,), 2.0)) if alias_index is not None else None
        self._doc_cache = DocumentCache()
        self._tables_cache = DocumentCache()

    @property
    def tables(self) -> GraphTables:
        return self._tables

    @torch.no_grad()
    def copy_from_generative(self, model: nn.Module) -> KGLMProposal:
        """Initialize q with p's embeddings, encoder and latent heads (then q with peek=False is p's prior over z)."""
        for name in ("token_embedding", "entity_embedding", "relation_embedding", "encoder", "mention_type"):
            getattr(self, name).load_state_dict(getattr(model, name).state_dict())
        if self.new_entity_bias is not None and model.new_entity_bias is not None:
            self.new_entity_bias.copy_(model.new_entity_bias)
        if self.nopeek_projection is not None:
            nn.init.eye_(self.nopeek_projection.weight)
            nn.init.zeros_(self.nopeek_projection.bias)
            self.nopeek_mention_type.load_state_dict(model.mention_type.state_dict())
            if self.nopeek_new_entity_bias is not None and model.new_entity_bias is not None:
                self.nopeek_new_entity_bias.copy_(model.new_entity_bias)
        return self

    # --- encoding -----------------------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """States after reading @@START@@, x_1, ..., x_T: [T + 1, D_tok + 2 D_ent]; cached per document in eval."""
        x = x.to(self.token_embedding.weight.device)

        def compute() -> torch.Tensor:
            ids = torch.where(x >= self.vocab_size, self.unk_id, x)
            inputs = torch.cat([x.new_tensor([self.bos_id]), ids])
            emb = embedding_dropout(self.token_embedding.weight, inputs, self.dropoute, self.training)
            return self.encoder.encode_chunked(emb.unsqueeze(0), self.chunk_size)[0]

        return self._doc_cache.get(self, x, compute)

    def alias_match(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_t starts an alias of e, some edge p -> e' has x_t starting an alias of e'): float [T, N] each.

        Dense in the graph: memory O(T · (N + edges)), meant for graphs of thousands of entities (train with
        ``--no-proposal-alias-features`` for a Wikidata-sized graph)."""
        tables = self.tables
        T, N = x.numel(), tables.num_entities
        device = self.token_embedding.weight.device
        pos, ent = [], []
        for t, tok in enumerate(x.tolist()):
            hits = self.alias_index.get(tok, ())
            pos.extend([t] * len(hits))
            ent.extend(hits)
        match = torch.zeros(T, N, device=device)
        match[
            torch.tensor(pos, dtype=torch.long, device=device),
            torch.tensor(ent, dtype=torch.long, device=device),
        ] = 1.0
        reach = torch.zeros(T, N, device=device).index_add_(1, tables.edge_source, match[:, tables.edge_tail])
        return match, (reach > 0).float()

    def heads(self, x: torch.Tensor, peek: bool = True) -> LatentHeads:
        """q's latent factors for labelling x_1..x_T: states after x_≤t (peek) or x_<t (no peek)."""
        out = self.encode(x)
        type_layer, bias = self.mention_type, self.new_entity_bias
        new_scores = parent_scores = tail_scores = None
        if peek:
            enc = out[1:]
            if self.alias_weight is not None:
                match, reach = self.alias_match(x)
                new_scores, tail_scores = self.alias_weight[0] * match, self.alias_weight[2] * match
                parent_scores = self.alias_weight[1] * reach
        else:
            enc = out[:-1]
            if self.nopeek_projection is not None:
                enc = self.nopeek_projection(enc)
                type_layer, bias = self.nopeek_mention_type, self.nopeek_new_entity_bias
        h_type, h_head, h_rel = enc.split([self.token_dim, self.entity_dim, self.entity_dim], -1)
        return LatentHeads(
            h_type,
            h_head,
            h_rel,
            type_layer,
            self.entity_embedding.weight,
            self.relation_embedding.weight,
            bias,
            self.tables,
            self.cutoff,
            new_scores,
            parent_scores,
            tail_scores,
            self.memory_budget,
        )

    def head_tables(self, x: torch.Tensor, temperature: float = 1.0, peek: bool = True) -> HeadTables:
        """q_τ's head tables for document x (cached per document, temperature and peeking in eval without grad)."""
        return self._tables_cache.get(
            self,
            x,
            lambda: HeadTables.build(self.heads(x, peek), temperature),
            (float(temperature), bool(peek)),
        )

    def clear_caches(self) -> None:
        """Drop the cached encodings and head tables (new parameters, or a new memory budget)."""
        self._doc_cache.clear()
        self._tables_cache.clear()

    def train(self, mode: bool = True):
        self.clear_caches()
        return super().train(mode)

    # --- scoring ------------------------------------------------------------------------------------------------
    def log_prob(self, x: torch.Tensor, z: dict, temperature: float = 1.0, peek: bool = True) -> torch.Tensor:
        """log q_τ(z_k | x) for K configurations: float64 [K] (-inf outside the support); differentiable."""
        K = z["mention_type"].shape[0]
        if x.numel() == 0:
            return torch.zeros(K, dtype=torch.float64, device=x.device)
        z = {k: v.to(self.token_embedding.weight.device) for k, v in z.items()}
        tabs = self.head_tables(x, temperature, peek)
        return latent_log_prob(tabs.heads, z, temperature, head_tables=tabs)

    # --- sampling -----------------------------------------------------------------------------------------------
    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[dict, torch.Tensor]:
        """Draw K configurations z_k ~ q_τ(z | x): (dict of LongTensor [K, T], log q_τ(z_k | x) float64 [K]).

        One ``stepwise.sample_step`` per token, each consuming ``torch.rand(K, 4)`` of ``generator`` (the stream of
        ``KGLM.smc_step``); with ``cuda_graphs`` in effect the step is replayed from a CUDA graph (``sample_static``)."""
        K, T = int(num_samples), x.numel()
        device = self.token_embedding.weight.device
        z = self._empty_latents(K, T, device)
        log_q = torch.zeros(K, dtype=torch.float64, device=device)
        if T == 0:
            return z, log_q
        tabs = self.head_tables(x, temperature, peek)
        if graphs_in_effect(self, device):
            return self.sample_static(tabs, K, T, generator, capture=True)
        state = WindowState.empty(K, self.cutoff, device)
        for t in range(T):
            u = torch.rand(K, 4, generator=generator, device=device, dtype=torch.float64)
            typ, ent, par, lq = sample_step(tabs, state, t, u)
            log_q += lq
            z["mention_type"][:, t], z["entity"][:, t], z["parent"][:, t] = typ, ent, par
            state = state.advance(self.tables, typ, ent, par)
        z["relation"] = canonical_relation(self.tables, z["parent"], z["entity"])
        return z, log_q

    def sample_documents(self, xs, num_samples, temperature: float = 1.0, peek: bool = True, generators=None):
        """``sample`` of several documents side by side (``protocol.DocumentSampler``; ``stepwise.sample_documents``):
        per document (z, log q_τ(z | x)), each what ``sample`` draws alone with its generator; None where the
        documents' tables would not be read by position (a large graph). Arguments checked as ``sample`` checks
        them."""
        for x, k in zip(xs, num_samples, strict=True):
            check_proposal_args(x, k, temperature)
        device = self.token_embedding.weight.device
        return sample_documents(
            self, [x.to(device) for x in xs], list(num_samples), temperature, peek, generators
        )

    @staticmethod
    def _empty_latents(K: int, T: int, device) -> dict:
        return {
            k: torch.full((K, T), v, dtype=torch.long, device=device)
            for k, v in (("mention_type", NONE), ("entity", -1), ("parent", -1), ("relation", -1))
        }

    @torch.no_grad()
    def sample_static(
        self, tabs: HeadTables, K: int, T: int, generator: torch.Generator | None, capture: bool
    ) -> tuple[dict, torch.Tensor]:
        """``sample``'s token loop over static buffers (u, t, the window state, z, log q), its step captured in a
        CUDA graph and replayed per token when ``capture`` (cuda_graphs.py), else run eagerly: the same uniforms, the
        same kernels, the same z and log q as ``sample``."""
        device = self.token_embedding.weight.device
        u = torch.full((K, 4), 0.5, dtype=torch.float64, device=device)
        t_now = torch.zeros(1, dtype=torch.long, device=device)
        empty = WindowState.empty(K, self.cutoff, device)
        state, z = empty.static_copy(), self._empty_latents(K, T, device)
        log_q = torch.zeros(K, dtype=torch.float64, device=device)

        def step() -> None:
            typ, ent, par, lq = sample_step(tabs, state, t_now, u)
            log_q.add_(lq)
            for key, value in (("mention_type", typ), ("entity", ent), ("parent", par)):
                z[key].index_copy_(1, t_now, value.unsqueeze(1))
            copy_fields(state, state.advance(self.tables, typ, ent, par))

        def reset() -> None:
            copy_fields(state, empty)
            log_q.zero_()
            for key, value in self._empty_latents(K, T, device).items():
                z[key].copy_(value)

        loop = TokenLoop(step, reset, capture)
        for t in range(T):
            torch.rand(K, 4, generator=generator, device=device, dtype=torch.float64, out=u)
            t_now.fill_(t)
            loop()
        z["relation"] = canonical_relation(self.tables, z["parent"], z["entity"])
        return z, log_q

    # --- beam search --------------------------------------------------------------------------------------------
    def _beam(self, x: torch.Tensor, beam_size: int) -> dict:
        """Up to ``beam_size`` distinct configurations with the highest q(z | x) (peeking, τ = 1): dict of [k, T]."""
        device = self.token_embedding.weight.device
        T = x.numel()
        tables = self.tables
        C = self.cutoff
        types = torch.zeros(1, 0, dtype=torch.long, device=device)
        ents, pars = types.clone(), types.clone()
        window = torch.zeros(1, C, dtype=torch.long, device=device)
        score = torch.zeros(1, dtype=torch.float64, device=device)
        if T == 0:
            return {
                k: torch.zeros(1, 0, dtype=torch.long, device=device)
                for k in ("mention_type", "entity", "parent", "relation")
            }
        heads = self.heads(x, peek=True)
        type_logits = heads.type_logits()
        any_new = bool(tables.row_owned.any())
        for t in range(T):
            B = score.numel()
            prev_type = types[:, -1] if t else torch.zeros(B, dtype=torch.long, device=device)
            prev_ent = ents[:, -1] if t else torch.full((B,), -1, dtype=torch.long, device=device)
            prev_par = pars[:, -1] if t else torch.full((B,), -1, dtype=torch.long, device=device)
            cand = candidate_slots(window, tables)
            allowed = allowed_types(any_new, cand.any(-1), prev_type)
            lp = torch.log_softmax(type_logits[t].expand(B, -1).masked_fill(~allowed, -math.inf), -1)
            # candidate extensions: (hypothesis, score, type, entity, parent)
            hb, hs, ht, he, hp = [], [], [], [], []

            def add(b, s, typ, e, p):
                hb.append(b), hs.append(s), ht.append(typ), he.append(e), hp.append(p)  # noqa: B023 (used here)

            ar = torch.arange(B, device=device)
            add(
                ar,
                score + lp[:, NONE],
                torch.full_like(ar, NONE),
                torch.full_like(ar, -1),
                torch.full_like(ar, -1),
            )
            add(ar, score + lp[:, CONTINUING], torch.full_like(ar, CONTINUING), prev_ent, prev_par)
            if any_new:
                nl = torch.log_softmax(heads.new_entity_logits(torch.tensor([t], device=device))[0], -1)
                top = torch.topk(nl, min(beam_size, int(torch.isfinite(nl).sum())))
                # [B, k]
                s = (score + lp[:, NEW]).unsqueeze(1) + top.values.unsqueeze(0)
                bb = ar.unsqueeze(1).expand_as(s)
                ee = tables.row_entity[top.indices].unsqueeze(0).expand_as(s)
                add(
                    bb.reshape(-1),
                    s.reshape(-1),
                    torch.full_like(bb.reshape(-1), NEW),
                    ee.reshape(-1),
                    torch.full_like(bb.reshape(-1), -1),
                )
            b_idx, c_idx = torch.nonzero(cand, as_tuple=True)
            if b_idx.numel():
                t_b = torch.full((B,), t, dtype=torch.long, device=device)
                # [B, C]
                plog = torch.log_softmax(heads.parent_logits(t_b, window).masked_fill(~cand, -math.inf), -1)
                parents = tables.row_entity[window[b_idx, c_idx]]
                p_lp = plog[b_idx, c_idx]
                edges, pair = expand_edges(parents, tables)
                elog = heads.edge_logits(torch.full_like(pair, t), edges)
                norm = segment_logsumexp(elog, pair, parents.numel())
                tails = tables.edge_tail[edges]
                key = pair * tables.num_entities + tails
                uk, inv = torch.unique(key, return_inverse=True)
                reach = segment_logsumexp(elog, inv, uk.numel())
                u_pair, u_tail = uk // tables.num_entities, uk % tables.num_entities
                s = score[b_idx[u_pair]] + lp[b_idx[u_pair], RELATED] + p_lp[u_pair] + reach - norm[u_pair]
                add(b_idx[u_pair], s, torch.full_like(u_pair, RELATED), u_tail, parents[u_pair])
            hb, hs, ht, he, hp = (torch.cat(v) for v in (hb, hs, ht, he, hp))
            finite = torch.isfinite(hs)
            hb, hs, ht, he, hp = hb[finite], hs[finite], ht[finite], he[finite], hp[finite]
            keep = torch.topk(hs, min(beam_size, hs.numel())).indices
            hb, hs, ht, he, hp = hb[keep], hs[keep], ht[keep], he[keep], hp[keep]
            types = torch.cat([types[hb], ht.unsqueeze(1)], 1)
            ents = torch.cat([ents[hb], he.unsqueeze(1)], 1)
            pars = torch.cat([pars[hb], hp.unsqueeze(1)], 1)
            row = torch.where(ht > 0, tables.row_of(he), 0)
            window = torch.cat([window[hb], row.unsqueeze(1)], 1)[:, 1:] if C > 0 else window[hb]
            score = hs
        return {
            "mention_type": types,
            "entity": ents,
            "parent": pars,
            "relation": canonical_relation(tables, pars, ents),
        }
