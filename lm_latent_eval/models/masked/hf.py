"""Hugging Face masked LMs as latent LMs over reveal orders: any ``AutoModelForMaskedLM`` checkpoint (BERT, RoBERTa,
ModernBERT) and masked-diffusion checkpoints whose forward returns logits at every position (LLaDA-, Dream-,
MDLM-style, loaded through ``AutoModel`` with ``trust_remote_code``).

The text's ids are the checkpoint tokenizer's without special tokens; the network reads them between the special
tokens the tokenizer puts around one sequence ([CLS] … [SEP], <s> … </s>, none for most diffusion LMs), which are
never masked, never revealed and never scored: the positions an order reveals are the text's tokens only. The mask id
is the tokenizer's mask token, or model_args ``mask_token`` (a token or an id).
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

from ...errors import InputError
from .model import MaskedOrderLM

PROBE = "a"  # a text whose ids show where the tokenizer puts its special tokens
# the configuration fields that name the longest input, by family (first found wins)
POSITION_FIELDS = ("max_position_embeddings", "max_sequence_length", "n_positions")


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after one sequence (found from ``PROBE`` with and without them).

    Examples
    --------
    >>> class Bert:  # [CLS] = 2, [SEP] = 3
    ...     def __call__(self, text, add_special_tokens=True):
    ...         return {"input_ids": [2, 7, 3] if add_special_tokens else [7]}
    >>> special_tokens_around(Bert())
    ([2], [3])
    """
    plain = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    full = tokenizer(PROBE, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    return [], []


def mask_token_id(tokenizer, mask_token: str | int | None) -> int:
    """The mask id: ``mask_token`` (a token of the tokenizer, or an id) where given, else the tokenizer's own."""
    if mask_token is None:
        if tokenizer.mask_token_id is None:
            raise InputError(
                "the tokenizer has no mask token: pass model_args mask_token=<the token or id the model reads at a "
                "masked position>"
            )
        return int(tokenizer.mask_token_id)
    token_id = tokenizer.convert_tokens_to_ids(str(mask_token))
    if token_id is not None and token_id != tokenizer.unk_token_id:
        return int(token_id)
    if str(mask_token).isdigit():
        return int(mask_token)
    raise InputError(f"model_args mask_token={mask_token!r} is neither a token of the tokenizer nor an id")


def max_positions(config) -> int | None:
    """The longest input the network reads: the configuration's ``max_position_embeddings`` (BERT, Dream),
    ``max_sequence_length`` (LLaDA) or ``n_positions``; None where it names none.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> max_positions(SimpleNamespace(max_sequence_length=4096)), max_positions(SimpleNamespace())
    (4096, None)
    """
    for name in POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def load_config(path: str, trust_remote_code: bool):
    """``AutoConfig`` of the checkpoint; an ``InputError`` naming model_args ``trust_remote_code=True`` when the
    checkpoint's configuration is its own code (``auto_map``) and it was not given."""
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except ValueError as err:
        if trust_remote_code or "trust_remote_code" not in str(err):
            raise
        raise InputError(
            f"{path} holds its own modeling code (config.json's auto_map): read it, and if you trust it pass "
            "model_args trust_remote_code=True"
        ) from None


def load_network(path: str, trust_remote_code: bool):
    """``AutoModelForMaskedLM``, or ``AutoModel`` for a masked-diffusion checkpoint that registers no masked-LM head
    (its forward must return logits)."""
    config = load_config(path, trust_remote_code)
    try:
        return AutoModelForMaskedLM.from_pretrained(path, config=config, trust_remote_code=trust_remote_code)
    except ValueError:
        return AutoModel.from_pretrained(path, config=config, trust_remote_code=trust_remote_code)


class HFMaskedLM(MaskedOrderLM):
    """A Hugging Face masked LM or masked-diffusion LM and its tokenizer under the order-latent contract.

    Parameters
    ----------
    network : transformers.PreTrainedModel
        Maps input_ids [B, L] to an output with ``.logits`` [B, L, V] (or to the logits).
    tokenizer : transformers.PreTrainedTokenizerBase
        The checkpoint's tokenizer.
    mask_token : str or int, optional
        The masked position's token or id (default: the tokenizer's mask token).
    policy, policy_temperature, max_exact_tokens, block_tokens
        As in ``MaskedOrderLM``.
    """

    def __init__(self, network, tokenizer, mask_token=None, policy="uniform", policy_temperature=1.0,
                 max_exact_tokens=16, block_tokens=8192):  # fmt: skip
        before, after = special_tokens_around(tokenizer)
        positions = max_positions(network.config)
        max_length = None if positions is None else positions - len(before) - len(after)
        super().__init__(network, mask_token_id(tokenizer, mask_token), None, policy, policy_temperature,
                         max_exact_tokens, max_length, block_tokens)  # fmt: skip
        self.tokenizer = tokenizer
        self.register_buffer("special_before", torch.tensor(before, dtype=torch.long), persistent=False)
        self.register_buffer("special_after", torch.tensor(after, dtype=torch.long), persistent=False)

    @classmethod
    def from_pretrained(cls, path: str, mask_token=None, trust_remote_code: bool = False, **kwargs):
        """Network and tokenizer from a local folder (or a Hub snapshot), ``trust_remote_code`` passed through."""
        network = load_network(path, trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        return cls(network, tokenizer, mask_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        """V, the rows of the output layer (the configuration's ``vocab_size`` where the network names none)."""
        output = self.predictor.get_output_embeddings()
        return int(self.predictor.config.vocab_size if output is None else output.weight.shape[0])

    def network_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V] of the text positions, the special tokens put around them."""
        B = ids.shape[0]
        before, after = self.special_before.expand(B, -1), self.special_after.expand(B, -1)
        out = self.predictor(input_ids=torch.cat([before, ids, after], 1))
        logits = getattr(out, "logits", out)
        return logits[:, before.shape[1] : before.shape[1] + ids.shape[1]]

    def text_ids(self, text: str) -> torch.Tensor:
        """The tokenizer's ids [T] of ``text``, without special tokens."""
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def detokenize(self, ids) -> str:
        """The tokenizer's decoding of the ids."""
        return self.tokenizer.decode([int(i) for i in ids])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, tokenizer={type(self.tokenizer).__name__}"
