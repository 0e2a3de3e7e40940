"""A masked (or masked-diffusion) LM as a latent LM: the latent z is the order σ in which the T positions are revealed.

All T positions start masked; step t reveals one position σ_t, drawn from an order policy π (``policy.py``), and
writes its token from the network's conditional given the positions revealed so far:

    p(x, σ) = Π_t π(σ_t | S_{t−1}) p_θ(x_{σ_t} | x at S_{t−1} revealed, the rest masked),   S_t = {σ_1, ..., σ_t},

and p(x) = Σ_σ p(x, σ) is the probability that the model's own one-token-per-step sampler writes x among the texts
of length T (not a prefix probability: ``prefix_probability = False``). The published Monte Carlo ELBO
E_{σ ~ uniform} log p(x | σ) is importance sampling with K = 1 and the uniform proposal.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import ClassVar

import torch
from torch import nn

from ...errors import UnsupportedError
from ..hmm.tokenizer import UNK, split_words
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import WordVocabulary, check_word_ids
from . import documents, stepwise
from .conditionals import step_scores, token_log_probs
from .exact import deterministic_log_marginal, dp_log_marginal, exact_cost
from .orders import check_orders, order_scores, picked
from .policy import DEFAULT_BLOCK, POLICIES, check_policy, is_deterministic
from .proposal import MaskedOrderProposal
from .row_cache import RowCache
from .sampling import sample_continuation
from .value import resampled_interval_doubt
from .windows import room, window_size

# orders scored per block of log_joint: K · T² booleans of states and float64 tables stay near 2^20 entries each
STATE_ENTRIES = 1 << 20


class MaskedOrderLM(StepwiseFromModule, nn.Module):
    """Any mask predictor (ids [B, L], the mask id at masked positions -> logits [B, L, V]) as a latent LM over orders.

    Parameters
    ----------
    predictor : nn.Module
        The network; its output is the logits or has them as ``.logits`` (a Hugging Face masked LM).
    mask_id : int
        The id the network reads at a masked position; its logit is left out of every token distribution.
    vocab : list of str or None
        The words of the ids (``<unk>`` and ``vocab[mask_id]`` among them); ``tokenize`` lower-cases and splits off
        punctuation, and a word outside the list is ``<unk>``. None: a subclass tokenizes (``text_ids``,
        ``id_text`` and ``vocab_size``: the Hugging Face checkpoints of ``hf.py``).
    policy : str
        A name of ``policy.POLICIES``: ``uniform`` (p(σ) = 1/T!, the default), ``confidence``, or one of DUEL's
        deterministic policies (``greedy_confidence``, ``margin``, ``left_to_right`` and their ``block_`` variants),
        whose p(x) is the likelihood of that sampler along its one order (``log_marginal``: T network rows).
    policy_temperature : float
        τ_π of the confidence policy (0: deterministic).
    policy_block : int
        B of the block policies.
    max_exact_tokens : int
        The longest text ``log_marginal`` sums over its 2^T revealed sets.
    max_length : int or None
        The longest input the network reads, a conditional's revealed context included (None: no limit).
    block_tokens : int
        Network rows per call × T: the memory of one call.
    """

    # p(x) is a distribution over texts of length T, not the probability that a text starts with x
    prefix_probability = False
    # the dynamic program costs 2^T network rows: short texts only (``max_exact_tokens``)
    exact_marginal_tractable = False
    stepwise_module = stepwise
    # texts side by side (protocol.DocumentBatchLM): those of one length share the draw and the network's calls
    documents_module = documents
    # what the user does not give (estimators.registry.with_model_defaults, ``default_settings``): without a value
    # head, uniform orders (peek=False: the myopic peeking proposal's weights are heavy-tailed) and SMC that never
    # resamples (the mean-field look-ahead misleads resampling); with one, SMC resampling at ESS < K/2 under it,
    # peeking through it (fewer rows for an interval of measured coverage up to RESAMPLED_INTERVAL_TOKENS); the
    # measurements: docs/models.md, "Masked and masked-diffusion LMs" and "At length"
    settings_without_head: ClassVar[dict] = {"peek": False, "resample_threshold": 0.0}
    settings_with_head: ClassVar[dict] = {"peek": True, "resample_threshold": 0.5}

    def __init__(self, predictor, mask_id, vocab, policy="uniform", policy_temperature=1.0, max_exact_tokens=16,
                 max_length=None, block_tokens=8192, policy_block=DEFAULT_BLOCK):  # fmt: skip
        super().__init__()
        check_policy(policy, policy_temperature, policy_block)
        if vocab is not None:
            mask_word = vocab[mask_id]
            self.words = WordVocabulary(
                vocab, UNK, specials=(mask_word,), lowercase=True, reserved=(mask_word,)
            )
        self.predictor, self.mask_id = predictor, int(mask_id)
        self.policy, self.policy_temperature = policy, float(policy_temperature)
        self.policy_block = policy_block
        # a deterministic policy's p(x) is one order's product of conditionals: T rows, so estimator=auto takes it
        self.exact_marginal_tractable = is_deterministic(policy, self.policy_temperature)
        self.max_exact_tokens, self.max_length, self.block_tokens = max_exact_tokens, max_length, block_tokens
        # network rows run so far (one row = one revealed set of one text): the cost figure of the benchmarks
        self.network_rows = 0
        # the rows of recently scored states, read back instead of run again (row_cache.py; shared with views)
        self.row_cache = RowCache()
        # a conditional view's revealed context (``conditional_model``): ids [C] read before the text, and its text
        self.context_ids, self.context_text = None, None
        # the one-line notices given once (``check_text``: texts read in windows), shared with conditional views
        self.notices_given = set()
        self.proposal = MaskedOrderProposal(self)
        # SMC's look-ahead ψ (``value.py``): a fitted ValueHead, or None for the mean field
        self.value_head = None

    @property
    def default_settings(self) -> dict:
        """The settings the model asks for where the user gives none: ``settings_with_head`` when it has a value head
        (``value.py``), else ``settings_without_head``."""
        return self.settings_without_head if self.value_head is None else self.settings_with_head

    @property
    def vocab(self) -> list[str]:
        return self.words.words

    @property
    def vocab_size(self) -> int:
        """V, the ids a text may hold (the mask id among them, refused in a text)."""
        return len(self.vocab)

    @property
    def device(self) -> torch.device:
        return next(self.predictor.parameters()).device

    def network_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The network's logits [B, L, V] for ids [B, L]."""
        out = self.predictor(ids)
        return getattr(out, "logits", out)

    def predict(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] for the text ids [B, T], read after the revealed context of a conditional view."""
        if self.context_ids is None or self.context_ids.numel() == 0:
            return self.network_logits(ids)
        context = self.context_ids.to(ids.device).expand(ids.shape[0], -1)
        return self.network_logits(torch.cat([context, ids], 1))[:, context.shape[1] :]

    def text_ids(self, text: str) -> torch.Tensor:
        """LongTensor [T] of word ids (lower-cased, punctuation split off; unknown words -> ``<unk>``)."""
        return torch.tensor(self.words.ids(split_words(text)), dtype=torch.long)

    def detokenize(self, ids) -> str:
        """The words of the ids joined by spaces."""
        return self.words.detokenize(int(i) for i in ids)

    def tokenize(self, text: str) -> torch.Tensor:
        """The text's ids [T] (``text_ids``); in a conditional view, ``text`` is context ⊕ continuation and the ids
        are the continuation's (``conditional_model``)."""
        if self.context_text is None:
            return self.text_ids(text)
        if not text.startswith(self.context_text):
            raise ValueError(f"a conditional view of context {self.context_text[-40:]!r} got another text")
        full, context = self.text_ids(text), self.context_ids.cpu()
        if full.numel() >= context.numel() and torch.equal(full[: context.numel()], context):
            return full[context.numel() :]
        # the tokens of the context are no prefix of the whole text's: the continuation tokenized alone
        return self.text_ids(text[len(self.context_text) :])

    def check_text(self, x: torch.Tensor) -> torch.Tensor:
        """x on the model's device; ValueError for ids outside the vocabulary or the mask id, UnsupportedError when
        a conditional view's context leaves the network fewer than 2 positions (a longer text is read in windows,
        ``windows.py``)."""
        check_word_ids(x, self.vocab_size)
        if bool((x == self.mask_id).any()):
            raise ValueError(f"x holds the mask id {self.mask_id}; use model.tokenize(text)")
        # a text longer than the network reads is read in windows; refused when the context leaves no room
        if window_size(self, x.numel()) is not None and "windows" not in self.notices_given:
            self.notices_given.add("windows")
            warnings.warn(
                f"{type(self).__name__}: a text of {x.numel()} tokens is longer than the {room(self)} positions the "
                f"network reads: read in windows of {window_size(self, x.numel())} (windows.py; noticed once)",
                stacklevel=2,
            )
        return x.to(self.device)

    def conditional_model(self, context: str) -> MaskedOrderLM:
        """The model of a continuation given ``context`` revealed: a view sharing this network whose documents are
        context ⊕ continuation texts, whose x is the continuation's ids, and whose latent is the order of the
        continuation's positions, all masked at first, the context's ids read before them:

            p(x_cont | x_ctx) = Σ_σ Π_t π(σ_t | S_{t−1}) p_θ(x_{σ_t} | x_ctx and x at S_{t−1} revealed, the rest masked),

        a distribution over the continuations of T tokens (Σ over the vocabulary = 1 at T = 1). Every estimator
        applies to the view (``log_marginal``: the dynamic program over the continuation's revealed sets).
        """
        view = copy.copy(self)
        view.context_text, view.context_ids = context, self.text_ids(context).to(self.device)
        view.proposal = MaskedOrderProposal(view)
        return view

    def sample_text(self, prefix_text: str, max_tokens: int, generator=None, stop=None) -> str:
        """A continuation of ``prefix_text`` from the model's own sampler (``sampling.sample_continuation``): as
        many masked positions as ``max_tokens`` (at most what the network reads after the prefix), revealed one per
        step under the order policy, cut before the first ``stop`` string."""
        text = sample_continuation(self, prefix_text, max_tokens, generator)
        return text[: min((text.find(s) for s in stop or [] if s and s in text), default=len(text))]

    @torch.no_grad()
    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, σ_k) for K orders z [K, T]: float64 [K], −inf for a row that is not a permutation."""
        x = self.check_text(x)
        T = x.numel()
        z = check_orders(z, T).to(self.device)
        if T == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64, device=self.device)
        rows = max(1, STATE_ENTRIES // (T * T))
        out = []
        for start in range(0, z.shape[0], rows):
            valid, order, scores = order_scores(self, x, z[start : start + rows])
            out.append(picked(scores.log_joint, order).masked_fill(~valid, -math.inf))
        return torch.cat(out)

    def masked_token_log_probs(
        self, x: torch.Tensor, revealed: torch.Tensor, keep_mask_row: bool = False
    ) -> torch.Tensor:
        """log p_θ(x_i | x at S revealed, the rest masked) for N states (revealed BoolTensor [N, T]): float64 [N, T],
        −inf at the revealed positions (``estimator=elbo``'s terms); ``keep_mask_row``: normalized over every output
        row, the mask's included (LLaDA's evaluation code), not over the tokens a sampler writes."""
        # refused before check_text, whose notice would say the text is read in windows
        if window_size(self, x.numel()) is not None:
            raise UnsupportedError(
                f"{type(self).__name__}: masks over a text of {x.numel()} tokens, longer than the network reads "
                f"({room(self)}): the ELBO is written for one window"
            )
        x = self.check_text(x)
        if keep_mask_row:
            log_token, _ = token_log_probs(self, x, revealed.to(self.device), keep_mask_row=True)
            return log_token.masked_fill(revealed.to(self.device), -math.inf)
        return step_scores(self, x, revealed.to(self.device)).log_token

    def log_marginal(self, x: torch.Tensor) -> float:
        """log p(x) = log Σ_σ p(x, σ), exact: along the one order of a deterministic policy (T network rows, any
        length), else by the dynamic program over revealed sets (``exact.py``; an UnsupportedError beyond
        ``max_exact_tokens`` tokens)."""
        if is_deterministic(self.policy, self.policy_temperature):
            return deterministic_log_marginal(self, self.check_text(x))
        return dp_log_marginal(self, self.check_text(x))

    def exact_marginal_cost(self, x: torch.Tensor) -> float:
        """What ``log_marginal(x)`` costs in samples (``exact.exact_cost``: (2^T − 1) / T for a text the network
        reads whole), so that the sampling estimators under ``auto`` compute the short documents exactly."""
        return exact_cost(self, int(x.numel()))

    def smc_interval_doubt(self, x: torch.Tensor, settings) -> str | None:
        """Why SMC under ``settings`` over x states no interval (``value.resampled_interval_doubt``), or None."""
        return resampled_interval_doubt(self, int(x.numel()), settings)

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, mask_id={self.mask_id}, policy={self.policy!r}, "
            f"policy_temperature={self.policy_temperature}"
            + (f", policy_block={self.policy_block}" if POLICIES[self.policy].block else "")
        )
