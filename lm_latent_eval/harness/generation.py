"""``generate_until``'s sampling: ancestral samples from p(· | context) of a model with ``sample_text``, seeded from
(seed, context) so that order and batching never change a continuation, cut at the first ``until`` string."""

from __future__ import annotations

import torch
from tqdm import tqdm

from ..errors import UserError
from ..estimators.seeding import document_generator
from ..protocol import has_text_sampler

# block index of the random stream used by generate_until (IS uses blocks 0, 1, ...)
GENERATION_STREAM = -1
DEFAULT_MAX_GEN_TOKS = 256


class NoTextSampler(UserError, NotImplementedError):
    """generate_until for a model without ``sample_text``."""


def generate(model, requests, seed: int, device: torch.device, progress: bool = True) -> list[str]:
    """One continuation per lm-eval request, ``args == (context, gen_kwargs)``: ``until`` strings and
    ``max_gen_toks``.

    Raises
    ------
    NoTextSampler
        The model has no ``sample_text``.
    """
    if not has_text_sampler(model):
        raise NoTextSampler(f"{type(model).__name__} has no sample_text(): generate_until is unavailable")
    outputs = []
    for request in tqdm(requests, desc="sampling continuations", disable=not progress):
        context, gen_kwargs = request.args
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_tokens = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        gen = document_generator(seed, context, GENERATION_STREAM, device=device)
        text = model.sample_text(context, max_tokens, generator=gen, stop=until)
        cut = min((text.find(s) for s in until if s and s in text), default=len(text))
        outputs.append(text[:cut])
    return outputs
