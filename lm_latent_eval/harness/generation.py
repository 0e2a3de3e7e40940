"""``generate_until``: continuations from a model with ``sample_text``, seeded from (seed, context) so that order and
batching never change one, cut at the first ``until`` string, under the request's generation settings.

* ``do_sample: true`` (or no ``do_sample`` and no ``temperature``): one ancestral sample from p(· | context).
* ``do_sample: false``, or ``temperature: 0`` without ``do_sample`` (as lm-eval's ``hf`` reads it; lm-eval's default
  and gsm8k's): greedy decoding, approximated by the most probable of ``GREEDY_CANDIDATES`` seeded ancestral samples,
  each scored by the run's estimator as log p̂(continuation | context), as ``loglikelihood`` scores it (ties go to the
  first sample). A latent LM has no tractable argmax over continuations.
* ``sample_text`` samples at temperature 1 only: another temperature under sampling, and any other setting that
  would change the decoding (``top_p``, ``top_k``, ``num_beams``, ...), is refused with one line, never ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tqdm import tqdm

from ..errors import UnsupportedError, UserError
from ..estimators.seeding import document_generator
from ..protocol import has_text_sampler

# block index of the random stream used by generate_until (IS uses blocks 0, 1, ...); greedy candidate i uses
# GENERATION_STREAM - i (candidate 0 is the sample of do_sample: true)
GENERATION_STREAM = -1
DEFAULT_MAX_GEN_TOKS = 256
# samples among which greedy decoding picks the most probable
GREEDY_CANDIDATES = 8
# gen_kwargs read here; the values of others that change nothing
READ = ("until", "max_gen_toks", "do_sample", "temperature")
NO_EFFECT = {"top_p": (1, 1.0), "top_k": (0,), "num_beams": (1,), "num_return_sequences": (1,)}


class NoTextSampler(UserError, NotImplementedError):
    """generate_until for a model without ``sample_text``."""


class UnsupportedGenerationSetting(UnsupportedError):
    """A task's generation setting that the model's ``sample_text`` cannot honour."""


def is_greedy(gen_kwargs: dict, model) -> bool:
    """Whether a request asks for greedy decoding; ``UnsupportedGenerationSetting`` (one line) for a setting that
    ``sample_text`` cannot honour.

    Examples
    --------
    >>> is_greedy({"until": ["."], "do_sample": False, "temperature": 0.0}, None), is_greedy({"until": ["."]}, None)
    (True, False)
    >>> is_greedy({"temperature": 0}, None), is_greedy({"do_sample": True, "temperature": 1.0, "top_p": 1.0}, None)
    (True, False)
    """
    owner = type(model).__name__
    for key, value in gen_kwargs.items():
        if key not in READ and value is not None and value not in NO_EFFECT.get(key, ()):
            raise UnsupportedGenerationSetting(
                f"generate_until: {key}={value!r} is not supported ({owner}.sample_text draws ancestral samples at "
                f"temperature 1; lm-latent-eval reads {', '.join(READ)}); drop it from the task's generation_kwargs"
            )
    do_sample, temperature = gen_kwargs.get("do_sample"), gen_kwargs.get("temperature")
    if do_sample is None:
        do_sample = temperature is None or float(temperature) != 0.0
    if do_sample and temperature is not None and not math.isclose(float(temperature), 1.0):
        raise UnsupportedGenerationSetting(
            f"generate_until: temperature={temperature} is not supported ({owner}.sample_text samples at temperature "
            "1); use temperature 1.0, or do_sample: false for greedy decoding"
        )
    return not do_sample


def generate(
    model,
    requests,
    seed: int,
    device: torch.device,
    progress: bool = True,
    score: Callable[[list[tuple[str, str]]], dict[tuple[str, str], float]] | None = None,
) -> list[str]:
    """One continuation per lm-eval request, ``args == (context, gen_kwargs)``: ``until`` strings, ``max_gen_toks``,
    ``do_sample`` and ``temperature`` (``is_greedy``); ``score``: log p̂(continuation | context) of each
    (context, continuation) pair, for greedy decoding.

    Raises
    ------
    NoTextSampler
        The model has no ``sample_text``.
    UnsupportedGenerationSetting
        A generation setting the model cannot honour (before any sampling).
    """
    if not has_text_sampler(model):
        raise NoTextSampler(f"{type(model).__name__} has no sample_text(): generate_until is unavailable")
    greedy = [is_greedy(request.args[1], model) for request in requests]
    if any(greedy) and score is None:
        raise ValueError("greedy decoding needs a score function")
    candidates = []
    for request, wants_greedy in tqdm(
        list(zip(requests, greedy)), desc="sampling continuations", disable=not progress
    ):
        context, gen_kwargs = request.args
        count = GREEDY_CANDIDATES if wants_greedy else 1
        candidates.append(
            [sample(model, context, gen_kwargs, seed, device, GENERATION_STREAM - i) for i in range(count)]
        )
    # every greedy request's candidates scored in one batch
    pairs = sorted(
        {(request.args[0], c) for request, cs, g in zip(requests, candidates, greedy) if g for c in cs}
    )
    scores = score(pairs) if pairs else {}
    return [
        max(cs, key=lambda c, ctx=request.args[0]: scores[ctx, c]) if g else cs[0]
        for request, cs, g in zip(requests, candidates, greedy)
    ]


def sample(model, context: str, gen_kwargs: dict, seed: int, device: torch.device, stream: int) -> str:
    """One ancestral continuation of ``context`` from random stream ``stream`` of (seed, context), cut at the first
    ``until`` string."""
    until = gen_kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    max_tokens = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
    gen = document_generator(seed, context, stream, device=device)
    text = model.sample_text(context, max_tokens, generator=gen, stop=until)
    cut = min((text.find(s) for s in until if s and s in text), default=len(text))
    return text[:cut]
