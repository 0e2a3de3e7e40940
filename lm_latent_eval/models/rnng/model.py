"""RNNG generative model p(x, z) (Dyer et al. 2016) in the unlabeled binarized form of URNNG (Kim et al. 2019).

z is a binary tree over the words w_1..w_T as SHIFT/REDUCE actions a_1..a_{2T−1} (``latents.py``). A stack LSTM
summarizes the stack: its state after ``<s>`` and the stack elements e_1..e_n gives the context h of the next
action. SHIFT generates the next word and pushes its embedding (tree-LSTM cell c = 0); REDUCE pops e_{n−1}, e_n
and pushes their tree-LSTM composition. Then

    p(x, z) = Π_t p(a_t | h_t) · Π_{a_t = SHIFT} p(w | h_t) · [p(</s> | h_end) when the sentence end is counted]

with p(a | h) = softmax(W_a h) over {SHIFT, REDUCE} and p(w | h) = softmax(W_w h) over the vocabulary. Invalid
events have probability exactly zero (masked logits): REDUCE with fewer than two stack elements (so SHIFT is then
certain), ``<s>`` ever, and ``</s>`` unless the stack holds one finished constituent of ≥ 1 word. Generating
``</s>`` ends the sentence, so with the end counted p is a distribution over sentences with their trees. The model
does not know T: where all words are shifted but the stack holds ≥ 2 elements, REDUCE is charged its probability.

Sentence end: ``count_eos=True`` (default) makes ``tokenize`` append ``</s>``, so T includes it and log p(x, z)
includes p(</s> | h_end), as URNNG trains it; ``count_eos=False`` leaves it out (perplexity over words only, as on
the PTB version of Dyer et al.). ``log_joint`` decides from x itself: it counts the end iff x ends with ``</s>``.
K trees of one sentence are scored in one batched pass (a loop over the 2T − 1 actions, never over particles), each
distinct tree once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from ...tensors import distinct_rows, log_normalizer
from ..checkpoints import StrictLoading
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import WordVocabulary, build_word_list
from . import documents, sampling, stepwise
from .enumerate import exact_log_marginal
from .latents import SHIFT, check_actions, is_tree, right_branching, stack_sizes
from .prefix import RNNGPrefix
from .proposal import TreeCRFProposal

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
SPECIAL = (UNK, BOS, EOS)
# word logits computed per block of (rows × vocabulary) entries, bounding memory
WORD_BLOCK = 1 << 22
# log_joint scores at least this many rows (see there)
MIN_ROWS = 4


def build_vocabulary(
    sentences: Iterable[Iterable[str]], min_count: int = 1, max_size: int | None = None
) -> list[str]:
    """[<unk>, <s>, </s>, words seen ≥ min_count times, most frequent first (ties alphabetical)]."""
    return build_word_list(sentences, SPECIAL, min_count, max_size)


class TreeLSTM(nn.Module):
    """Binary tree-LSTM composition: c = σ(f_l) c_l + σ(f_r) c_r + σ(i) tanh(g), h = σ(o) tanh(c)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.linear = nn.Linear(2 * dim, 5 * dim)

    def forward(self, left_h, left_c, right_h, right_c):
        i, f_l, f_r, o, g = self.linear(torch.cat([left_h, right_h], -1)).split(self.dim, -1)
        c = torch.sigmoid(f_l) * left_c + torch.sigmoid(f_r) * right_c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class StackLSTM(nn.Module):
    """A stack of LSTM cells; states are [B, L, H] (h and c of every layer)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float = 0.0):
        super().__init__()
        self.cells = nn.ModuleList(
            nn.LSTMCell(input_size if l == 0 else hidden_size, hidden_size) for l in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, inputs, h, c):
        """One step from states h, c [B, L, H] on inputs [B, D]: new (h, c) [B, L, H] in the dtype of h and c (under
        CUDA's autocast the cells compute in bfloat16; the stacks stay in their own dtype)."""
        hs, cs = [], []
        for l, cell in enumerate(self.cells):
            h_l, c_l = cell(inputs if l == 0 else self.dropout(hs[-1]), (h[:, l], c[:, l]))
            hs.append(h_l)
            cs.append(c_l)
        return torch.stack(hs, 1).to(h.dtype), torch.stack(cs, 1).to(c.dtype)


class RNNG(
    nn.Module,
    StepwiseFromModule,
    StrictLoading,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-lm", "rnng"],
):
    """Unlabeled binarized RNNG: ``tokenize``, ``log_joint(x, z)`` [K], ``proposal`` (tree CRF q(z | x)).

    x: LongTensor [T] of word ids (with a final </s> when the sentence end is counted). z: LongTensor [K, 2T_w − 1]
    of SHIFT (0) / REDUCE (1) actions over the T_w words. Sizes: D = ``dim`` (word and constituent vectors),
    H = ``hidden_size`` (stack LSTM), L = ``num_layers``.
    """

    # log_joint scores complete trees (and, with count_eos, the end of the sentence)
    prefix_probability = False
    # log_marginal lists every tree: sentences of ≤ 12 words (auto picks SMC)
    exact_marginal_tractable = False
    # SMC, word-synchronous: step t draws the REDUCEs before word t and shifts it
    stepwise_module = stepwise
    # sentences side by side (protocol.DocumentBatchLM), one row per particle; on the CPU one at a time
    documents_module = documents

    # options of from_pretrained that lm-eval's model_args may set (harness/model_args.py): name -> (type, help)
    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "count_eos": (
            bool,
            "score </s> after each sentence and count it as a token (default: the checkpoint's)",
        )
    }

    def __init__(
        self,
        vocab: list[str],
        dim: int = 32,
        hidden_size: int = 32,
        num_layers: int = 1,
        count_eos: bool = True,
        lowercase: bool = False,
        tie_weights: bool = True,
        dropout: float = 0.0,
        proposal_dim: int | None = None,
        proposal_hidden_size: int | None = None,
    ):
        super().__init__()
        self.vocabulary = WordVocabulary(vocab, UNK, specials=SPECIAL, lowercase=lowercase, reserved=SPECIAL)
        self.vocab, self.word_to_id = self.vocabulary.words, self.vocabulary.word_to_id
        self.unk_id, self.bos_id, self.eos_id = (self.word_to_id[s] for s in SPECIAL)
        self.count_eos = bool(count_eos)
        self.dim, self.hidden_size, self.num_layers = dim, hidden_size, num_layers
        V = len(self.vocab)
        self.embedding = nn.Embedding(V, dim)
        self.stack_lstm = StackLSTM(dim, hidden_size, num_layers, dropout)
        self.compose = TreeLSTM(dim)
        self.dropout = nn.Dropout(dropout)
        # logits of SHIFT (0) and REDUCE (1)
        self.action_head = nn.Linear(hidden_size, 2)
        self.word_head = nn.Linear(hidden_size, V)
        # added to the word logits: row 1 where </s> is allowed (−inf at <s>), row 0 where not (−inf at <s>, </s>)
        word_mask = torch.zeros(2, V)
        word_mask[:, self.bos_id] = float("-inf")
        word_mask[0, self.eos_id] = float("-inf")
        self.register_buffer("word_mask", word_mask, persistent=False)
        if tie_weights:
            if dim != hidden_size:
                raise ValueError(f"tie_weights needs dim == hidden_size, got {dim} and {hidden_size}")
            self.word_head.weight = self.embedding.weight
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        self.proposal = TreeCRFProposal(
            V, self.bos_id, self.eos_id, proposal_dim or dim, proposal_hidden_size or hidden_size, dropout
        )
        # peek=false draws from this model's own action distribution
        self.proposal.bind(self)

    @property
    def device(self) -> torch.device:
        return self.embedding.weight.device

    # --- text ---------------------------------------------------------------------------------------------------
    def token_ids(self, words: Iterable[str], eos: bool | None = None) -> torch.Tensor:
        """Ids of already-split words (unknown words and the special symbols as text -> <unk>), then </s> if the
        sentence end is counted (``eos``, default ``count_eos``) and there is at least one word: [T]."""
        ids = self.vocabulary.ids(words)
        if ids and (self.count_eos if eos is None else eos):
            ids.append(self.eos_id)
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def tokenize(self, text: str) -> torch.Tensor:
        """Whitespace-separated words -> LongTensor [T] (+ </s> when counted; "" -> T = 0)."""
        return self.token_ids(self.vocabulary.split(text))

    def detokenize(self, x: torch.Tensor) -> str:
        """Words of the ids joined by single spaces (without </s>)."""
        return self.vocabulary.detokenize(x.tolist(), skip=[self.eos_id])

    # --- p(x, z) ------------------------------------------------------------------------------------------------
    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, z_k) for K trees: float64 [K]; −inf for an action sequence that is not a tree over x's words."""
        return self.score_trees(x, z)

    def score_trees(self, x: torch.Tensor, z: torch.Tensor, prefix: bool = False) -> torch.Tensor:
        """``log_joint``; with ``prefix`` (x without </s>) only the actions up to the SHIFT of the last word count: the
        joint of the words and the partial tree that the word-synchronous steps build (``prefix.py``)."""
        # checks x; drops a final </s>
        words = self.proposal.words(x)
        with_eos = words.numel() < x.numel()
        if prefix and with_eos:
            raise ValueError("a prefix has no </s>")
        T = words.numel()
        z = check_actions(z.to(self.device), T)
        K = z.shape[0]
        if T == 0:
            return torch.zeros(K, dtype=torch.float64, device=self.device)
        valid = is_tree(z, T)
        actions = torch.where(valid[:, None], z, right_branching(T, 1, self.device))
        # each distinct tree is scored once (draws from a peaked q repeat) and its value copied to its draws; a batch
        # of K ≥ 4 trees is still scored as ≥ 4 rows, as 1–3-row float32 matrix products round differently on CPU
        if K >= MIN_ROWS:
            distinct, tree_of = distinct_rows(actions, MIN_ROWS)
        else:
            distinct, tree_of = actions, torch.arange(K, device=self.device)
        log_p = self.score_batch(words.unsqueeze(0), distinct, with_eos, prefix)[tree_of]
        return log_p.masked_fill(~valid, float("-inf"))

    def score_batch(
        self, words: torch.Tensor, actions: torch.Tensor, with_eos: bool, prefix: bool = False
    ) -> torch.Tensor:
        """log p(x_b, z_b) for words [B|1, T] and valid trees actions [B, 2T − 1] (float32 math): float64 [B]; with
        ``prefix`` without the actions after the last SHIFT."""
        B, A = actions.shape
        T = words.shape[1]
        D, H, L = self.dim, self.hidden_size, self.num_layers
        dev = actions.device
        rows = torch.arange(B, device=dev)
        # [B|1, T, D]
        emb = self.dropout(self.embedding(words))
        word_table, word_row = emb.reshape(-1, D), rows * T if emb.shape[0] > 1 else torch.zeros_like(rows)
        # flat tables: row b·(T + 1) + n of state_h/state_c is the stack LSTM's (h, c) after <s> and n elements of
        # tree b (n = 0..T); row b·T + n of elem_h/elem_c is element n of tree b's stack
        zeros = emb.new_zeros(1, L, H)
        h0, c0 = self.stack_lstm(self.dropout(self.embedding.weight[self.bos_id]).unsqueeze(0), zeros, zeros)
        state_h = torch.cat([h0, zeros.expand(T, L, H)]).repeat(B, 1, 1)
        state_c = torch.cat([c0, zeros.expand(T, L, H)]).repeat(B, 1, 1)
        elem_h = emb.new_zeros(B * T, D)
        elem_c = emb.new_zeros(B * T, D)
        state_row, elem_row = rows * (T + 1), rows * T
        size = torch.zeros(B, dtype=torch.long, device=dev)
        ptr = torch.zeros(B, dtype=torch.long, device=dev)
        # steps where some tree composes (one host sync)
        any_reduce = (actions != SHIFT).any(0).tolist()
        # last layer's h at the top of the stack: the context of the next action
        top = h0[:, L - 1].expand(B, H)
        contexts = []
        for t in range(A):
            contexts.append(top)
            shift = actions[:, t] == SHIFT
            left = (size - 2).clamp(min=0)
            word = word_table.index_select(0, word_row + ptr.clamp(max=T - 1))
            if any_reduce[t]:
                # left and right children
                pair = torch.cat([elem_row + left, elem_row + (size - 1).clamp(min=0)])
                pair_h, pair_c = elem_h.index_select(0, pair), elem_c.index_select(0, pair)
                comp_h, comp_c = self.compose(pair_h[:B], pair_c[:B], pair_h[B:], pair_c[B:])
                new_h = torch.where(shift[:, None], word, comp_h)
                new_c = torch.where(shift[:, None], torch.zeros_like(comp_c), comp_c)
            else:
                new_h, new_c = word, torch.zeros_like(word)
            # index of the new element
            pos = torch.where(shift, size, left)
            # the state the new element is pushed on
            below = state_row + pos
            h, c = self.stack_lstm(new_h, state_h.index_select(0, below), state_c.index_select(0, below))
            # in place: one row per tree, not the whole stack
            elem_h.index_copy_(0, elem_row + pos, new_h)
            elem_c.index_copy_(0, elem_row + pos, new_c)
            state_h.index_copy_(0, below + 1, h)
            state_c.index_copy_(0, below + 1, c)
            top = h[:, L - 1]
            size, ptr = pos + 1, ptr + shift.long()
        # [B, A, H]
        ctx = self.dropout(torch.stack(contexts, 1))
        sizes = stack_sizes(actions)
        # actions: REDUCE impossible below two elements (SHIFT is then certain)
        impossible = torch.stack([torch.zeros_like(sizes, dtype=torch.bool), sizes < 2], -1)
        action_logits = self.action_head(ctx).float().masked_fill(impossible, float("-inf"))
        action_lp = action_logits.log_softmax(-1).gather(2, actions.unsqueeze(2)).squeeze(2)
        # the REDUCEs that close the tree after the last word are not part of the prefix
        if prefix:
            shifted = torch.cumsum((actions == SHIFT).long(), 1)
            action_lp = action_lp.masked_fill((shifted == T) & (actions != SHIFT), 0.0)
        log_p = action_lp.double().sum(1)
        # words at the SHIFT steps; </s> is possible only on one finished constituent of ≥ 1 word
        is_shift = actions == SHIFT
        shift_ctx = ctx[is_shift].view(B * T, -1)
        eos_ok = ((sizes[is_shift].view(B, T) == 1) & (torch.arange(T, device=dev) >= 1)).reshape(-1)
        log_p = log_p + self.word_log_probs(shift_ctx, eos_ok, words.expand(B, T).reshape(-1)).view(B, T).sum(
            1
        )
        if with_eos:
            # the stack holds one element
            end = self.dropout(state_h.view(B, T + 1, L, H)[:, 1, L - 1])
            eos = torch.full((B,), self.eos_id, dtype=torch.long, device=dev)
            log_p = log_p + self.word_log_probs(end, torch.ones(B, dtype=torch.bool, device=dev), eos)
        return log_p

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """Exact log p(x) = log Σ_z p(x, z) by listing every binary tree (``enumerate.py``): sentences of ≤ 12 words
        (Catalan(11) = 58,786 trees); a clear error above."""
        return exact_log_marginal(self, x)

    def prefix_model(self):
        """This RNNG as P(a sentence starts with x): log_joint stops at the last SHIFT (``prefix.py``); what
        ``loglikelihood(context, continuation)`` is answered from."""
        return RNNGPrefix(self)

    # a continuation of the prefix drawn from p: the prefix's tree by a particle filter, then actions and words
    # until </s>, ``max_tokens`` words or a stop string: sampling.py
    sample_text = sampling.sample_text

    def word_log_probs(
        self, ctx: torch.Tensor, eos_allowed: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """log p(target_n | h_n) for contexts [N, H], </s> masked where not allowed [N], <s> always: float64 [N]."""
        N, V = ctx.shape[0], len(self.vocab)
        rows = max(1, WORD_BLOCK // V)
        parts = []
        for s in range(0, N, rows):
            # x + 0 = x and x − inf = −inf: masked_fill's numbers
            logits = (
                self.word_head(ctx[s : s + rows]).float()
                + self.word_mask.float()[eos_allowed[s : s + rows].long()]
            )
            # the float32 log-sum-exp, in cache-sized blocks on the CPU: the numbers of logits.logsumexp(-1)
            lp = logits.gather(1, target[s : s + rows, None]).squeeze(1) - log_normalizer(logits).float()
            parts.append(lp.double())
        if len(parts) == 1:
            return parts[0]
        return torch.cat(parts) if parts else ctx.new_zeros(0, dtype=torch.float64)

    def extra_repr(self) -> str:
        return (
            f"vocab_size={len(self.vocab)}, dim={self.dim}, hidden_size={self.hidden_size}, "
            f"num_layers={self.num_layers}, count_eos={self.count_eos}"
        )
