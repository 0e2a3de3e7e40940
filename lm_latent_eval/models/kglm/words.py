"""The KGLM word distribution p(x_t | h_t, entity_t): generate a vocabulary word or copy a token of an alias.

One softmax runs over generating a vocabulary word, s_w = (W_gen · condense([h_type; E_entity]) + b)_w, and copying
a token position l of one of the entity's aliases, c_l = h_type · tanh(W_copy · LSTM_alias(alias tokens))_l, so

    log p(x_t | h_t, e) = log(exp s_{x_t} + Σ_{l copies x_t} exp c_l) − log(Σ_w exp s_w + Σ_l exp c_l):

p(x_t) sums every way of producing x_t's string, generating it (in-vocabulary words) or copying it. A word outside
the vocabulary that cannot be copied is generated as ``@@UNKNOWN@@`` with the unknown-word penalty (``unk_penalty``
nats, the original's log |unk types|); an out-of-vocabulary alias word that *can* be copied is only copied (as in
the original). Alias words outside the vocabulary have extended ids ≥ V (``WordVocabulary.extended_words``) so that
copying matches them by string; the LSTMs read them as ``@@UNKNOWN@@``.

``WordDistribution`` is mixed into ``KGLM``: it uses the model's token_embedding, entity_embedding, condense,
generate, alias_encoder and copy modules, its vocabulary, graph, tables, token_dim, unk_id, unk_penalty, dropout and
dropoute, and its ``input_ids`` and ``_check_x``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...tensors import log_normalizer, pad_rows
from ..encoder_cache import cache_version
from ..memory_plan import DEFAULT_MEMORY_BUDGET, rows_per_chunk
from .awd_lstm import embedding_dropout

# (position, entity) pairs scored per generate-softmax call, at most (fewer where a quarter of the memory budget
# does not hold this many: ``generate_row_bytes``, ``copy_row_bytes``)
_WORD_CHUNK = 1024
# (position, row) pairs: up to this many, the generate terms of all of them are computed
_GEN_TABLE_LIMIT = 1 << 16
# graphs of more entities encode their aliases ``_ALIAS_FORMS_PER_CALL`` forms per LSTM call instead of one entity per
# call (the same numbers up to float32 rounding, which depends on the batch; smaller graphs keep the per-entity calls)
_ALIAS_BATCH_ENTITIES = 4096
_ALIAS_FORMS_PER_CALL = 4096


def generate_row_bytes(vocab_size: int, token_dim: int, entity_dim: int, itemsize: int = 4) -> int:
    """Bytes ``_generate_terms`` holds per (position, entity) pair: the condensed input, its projection, the
    vocabulary logits in the model's precision and their log-sum-exp's float32 temporary (a value a word each)."""
    return vocab_size * (itemsize + 4) + 2 * (token_dim + entity_dim) * itemsize + token_dim * itemsize


def copy_row_bytes(max_alias_tokens: int, token_dim: int, itemsize: int = 4) -> int:
    """Bytes ``_copy_terms`` holds per (position, entity) pair: the gathered alias vectors [L, D] and the [L]-sized
    index, mask, score and match values (6 eight-byte and 2 one-byte values a token)."""
    return max(max_alias_tokens, 1) * (token_dim * itemsize + 6 * 8 + 2)


class WordDistribution:
    """p(x_t | h_t, entity_t) of KGLM (see the module docstring); the alias tables are cached per parameter version
    and precision (``encoder_cache.cache_version``) in evaluation without grad (``_alias_cache``, cleared by
    ``KGLM.train``)."""

    def _word_budget(self) -> int:
        """The model's ``memory_budget`` (bytes)."""
        return getattr(self, "memory_budget", DEFAULT_MEMORY_BUDGET)

    def alias_table(
        self, entity: int, version: tuple | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(projected alias token vectors [L, D_tok], their x ids [L]) for one entity, None without aliases."""
        forms = [f for f in self.graph.entity_aliases(entity) if f]
        if not forms:
            return None
        cacheable = not self.training and not torch.is_grad_enabled()
        version = cache_version(self, self.token_embedding.weight.device) if version is None else version
        hit = self._alias_cache.get(entity)
        if cacheable and hit is not None and hit[0] == version:
            return hit[1]
        table = self.encode_aliases(forms)
        if cacheable:
            self._alias_cache[entity] = (version, table)
        return table

    def encode_aliases(self, forms: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """tanh(W_copy · LSTM_alias(form)) of every token of the alias forms, in one packed LSTM call: (vectors
        [L, D_tok], x ids [L]), form after form."""
        # [A, L]
        padded = pad_rows([self.vocabulary.ids(f) for f in forms]).to(self.token_embedding.weight.device)
        L = padded.shape[1]
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
        return proj[mask], padded[mask]

    def alias_tables(self, entities: list[int] | None = None) -> tuple:
        """Every entity's projected alias tokens, flat: (vectors [L + 1, D_tok] (last row zero), x ids [L + 1] (last
        -1), offset [N + 1], length [N + 1], the largest length (int)); entity N stands for "no entity" (length 0).
        Built once per parameter version in eval without grad (all entities); otherwise for ``entities`` only (the
        others get length 0)."""
        cacheable = not self.training and not torch.is_grad_enabled()
        version = cache_version(self, self.token_embedding.weight.device)
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
        # a large graph: its aliases in packed calls of many forms
        if cacheable and N > _ALIAS_BATCH_ENTITIES:
            forms = [[f for f in self.graph.entity_aliases(e) if f] for e in range(N)]
            length[:N] = torch.tensor([sum(len(f) for f in fs) for fs in forms], dtype=torch.long)
            offset[:N] = length[:N].cumsum(0) - length[:N]
            total = int(length.sum())
            flat = [f for fs in forms for f in fs]
            for s in range(0, len(flat), _ALIAS_FORMS_PER_CALL):
                v, i = self.encode_aliases(flat[s : s + _ALIAS_FORMS_PER_CALL])
                vecs.append(v)
                ids.append(i)
            wanted = ()
        for e in wanted:
            table = self.alias_table(e, version)
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
        size = self.entity_embedding.weight.element_size()
        row_bytes = generate_row_bytes(len(self.vocabulary), self.token_dim, self.entity_dim, size)
        step = min(_WORD_CHUNK, rows_per_chunk(row_bytes, self._word_budget() // 4))
        for s in range(0, M, step):
            sl = slice(s, s + step)
            h, r = h_type[sl], rows[sl]
            n = h.shape[0]
            if n < 4:
                h, r = torch.cat([h, h[:1].expand(4 - n, -1)]), torch.cat([r, r[:1].expand(4 - n)])
            scores = self.generate(self.condense(torch.cat([h, self.entity_embedding.weight[r]], -1)))[:n]
            out[0, sl] = log_normalizer(scores)
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

    def _copy_terms(
        self, h_type: torch.Tensor, entity: torch.Tensor, x: torch.Tensor, alias
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log Σ_l exp c_l, log Σ_{l copies x} exp c_l) over the alias tokens of each entity: [M] each (-inf without)."""
        vecs, ids, offset, length, L = alias
        N = offset.numel() - 1
        e = torch.where(entity >= 0, entity, N)
        copy_lse = torch.full(entity.shape, -math.inf, dtype=torch.float64, device=h_type.device)
        copy_x = copy_lse.clone()
        if L == 0:
            return copy_lse, copy_x
        j = torch.arange(L, device=h_type.device)
        row_bytes = copy_row_bytes(L, vecs.shape[-1], vecs.element_size())
        step = min(_WORD_CHUNK, rows_per_chunk(row_bytes, self._word_budget() // 4))
        for s in range(0, entity.numel(), step):
            sl = slice(s, s + step)
            valid = j < length[e[sl]].unsqueeze(1)
            idx = torch.where(valid, offset[e[sl]].unsqueeze(1) + j, vecs.shape[0] - 1)
            scores = (
                torch.einsum("ud,uld->ul", h_type[sl].contiguous(), vecs[idx])
                .double()
                .masked_fill(~valid, -math.inf)
            )
            copy_lse[sl] = scores.logsumexp(-1)
            copy_x[sl] = scores.masked_fill(ids[idx] != x[sl].unsqueeze(1), -math.inf).logsumexp(-1)
        return copy_lse, copy_x

    def _combine_word_terms(self, x: torch.Tensor, gen, copy) -> torch.Tensor:
        """log p(x_t | h_t, entity) from the generate and copy terms: generate in-vocabulary words, copy alias tokens,
        else generate @@UNKNOWN@@ with the penalty."""
        gen_lse, gen_x, gen_unk = gen
        copy_lse, copy_x = copy
        in_vocab = (x < len(self.vocabulary)) & (x != self.unk_id)
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
        alias = self.alias_tables(
            None if not (self.training or torch.is_grad_enabled()) else torch.unique(ue[ue >= 0]).tolist()
        )
        # all (position, row) pairs when the particles cover a good part of them (the stepwise path reads the same
        # table); else only the distinct pairs (the same float32 products wherever the kernel is shape-invariant)
        table = self.generate_table(h_type, x) if 2 * uniq.numel() >= T * self.tables.num_rows else None
        if table is not None:
            gen = tuple(v[ut, self.tables.row_of(ue)] for v in table)
        else:
            gen = self._generate_terms(h_type[ut], self.tables.row_of(ue), self.input_ids(x)[ut])
        copy = self._copy_terms(h_type[ut], ue, x[ut], alias)
        return self._combine_word_terms(x[ut], gen, copy)[inv].view(K, T)

    def word_log_prob_step(
        self,
        h_type_t: torch.Tensor,
        x_t: torch.Tensor,
        entity: torch.Tensor,
        alias,
        gen_table_t: tuple | None = None,
    ) -> torch.Tensor:
        """log p(x_t | h_t, entity_k) for one position and K particles' entities [K]: float64 [K] (no host sync off the
        CPU; on the CPU computed once per distinct entity);
        ``gen_table_t``: row t of ``generate_table`` (then the numbers equal ``word_log_prob``'s)."""
        K = entity.numel()
        R = self.tables.num_rows
        # on the CPU every term is computed once per distinct entity among the K (as ``word_log_prob`` does per
        # distinct pair) and the result gathered; elsewhere per particle (no sync)
        inv = None
        if entity.device.type == "cpu":
            entity, inv = torch.unique(entity, return_inverse=True)
        U = entity.numel()
        rows = self.tables.row_of(entity)
        x_in = self.input_ids(x_t.view(1))
        if gen_table_t is not None:
            gen = tuple(v[rows] for v in gen_table_t)
        elif R <= K:
            # the generate terms of every row at t, gathered
            g = self._generate_terms(
                h_type_t.expand(R, -1), torch.arange(R, device=entity.device), x_in.expand(R)
            )
            gen = tuple(v[rows] for v in g)
        else:
            gen = self._generate_terms(h_type_t.expand(U, -1), rows, x_in.expand(U))
        copy = self._copy_terms(h_type_t.expand(U, -1).contiguous(), entity, x_t.view(1).expand(U), alias)
        out = self._combine_word_terms(x_t.view(1).expand(U), gen, copy)
        return out if inv is None else out.index_select(0, inv)

    def word_log_prob_table(
        self, h_type: torch.Tensor, x: torch.Tensor, alias, gen_table: tuple
    ) -> torch.Tensor:
        """log p(x_t | h_t, e) of every position t and entity e ∈ {−1 (none), 0, .., N − 1}: float64 [T, N + 1], entity
        e in column e + 1, so that a step reads its particles' terms with one gather. The numbers of
        ``word_log_prob_step`` with row t of ``gen_table`` (``generate_table``): the same generate terms, and copy
        terms from the same per-pair products."""
        T, N = x.numel(), self.graph.num_entities
        t = torch.arange(T, device=x.device).repeat_interleave(N + 1)
        entity = torch.arange(-1, N, device=x.device).repeat(T)
        gen = tuple(v[t, self.tables.row_of(entity)] for v in gen_table)
        copy = self._copy_terms(h_type[t], entity, x[t], alias)
        return self._combine_word_terms(x[t], gen, copy).view(T, N + 1)

    def unknown_word_penalty(self, x: torch.Tensor, z: dict) -> torch.Tensor:
        """Nats ``log_joint`` subtracts for unknown words: unk_penalty · #{t: x_t out of vocabulary and not an alias
        word of entity_t} per configuration, float64 [K]; log_joint + this = log p(x, z) without the penalty (PPL)."""
        x = self._check_x(x)
        entity = z["entity"].to(x.device)
        out = torch.zeros(entity.shape[0], dtype=torch.float64, device=x.device)
        if self.unk_penalty == 0.0 or x.numel() == 0:
            return out
        unknown = (x >= len(self.vocabulary)) | (x == self.unk_id)
        for t in torch.nonzero(unknown, as_tuple=True)[0].tolist():
            word = int(x[t])
            copyable = torch.tensor(
                [self._copies(int(e), word) for e in entity[:, t].tolist()], device=x.device
            )
            out += (~copyable).double() * self.unk_penalty
        return out

    def _copies(self, entity: int, word: int) -> bool:
        """True when ``word`` (an x id) is a token of one of ``entity``'s aliases (so it is copied, never penalized)."""
        if entity < 0:
            return False
        return any(self.vocabulary.id(w) == word for form in self.graph.entity_aliases(entity) for w in form)
