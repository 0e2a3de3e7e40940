"""The reasoning template: where the chain of thought z sits between a question x and an answer y, and when it ends.

Token layout (every part a model_arg; ``\\n`` and ``\\t`` in a model_arg are read as newline and tab)::

    prompt(x)  = [BOS] x ⊕ trigger                      (chat_template: the chat template's user turn holding x,
                                                          the generation prompt, then trigger)
    chain z    = z_1 .. z_n, drawn from the model after prompt(x)
    answer ctx = prompt(x) ⊕ z' ⊕ [end_marker] ⊕ answer_prefix,   then y scored token by token

The chain ends at the first n at which (a) the text of z_1..z_n contains ``end_marker`` (``MARKER``: nothing is
appended), (b) z_n is a stop token of the model (EOS, the chat turn's end: ``STOP``; z_n is left out of the answer's
context and ``end_marker`` appended), or (c) n = ``max_chain_tokens`` (``CUT``: ``end_marker`` appended). These three
events are a stopping rule, so the chains partition the model's token streams and Σ_z p(z | x) = 1:

    p(z | x) = Π_{t ≤ n} p(z_t | prompt(x), z_<t),     p(y | x) = Σ_z p(z | x) p(y | answer ctx(x, z)).

A cut chain is a defined outcome (closed by the forced ``end_marker``), never dropped: p(y | x) is the probability
of y after the model's own reasoning, cut at ``max_chain_tokens`` tokens where it runs longer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import InputError

# how a chain ended (``ChainRule.closing``)
OPEN, MARKER, STOP, CUT = 0, 1, 2, 3


def unescape(text: str) -> str:
    r"""A model_arg's ``\n`` and ``\t`` as newline and tab (lm-eval's command line passes them literally).

    Examples
    --------
    >>> unescape("Answer:\\n"), unescape("a\\tb")
    ('Answer:\n', 'a\tb')
    """
    return text.replace("\\n", "\n").replace("\\t", "\t")


@dataclass(frozen=True)
class ReasoningTemplate:
    """The template's parts (module docstring).

    Parameters
    ----------
    trigger : str
        Written after the question, before the chain (``Let's think step by step.``).
    end_marker : str
        The text that closes a chain; appended after a chain closed by a stop token or cut.
    answer_prefix : str
        Written after the closed chain, before the answer y.
    max_chain_tokens : int
        L, the longest chain (a chain reaching it is cut).
    hint : str
        The peeking proposal's hint, written between the question and the trigger; ``{answer}`` is replaced by y.
    chat : bool
        Whether the question goes through the tokenizer's chat template (user turn, generation prompt).
    """

    trigger: str = " Let's think step by step."
    end_marker: str = "\n\n"
    answer_prefix: str = "Therefore, the answer is"
    max_chain_tokens: int = 256
    hint: str = " (The answer is{answer}.)"
    chat: bool = False

    def __post_init__(self):
        if not isinstance(self.max_chain_tokens, int) or self.max_chain_tokens < 1:
            raise InputError(f"max_chain_tokens must be a positive integer, got {self.max_chain_tokens!r}")
        if not self.end_marker:
            raise InputError("end_marker must be a non-empty text: it closes every chain that is cut")
        if "{answer}" not in self.hint:
            raise InputError(f"hint must hold {{answer}} (where the answer goes), got {self.hint!r}")


class ChainRule:
    """When a chain ends, and the token ids of the template's parts, for one tokenizer.

    Parameters
    ----------
    template : ReasoningTemplate
        The parts.
    tokenizer
        A transformers tokenizer.
    stop_ids : iterable of int
        The model's stop tokens (EOS, the chat turn's end).
    """

    def __init__(self, template: ReasoningTemplate, tokenizer, stop_ids) -> None:
        self.template, self.tokenizer = template, tokenizer
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.marker_ids = self.ids(template.end_marker)
        self.answer_prefix_ids = self.ids(template.answer_prefix)

    def ids(self, text: str) -> list[int]:
        """The ids of a part of the template, without special tokens."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def closing(self, chain: list[int]) -> int:
        """How the chain z_1..z_n ends at n: ``STOP``, ``MARKER``, ``CUT`` or ``OPEN`` (it goes on)."""
        if not chain:
            return OPEN
        if chain[-1] in self.stop_ids:
            return STOP
        if self.template.end_marker in self.tokenizer.decode(chain, skip_special_tokens=False):
            return MARKER
        return CUT if len(chain) >= self.template.max_chain_tokens else OPEN

    def is_chain(self, chain: list[int]) -> bool:
        """Whether z is a chain the rule can end with: closed at its last token, open at every earlier one."""
        return self.closing(chain) != OPEN and all(
            self.closing(chain[:n]) == OPEN for n in range(1, len(chain))
        )

    def suffix(self, chain: list[int]) -> tuple[list[int], list[int]]:
        """(the chain's tokens in the answer's context, the ids that follow them before y): a stop token left out
        and the end marker appended where the chain did not write it."""
        end = self.closing(chain)
        kept = chain[:-1] if end == STOP else chain
        return kept, ([] if end == MARKER else self.marker_ids) + self.answer_prefix_ids


def prompt_ids(
    tokenizer, template: ReasoningTemplate, question: str, hint: str | None = None
) -> torch.Tensor:
    """LongTensor [P] of prompt(x) (module docstring), the peeking proposal's hint after the question where given;
    a BOS token first where the tokenizer has one and did not put it there (a chat template writes its own)."""
    question = question + (template.hint.replace("{answer}", hint) if hint is not None else "")
    if template.chat:
        turns = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text + template.trigger, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(question + template.trigger, add_special_tokens=True)["input_ids"]
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
    if not ids:
        raise InputError("the prompt is empty: give the tokenizer a BOS or EOS token, or a non-empty trigger")
    return torch.tensor(ids, dtype=torch.long)
