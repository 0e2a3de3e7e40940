"""EntityNLM generative model p(x, z) (Ji et al., 2017) and its Hub checkpoint layout.

p(x, z) = Π_t p(z_t | h_{t−1}, memory) p(x_t | h_{t−1}, e_t), where h_t is the state of a token LSTM (AWD-LSTM,
output size D) after reading ``@@START@@ x_1 .. x_t``: it reads x only, so it is computed once per document and
shared by every particle. The latent factors and the dynamic entity memory are in ``latents.py``. The word
distribution is eq. 6: p(x_t = w) ∝ exp(W_vocab (h_{t−1} + W_e e_t) + b)_w, with e_t the embedding of the entity
mentioned at t before its update (or, outside mentions, the previous token's e; zeros before the first mention),
W_vocab tied to the input embedding. Words outside the vocabulary are ``@@UNKNOWN@@`` (scored as that token).

``log_joint`` is the probability of the prefix x_1..x_T with z (no end event): batched over K particles with an
entity memory [K, M, D] each. Checkpoint: ``config.json`` (constructor arguments, the vocabulary included) and
``model.safetensors`` (p's and q's weights, q's under ``proposal.``), written by ``save_pretrained``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from ...tensors import distinct_rows, log_normalizer
from ..checkpoints import StrictLoading
from ..cuda_graphs import CUDA_GRAPHS_HELP, GraphsOfProposal, parse_cuda_graphs
from ..encoder_cache import DocumentCache
from ..kglm.awd_lstm import AWDLSTMDropouts, embedding_dropout
from ..memory_plan import DEFAULT_MEMORY_BUDGET, MemoryPlan, check_memory_budget
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import WordVocabulary, build_word_list, check_word_ids
from . import memory_plan, stepwise
from .heads import EntityHeads
from .latents import LATENT_KEYS, MIN_ROWS, check_latents, rows_apart, without_autograd
from .memory_plan import WORD_GROUP
from .proposal import EntityNLMProposal
from .scoring import score_latents

UNK, BOS = "@@UNKNOWN@@", "@@START@@"
# logits computed per block of the word softmax (rows × vocabulary), bounding memory
WORD_BLOCK = 1 << 22


def build_vocabulary(
    documents: Iterable[Iterable[str]], min_count: int = 1, max_size: int | None = None
) -> list[str]:
    """[@@UNKNOWN@@, @@START@@, words seen ≥ min_count times, most frequent first (ties alphabetical)]."""
    return build_word_list(documents, (UNK, BOS), min_count, max_size)


class EntityNLM(
    StepwiseFromModule,
    GraphsOfProposal,
    nn.Module,
    StrictLoading,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-lm", "entitynlm"],
):
    """Entity neural language model: ``tokenize``, ``log_joint(x, z)`` [K], ``proposal`` (q(z | x)).

    x: LongTensor [T] of word ids. z: dict of LongTensor [K, T] with keys mention (R_t), entity (E_t), length (L_t);
    see ``latents.py``. Sizes: D = ``dim`` (embeddings, LSTM output and entity embeddings), M = ``max_entities``,
    ℓ_max = ``max_mention_length``.
    """

    # log_joint has no end-of-text event: Σ_z p(x, z) = P(a text starts with x)
    prefix_probability = True
    # SMC (stepwise.py: q_τ draws z_t peeking or not, p scores it); documents side by side in one row per particle,
    # declined on the CPU, where each document keeps one row per distinct history
    stepwise_module = documents_module = stepwise
    # bytes one log_joint call may hold (models/memory_plan.py; the memory_budget property sets it)
    _memory_budget = DEFAULT_MEMORY_BUDGET

    # options of from_pretrained that lm-eval's model_args may set (harness/model_args.py): name -> (type, help)
    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "revision": (str, "Hub revision (branch, tag or commit) of pretrained"),
        "cache_dir": (str, "huggingface_hub cache folder"),
        "local_files_only": (bool, "never download: read the Hub cache only"),
        "force_download": (bool, "download again even if cached"),
        "token": (str, "Hugging Face access token"),
        "cuda_graphs": (str, CUDA_GRAPHS_HELP),
    }

    def __init__(
        self,
        vocab: list[str],
        dim: int = 256,
        hidden_size: int = 256,
        num_layers: int = 2,
        max_entities: int = 64,
        max_mention_length: int = 25,
        lowercase: bool = True,
        tie_weights: bool = True,
        dropout: float = 0.0,
        dropouti: float = 0.0,
        dropoute: float = 0.0,
        wdrop: float = 0.0,
        chunk_size: int = 70,
        proposal_hidden_size: int | None = None,
        proposal_num_layers: int | None = None,
    ):
        super().__init__()
        self.vocabulary = WordVocabulary(vocab, UNK, specials=(BOS,), lowercase=lowercase)
        self.vocab, self.word_to_id, self.unk_id = (
            self.vocabulary.words,
            self.vocabulary.word_to_id,
            self.vocabulary.unk_id,
        )
        self.bos_id = self.word_to_id[BOS]
        self.dim, self.chunk_size, self.dropoute = dim, int(chunk_size), dropoute
        self.max_entities, self.max_mention_length = int(max_entities), int(max_mention_length)
        V = len(self.vocab)
        dropouts = AWDLSTMDropouts(dropout=dropout, dropouti=dropouti, dropoute=dropoute, wdrop=wdrop)
        self.token_embedding = nn.Embedding(V, dim)
        self.encoder = dropouts.encoder(dim, hidden_size, dim, num_layers)
        self.heads = EntityHeads(dim, self.max_entities, self.max_mention_length)
        # W_e
        self.entity_output = nn.Linear(dim, dim, bias=False)
        # W_vocab, b
        self.vocab_output = nn.Linear(dim, V)
        if tie_weights:
            self.vocab_output.weight = self.token_embedding.weight
        nn.init.uniform_(self.token_embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.vocab_output.bias)
        self.proposal = EntityNLMProposal(
            vocab_size=V,
            bos_id=self.bos_id,
            dim=dim,
            hidden_size=proposal_hidden_size or hidden_size,
            num_layers=proposal_num_layers or num_layers,
            max_entities=self.max_entities,
            max_mention_length=self.max_mention_length,
            dropouts=dropouts,
            chunk_size=chunk_size,
        )
        self._doc_cache = DocumentCache()

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path, *, cuda_graphs=None, memory_budget=None, **kwargs
    ) -> EntityNLM:
        """Our checkpoint (folder or Hub id; huggingface_hub's options in ``kwargs``); ``cuda_graphs`` and
        ``memory_budget`` (bytes): run settings, not part of the checkpoint (see the properties)."""
        setting = parse_cuda_graphs(cuda_graphs)
        budget = None if memory_budget is None else check_memory_budget(memory_budget)
        model = super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        model.cuda_graphs = setting
        if budget is not None:
            model.memory_budget = budget
        return model

    @property
    def device(self) -> torch.device:
        return self.token_embedding.weight.device

    # --- text ---------------------------------------------------------------------------------------------------
    def token_ids(self, tokens: Iterable[str]) -> torch.Tensor:
        """Ids of already-split tokens (lower-cased when the model is); unknown words -> @@UNKNOWN@@: [T]."""
        return torch.tensor(self.vocabulary.ids(tokens), dtype=torch.long, device=self.device)

    def tokenize(self, text: str) -> torch.Tensor:
        """Whitespace-separated words -> LongTensor [T] (unknown words -> @@UNKNOWN@@; "" -> T = 0)."""
        return self.token_ids(self.vocabulary.split(text))

    def detokenize(self, x: torch.Tensor) -> str:
        """Words of the ids joined by single spaces."""
        return self.vocabulary.detokenize(x.tolist())

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        check_word_ids(x, len(self.vocab))
        return x.to(self.device)

    # --- shared encoder -----------------------------------------------------------------------------------------
    def encode_batch(self, x: torch.Tensor) -> torch.Tensor:
        """States h_0..h_T after reading @@START@@ x_1 .. x_t, for rows of x [B, T]: [B, T + 1, D]."""
        inputs = torch.cat([x.new_full((x.shape[0], 1), self.bos_id), x], 1)
        emb = embedding_dropout(self.token_embedding.weight, inputs, self.dropoute, self.training)
        return self.encoder.encode_chunked(emb, self.chunk_size)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """h_0..h_T for one document x [T]: [T + 1, D]; cached per document in evaluation (no grad)."""
        return self._doc_cache.get(self, x, lambda: self.encode_batch(x.unsqueeze(0))[0])

    def train(self, mode: bool = True):
        self._doc_cache.clear()
        return super().train(mode)

    # --- the memory budget (memory_plan.py) ----------------------------------------------------------------------------
    @property
    def memory_budget(self) -> int:
        """Bytes the temporaries of one ``log_joint`` call may hold (models/memory_plan.py; default 8 GiB): a run setting;
        ``log_joint`` scores ``max_particles_per_call`` particles at a time."""
        return self._memory_budget

    @memory_budget.setter
    def memory_budget(self, value) -> None:
        self._memory_budget = check_memory_budget(value)

    def max_particles_per_call(self, num_tokens: int, budget: int | None = None) -> int:
        """The most particles of a ``num_tokens``-token document one ``log_joint`` call scores within ``budget``
        bytes (default ``memory_budget``); ``log_joint`` splits larger K into calls of this many."""
        return memory_plan.max_particles_per_call(self, num_tokens, budget)

    def memory_plan(self, num_tokens: int, num_particles: int, budget: int | None = None) -> MemoryPlan:
        """The planned temporaries of one ``log_joint`` call and of the sampler (entitynlm/memory_plan.py)."""
        return memory_plan.memory_plan(self, num_tokens, num_particles, budget)

    # --- p(x, z) ------------------------------------------------------------------------------------------------
    @without_autograd
    def log_joint(self, x: torch.Tensor, z: dict) -> torch.Tensor:
        """log p(x, z_k) for K configurations: float64 [K]; −inf where p(x, z_k) = 0.

        Scored ``max_particles_per_call`` particles at a time (the memory budget); chunking moves a value within
        float32 rounding at most, as scoring a draw at another row does."""
        x = self._check_x(x)
        z = {k: v.to(x.device) for k, v in z.items()} if isinstance(z, dict) else z
        R, _, _ = check_latents(z, x.numel())
        if x.numel() == 0:
            return torch.zeros(R.shape[0], dtype=torch.float64, device=x.device)
        # [1, T + 1, D], shared by the K particles
        states = self.encode(x).unsqueeze(0)
        K, T = R.shape
        if K < MIN_ROWS:
            return self.log_joint_batch(states, x.unsqueeze(0), z)
        step = max(MIN_ROWS, self.max_particles_per_call(T))
        if K <= step:
            return self._log_joint_distinct(states, x, z)
        parts = [
            self._log_joint_distinct(states, x, {k: v[s : s + step] for k, v in z.items()})
            for s in range(0, K, step)
        ]
        return torch.cat(parts)

    def _log_joint_distinct(self, states: torch.Tensor, x: torch.Tensor, z: dict) -> torch.Tensor:
        """``log_joint`` of K ≥ 1 configurations, each distinct one scored once: float64 [K]."""
        T = x.numel()
        # each distinct z is scored once (draws from a peaked q repeat) and its value copied to its draws, in ≥ 4 rows
        # (1–3-row float32 products round differently); a draw is then scored at another row of a smaller batch, and
        # float32 rows round by position, so log p moves within float32 rounding
        # (tests/models/entitynlm/test_entitynlm_pinned.py)
        distinct, index = distinct_rows(torch.cat([z[k] for k in LATENT_KEYS], 1), MIN_ROWS)
        distinct = dict(zip(LATENT_KEYS, (part.contiguous() for part in distinct.split(T, 1))))
        return self.log_joint_batch(states, x.unsqueeze(0), distinct)[index]

    def log_joint_batch(
        self, states: torch.Tensor, x: torch.Tensor, z: dict, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log p(x_k, z_k) from encoder states [K|1, T + 1, D] and x [K|1, T] (``mask`` [K, T]: real tokens): [K]."""
        latent, context = score_latents(
            self.heads, states[:, :-1], states[:, 1:], z, mask=mask, track_context=True
        )
        # [K, T]
        words = self.word_log_probs(states[:, :-1], context, x)
        if mask is not None:
            words = words.masked_fill(~mask, 0.0)
        return latent + words.sum(-1)

    def word_log_probs(self, h: torch.Tensor, context: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """log p(x_t | h_{t−1}, e_t) for h [K|1, T, D], e_t [K, T, D], x [K|1, T]: float64 [K, T] (eq. 6).

        Each token gets the numbers ``word_step`` gives it (the same products of the same rows): where ``rows_apart``
        holds, from products over about ``WORD_GROUP`` logits of consecutive tokens at once, else token by token."""
        K, T, _ = context.shape
        target = x.expand(K, T)
        if T == 0:
            return torch.zeros(K, 0, dtype=torch.float64, device=context.device)
        if not rows_apart(K, context):
            # per token, a fresh (aligned) copy of its rows: BLAS may round differently on a misaligned slice
            aligned = (context[:, t].clone(memory_format=torch.contiguous_format) for t in range(T))
            return torch.stack([self.word_step(h[:, t], e, target[:, t]) for t, e in enumerate(aligned)], 1)
        per_group = max(1, WORD_GROUP // (K * len(self.vocab)))
        out = []
        for first in range(0, T, per_group):
            stop = min(T, first + per_group)
            # token-major copies
            tokens = context[:, first:stop].transpose(0, 1).reshape(-1, context.shape[-1])
            words = target[:, first:stop].t().reshape(-1)
            out.append(
                self.word_terms(h[:, first:stop].transpose(0, 1), tokens, words, stop - first).view(
                    stop - first, K
                )
            )
        return torch.cat(out).t()

    def word_terms(
        self, h: torch.Tensor, context: torch.Tensor, x: torch.Tensor, tokens: int = 1
    ) -> torch.Tensor:
        """s_x − log Σ_w exp s_w, s = W_vocab (h_{t−1} + W_e e_t) + b, for one token, h [K|1, D], e_t [K, D], x_t [K]:
        float64 [K]; or for ``tokens`` n tokens at once, h [n, K|1, D], e_t token-major [n·K, D], x [n·K]: [n·K]. The
        float32 logits exist a block of at most ``WORD_BLOCK`` values at a time (one product each)."""
        rows = max(1, WORD_BLOCK // len(self.vocab))
        # [n·K, D]
        feats = (h + self.entity_output(context).view(tokens, -1, context.shape[-1])).view(context.shape)
        parts = []
        for s in range(0, feats.shape[0], rows):
            logits = self.vocab_output(feats[s : s + rows])
            picked = logits.gather(1, x[s : s + rows].unsqueeze(1)).squeeze(1)
            parts.append(picked.double() - log_normalizer(logits))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def word_step(self, h: torch.Tensor, context: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """log p(x_t | h_{t−1}, e_t) for one token: h [K|1, D], e_t [K, D], x_t [K|1]: float64 [K] (eq. 6)."""
        return self.word_terms(h, context, x.expand(context.shape[0]))

    def extra_repr(self) -> str:
        return (
            f"vocab_size={len(self.vocab)}, dim={self.dim}, max_entities={self.max_entities}, "
            f"max_mention_length={self.max_mention_length}, latents={LATENT_KEYS}"
        )
