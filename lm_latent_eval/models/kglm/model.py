"""KGLM generative model p(x, z) (Logan et al., 2019) and its Hub checkpoint layout.

p(x, z) = Π_t p(type_t | ·) p(entity_t | type_t, ·) p(x_t | h_t, entity_t), where h_t is the AWD-LSTM state after
reading ``@@START@@ x_1 .. x_{t-1}`` (the token LSTM reads x only, so it is computed once per document and shared
by every particle), split into h_type [D_tok] | h_head [D_ent] | h_rel [D_ent]. The latent factors are in
``latents.py``. The word distribution is one softmax over generating a vocabulary word,
``W_gen · condense([h_type; E_entity]) + b``, and copying a token position of one of the entity's aliases,
``h_type · tanh(W_copy · LSTM_alias(alias tokens))``; p(x_t) sums every way of producing x_t's string:
generating it (in-vocabulary words) or copying it. A word outside the vocabulary that cannot be copied is
generated as ``@@UNKNOWN@@`` with the unknown-word penalty (``unk_penalty`` nats, the original's log |unk types|);
an out-of-vocabulary alias word that *can* be copied is only copied (as in the original).

Deviations from the original training loss, chosen so that Σ_x Σ_z p(x, z) is a proper distribution:
the entity of a mention is scored once (at its first token; continuation tokens score only their type);
impossible types are masked before the softmax (continuing after no mention; related with no candidate parent);
the parent softmax runs over recent entities that have at least one edge; new entities never include row 0.

Stepwise interface (for SMC): ``smc_init(x, K, temperature, peek)`` sets up K particles, ``smc_step(state, t,
generator)`` draws z_t ~ q_τ(z_t | x, z_<t) for each and returns log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t)
(float64 [K]), ``smc_reorder(state, ancestors)`` resamples histories and ``smc_latents(state)`` returns the z drawn
so far. Each increment is a proper conditional (an entity is scored once, at its first token; a continuation scores
its type and its word), so the T increments sum to log p(x, z) − log q_τ(z | x); with the same generator seed the
steps draw exactly the z of ``proposal.sample`` (both consume ``torch.rand(K, 4)`` per token, ``stepwise.py``).

Checkpoint layout (``save_pretrained`` / ``from_pretrained``): ``config.json`` (constructor arguments, including
the word ``vocab``), ``model.safetensors`` (p's and q's weights; q's under ``proposal.``), and
``knowledge_graph.json`` (``KnowledgeGraph.to_json``: entities, relations, edges, aliases). ``from_pretrained``
reads the graph from the checkpoint folder unless ``knowledge_graph=`` (a KnowledgeGraph, a dict or a JSON path)
is given.

Mapping of an original AllenNLP ``kglm`` archive (``weights.th``) onto this module (``.`` = this model):

    _token_embedder.weight                      -> token_embedding.weight   (row i = tokens vocab index i,
                                                   0 = padding; build ``vocab`` as ["@@PADDING@@"] + tokens.txt)
    _entity_embedder.weight                     -> entity_embedding.weight  (rows = entity_ids namespace;
                                                   pass entity_rows / num_entity_rows, see GraphTables)
    _relation_embedder.weight                   -> relation_embedding.weight (relation_rows / num_relation_rows)
    _rnn._rnns.{i}.module.weight_ih_l0          -> encoder.layers.{i}.weight_ih_l0
    _rnn._rnns.{i}.weight_hh_l0_raw             -> encoder.layers.{i}.weight_hh_l0   (the raw, undropped W_hh)
    _rnn._rnns.{i}.module.weight_hh_l0          -> (not used: a dropped copy of the raw weight)
    _rnn._rnns.{i}.module.bias_{ih,hh}_l0       -> encoder.layers.{i}.bias_{ih,hh}_l0
    _fc_mention_type.{weight,bias}              -> mention_type.{weight,bias}
    _fc_new_entity.bias                         -> new_entity_bias   (weight is tied to entity_embedding; an
                                                   archive with use_shortlist=true has none: new_entity_bias=False)
    _fc_condense.{weight,bias}                  -> condense.{weight,bias}
    _fc_generate.{weight,bias}                  -> generate.{weight,bias}   (weight tied to token_embedding)
    _fc_copy.{weight,bias}                      -> copy.{weight,bias}
    _alias_encoder._module.{w,b}_{ih,hh}_l0     -> alias_encoder.{w,b}_{ih,hh}_l0
    a ``kglm-disc`` archive: the same names     -> proposal.<same target names> (no word head, no alias encoder)

Sizes: token_dim = D_tok (original 400), entity_dim = D_ent (256), hidden_size (1150), num_layers (3); the last
LSTM layer has D_tok + 2·D_ent units.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
import torch.nn.functional as F
from huggingface_hub import PyTorchModelHubMixin, hf_hub_download
from torch import nn

from ..encoder_cache import DocumentCache, parameter_versions
from .awd_lstm import AWDLSTM, embedding_dropout
from .graph import KnowledgeGraph
from .latents import (
    LATENT_KEYS,
    NONE,
    GraphTables,
    HeadTables,
    LatentHeads,
    canonical_relation,
    latent_log_prob,
)
from .proposal import KGLMProposal
from .stepwise import WindowState, sample_step, score_step

GRAPH_FILE = "knowledge_graph.json"
UNK, BOS, PAD = "@@UNKNOWN@@", "@@START@@", "@@PADDING@@"
_WORD_CHUNK = 1024  # (position, entity) pairs scored per generate-softmax call
_GEN_TABLE_LIMIT = 1 << 16  # (position, row) pairs: up to this many, the generate terms of all of them are computed


@dataclass
class KGLMParticles:
    """State of K particles of one document for ``KGLM.smc_step``: head tables of q_τ and p, window state, z so far."""

    x: torch.Tensor  # [T]
    q: HeadTables | None
    p: HeadTables | None
    alias: tuple | None  # KGLM.alias_tables()
    gen: tuple | None  # KGLM.generate_table() of p's states
    window: WindowState
    z: dict  # mention_type / entity / parent: LongTensor [K, T]


def build_vocabulary(documents: Iterable[Iterable[str]], min_count: int = 1, max_size: int | None = None) -> list[str]:
    """Word list [@@PADDING@@, @@UNKNOWN@@, @@START@@, most frequent words...] from tokenized documents."""
    counts = Counter(tok for doc in documents for tok in doc)
    words = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_count and w not in (PAD, UNK, BOS)]
    if max_size is not None:
        words = words[: max(0, max_size - 3)]
    return [PAD, UNK, BOS] + words


def load_graph(source) -> KnowledgeGraph:
    """A KnowledgeGraph from a KnowledgeGraph, a ``to_dict`` dict, a JSON path or None (empty graph)."""
    if source is None:
        return KnowledgeGraph()
    if isinstance(source, KnowledgeGraph):
        return source
    if isinstance(source, dict):
        return KnowledgeGraph.from_dict(source)
    if isinstance(source, (str, Path)):
        return KnowledgeGraph.from_json(source)
    raise TypeError(f"knowledge_graph must be a KnowledgeGraph, dict or JSON path, got {type(source).__name__}")


class KGLM(nn.Module, PyTorchModelHubMixin, library_name="lm-latent-eval", tags=["latent-lm", "kglm"]):
    """Knowledge-graph language model: ``log_joint(x, z)`` [K], ``proposal`` (q(z | x)), ``tokenize``.

    x: LongTensor [T] of ids from ``tokenize`` (whitespace tokens; ids >= len(vocab) are out-of-vocabulary words
    that occur in some alias, so they can be copied; other unknown words map to @@UNKNOWN@@).
    z: dict of LongTensor [K, T] with keys mention_type / entity / parent / relation (see ``latents.py``).
    """

    # options of from_pretrained that lm-eval's model_args may set (harness/model_args.py): name -> (type, help);
    # Path: an existing file, whose sha256 joins the run's identity
    MODEL_ARGS = {
        "knowledge_graph": (Path, "the original knowledge_graph.pkl or our JSON (original archives only)"),
        "alias_database": (Path, "the original alias.pkl (original archives only)"),
        "proposal_archive": (Path, "a kglm-disc AllenNLP archive: the original proposal (original archives only)"),
    }

    def __init__(
        self,
        vocab: list[str],
        knowledge_graph: KnowledgeGraph | dict | str | None = None,
        token_dim: int = 400,
        entity_dim: int = 256,
        hidden_size: int = 1150,
        num_layers: int = 3,
        cutoff: int = 30,
        tie_weights: bool = True,
        new_entity_bias: bool = True,
        unk_penalty: float = 0.0,
        entity_rows: list[int] | None = None,
        relation_rows: list[int] | None = None,
        num_entity_rows: int | None = None,
        num_relation_rows: int | None = None,
        dropout: float = 0.4,
        dropouti: float = 0.65,
        dropoute: float = 0.1,
        wdrop: float = 0.5,
        chunk_size: int = 70,
        proposal_hidden_size: int | None = None,
        proposal_num_layers: int | None = None,
        proposal_nopeek_heads: bool = False,
        proposal_alias_features: bool = False,
    ):
        super().__init__()
        if not isinstance(vocab, (list, tuple)) or UNK not in vocab or BOS not in vocab:
            raise ValueError(f"vocab must be a list of words containing {UNK!r} and {BOS!r}")
        if len(set(vocab)) != len(vocab):
            raise ValueError("vocab has duplicate words")
        if cutoff < 0 or not math.isfinite(unk_penalty) or unk_penalty < 0:
            raise ValueError(f"need cutoff >= 0 and a finite unk_penalty >= 0, got {cutoff}, {unk_penalty}")
        self.vocab = list(vocab)
        self.word_to_id = {w: i for i, w in enumerate(self.vocab)}
        self.unk_id, self.bos_id = self.word_to_id[UNK], self.word_to_id[BOS]
        self.graph = load_graph(knowledge_graph)
        self.tables = GraphTables(self.graph, entity_rows, relation_rows)
        # out-of-vocabulary alias words get ids V, V+1, ... so that copying can match them by string
        extra = sorted({tok for forms in self.graph.aliases.values() for f in forms for tok in f} - set(self.word_to_id))
        self.extended_words = extra
        self.extended_to_id = {w: len(self.vocab) + i for i, w in enumerate(extra)}
        self.cutoff, self.unk_penalty, self.chunk_size = int(cutoff), float(unk_penalty), int(chunk_size)
        self.token_dim, self.entity_dim = token_dim, entity_dim
        self.dropout, self.dropoute = dropout, dropoute
        n_ent_rows = max(num_entity_rows or 0, self.tables.num_rows)
        n_rel_rows = max(num_relation_rows or 0, int(self.tables.relation_row.max()) + 1 if self.graph.num_relations else 1)
        V = len(self.vocab)

        self.token_embedding = nn.Embedding(V, token_dim)
        self.entity_embedding = nn.Embedding(n_ent_rows, entity_dim)
        self.relation_embedding = nn.Embedding(n_rel_rows, entity_dim)
        self.encoder = AWDLSTM(token_dim, hidden_size, token_dim + 2 * entity_dim, num_layers, wdrop, dropouti, dropout)
        self.mention_type = nn.Linear(token_dim, 4)
        self.new_entity_bias = nn.Parameter(torch.zeros(n_ent_rows)) if new_entity_bias else None
        self.condense = nn.Linear(token_dim + entity_dim, token_dim)
        self.generate = nn.Linear(token_dim, V)
        if tie_weights:
            self.generate.weight = self.token_embedding.weight
        self.alias_encoder = nn.LSTM(token_dim, token_dim, batch_first=True)
        self.copy = nn.Linear(token_dim, token_dim)
        nn.init.uniform_(self.token_embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.generate.bias)

        self.proposal = KGLMProposal(
            vocab_size=V, unk_id=self.unk_id, bos_id=self.bos_id, tables=self.tables, token_dim=token_dim,
            entity_dim=entity_dim, hidden_size=proposal_hidden_size or hidden_size,
            num_layers=proposal_num_layers or num_layers, cutoff=cutoff,
            new_entity_bias=new_entity_bias, num_entity_rows=n_ent_rows, num_relation_rows=n_rel_rows,
            dropout=dropout, dropouti=dropouti, dropoute=dropoute, wdrop=wdrop, chunk_size=chunk_size,
            nopeek_heads=proposal_nopeek_heads, alias_index=self.alias_start_index() if proposal_alias_features else None,
        )
        self._doc_cache = DocumentCache()
        self._tables_cache = DocumentCache()
        self._alias_cache: dict = {}
        if isinstance(getattr(self, "_hub_mixin_config", None), dict):
            self._hub_mixin_config.pop("knowledge_graph", None)  # saved beside the weights as knowledge_graph.json

    def alias_start_index(self) -> dict[int, list[int]]:
        """Token id -> the entities having an alias that starts with that token (q's alias features)."""
        index: dict[int, set[int]] = {}
        for e in range(self.graph.num_entities):
            for form in self.graph.entity_aliases(e):
                if form:
                    tok = self.word_to_id.get(form[0], self.extended_to_id.get(form[0], self.unk_id))
                    index.setdefault(tok, set()).add(e)
        return {tok: sorted(es) for tok, es in index.items()}

    # --- text -------------------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> torch.Tensor:
        """Whitespace tokens -> LongTensor [T]: vocabulary ids, alias-word ids (>= V), else the @@UNKNOWN@@ id."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize expects a string, got {type(text).__name__}")
        ids = [self.word_to_id.get(w, self.extended_to_id.get(w, self.unk_id)) for w in text.split()]
        return torch.tensor(ids, dtype=torch.long, device=self.token_embedding.weight.device)

    def detokenize(self, x: torch.Tensor) -> str:
        """Inverse of tokenize up to unknown words and whitespace."""
        words = self.vocab + self.extended_words
        return " ".join(words[i] for i in x.tolist())

    def input_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Ids the LSTMs read: alias-only words (>= V) become @@UNKNOWN@@: [T]."""
        return torch.where(x >= len(self.vocab), self.unk_id, x)

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype != torch.long:
            raise ValueError(f"x must be a LongTensor [T], got {getattr(x, 'shape', type(x))}")
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= len(self.vocab) + len(self.extended_words)):
            raise ValueError("x holds ids outside this model's vocabulary; use model.tokenize(text)")
        return x.to(self.token_embedding.weight.device)

    # --- shared encoder ------------------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder outputs h_t after reading @@START@@ x_<t, for t = 1..T: [T, D_tok + 2 D_ent]; cached per document."""
        x = self._check_x(x)

        def compute() -> torch.Tensor:
            inputs = torch.cat([x.new_tensor([self.bos_id]), self.input_ids(x)[:-1]])
            emb = embedding_dropout(self.token_embedding.weight, inputs, self.dropoute, self.training)
            return self.encoder.encode_chunked(emb.unsqueeze(0), self.chunk_size)[0]

        return self._doc_cache.get(self, x, compute)

    def latent_heads(self, encoded: torch.Tensor) -> LatentHeads:
        """The latent factors of p read from encoder outputs [T, D]."""
        h_type, h_head, h_rel = encoded.split([self.token_dim, self.entity_dim, self.entity_dim], -1)
        return LatentHeads(
            h_type, h_head, h_rel, self.mention_type, self.entity_embedding.weight, self.relation_embedding.weight,
            self.new_entity_bias, self.tables, self.cutoff,
        )

    # --- p(x, z) ------------------------------------------------------------------------------------------------
    def log_joint(self, x: torch.Tensor, z: dict) -> torch.Tensor:
        """log p(x, z_k) for K configurations: float64 [K]; -inf where p(x, z_k) = 0."""
        x = self._check_x(x)
        z = {k: v.to(x.device) for k, v in z.items()}
        T = x.numel()
        if "mention_type" not in z:
            raise ValueError(f"KGLM latents must be a dict with keys {LATENT_KEYS}")
        K = z["mention_type"].shape[0]
        if T == 0:
            return torch.zeros(K, dtype=torch.float64, device=x.device)
        tabs = self.head_tables(x)
        lp = latent_log_prob(tabs.heads, z, head_tables=tabs)
        words = self.word_log_prob(tabs.heads.h_type, x, z["entity"])
        return (lp + words.sum(-1)).masked_fill(torch.isneginf(lp), -math.inf)

    def head_tables(self, x: torch.Tensor) -> HeadTables:
        """p's latent head tables for document x (cached per document in eval without grad)."""
        return self._tables_cache.get(self, x, lambda: HeadTables.build(self.latent_heads(self.encode(x)), 1.0))

    def _alias_table(self, entity: int, version: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(projected alias token vectors [L, D_tok], their x ids [L]) for one entity, None without aliases."""
        forms = [f for f in self.graph.entity_aliases(entity) if f]
        if not forms:
            return None
        cacheable = not self.training and not torch.is_grad_enabled()
        version = parameter_versions(self) if version is None else version
        hit = self._alias_cache.get(entity)
        if cacheable and hit is not None and hit[0] == version:
            return hit[1]
        device = self.token_embedding.weight.device
        ids = [[self.word_to_id.get(w, self.extended_to_id.get(w, self.unk_id)) for w in f] for f in forms]
        L = max(len(f) for f in ids)
        padded = torch.full((len(ids), L), -1, dtype=torch.long, device=device)
        for i, f in enumerate(ids):
            padded[i, : len(f)] = torch.tensor(f, dtype=torch.long)
        mask = padded >= 0
        inputs = self.input_ids(padded.clamp(min=0))
        emb = embedding_dropout(self.token_embedding.weight, inputs, self.dropoute, self.training)
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.alias_encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=L)
        proj = torch.tanh(self.copy(out))
        if self.training and self.dropout > 0:
            proj = F.dropout(proj, self.dropout, True)
        table = (proj[mask], padded[mask])
        if cacheable:
            self._alias_cache[entity] = (version, table)
        return table

    def alias_tables(self, entities: list[int] | None = None) -> tuple:
        """Every entity's projected alias tokens, flat: (vectors [L + 1, D_tok] (last row zero), x ids [L + 1] (last
        -1), offset [N + 1], length [N + 1], the largest length (int)); entity N stands for "no entity" (length 0).
        Built once per parameter version in eval without grad (all entities); otherwise for ``entities`` only (the
        others get length 0)."""
        cacheable = not self.training and not torch.is_grad_enabled()
        version = parameter_versions(self)
        hit = self._alias_cache.get("flat")
        if cacheable and hit is not None and hit[0] == version:
            return hit[1]
        N = self.graph.num_entities
        device = self.token_embedding.weight.device
        wanted = range(N) if cacheable or entities is None else entities
        vecs, ids = [], []
        offset = torch.zeros(N + 1, dtype=torch.long)
        length = torch.zeros(N + 1, dtype=torch.long)
        total = 0
        for e in wanted:
            table = self._alias_table(e, version)
            if table is not None:
                vecs.append(table[0])
                ids.append(table[1])
                offset[e], length[e] = total, table[1].numel()
                total += table[1].numel()
        vecs.append(torch.zeros(1, self.token_dim, device=device, dtype=self.token_embedding.weight.dtype))
        ids.append(torch.full((1,), -1, dtype=torch.long, device=device))
        offset[length == 0] = total
        flat = (torch.cat(vecs), torch.cat(ids), offset.to(device), length.to(device), int(length.max()))
        if cacheable:
            self._alias_cache["flat"] = (version, flat)
        return flat

    def _generate_terms(self, h_type: torch.Tensor, rows: torch.Tensor, x_in: torch.Tensor):
        """(log Σ_w exp s_w, s_{x}, s_unk) of the generate softmax for (state [M, D], entity row [M], word [M]) pairs.

        At least 4 rows enter each product (short batches are padded) so that a pair's float32 scores do not depend
        on how many pairs are scored with it."""
        M = rows.numel()
        out = torch.empty(3, M, dtype=torch.float64, device=h_type.device)
        for s in range(0, M, _WORD_CHUNK):
            sl = slice(s, s + _WORD_CHUNK)
            h, r = h_type[sl], rows[sl]
            n = h.shape[0]
            if n < 4:
                h, r = torch.cat([h, h[:1].expand(4 - n, -1)]), torch.cat([r, r[:1].expand(4 - n)])
            scores = self.generate(self.condense(torch.cat([h, self.entity_embedding.weight[r]], -1)))[:n].double()
            out[0, sl] = scores.logsumexp(-1)
            out[1, sl] = scores.gather(1, x_in[sl].unsqueeze(1)).squeeze(1)
            out[2, sl] = scores[:, self.unk_id]
        return out[0], out[1], out[2]

    def generate_table(self, h_type: torch.Tensor, x: torch.Tensor):
        """The generate terms of every (position, entity row) pair, [T, rows] each, in one fixed arrangement (so that
        the whole-document and stepwise paths read identical float32 products); None above _GEN_TABLE_LIMIT pairs."""
        T, R = x.numel(), self.tables.num_rows
        if T * R > _GEN_TABLE_LIMIT:
            return None
        t = torch.arange(T, device=x.device).repeat_interleave(R)
        r = torch.arange(R, device=x.device).repeat(T)
        return tuple(v.view(T, R) for v in self._generate_terms(h_type[t], r, self.input_ids(x)[t]))

    def _copy_terms(self, h_type: torch.Tensor, entity: torch.Tensor, x: torch.Tensor, alias) -> tuple[torch.Tensor, torch.Tensor]:
        """(log Σ_l exp c_l, log Σ_{l copies x} exp c_l) over the alias tokens of each entity: [M] each (-inf without)."""
        vecs, ids, offset, length, L = alias
        N = offset.numel() - 1
        e = torch.where(entity >= 0, entity, N)
        copy_lse = torch.full(entity.shape, -math.inf, dtype=torch.float64, device=h_type.device)
        copy_x = copy_lse.clone()
        if L == 0:
            return copy_lse, copy_x
        j = torch.arange(L, device=h_type.device)
        for s in range(0, entity.numel(), _WORD_CHUNK):
            sl = slice(s, s + _WORD_CHUNK)
            valid = j < length[e[sl]].unsqueeze(1)
            idx = torch.where(valid, offset[e[sl]].unsqueeze(1) + j, vecs.shape[0] - 1)
            scores = torch.einsum("ud,uld->ul", h_type[sl].contiguous(), vecs[idx]).double().masked_fill(~valid, -math.inf)
            copy_lse[sl] = scores.logsumexp(-1)
            copy_x[sl] = scores.masked_fill(ids[idx] != x[sl].unsqueeze(1), -math.inf).logsumexp(-1)
        return copy_lse, copy_x

    def _combine_word_terms(self, x: torch.Tensor, gen, copy) -> torch.Tensor:
        """log p(x_t | h_t, entity) from the generate and copy terms: generate in-vocabulary words, copy alias tokens,
        else generate @@UNKNOWN@@ with the penalty."""
        gen_lse, gen_x, gen_unk = gen
        copy_lse, copy_x = copy
        in_vocab = (x < len(self.vocab)) & (x != self.unk_id)
        copyable = torch.isfinite(copy_x)
        gen_term = torch.where(in_vocab, gen_x, torch.where(copyable, -math.inf, gen_unk - self.unk_penalty))
        return torch.logaddexp(gen_term, copy_x) - torch.logaddexp(gen_lse, copy_lse)

    def word_log_prob(self, h_type: torch.Tensor, x: torch.Tensor, entity: torch.Tensor) -> torch.Tensor:
        """log p(x_t | h_t, entity_t) [K, T], computed once per distinct (t, entity) pair among the K particles."""
        K, T = entity.shape
        N = self.graph.num_entities
        key = torch.arange(T, device=x.device) * (N + 1) + (entity.clamp(min=-1) + 1)
        uniq, inv = torch.unique(key.reshape(-1), return_inverse=True)
        ut, ue = uniq // (N + 1), uniq % (N + 1) - 1
        alias = self.alias_tables(None if not (self.training or torch.is_grad_enabled())
                                  else torch.unique(ue[ue >= 0]).tolist())
        # all (position, row) pairs when the particles cover a good part of them (the stepwise path reads the same
        # table); else only the distinct pairs (the same float32 products wherever the kernel is shape-invariant)
        table = self.generate_table(h_type, x) if 2 * uniq.numel() >= T * self.tables.num_rows else None
        if table is not None:
            gen = tuple(v[ut, self.tables.row_of(ue)] for v in table)
        else:
            gen = self._generate_terms(h_type[ut], self.tables.row_of(ue), self.input_ids(x)[ut])
        copy = self._copy_terms(h_type[ut], ue, x[ut], alias)
        return self._combine_word_terms(x[ut], gen, copy)[inv].view(K, T)

    def word_log_prob_step(self, h_type_t: torch.Tensor, x_t: torch.Tensor, entity: torch.Tensor, alias,
                           gen_table_t: tuple | None = None) -> torch.Tensor:
        """log p(x_t | h_t, entity_k) for one position and K particles' entities [K]: float64 [K] (no host sync);
        ``gen_table_t``: row t of ``generate_table`` (then the numbers equal ``word_log_prob``'s)."""
        K = entity.numel()
        R = self.tables.num_rows
        rows = self.tables.row_of(entity)
        x_in = self.input_ids(x_t.view(1))
        if gen_table_t is not None:
            gen = tuple(v[rows] for v in gen_table_t)
        elif R <= K:  # the generate terms of every row at t, gathered
            g = self._generate_terms(h_type_t.expand(R, -1), torch.arange(R, device=entity.device), x_in.expand(R))
            gen = tuple(v[rows] for v in g)
        else:
            gen = self._generate_terms(h_type_t.expand(K, -1), rows, x_in.expand(K))
        copy = self._copy_terms(h_type_t.expand(K, -1).contiguous(), entity, x_t.view(1).expand(K), alias)
        return self._combine_word_terms(x_t.view(1).expand(K), gen, copy)

    # --- stepwise interface (SMC) ---------------------------------------------------------------------------------
    @torch.no_grad()
    def smc_init(self, x: torch.Tensor, num_particles: int, temperature: float = 1.0, peek: bool = True) -> "KGLMParticles":
        """K empty particles for document x [T]: q_τ's and p's head tables, the window state and the z drawn so far."""
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        x = self._check_x(x)
        K, T = int(num_particles), x.numel()
        device = x.device
        q_tabs = p_tabs = alias = gen = None
        if T:
            q_tabs = self.proposal.head_tables(x, temperature, peek)
            p_tabs = self.head_tables(x)
            alias = self.alias_tables()
            gen = self.generate_table(p_tabs.heads.h_type, x)
        z = {k: torch.full((K, T), v, dtype=torch.long, device=device)
             for k, v in (("mention_type", NONE), ("entity", -1), ("parent", -1))}
        return KGLMParticles(x, q_tabs, p_tabs, alias, gen, WindowState.empty(K, self.cutoff, device), z)

    @torch.no_grad()
    def smc_step(self, state: "KGLMParticles", t: int, generator: torch.Generator | None = None):
        """Draw z_t ~ q_τ(z_t | x, z_<t) for every particle: (state, log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t)
        float64 [K]). Consumes ``torch.rand(K, 4)`` of ``generator``, as ``proposal.sample`` does at token t."""
        K = state.window.prev_type.shape[0]
        u = torch.rand(K, 4, generator=generator, device=state.x.device, dtype=torch.float64)
        typ, ent, par, log_q = sample_step(state.q, state.window, t, u)
        log_prior = score_step(state.p, state.window, t, typ, ent, par)
        gen_t = None if state.gen is None else tuple(v[t] for v in state.gen)
        log_word = self.word_log_prob_step(state.p.heads.h_type[t], state.x[t], ent, state.alias, gen_t)
        state.window = state.window.advance(self.tables, typ, ent, par)
        state.z["mention_type"][:, t], state.z["entity"][:, t], state.z["parent"][:, t] = typ, ent, par
        return state, log_prior + log_word - log_q

    def smc_reorder(self, state: "KGLMParticles", ancestors: torch.Tensor) -> "KGLMParticles":
        """Particle k takes the history (window state and z so far) of particle ancestors[k]."""
        index = ancestors.to(state.x.device)
        return KGLMParticles(state.x, state.q, state.p, state.alias, state.gen, state.window.select(index),
                             {k: v[index] for k, v in state.z.items()})

    def smc_latents(self, state: "KGLMParticles") -> dict:
        """The configurations drawn so far, as ``log_joint`` takes them: dict of LongTensor [K, T] (undrawn: none)."""
        z = {k: v.clone() for k, v in state.z.items()}
        z["relation"] = canonical_relation(self.tables, z["parent"], z["entity"])
        return z

    def unknown_word_penalty(self, x: torch.Tensor, z: dict) -> torch.Tensor:
        """Nats ``log_joint`` subtracts for unknown words: unk_penalty · #{t: x_t out of vocabulary and not an alias
        word of entity_t} per configuration, float64 [K]; log_joint + this = log p(x, z) without the penalty (PPL)."""
        x = self._check_x(x)
        entity = z["entity"].to(x.device)
        out = torch.zeros(entity.shape[0], dtype=torch.float64, device=x.device)
        if self.unk_penalty == 0.0 or x.numel() == 0:
            return out
        unknown = (x >= len(self.vocab)) | (x == self.unk_id)
        for t in torch.nonzero(unknown, as_tuple=True)[0].tolist():
            word = int(x[t])
            copyable = torch.tensor([self._copies(int(e), word) for e in entity[:, t].tolist()], device=x.device)
            out += (~copyable).double() * self.unk_penalty
        return out

    def _copies(self, entity: int, word: int) -> bool:
        """True when ``word`` (an x id) is a token of one of ``entity``'s aliases (so it is copied, never penalized)."""
        if entity < 0:
            return False
        return any(self.word_to_id.get(w, self.extended_to_id.get(w, self.unk_id)) == word
                   for form in self.graph.entity_aliases(entity) for w in form)

    def sample_text(self, prefix_text: str, max_tokens: int, generator: torch.Generator | None = None,
                    stop: list[str] | None = None) -> str:
        """Ancestral sample of a continuation from p(· | prefix) (see ``sampling.py``), cut before a stop string."""
        from .sampling import sample_text

        return sample_text(self, prefix_text, max_tokens, generator, stop)

    def train(self, mode: bool = True):
        self._doc_cache.clear()
        self._tables_cache.clear()
        self._alias_cache = {}
        return super().train(mode)

    # --- checkpoints --------------------------------------------------------------------------------------------
    def _save_pretrained(self, save_directory: Path) -> None:
        """model.safetensors (p and q) + knowledge_graph.json; config.json is written by the mixin."""
        super()._save_pretrained(save_directory)
        self.graph.to_json(Path(save_directory) / GRAPH_FILE)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *, knowledge_graph=None, alias_database=None,
                        proposal_archive=None, **kwargs) -> "KGLM":
        """Our checkpoint (folder or Hub id), or an original AllenNLP ``kglm`` archive (``.tar.gz`` / ``.tgz``) read
        with ``archive.load_original_kglm`` (then ``knowledge_graph`` — the original ``knowledge_graph.pkl`` or our
        JSON —, ``alias_database`` (``alias.pkl``) and ``proposal_archive`` (a ``kglm-disc`` archive) apply)."""
        name = str(pretrained_model_name_or_path)
        if name.endswith((".tar.gz", ".tgz")):
            from .archive import load_original_kglm

            if kwargs:
                raise ValueError(f"{name}: options {sorted(kwargs)} do not apply to an original KGLM archive")
            return load_original_kglm(name, knowledge_graph=knowledge_graph, alias_database=alias_database,
                                      proposal_archive=proposal_archive, model_class=cls)
        if alias_database is not None or proposal_archive is not None:
            raise ValueError(f"{name}: alias_database / proposal_archive only apply to an original AllenNLP archive "
                             "(model.tar.gz); a lm-latent-eval checkpoint already holds the aliases and q")
        if knowledge_graph is not None:
            kwargs["knowledge_graph"] = knowledge_graph
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision=None, cache_dir=None, force_download=False,
                         local_files_only=False, token=None, map_location: str = "cpu", strict: bool = True,
                         **model_kwargs):
        """Build from config.json + knowledge_graph.json (unless ``knowledge_graph=`` is given) and load every weight."""
        import safetensors.torch

        if os.path.isdir(model_id):
            weights = os.path.join(model_id, "model.safetensors")
            graph_file = os.path.join(model_id, GRAPH_FILE)
            if not os.path.isfile(weights):
                raise FileNotFoundError(f"{model_id}: no model.safetensors (not a KGLM checkpoint folder)")
        else:
            dl = dict(revision=revision, cache_dir=cache_dir, force_download=force_download, token=token,
                      local_files_only=local_files_only)
            weights = hf_hub_download(model_id, "model.safetensors", **dl)
            graph_file = hf_hub_download(model_id, GRAPH_FILE, **dl) if "knowledge_graph" not in model_kwargs else None
        if model_kwargs.get("knowledge_graph") is None:
            if graph_file is None or not os.path.isfile(graph_file):
                raise FileNotFoundError(f"{model_id}: no {GRAPH_FILE}; pass knowledge_graph=<KnowledgeGraph or JSON path>")
            model_kwargs["knowledge_graph"] = graph_file
        model = cls(**model_kwargs)
        safetensors.torch.load_model(model, weights, strict=strict, device=map_location)
        model.eval()
        return model
