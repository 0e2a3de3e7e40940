"""KGLM generative model p(x, z) (Logan et al., 2019): tokenize, log_joint and the rest of the contract.

p(x, z) = Π_t p(type_t | ·) p(entity_t | type_t, ·) p(x_t | h_t, entity_t), where h_t is the AWD-LSTM state after
reading ``@@START@@ x_1 .. x_{t-1}`` (the token LSTM reads x only, so it is computed once per document and shared
by every particle), split into h_type [D_tok] | h_head [D_ent] | h_rel [D_ent]. One module per part:
``latents.py`` (the latent factors, shared with q), ``words.py`` (the word distribution: generate a vocabulary
word or copy an alias token), ``proposal.py`` (q(z | x)), ``stepwise.py`` (the per-token kernel and the SMC
particles), ``checkpoint.py`` (our Hub layout) and ``archive.py`` (original AllenNLP archives), ``sampling.py``
(``sample_text``). Words ↔ ids: ``models/vocabulary.py``, with the alias words outside the vocabulary as extended
ids ≥ V, so that they can be copied.

Deviations from the original training loss, chosen so that Σ_x Σ_z p(x, z) is a proper distribution:
the entity of a mention is scored once (at its first token; continuation tokens score only their type);
impossible types are masked before the softmax (continuing after no mention; related with no candidate parent);
the parent softmax runs over recent entities that have at least one edge; new entities never include row 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from ..cuda_graphs import CUDA_GRAPHS_HELP, GraphsOfProposal, parse_cuda_graphs
from ..encoder_cache import DocumentCache
from ..memory_plan import MemoryPlan, check_memory_budget
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import WordVocabulary, build_word_list
from . import memory_plan, sampling, stepwise
from .awd_lstm import AWDLSTMDropouts, embedding_dropout
from .checkpoint import (
    GRAPH_FILE,
    checkpoint_options,
    is_original_archive,
    load_checkpoint,
    load_graph,
    load_original,
)
from .graph import KnowledgeGraph
from .latents import LATENT_KEYS, GraphTables, HeadTables, LatentHeads, latent_log_prob
from .proposal import KGLMProposal
from .words import WordDistribution

UNK, BOS, PAD = "@@UNKNOWN@@", "@@START@@", "@@PADDING@@"


def build_vocabulary(
    documents: Iterable[Iterable[str]], min_count: int = 1, max_size: int | None = None
) -> list[str]:
    """Word list [@@PADDING@@, @@UNKNOWN@@, @@START@@, most frequent words...] from tokenized documents."""
    return build_word_list(documents, (PAD, UNK, BOS), min_count, max_size)


class KGLM(
    StepwiseFromModule,
    WordDistribution,
    GraphsOfProposal,
    nn.Module,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-lm", "kglm"],
):
    """Knowledge-graph language model: ``log_joint(x, z)`` [K], ``proposal`` (q(z | x)), ``tokenize``.

    x: LongTensor [T] of ids from ``tokenize`` (whitespace tokens; ids >= len(vocab) are out-of-vocabulary words
    that occur in some alias, so they can be copied; other unknown words map to @@UNKNOWN@@).
    z: dict of LongTensor [K, T] with keys mention_type / entity / parent / relation (see ``latents.py``).
    """

    # log_joint has no end-of-text event: Σ_z p(x, z) = P(a text starts with x)
    prefix_probability = True
    # SMC (stepwise.py: step t draws z_t from q_τ's heads, scores it under p's); documents side by side there too,
    # None where a document's tables are too large to be read by position (a large graph)
    stepwise_module = documents_module = stepwise

    # options of from_pretrained that lm-eval's model_args may set (harness/model_args.py): name -> (type, help);
    # Path: an existing file, whose sha256 joins the run's identity
    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "knowledge_graph": (Path, "the original knowledge_graph.pkl or our JSON (original archives only)"),
        "alias_database": (Path, "the original alias.pkl (original archives only)"),
        "proposal_archive": (
            Path,
            "a kglm-disc AllenNLP archive: the original proposal (original archives only)",
        ),
        "cuda_graphs": (str, CUDA_GRAPHS_HELP),
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
        if cutoff < 0 or not math.isfinite(unk_penalty) or unk_penalty < 0:
            raise ValueError(f"need cutoff >= 0 and a finite unk_penalty >= 0, got {cutoff}, {unk_penalty}")
        self.graph = load_graph(knowledge_graph)
        self.tables = GraphTables(self.graph, entity_rows, relation_rows)
        # out-of-vocabulary alias words get ids V, V+1, ... so that copying can match them by string
        alias_words = {tok for forms in self.graph.aliases.values() for f in forms for tok in f}
        self.vocabulary = WordVocabulary(vocab, UNK, specials=(BOS,), extended_words=alias_words)
        self.vocab, self.word_to_id, self.unk_id = (
            self.vocabulary.words,
            self.vocabulary.word_to_id,
            self.vocabulary.unk_id,
        )
        self.bos_id, self.extended_words = self.word_to_id[BOS], self.vocabulary.extended_words
        self.cutoff, self.unk_penalty, self.chunk_size = int(cutoff), float(unk_penalty), int(chunk_size)
        self.token_dim, self.entity_dim = token_dim, entity_dim
        self.dropout, self.dropoute = dropout, dropoute
        n_ent_rows = max(num_entity_rows or 0, self.tables.num_rows)
        n_rel_rows = max(
            num_relation_rows or 0, int(self.tables.relation_row.max()) + 1 if self.graph.num_relations else 1
        )
        V = len(self.vocab)

        dropouts = AWDLSTMDropouts(dropout=dropout, dropouti=dropouti, dropoute=dropoute, wdrop=wdrop)
        self.token_embedding = nn.Embedding(V, token_dim)
        self.entity_embedding = nn.Embedding(n_ent_rows, entity_dim)
        self.relation_embedding = nn.Embedding(n_rel_rows, entity_dim)
        self.encoder = dropouts.encoder(token_dim, hidden_size, token_dim + 2 * entity_dim, num_layers)
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
            vocab_size=V,
            unk_id=self.unk_id,
            bos_id=self.bos_id,
            tables=self.tables,
            token_dim=token_dim,
            entity_dim=entity_dim,
            hidden_size=proposal_hidden_size or hidden_size,
            num_layers=proposal_num_layers or num_layers,
            cutoff=cutoff,
            new_entity_bias=new_entity_bias,
            num_entity_rows=n_ent_rows,
            num_relation_rows=n_rel_rows,
            dropouts=dropouts,
            chunk_size=chunk_size,
            nopeek_heads=proposal_nopeek_heads,
            alias_index=self.alias_start_index() if proposal_alias_features else None,
        )
        self._doc_cache = DocumentCache()
        self._tables_cache = DocumentCache()
        # SMC's per-document word tables (step_word_tables), for every block of particles of a document
        self._generate_cache = DocumentCache()
        self._word_table_cache = DocumentCache()
        self._alias_cache: dict = {}
        if isinstance(getattr(self, "_hub_mixin_config", None), dict):
            # saved beside the weights as knowledge_graph.json
            self._hub_mixin_config.pop("knowledge_graph", None)

    def alias_start_index(self) -> dict[int, list[int]]:
        """Token id -> the entities having an alias that starts with that token (q's alias features)."""
        index: dict[int, set[int]] = {}
        for e in range(self.graph.num_entities):
            for form in self.graph.entity_aliases(e):
                if form:
                    index.setdefault(self.vocabulary.id(form[0]), set()).add(e)
        return {tok: sorted(es) for tok, es in index.items()}

    # --- text -------------------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> torch.Tensor:
        """Whitespace tokens -> LongTensor [T]: vocabulary ids, alias-word ids (>= V), else the @@UNKNOWN@@ id."""
        return torch.tensor(
            self.vocabulary.tokenize(text), dtype=torch.long, device=self.token_embedding.weight.device
        )

    def detokenize(self, x: torch.Tensor) -> str:
        """Inverse of tokenize up to unknown words and whitespace."""
        return self.vocabulary.detokenize(x.tolist())

    def input_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Ids the LSTMs read: alias-only words (>= V) become @@UNKNOWN@@: [T]."""
        return torch.where(x >= len(self.vocab), self.unk_id, x)

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype != torch.long:
            raise ValueError(f"x must be a LongTensor [T], got {getattr(x, 'shape', type(x))}")
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.vocabulary.num_ids):
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
            h_type,
            h_head,
            h_rel,
            self.mention_type,
            self.entity_embedding.weight,
            self.relation_embedding.weight,
            self.new_entity_bias,
            self.tables,
            self.cutoff,
            memory_budget=self.memory_budget,
        )

    # --- the memory budget (memory_plan.py) ----------------------------------------------------------------------------
    @property
    def memory_budget(self) -> int:
        """Bytes the temporaries of one ``log_joint`` call or sampler step may hold (models/memory_plan.py; default 8 GiB):
        a run setting, shared with the proposal; setting it drops the cached head tables, which carry it."""
        return self.proposal.memory_budget

    @memory_budget.setter
    def memory_budget(self, value) -> None:
        self.proposal.memory_budget = check_memory_budget(value)
        self.proposal.clear_caches()
        self._tables_cache.clear()

    def max_particles_per_call(self, num_tokens: int, budget: int | None = None) -> int:
        """The most particles of a ``num_tokens``-token document one ``log_joint`` call scores within ``budget``
        bytes (default ``memory_budget``); ``log_joint`` splits larger K into calls of this many."""
        return memory_plan.max_particles_per_call(self, num_tokens, budget)

    def memory_plan(self, num_tokens: int, num_particles: int, budget: int | None = None) -> MemoryPlan:
        """The planned temporaries of one ``log_joint`` call and one sampler step (kglm/memory_plan.py)."""
        return memory_plan.memory_plan(self, num_tokens, num_particles, budget)

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
        step = self.max_particles_per_call(T)
        if K <= step:
            return self._log_joint(x, z, tabs)
        parts = [
            self._log_joint(x, {k: v[s : s + step] for k, v in z.items()}, tabs) for s in range(0, K, step)
        ]
        return torch.cat(parts)

    def _log_joint(self, x: torch.Tensor, z: dict, tabs: HeadTables) -> torch.Tensor:
        lp = latent_log_prob(tabs.heads, z, head_tables=tabs)
        words = self.word_log_prob(tabs.heads.h_type, x, z["entity"])
        return (lp + words.sum(-1)).masked_fill(torch.isneginf(lp), -math.inf)

    def head_tables(self, x: torch.Tensor) -> HeadTables:
        """p's latent head tables for document x (cached per document in eval without grad)."""
        return self._tables_cache.get(
            self, x, lambda: HeadTables.build(self.latent_heads(self.encode(x)), 1.0)
        )

    # --- stepwise interface (SMC; stepwise.py) ---------------------------------------------------------------------
    def step_word_tables(
        self, x: torch.Tensor, alias, with_words: bool
    ) -> tuple[tuple | None, torch.Tensor | None]:
        """The word tables SMC's steps read for document x: ``generate_table`` of p's states, and, where asked for
        (and the generate table exists), ``word_log_prob_table``; each built once per document in eval without grad,
        not once per block of particles."""
        h_type = self.head_tables(x).heads.h_type
        gen = self._generate_cache.get(self, x, lambda: self.generate_table(h_type, x))
        if gen is None or not with_words:
            return gen, None
        return gen, self._word_table_cache.get(
            self, x, lambda: self.word_log_prob_table(h_type, x, alias, gen)
        )

    # ancestral sampling of a continuation from p(· | prefix), cut before a stop string: sampling.py
    sample_text = sampling.sample_text

    def train(self, mode: bool = True):
        for cache in (self._doc_cache, self._tables_cache, self._generate_cache, self._word_table_cache):
            cache.clear()
        self._alias_cache = {}
        return super().train(mode)

    # --- checkpoints (checkpoint.py) -------------------------------------------------------------------------------
    def _save_pretrained(self, save_directory: Path) -> None:
        """model.safetensors (p and q) + knowledge_graph.json; config.json is written by the mixin."""
        super()._save_pretrained(save_directory)
        self.graph.to_json(Path(save_directory) / GRAPH_FILE)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *,
        knowledge_graph=None,
        alias_database=None,
        proposal_archive=None,
        cuda_graphs=None,
        memory_budget=None,
        **kwargs,
    ) -> KGLM:
        """Our checkpoint (folder or Hub id), or an original AllenNLP ``kglm`` archive (``.tar.gz`` / ``.tgz``) read
        with ``archive.load_original_kglm`` (then ``knowledge_graph`` — the original ``knowledge_graph.pkl`` or our
        JSON —, ``alias_database`` (``alias.pkl``) and ``proposal_archive`` (a ``kglm-disc`` archive) apply).
        ``cuda_graphs`` and ``memory_budget`` (bytes): run settings, not part of the checkpoint (see the properties)."""
        name = str(pretrained_model_name_or_path)
        setting = parse_cuda_graphs(cuda_graphs)
        if is_original_archive(name):
            model = load_original(cls, name, knowledge_graph, alias_database, proposal_archive, kwargs)
        else:
            options = checkpoint_options(name, knowledge_graph, alias_database, proposal_archive, kwargs)
            model = super().from_pretrained(pretrained_model_name_or_path, **options)
        model.cuda_graphs = setting
        if memory_budget is not None:
            model.memory_budget = memory_budget
        return model

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision=None,
        cache_dir=None,
        force_download=False,
        local_files_only=False,
        token=None,
        map_location: str = "cpu",
        strict: bool = True,
        **model_kwargs,
    ) -> KGLM:
        """Build from config.json + knowledge_graph.json (unless ``knowledge_graph=`` is given) and load every weight."""
        download = {
            "revision": revision,
            "cache_dir": cache_dir,
            "force_download": force_download,
            "token": token,
            "local_files_only": local_files_only,
        }
        return load_checkpoint(cls, model_id, map_location, strict, download, **model_kwargs)
