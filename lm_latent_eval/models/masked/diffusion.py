"""The bundled masked-diffusion LM: ``MaskPredictor`` over a word vocabulary (config.json + model.safetensors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin

from ...errors import InputError
from ..checkpoints import StrictLoading
from ..hmm.tokenizer import UNK
from .model import MaskedOrderLM
from .network import MaskPredictor
from .policy import DEFAULT_BLOCK
from .value import ValueHead

MASK = "<mask>"


class MaskedDiffusionLM(
    MaskedOrderLM,
    StrictLoading,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-variable-lm", "masked-diffusion"],
):
    """A word-level masked-diffusion LM (MDLM-style objective, ``train.py``) under the order-latent contract.

    Parameters
    ----------
    vocab : list of str
        The words, ``<unk>`` and ``<mask>`` among them (the mask id is the position of ``<mask>``).
    d_model, num_layers, num_heads, max_length, dropout
        The ``MaskPredictor``'s shape.
    policy, policy_temperature, max_exact_tokens, policy_block
        As in ``MaskedOrderLM`` (options of ``from_pretrained``: lm-eval's model_args set them).
    value_width : int
        Hidden units of SMC's value head (``value.ValueHead``, fitted by ``value.fit_value_head``); 0: none, the
        mean-field look-ahead.
    """

    # pretrained= may also be a transformers masked LM (hf.HFMaskedLM; models.checkpoints.fits)
    reads_transformers_checkpoints = True

    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "policy": (
            str,
            (
                "order policy π(i | S): uniform (default; p(σ) = 1/T!), confidence, or DUEL's deterministic "
                "greedy_confidence, margin, left_to_right, block_greedy_confidence, block_margin, block_left_to_right "
                "(p(x) = the likelihood of that sampler along its one order)"
            ),
        ),
        "policy_temperature": (float, "temperature of the confidence policy (0: deterministic; default 1)"),
        "policy_block": (int, "B of the block_ policies (default 32)"),
        "max_exact_tokens": (
            int,
            "refuse the exact marginal beyond this many tokens (2^T network rows; default 16)",
        ),
        "mask_token": (
            str,
            (
                "(Hugging Face checkpoints) the token or id read at a masked position (default: the config's "
                "mask_token_id, else the tokenizer's mask)"
            ),
        ),
        "shifted_outputs": (
            str,
            (
                "(Hugging Face checkpoints) auto (default: true for Dream's configs), true (output i predicts position "
                "i + 1, as Dream's sampler reads it) or false"
            ),
        ),
        "trust_remote_code": (bool, "(Hugging Face checkpoints) passed to transformers' Auto classes"),
        "value_head": (
            str,
            (
                "a value head file from `lm-latent-eval fit-value-head`: SMC's look-ahead where it resamples "
                "(resample_threshold > 0) and the peeking proposal's guess of what is left (peek=true; default: the "
                "checkpoint's head, else the mean field)"
            ),
        ),
    }

    def __init__(
        self,
        vocab: list[str],
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        max_length: int = 64,
        dropout: float = 0.0,
        policy: str = "uniform",
        policy_temperature: float = 1.0,
        max_exact_tokens: int = 16,
        policy_block: int = DEFAULT_BLOCK,
        value_width: int = 0,
    ):
        if MASK not in vocab or UNK not in vocab:
            raise ValueError(f"vocab must contain {UNK!r} and {MASK!r}")
        predictor = MaskPredictor(len(vocab), d_model, num_layers, num_heads, max_length, dropout)
        super().__init__(
            predictor, vocab.index(MASK), vocab, policy, policy_temperature, max_exact_tokens, max_length,
            policy_block=policy_block,
        )  # fmt: skip
        if value_width:
            self.value_head = ValueHead(value_width)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *,
        mask_token=None,
        trust_remote_code=False,
        shifted_outputs=None,
        dtype=None,
        device=None,
        value_head=None,
        **kwargs,
    ):
        """Our checkpoint (config.json + model.safetensors), or a Hugging Face masked LM or masked-diffusion
        checkpoint (``hf.HFMaskedLM``: ``mask_token``, ``trust_remote_code`` and ``shifted_outputs`` apply to it
        only; its network is read in ``dtype`` onto ``device`` by transformers, ``hf.loading_options``). Ours is
        small: it is loaded on the host and ``load_model`` casts and moves it. ``value_head``: a file of
        ``ValueHead.save`` that replaces the checkpoint's head."""
        model = cls._load(pretrained_model_name_or_path, mask_token, trust_remote_code, shifted_outputs, dtype,
                          device, **kwargs)  # fmt: skip
        if value_head is not None:
            model.value_head = ValueHead.load(value_head).to(device or "cpu")
        return model

    @classmethod
    def _load(cls, pretrained_model_name_or_path, mask_token, trust_remote_code, shifted_outputs, dtype, device,
              **kwargs):  # fmt: skip
        """``from_pretrained`` without its ``value_head``."""
        if is_transformers_checkpoint(pretrained_model_name_or_path):
            from .hf import HFMaskedLM

            shifted = {} if shifted_outputs is None else {"shifted_outputs": shifted_outputs}
            return HFMaskedLM.from_pretrained(
                str(pretrained_model_name_or_path), mask_token, trust_remote_code, dtype=dtype, device=device,
                **shifted, **kwargs,
            )  # fmt: skip
        if mask_token is not None or trust_remote_code or shifted_outputs is not None:
            raise InputError(
                "mask_token, trust_remote_code and shifted_outputs apply to Hugging Face checkpoints only, not to "
                f"{pretrained_model_name_or_path} (a lm-latent-eval masked-diffusion checkpoint)"
            )
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)


def is_transformers_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a transformers checkpoint folder (its config.json names a ``model_type``), not ours."""
    config = Path(path) / "config.json"
    return config.is_file() and "model_type" in json.loads(config.read_text(encoding="utf-8"))


def tiny_masked_lm(
    seed: int = 0,
    policy: str = "uniform",
    policy_temperature: float = 1.0,
    dtype=torch.float64,
    output_std: float = 0.25,
) -> MaskedDiffusionLM:
    """A random-weight ``MaskedDiffusionLM`` over the words a, b, c, d (ids 2..5; 0 ``<unk>``, 1 ``<mask>``) for
    tests and examples: d_model 16, one layer, texts of at most 8 tokens, output weights N(0, ``output_std``²):
    conditionals far enough from uniform that orders differ, near enough that importance weights stay light-tailed;
    float64 by default (exact sums agree to 1e-12), in eval mode.

    Examples
    --------
    >>> model = tiny_masked_lm(seed=0)
    >>> model.tokenize("a b zebra").tolist()
    [2, 3, 0]
    """
    vocab = [UNK, MASK, "a", "b", "c", "d"]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = MaskedDiffusionLM(vocab, d_model=16, num_layers=1, num_heads=2, max_length=8,
                                  policy=policy, policy_temperature=policy_temperature)  # fmt: skip
        torch.nn.init.normal_(model.predictor.output.weight, std=output_std)
    return model.to(dtype).eval()
