"""Hugging Face masked LMs as latent LMs over reveal orders: any ``AutoModelForMaskedLM`` checkpoint (BERT, RoBERTa,
ModernBERT) and masked-diffusion checkpoints whose forward returns logits at every position (LLaDA-, Dream-,
MDLM-style, loaded through ``AutoModel`` with ``trust_remote_code``).

The text's ids are the checkpoint tokenizer's without special tokens; the network reads them between the special
tokens the tokenizer puts around one sequence ([CLS] … [SEP], <s> … </s>, none for most diffusion LMs), which are
never masked, never revealed and never scored: the positions an order reveals are the text's tokens only.

Conventions read from the checkpoint's config (``checkpoint_conventions``), each with a model_arg that overrides it:

- the mask id: model_args ``mask_token`` (a token or an id), else config.json's ``mask_token_id`` (LLaDA, Dream), else
  the tokenizer's mask token; an id beyond the output layer is refused.
- shifted outputs (model_args ``shifted_outputs=auto|true|false``): Dream's network predicts the token at position i
  from its output at position i − 1 (its sampler shifts the logits right by one). ``auto`` reads a network as shifted
  when its config's ``model_type`` is ``Dream`` (case-insensitive) or a class named in its ``architectures`` or
  ``auto_map`` starts with ``Dream``. Position 0 then needs a predecessor: the last special token the tokenizer puts
  before a sequence, else a leading token read before the text (never masked, never scored): the tokenizer's BOS
  token, else the config's ``bos_token_id``.
- the diffusion time: a network whose forward takes ``timesteps`` (MDLM, BD3-LM) gets zeros where its config says
  ``time_conditioning: false`` (its own forward then replaces the value by zeros: the output does not depend on it);
  a time-conditioned network is refused, since a reveal step's noise level is not passed yet.
"""

from __future__ import annotations

import importlib.util
import inspect

import torch
import transformers
from packaging.version import Version
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

from ...errors import InputError, UnsupportedError
from .model import MaskedOrderLM
from .policy import DEFAULT_BLOCK

PROBE = "a"  # a text whose ids show where the tokenizer puts its special tokens
# the configuration fields that name the longest input, by family (first found wins)
POSITION_FIELDS = ("max_position_embeddings", "max_sequence_length", "n_positions", "model_length")
# the transformers version under which the released masked-diffusion checkpoints' own code loads (LLaDA, Dream)
AUTHORS_TRANSFORMERS = "4.46.3"
# the values model_args shifted_outputs accepts (lm-eval parses true / false to bools)
SHIFTED_CHOICES = ("auto", "true", "false")
# the first transformers release whose from_pretrained takes ``dtype`` (earlier ones: ``torch_dtype``)
DTYPE_KEYWORD_SINCE = Version("4.56.0")


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


def config_mask_id(config) -> int | None:
    """config.json's ``mask_token_id`` (LLaDA's and Dream's configs name it), None where absent."""
    value = getattr(config, "mask_token_id", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mask_token_id(tokenizer, mask_token: str | int | None, config=None) -> int:
    """The mask id: ``mask_token`` (a token of the tokenizer, or an id) where given, else the config's
    ``mask_token_id``, else the tokenizer's own mask token.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> tokenizer = SimpleNamespace(mask_token_id=None)
    >>> mask_token_id(tokenizer, None, SimpleNamespace(mask_token_id=126336))
    126336
    """
    if mask_token is None:
        from_config = None if config is None else config_mask_id(config)
        if from_config is not None:
            return from_config
        if tokenizer.mask_token_id is None:
            raise InputError(
                "neither the config (mask_token_id) nor the tokenizer names a mask token: pass model_args "
                "mask_token=<the token or id the model reads at a masked position>"
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


def names_dream(config) -> bool:
    """Whether the config names Dream: ``model_type`` ``Dream`` (case-insensitive), or a class of its
    ``architectures`` or ``auto_map`` whose name starts with ``Dream``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> names_dream(SimpleNamespace(model_type="Dream")), names_dream(SimpleNamespace(model_type="llada"))
    (True, False)
    >>> names_dream(SimpleNamespace(auto_map={"AutoModel": "modeling_dream.DreamModel"}))
    True
    """
    classes = [
        *(getattr(config, "architectures", None) or []),
        *(getattr(config, "auto_map", None) or {}).values(),
    ]
    names = [str(c).split(".")[-1] for c in classes]
    return str(getattr(config, "model_type", "")).lower() == "dream" or any(
        n.startswith("Dream") for n in names
    )


def shifted_outputs_of(config, shifted_outputs: str | bool = "auto") -> bool:
    """Whether output i predicts position i + 1 (Dream): model_args ``shifted_outputs`` (true / false), or for
    ``auto`` ``names_dream(config)``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> shifted_outputs_of(SimpleNamespace(model_type="Dream")), shifted_outputs_of(SimpleNamespace(), "true")
    (True, True)
    """
    choice = str(shifted_outputs).strip().lower()
    if choice not in SHIFTED_CHOICES:
        raise InputError(
            f"model_args shifted_outputs must be one of {', '.join(SHIFTED_CHOICES)}, got {shifted_outputs!r}"
        )
    return names_dream(config) if choice == "auto" else choice == "true"


def leading_token(tokenizer, config) -> int:
    """The token read before the text where a shifted network's position 0 needs a predecessor: the tokenizer's BOS
    token, else the config's ``bos_token_id``; an InputError where neither names one."""
    for value in (getattr(tokenizer, "bos_token_id", None), getattr(config, "bos_token_id", None)):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise InputError(
        "the network's outputs are shifted (output i predicts position i + 1), so position 0 needs a token before "
        "it, but neither the tokenizer nor the config names a BOS token (bos_token_id); pass model_args "
        "shifted_outputs=false if the network is not shifted"
    )


def time_argument(network) -> str | None:
    """``timesteps`` where the network's forward takes the diffusion time (MDLM, BD3-LM), else None; an
    UnsupportedError for a network that conditions on it (config ``time_conditioning`` not false)."""
    try:
        parameters = inspect.signature(network.forward).parameters
    except (TypeError, ValueError):
        return None
    if "timesteps" not in parameters:
        return None
    if getattr(network.config, "time_conditioning", None) is False:
        return "timesteps"
    raise UnsupportedError(
        f"{type(network).__name__}'s forward takes the diffusion time (timesteps) and its config does not say "
        "time_conditioning: false: the noise level of a reveal step is not passed yet, so the package would read "
        "another model than its sampler's"
    )


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


def loading_options(dtype: torch.dtype | None = None, device=None, version: str | None = None,
                    accelerate: bool | None = None) -> dict:  # fmt: skip
    """The keyword arguments of ``from_pretrained`` that load the weights in ``dtype`` on ``device``, so that no
    float32 copy of an 8B checkpoint (32 GB) is made on the host before a cast and a move.

    - ``dtype`` under the name the installed transformers takes: ``dtype`` from 4.56 on (5.x reads ``torch_dtype``
      as a deprecated alias), ``torch_dtype`` before;
    - with accelerate installed, ``device_map={"": device}``: each tensor is read from the checkpoint straight onto
      the device; transformers 4.x also gets ``low_cpu_mem_usage=True`` (the model is built on the meta device, not
      allocated and then overwritten; 5.x always loads so and ignores the flag). Without accelerate neither is
      passed (4.x refuses both) and the caller moves the loaded network.

    Parameters
    ----------
    dtype : torch.dtype or None
        The parameters' dtype (None: transformers' default).
    device : str or torch.device or None
        Where the parameters go (None: where transformers puts them).
    version, accelerate
        The transformers version and whether accelerate is importable (default: the installed ones).

    Examples
    --------
    >>> loading_options(torch.bfloat16, "cpu", version="5.2.0", accelerate=True)
    {'dtype': torch.bfloat16, 'device_map': {'': 'cpu'}}
    >>> loading_options(torch.bfloat16, "cuda:0", version="4.46.3", accelerate=True)
    {'torch_dtype': torch.bfloat16, 'device_map': {'': 'cuda:0'}, 'low_cpu_mem_usage': True}
    >>> loading_options(torch.bfloat16, "cuda:0", version="4.46.3", accelerate=False)
    {'torch_dtype': torch.bfloat16}
    """
    installed = Version(transformers.__version__ if version is None else version)
    if accelerate is None:
        accelerate = importlib.util.find_spec("accelerate") is not None
    options = {}
    if dtype is not None:
        options["dtype" if installed >= DTYPE_KEYWORD_SINCE else "torch_dtype"] = dtype
    if device is not None and accelerate:
        options["device_map"] = {"": str(torch.device(device))}
        if installed.major < 5:
            options["low_cpu_mem_usage"] = True
    return options


def load_network(path: str, trust_remote_code: bool, dtype: torch.dtype | None = None, device=None):
    """``AutoModelForMaskedLM``, or ``AutoModel`` for a masked-diffusion checkpoint that registers no masked-LM head
    (its forward must return logits), read in ``dtype`` onto ``device`` (``loading_options``; moved there after
    loading where accelerate is absent)."""
    config = load_config(path, trust_remote_code)
    options = loading_options(dtype, device) | {"config": config, "trust_remote_code": trust_remote_code}
    network = None
    try:
        network = AutoModelForMaskedLM.from_pretrained(path, **options)
    except ValueError as err:
        # no masked-LM head registered for this config (the masked-diffusion checkpoints): the plain model, unless
        # the checkpoint's own code raised it
        raise_if_own_code(err, path)
    if network is None:
        try:
            network = AutoModel.from_pretrained(path, **options)
        except Exception as err:
            raise_if_own_code(err, path)
            raise
    return network if device is None or "device_map" in options else network.to(device)


def raise_if_own_code(err: BaseException, path: str) -> None:
    """An InputError naming the cause and the transformers version that works where ``err`` was raised inside the
    checkpoint's own modeling code (a ``transformers_modules`` frame: Dream's code under transformers 5) or by
    transformers on the network object that code built (a frame whose ``self`` is an instance of a
    ``transformers_modules`` class: LLaDA's and BD3-LM's classes lack ``all_tied_weights_keys`` under transformers
    5); nothing otherwise (the error keeps its traceback: it may be a bug)."""
    frame, inside = err.__traceback__, None
    while frame is not None:
        code = frame.tb_frame.f_code
        owner = type(frame.tb_frame.f_locals.get("self"))
        if "transformers_modules" in code.co_filename:
            inside = f"{code.co_filename.rsplit('/', 1)[-1]}, line {frame.tb_lineno}"
        elif inside is None and owner.__module__.startswith("transformers_modules"):
            inside = f"{code.co_filename.rsplit('/', 1)[-1]}, line {frame.tb_lineno}, on its {owner.__name__}"
        frame = frame.tb_next
    if inside is None:
        return
    message = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    raise InputError(
        f"{path}: its own modeling code failed while loading under transformers {transformers.__version__} "
        f"({inside}: {message}); the released LLaDA, Dream and BD3-LM code loads under "
        f"transformers=={AUTHORS_TRANSFORMERS} (pip install transformers=={AUTHORS_TRANSFORMERS} in a separate "
        "environment)"
    ) from None


class HFMaskedLM(MaskedOrderLM):
    """A Hugging Face masked LM or masked-diffusion LM and its tokenizer under the order-latent contract.

    Parameters
    ----------
    network : transformers.PreTrainedModel
        Maps input_ids [B, L] to an output with ``.logits`` [B, L, V] (or to the logits).
    tokenizer : transformers.PreTrainedTokenizerBase
        The checkpoint's tokenizer.
    mask_token : str or int, optional
        The masked position's token or id (default: the config's ``mask_token_id``, else the tokenizer's mask token).
    policy, policy_temperature, max_exact_tokens, block_tokens, policy_block
        As in ``MaskedOrderLM``.
    shifted_outputs : str or bool
        ``auto`` (default: Dream's configs, ``names_dream``), ``true`` (output i predicts position i + 1, a leading
        token before the text where the tokenizer puts none) or ``false``.
    """

    def __init__(self, network, tokenizer, mask_token=None, policy="uniform", policy_temperature=1.0,
                 max_exact_tokens=16, block_tokens=8192, shifted_outputs="auto", policy_block=DEFAULT_BLOCK):  # fmt: skip
        before, after = special_tokens_around(tokenizer)
        self_shifted = shifted_outputs_of(network.config, shifted_outputs)
        if self_shifted and not before:
            before = [leading_token(tokenizer, network.config)]
        positions = max_positions(network.config)
        max_length = None if positions is None else positions - len(before) - len(after)
        mask_id = mask_token_id(tokenizer, mask_token, network.config)
        super().__init__(network, mask_id, None, policy, policy_temperature, max_exact_tokens, max_length,
                         block_tokens, policy_block)  # fmt: skip
        self.tokenizer = tokenizer
        self.shifted = self_shifted
        self.time_argument = time_argument(network)
        self.register_buffer("special_before", torch.tensor(before, dtype=torch.long), persistent=False)
        self.register_buffer("special_after", torch.tensor(after, dtype=torch.long), persistent=False)
        if not 0 <= mask_id < self.vocab_size:
            raise InputError(
                f"mask id {mask_id} ({'model_args mask_token' if mask_token is not None else 'the checkpoint'}) is "
                f"outside the network's output layer of {self.vocab_size} rows (ids 0..{self.vocab_size - 1})"
            )

    @classmethod
    def from_pretrained(cls, path: str, mask_token=None, trust_remote_code: bool = False, *, dtype=None,
                        device=None, **kwargs):  # fmt: skip
        """Network and tokenizer from a local folder (or a Hub snapshot), ``trust_remote_code`` passed through; the
        network read in ``dtype`` onto ``device`` (``load_network``)."""
        network = load_network(path, trust_remote_code, dtype, device)
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
        extra = {}
        if self.time_argument is not None:
            # zeros: the network's config says time_conditioning false, and its forward zeroes the value itself
            extra[self.time_argument] = torch.zeros(B, device=ids.device)
        out = self.predictor(input_ids=torch.cat([before, ids, after], 1), **extra)
        logits = getattr(out, "logits", out)
        # a shifted network (Dream) predicts position i from its output at i − 1
        start = before.shape[1] - (1 if self.shifted else 0)
        return logits[:, start : start + ids.shape[1]]

    def text_ids(self, text: str) -> torch.Tensor:
        """The tokenizer's ids [T] of ``text``, without special tokens."""
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def detokenize(self, ids) -> str:
        """The tokenizer's decoding of the ids."""
        return self.tokenizer.decode([int(i) for i in ids])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shifted={self.shifted}, tokenizer={type(self.tokenizer).__name__}"
