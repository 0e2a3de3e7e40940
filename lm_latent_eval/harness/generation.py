"""``generate_until``: continuations from a model with ``sample_text``, seeded from (seed, context) so that order and
batching never change one, cut at the first ``until`` string, under the request's generation settings.

* ``do_sample: true`` (or no ``do_sample`` and no ``temperature``) at temperature 1: one ancestral sample from
  p(· | context).
* ``do_sample: false``, or ``temperature: 0`` without ``do_sample`` (as lm-eval's ``hf`` reads it; lm-eval's default
  and gsm8k's): greedy decoding, approximated by the most probable of ``GREEDY_CANDIDATES`` seeded ancestral samples,
  each scored by the run's estimator as log p̂(continuation | context), as ``loglikelihood`` scores it (ties go to the
  first sample). A latent LM has no tractable argmax over continuations.
* another temperature τ > 0 under sampling: approximately a draw from p(c | context)^{1/τ} (the whole
  continuation's probability tempered, not each token's logits as ``hf`` tempers them: ``sample_text`` samples at
  temperature 1 only), by sampling-importance-resampling: one of the same ``GREEDY_CANDIDATES`` seeded samples, drawn
  with probability ∝ p̂(c | context)^{1/τ − 1} (``tempered_pick``). τ → 0 gives the greedy pick, τ = 1 the first
  sample; between, the draw follows the tempered distribution as the number of candidates grows.
* any other setting that would change the decoding (``top_p``, ``top_k``, ``num_beams``, ...) is refused with one
  line, never ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tqdm import tqdm

from ..errors import UnsupportedError, UserError
from ..estimators.seeding import document_generator
from ..protocol import has

# block index of the random stream used by generate_until (IS uses blocks 0, 1, ...); candidate i uses
# GENERATION_STREAM - i (candidate 0 is the sample of do_sample: true), the tempered resampling draw
# GENERATION_STREAM - GREEDY_CANDIDATES
GENERATION_STREAM = -1
DEFAULT_MAX_GEN_TOKS = 256
# samples among which greedy decoding picks the most probable (and tempered sampling resamples one)
GREEDY_CANDIDATES = 8
# gen_kwargs read here; the values of others that change nothing
READ = ("until", "max_gen_toks", "do_sample", "temperature")
NO_EFFECT = {"top_p": (1, 1.0), "top_k": (0,), "num_beams": (1,), "num_return_sequences": (1,)}


class NoTextSampler(UserError, NotImplementedError):
    """generate_until for a model without ``sample_text``."""


class UnsupportedGenerationSetting(UnsupportedError):
    """A task's generation setting that the model's ``sample_text`` cannot honour."""


def decoding_temperature(gen_kwargs: dict, model) -> float:
    """The temperature a request decodes at: 0.0 for greedy decoding (``do_sample: false``, or ``temperature: 0``
    without ``do_sample``), else the task's temperature (1.0 when unset); ``UnsupportedGenerationSetting`` (one line)
    for a setting that ``sample_text`` cannot honour.

    Examples
    --------
    >>> decoding_temperature({"until": ["."], "do_sample": False, "temperature": 0.7}, None)
    0.0
    >>> decoding_temperature({"temperature": 0}, None), decoding_temperature({"until": ["."]}, None)
    (0.0, 1.0)
    >>> decoding_temperature({"do_sample": True, "temperature": 0.7, "top_p": 1.0}, None)
    0.7
    """
    owner = type(model).__name__
    for key, value in gen_kwargs.items():
        if key not in READ and value is not None and value not in NO_EFFECT.get(key, ()):
            no_effect = NO_EFFECT.get(key)
            accepted = f"; {key}={no_effect[0]} is accepted, as it changes nothing" if no_effect else ""
            raise UnsupportedGenerationSetting(
                f"generate_until: {key}={value!r} is not supported ({owner}.sample_text draws whole ancestral "
                f"samples; lm-latent-eval's backends read {', '.join(READ)} from lm_eval --gen_kwargs or the task's "
                f"generation_kwargs, e.g. --gen_kwargs do_sample=true,temperature=0.7): remove {key} from "
                f"--gen_kwargs, or from the task's generation_kwargs if the task sets it{accepted}"
            )
    do_sample, temperature = gen_kwargs.get("do_sample"), gen_kwargs.get("temperature")
    tau = None if temperature is None else float(temperature)
    if do_sample is None:
        do_sample = tau is None or tau != 0.0
    if not do_sample:
        return 0.0
    if tau is not None and not (tau > 0.0 and math.isfinite(tau)):
        raise UnsupportedGenerationSetting(
            f"generate_until: temperature={temperature} with do_sample: true is not a sampling temperature; use a "
            "temperature above 0, or do_sample: false for greedy decoding"
        )
    return 1.0 if tau is None else tau


def is_greedy(gen_kwargs: dict, model) -> bool:
    """Whether a request asks for greedy decoding (``decoding_temperature`` 0).

    Examples
    --------
    >>> is_greedy({"until": ["."], "do_sample": False, "temperature": 0.0}, None), is_greedy({"until": ["."]}, None)
    (True, False)
    >>> is_greedy({"temperature": 0}, None), is_greedy({"do_sample": True, "temperature": 1.0, "top_p": 1.0}, None)
    (True, False)
    """
    return decoding_temperature(gen_kwargs, model) == 0.0


def tempered_pick(scores: list[float], temperature: float, generator: torch.Generator) -> int:
    """Index of the candidate continuation drawn with probability ∝ exp((1/τ − 1) · score), ``score`` = log p̂(c |
    context) of a candidate sampled from p(c | context) (up to a constant shared by the candidates): the
    sampling-importance-resampling step that turns samples from p into an approximate draw from p^{1/τ}. τ = 0: the
    first of the highest scores (greedy).

    Examples
    --------
    >>> tempered_pick([-3.0, -1.0, -2.0], 0.0, torch.Generator().manual_seed(0))
    1
    >>> tempered_pick([-3.0, -1.0, -2.0], 1e-3, torch.Generator().manual_seed(0))
    1
    """
    if temperature == 0.0:
        return max(range(len(scores)), key=lambda i: (scores[i], -i))
    logits = torch.tensor(scores, dtype=torch.float64) * (1.0 / temperature - 1.0)
    return int(torch.multinomial(torch.softmax(logits, 0), 1, generator=generator))


def generate(
    model,
    requests,
    seed: int,
    device: torch.device,
    progress: bool = True,
    score: Callable[[list[tuple[str, str]]], dict[tuple[str, str], float]] | None = None,
) -> list[str]:
    """One continuation per lm-eval request, ``args == (context, gen_kwargs)``: ``until`` strings, ``max_gen_toks``,
    ``do_sample`` and ``temperature`` (``decoding_temperature``); ``score``: log p̂(continuation | context) of each
    (context, continuation) pair (up to a constant per context), for greedy decoding and temperatures other than 1.

    Raises
    ------
    NoTextSampler
        The model has no ``sample_text``.
    UnsupportedGenerationSetting
        A generation setting the model cannot honour (before any sampling).
    """
    if not has(model, "text_sampler"):
        raise NoTextSampler(f"{type(model).__name__} has no sample_text(): generate_until is unavailable")
    temperatures = [decoding_temperature(request.args[1], model) for request in requests]
    ranked = [tau != 1.0 for tau in temperatures]
    if any(ranked) and score is None:
        raise ValueError("greedy decoding and temperatures other than 1 need a score function")
    candidates = []
    for request, rank in tqdm(
        list(zip(requests, ranked)), desc="sampling continuations", disable=not progress
    ):
        context, gen_kwargs = request.args
        count = GREEDY_CANDIDATES if rank else 1
        candidates.append(
            [sample(model, context, gen_kwargs, seed, device, GENERATION_STREAM - i) for i in range(count)]
        )
    # every ranked request's candidates scored in one batch
    pairs = sorted(
        {(request.args[0], c) for request, cs, r in zip(requests, candidates, ranked) if r for c in cs}
    )
    scores = score(pairs) if pairs else {}
    texts = []
    for request, cs, tau in zip(requests, candidates, temperatures):
        context = request.args[0]
        if len(cs) == 1:
            texts.append(cs[0])
            continue
        # the resampling draw: its own stream of (seed, context), after the candidates'
        gen = document_generator(seed, context, GENERATION_STREAM - GREEDY_CANDIDATES)
        texts.append(cs[tempered_pick([scores[context, c] for c in cs], tau, gen)])
    return texts


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
