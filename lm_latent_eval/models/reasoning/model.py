"""Any Hugging Face causal LM as a latent LM whose latent is its own chain of thought.

x is an answer y to a question (the context of lm-eval's ``loglikelihood``), z the chain the model writes between
them under the template (``template.py``), and

    p(y | question) = Σ_z p(z | question) p(y | question, z),

a prefix probability in y (no end-of-answer event). ``conditional_model(question)`` is the model of the answers to one
question, ``conditional_models(pairs)`` that of several questions' answers at once, drawn side by side (lm-eval's
loglikelihood goes through it, ``harness.conditionals``); the model itself answers the empty question. The default
proposal is the model's own sampler (``default_settings``: peek=False), so the importance weights are
p(y | question, z_k) ∈ [0, 1] (``importance_weight_bound``). ``loglikelihood_rolling`` is refused
(``rolling_refusal``): a document has no question to reason about.
"""

from __future__ import annotations

import copy
import math
from typing import ClassVar

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from ...errors import InputError, UnsupportedError
from .chains import PAD, draw_chains, score_answers, teacher_forced
from .proposal import ChainProposal, beam_search
from .questions import QuestionsView
from .template import OPEN, ChainRule, ReasoningTemplate, prompt_ids, unescape


class LatentReasoningLM(nn.Module):
    """p(y | question) marginalized over the chains of thought of a transformers causal LM (module docstring).

    Parameters
    ----------
    network
        A transformers causal LM (``AutoModelForCausalLM``).
    tokenizer
        Its tokenizer.
    template : ReasoningTemplate
        Trigger, end marker, answer prefix, the longest chain, the peeking hint, chat or not.
    top_p : float
        The proposal's nucleus (1: none).
    top_p_mix : float
        The share of the tempered distribution mixed into the nucleus, so that q > 0 wherever p > 0.
    max_exact_chains : int
        The most chains ``log_marginal`` enumerates.
    share_chains : bool
        The answers to one question on the same chains (``random_stream_text``).
    batch_chains : int
        The most chains drawn in one lockstep batch (``side_by_side_limit``: the key/value cache holds them all).
    """

    # Σ_z p(y, z | question) is the probability that the answer starts with y: no end-of-answer event
    prefix_probability = True
    # log_marginal enumerates every chain: tiny vocabularies and chains only
    exact_marginal_tractable = False
    # pretrained= is a transformers checkpoint (models.checkpoints.fits)
    reads_transformers_checkpoints = True
    # the model's own sampler as the proposal (weights p(y | x, z) ∈ [0, 1]), 16 chains, no precision target: a chain
    # costs up to max_chain_tokens forward passes of the whole network
    default_settings: ClassVar[dict] = {"peek": False, "num_samples": 16, "target_se": 0.0}
    rolling_refusal = (
        "loglikelihood_rolling (perplexity tasks) is refused: latent_reasoning scores an answer after the model's "
        "chain of thought about a question, and a document has no question; use loglikelihood (multiple-choice and "
        "answer-likelihood tasks) or generate_until, or --model hf for perplexity"
    )
    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "trigger": (
            str,
            'text after the question that opens the chain (default " Let\'s think step by step.")',
        ),
        "end_marker": (
            str,
            "text that closes the chain, appended where the chain is cut or stops (default \\n\\n)",
        ),
        "answer_prefix": (
            str,
            "text after the chain, before the answer (default 'Therefore, the answer is')",
        ),
        "max_chain_tokens": (int, "the longest chain: one reaching it is cut and closed by end_marker (256)"),
        "hint": (str, "peek=true's hint after the question; {answer} is replaced by the answer"),
        "chat_template": (str, "auto (the tokenizer's chat template where it has one), true or false"),
        "top_p": (float, "the proposal's nucleus (1: the tempered sampler alone)"),
        "top_p_mix": (float, "the tempered distribution's share mixed into the nucleus, > 0 (0.1)"),
        "max_exact_chains": (int, "the most chains the exact marginal (log_marginal) lists (100000)"),
        "share_chains": (
            bool,
            (
                "the answers to one question scored on the same chains (drawn once: common random numbers); false "
                "(default): each answer on its own chains, as the choices' flip probabilities assume"
            ),
        ),
        "batch_chains": (
            int,
            (
                "the most chains drawn in one lockstep batch, whose key/value cache holds them all: the answers of a "
                "batch's questions are drawn side by side in chunks of at most this many chains (256)"
            ),
        ),
    }

    def __init__(self, network, tokenizer, template: ReasoningTemplate | None = None, top_p: float = 1.0,
                 top_p_mix: float = 0.1, max_exact_chains: int = 100_000, share_chains: bool = False,
                 batch_chains: int = 256) -> None:  # fmt: skip
        super().__init__()
        if not isinstance(batch_chains, int) or isinstance(batch_chains, bool) or batch_chains < 1:
            raise InputError(f"batch_chains must be a positive integer, got {batch_chains!r}")
        if not 0.0 < top_p <= 1.0:
            raise InputError(f"top_p must be in (0, 1], got {top_p!r}")
        if top_p < 1.0 and not 0.0 < top_p_mix < 1.0:
            raise InputError(
                f"top_p_mix must be in (0, 1) with top_p < 1 (a nucleus alone leaves chains with p > 0 undrawable, "
                f"which biases the estimate low), got {top_p_mix!r}"
            )
        self.network, self.tokenizer = network, tokenizer
        self.template = template or ReasoningTemplate()
        self.top_p, self.top_p_mix, self.max_exact_chains = (
            float(top_p),
            float(top_p_mix),
            int(max_exact_chains),
        )
        stops = {tokenizer.eos_token_id} | set(_generation_stops(network))
        self.rule = ChainRule(self.template, tokenizer, {s for s in stops if s is not None})
        self.question, self.is_view, self.share_chains = "", False, bool(share_chains)
        # what importance sampling draws side by side at most (``estimators.importance``): chains of one batch
        self.side_by_side_limit = batch_chains
        self._prompt = None
        # the latest draws of the model's own sampler (``draw``), read back by log_joint and by the other answers to
        # the same question drawn from the same stream
        self._memo = None
        self.proposal = ChainProposal(self)

    @classmethod
    def from_pretrained(cls, path: str, *, dtype=None, device=None, trigger=None, end_marker=None,
                        answer_prefix=None, max_chain_tokens=None, hint=None, chat_template="auto", top_p=1.0,
                        top_p_mix=0.1, max_exact_chains=100_000, share_chains=False,
                        batch_chains=256) -> LatentReasoningLM:  # fmt: skip
        """The causal LM and tokenizer of ``path`` (a folder or Hub id) under the template (``MODEL_ARGS``)."""
        tokenizer = AutoTokenizer.from_pretrained(path)
        network = AutoModelForCausalLM.from_pretrained(
            path, **({"dtype": dtype} if dtype is not None else {})
        )
        if device is not None:
            network = network.to(device)
        chat = _chat(chat_template, tokenizer)
        given = {"trigger": trigger, "end_marker": end_marker, "answer_prefix": answer_prefix, "hint": hint}
        parts = {k: unescape(v) for k, v in given.items() if v is not None}
        if chat and trigger is None:
            parts["trigger"] = "Let's think step by step."
        if max_chain_tokens is not None:
            parts["max_chain_tokens"] = max_chain_tokens
        template = ReasoningTemplate(**parts, chat=chat)
        return cls(network.eval(), tokenizer, template, top_p, top_p_mix, max_exact_chains, share_chains,
                   batch_chains)  # fmt: skip

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    @property
    def vocab(self) -> list[str]:
        """The network's ids as token strings (ids past the tokenizer's end as ``<id N>``)."""
        known = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        return known + [f"<id {i}>" for i in range(len(known), int(self.network.config.vocab_size))]

    @property
    def prompt(self) -> torch.Tensor:
        """prompt(question) [P] on the model's device."""
        if self._prompt is None or self._prompt.device != self.device:
            self._prompt = prompt_ids(self.tokenizer, self.template, self.question).to(self.device)
        return self._prompt

    def check_fits(self, prompt: torch.Tensor, answer_tokens: int) -> None:
        """UnsupportedError, in one line, where prompt ⊕ the longest chain ⊕ end marker ⊕ answer prefix ⊕ the answer
        is longer than the network reads (its context length, as lm-eval's hf backend resolves it)."""
        from ..tokenization.model import context_length

        room = context_length(self.network.config, self.tokenizer)
        rule = self.rule
        need = prompt.numel() + self.template.max_chain_tokens + len(rule.marker_ids)
        need += len(rule.answer_prefix_ids) + answer_tokens
        if need > room:
            raise UnsupportedError(
                f"{type(self).__name__}: a prompt of {prompt.numel()} tokens, chains of up to "
                f"{self.template.max_chain_tokens} and an answer of {answer_tokens} need {need} positions, more than "
                f"the network's {room}: lower max_chain_tokens, or shorten the prompt (fewer few-shot examples)"
            )

    def hint_prompt(self, x: torch.Tensor) -> torch.Tensor:
        """prompt(question ⊕ hint(y)) [P'] of the peeking proposal, y the text of the answer's ids x."""
        answer = self.tokenizer.decode(x.tolist())
        return prompt_ids(self.tokenizer, self.template, self.question, hint=answer).to(self.device)

    def conditional_model(self, context: str) -> LatentReasoningLM:
        """The model of the answers to question ``context``: a view sharing the network, whose documents are
        context ⊕ answer texts and whose x is the answer's ids (``tokenize``)."""
        view = copy.copy(self)
        view.question, view._prompt, view._memo, view.is_view = context, None, None, True
        view.proposal = ChainProposal(view)
        return view

    def conditional_models(self, pairs: list[tuple[str, str]]) -> QuestionsView:
        """The answers of ``pairs`` (question, answer) to several questions as one latent LM (``QuestionsView``):
        each document the one of its question's view, their chains drawn side by side (lm-eval's loglikelihood
        estimates a batch's questions through it, ``harness.conditionals.view_estimates``)."""
        return QuestionsView(self, pairs)

    def random_stream_text(self, document: str) -> str:
        """The text a document's random stream is seeded from: its own (each answer on its own chains, independent
        estimates), or, for a view with ``share_chains``, the question, so that its answers are scored on the same
        chains, drawn once (common random numbers). Shared chains make the answers' estimates dependent: on the tiny
        model negatively (an answer likely after a chain leaves less to the others), so that the paired difference
        spreads more than with independent chains (bench/reasoning); the choices' flip probabilities read that
        dependence from the paired weights (``harness.choices``): opt in for speed only."""
        return self.question if self.is_view and self.share_chains else document

    def tokenize(self, text: str) -> torch.Tensor:
        """The answer's ids [T]: ``text`` is question ⊕ answer (the model's own question, "" unless a view)."""
        if not text.startswith(self.question):
            raise ValueError(f"a view of question {self.question[-40:]!r} got another text {text[:40]!r}")
        answer = text[len(self.question) :]
        ids = self.tokenizer(answer, add_special_tokens=False)["input_ids"] if answer else []
        return torch.tensor(ids, dtype=torch.long)

    def chain_rows(self, z: torch.Tensor) -> tuple[list[list[int]], list[bool]]:
        """The chains of z [K, n] (−1 padding dropped) and whether each is a chain of the template."""
        chains = [[t for t in row if t != PAD] for row in z.tolist()]
        return chains, [bool(c) and self.rule.is_chain(c) for c in chains]

    @torch.no_grad()
    def draw(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """K chains from the proposal and their log q (``ChainProposal``); the draws of the model's own sampler
        (peek=False) are kept, keyed by the generator's state before them, with the cache after them: another answer
        drawn from the same stream (the same question's other choices) gets them without drawing again."""
        prompt = self.hint_prompt(x) if peek else self.prompt
        self.check_fits(prompt, x.numel())
        key = (
            bytes(generator.get_state().tolist()) if generator is not None else None,
            num_samples,
            temperature,
        )
        memo = self._memo
        if not peek and generator is not None and memo is not None and memo[0] == key:
            generator.set_state(memo[2])
            return memo[1].tokens, memo[1].log_q
        draws = draw_chains(self.network, self.rule, prompt, num_samples, generator, temperature, self.top_p,
                            self.top_p_mix)  # fmt: skip
        if not peek and generator is not None:
            self._memo = (key, draws, generator.get_state())
        return draws.tokens, draws.log_q

    @torch.no_grad()
    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(y, z | question) = log p(z | question) + log p(y | question, z) for chains z [K, n]: float64 [K],
        −inf for a row that is no chain of the template (and for every chain where the answer is empty, whose only
        configuration is the empty one)."""
        x = x.to(self.device)
        if x.numel() == 0:
            empty = (z == PAD).all(1)
            return torch.where(empty, 0.0, -math.inf).double().to(self.device)
        found = self._memo_rows(z)
        if found is not None:
            draws, rows = found
            return draws.log_p[rows] + score_answers(self.network, self.rule, draws, rows, x)
        self.check_fits(self.prompt, x.numel())
        chains, valid = self.chain_rows(z)
        out = torch.full((len(chains),), -math.inf, dtype=torch.float64, device=self.device)
        listed = [c for c, ok in zip(chains, valid) if ok]
        if listed:
            log_p, _, log_y = teacher_forced(self.network, self.rule, self.prompt, listed, x)
            out[torch.tensor(valid, device=self.device)] = log_p + log_y
        return out

    def _memo_rows(self, z: torch.Tensor):
        """(draws, rows of them) where every row of z is one the model's own sampler drew last, else None."""
        if self._memo is None:
            return None
        draws = self._memo[1]
        found = self._memo_offset(draws.tokens, z)
        if found is None or not draws.drawn_after(found, self.prompt):
            return None
        return draws, found

    @staticmethod
    def _memo_offset(tokens: torch.Tensor, z: torch.Tensor) -> torch.Tensor | None:
        """The rows of ``tokens`` that z [K', n] is (a chunk of them in order, found by its storage offset, or the first
        K' rows), or None."""
        if z.shape[1] != tokens.shape[1] or z.shape[0] > tokens.shape[0]:
            return None
        z = z.to(tokens.device)
        # a chunk of the draws (select_particles' slice): the same rows in order
        offset = (z.data_ptr() - tokens.data_ptr()) // max(tokens.stride(0) * tokens.element_size(), 1)
        if 0 <= offset <= tokens.shape[0] - z.shape[0] and torch.equal(
            tokens[offset : offset + z.shape[0]], z
        ):
            return torch.arange(offset, offset + z.shape[0], device=tokens.device)
        if torch.equal(tokens[: z.shape[0]], z):
            return torch.arange(z.shape[0], device=tokens.device)
        return None

    def enumerate_chains(self) -> list[list[int]]:
        """Every chain of the template over the network's vocabulary (tiny models only: at most ``max_exact_chains``,
        else UnsupportedError)."""
        vocab = int(self.network.config.vocab_size)
        open_, done = [[]], []
        for _ in range(self.template.max_chain_tokens):
            grown = [[*chain, v] for chain in open_ for v in range(vocab)]
            if len(done) + len(grown) > self.max_exact_chains:
                raise UnsupportedError(
                    f"{type(self).__name__}: over {self.max_exact_chains} chains of up to "
                    f"{self.template.max_chain_tokens} tokens over {vocab} ids to enumerate; the exact marginal is "
                    "for tiny models (raise max_exact_chains, or estimate it by sampling)"
                )
            open_ = [c for c in grown if self.rule.closing(c) == OPEN]
            done += [c for c in grown if self.rule.closing(c) != OPEN]
            if not open_:
                break
        return done

    def log_marginal(self, x: torch.Tensor) -> float:
        """log p(y | question) = log Σ_z p(z | question) p(y | question, z), every chain listed
        (``enumerate_chains``); 0 for an empty answer."""
        if x.numel() == 0:
            return 0.0
        self.check_fits(self.prompt, x.numel())
        chains = self.enumerate_chains()
        log_p, _, log_y = teacher_forced(self.network, self.rule, self.prompt, chains, x.to(self.device))
        return float(torch.logsumexp(log_p + log_y, 0))

    def exact_marginal_cost(self, x: torch.Tensor) -> float:
        """What ``log_marginal`` costs in samples: the chains it lists, at most Σ_{l ≤ L} V^l (inf beyond
        ``max_exact_chains``)."""
        vocab, length = int(self.network.config.vocab_size), self.template.max_chain_tokens
        count = sum(vocab**n for n in range(1, min(length, 64) + 1))
        return float(count) if count <= self.max_exact_chains else math.inf

    def importance_weight_bound(self, temperature: float, peek: bool) -> float | None:
        """B with w ≤ B for every draw: 1 for the model's own sampler (τ = 1, no nucleus, no peeking), whose weights
        are p(y | x, z); None otherwise (unbounded)."""
        return 1.0 if (temperature == 1.0 and not peek and self.top_p >= 1.0) else None

    def beam_chains(self, beam_size: int) -> torch.Tensor:
        """``ChainProposal._beam``'s chains [k', n]."""
        return pad_chains(beam_search(self, beam_size), self.device)

    @torch.no_grad()
    def sample_text(self, prefix_text: str, max_tokens: int, generator=None, stop=None) -> str:
        """An answer to question ``prefix_text`` from the model's own sampler: a chain, then up to ``max_tokens``
        tokens of the answer after it (cut before the first ``stop`` string); the answer only."""
        view = self.conditional_model(prefix_text)
        view.check_fits(view.prompt, max_tokens)
        draws = draw_chains(view.network, view.rule, view.prompt, 1, generator)
        kept, suffix = view.rule.suffix(draws.tokens[0][draws.tokens[0] != PAD].tolist())
        ids = torch.tensor(view.prompt.tolist() + kept + suffix, device=self.device)
        return _sample_answer(self, ids, max_tokens, generator, stop or [])


def _sample_answer(model, ids: torch.Tensor, max_tokens: int, generator, stop: list[str]) -> str:
    """Up to ``max_tokens`` tokens drawn from the network after ``ids`` [S] at temperature 1 (one cached forward pass
    per token, from ``generator``), stopped at a stop token or once the text holds a ``stop`` string, cut before it."""
    from ..causal_lm import cache_step

    tokens: list[int] = []
    out, cache = cache_step(model.network, ids[None], None)
    logits = out.logits[0, -1]
    for _ in range(max_tokens):
        token = int(torch.multinomial(torch.softmax(logits.double(), -1), 1, generator=generator))
        if token in model.rule.stop_ids:
            break
        tokens.append(token)
        text = model.tokenizer.decode(tokens, skip_special_tokens=True)
        if any(s and s in text for s in stop):
            break
        out, cache = cache_step(model.network, torch.tensor([[token]], device=ids.device), cache)
        logits = out.logits[0, -1]
    text = model.tokenizer.decode(tokens, skip_special_tokens=True)
    return text[: min((text.find(s) for s in stop if s and s in text), default=len(text))]


def pad_chains(chains: list[list[int]], device) -> torch.Tensor:
    """Chains as LongTensor [K, n] padded with −1."""
    from ...tensors import pad_rows

    return pad_rows(chains, PAD).to(device)


def _generation_stops(network) -> list[int]:
    """The network's generation config's EOS ids (a chat model's turn end among them)."""
    config = getattr(network, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def _chat(value, tokenizer) -> bool:
    """model_args ``chat_template``: auto (the tokenizer's chat template where it has one), true or false."""
    text = str(value).strip().lower()
    if text == "auto":
        return getattr(tokenizer, "chat_template", None) is not None
    if text in ("true", "1", "yes"):
        if getattr(tokenizer, "chat_template", None) is None:
            raise InputError(
                "chat_template=true: the tokenizer has no chat template; use chat_template=false"
            )
        return True
    if text in ("false", "0", "no"):
        return False
    raise InputError(f"chat_template must be auto, true or false, got {value!r}")
