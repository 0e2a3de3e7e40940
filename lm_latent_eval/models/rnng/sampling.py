"""Ancestral sampling of text from an RNNG (``generate_until``): the prefix's tree from a word-synchronous particle
filter, then actions and words from p until ``</s>``, the word budget or a stop string.

The prefix w_1..w_n fixes no tree: p(z | the sentence starts with w_1..w_n) is what the particle filter of
``stepwise.py`` targets after n steps (no closing REDUCEs, no ``</s>``). ``PREFIX_PARTICLES`` particles with the
no-peeking proposal, multinomial resampling whenever the ESS falls below half of them, and one particle drawn in
proportion to its weight at the end (sampling importance resampling: exact as the particle count grows). From its
stack the generative story runs on: an action from p(a | h) (SHIFT is certain below two elements); at SHIFT a word
from p(w | h), where ``</s>`` (possible on one finished constituent) ends the sentence and the sample. Every draw
comes from ``generator``.
"""

from __future__ import annotations

import math

import torch

from . import stepwise
from .latents import REDUCE

PREFIX_PARTICLES = 32


def _prefix_stack(model, words: torch.Tensor, generator) -> tuple[list, list]:
    """One stack after the prefix words [n], drawn from p(z | prefix) by the particle filter: (elements [(h, c)],
    stack LSTM states [(h, c)], each [1, ...]; states[j] after <s> and j elements)."""
    K = PREFIX_PARTICLES
    # a counted end: the steps stop before closing
    x = torch.cat([words, words.new_tensor([model.eos_id])])
    state = stepwise.init_particles(model, x, K, 1.0, peek=False)
    log_w = torch.zeros(K, dtype=torch.float64, device=words.device)
    for t in range(words.numel()):
        log_ess = float(torch.logsumexp(log_w, 0) * 2 - torch.logsumexp(2 * log_w, 0))
        if log_ess < math.log(K / 2):
            ancestors = torch.multinomial(torch.softmax(log_w, 0), K, replacement=True, generator=generator)
            state, log_w = stepwise.reorder_particles(state, ancestors), torch.zeros_like(log_w)
        state, increment = stepwise.step_particles(model, state, t, generator)
        log_w = log_w + increment
    k = int(torch.multinomial(torch.softmax(log_w, 0), 1, generator=generator))
    st, size = state.stacks, int(state.stacks.size[k])
    elements = [(st.elem_h[k, j : j + 1], st.elem_c[k, j : j + 1]) for j in range(size)]
    return elements, [(st.state_h[k, j : j + 1], st.state_c[k, j : j + 1]) for j in range(size + 1)]


def _initial_state(model, device) -> tuple:
    zeros = torch.zeros(1, model.num_layers, model.hidden_size, device=device)
    return model.stack_lstm(model.embedding.weight[model.bos_id].unsqueeze(0), zeros, zeros)


def _draw(logits: torch.Tensor, generator) -> int:
    return int(torch.multinomial(torch.softmax(logits.double(), -1), 1, generator=generator))


@torch.no_grad()
def sample_text(
    model, prefix_text: str, max_tokens: int, generator=None, stop: list[str] | None = None
) -> str:
    """A continuation of ``prefix_text`` drawn from p (led by a space when the prefix has words), at most
    ``max_tokens`` words, cut before the first ``stop`` string."""
    words = model.token_ids(model.vocabulary.split(prefix_text), eos=False)
    if words.numel():
        elements, states = _prefix_stack(model, words, generator)
    else:
        elements, states = [], [_initial_state(model, words.device)]
    stops = [s for s in (stop or []) if s]
    out: list[str] = []
    text = ""
    while len(out) < max(0, int(max_tokens)):
        # [1, H]: the stack LSTM's top layer
        h = states[-1][0][:, -1]
        if len(elements) >= 2 and _draw(model.action_head(h)[0], generator) == REDUCE:
            (left_h, left_c), (right_h, right_c) = elements[-2:]
            composed = model.compose(left_h, left_c, right_h, right_c)
            del elements[-2:], states[-2:]
        else:
            logits = model.word_head(h)[0].float()
            logits[model.bos_id] = float("-inf")
            if not (len(elements) == 1 and words.numel() + len(out) >= 1):
                logits[model.eos_id] = float("-inf")
            word = _draw(logits, generator)
            if word == model.eos_id:
                break
            out.append(model.vocab[word])
            emb = model.embedding.weight[word].unsqueeze(0)
            composed = (emb, torch.zeros_like(emb))
            text = (" " if words.numel() else "") + " ".join(out)
            if any(s in text for s in stops):
                break
        elements.append(composed)
        states.append(model.stack_lstm(composed[0], *states[-1]))
    return text[: min((text.find(s) for s in stops if s in text), default=len(text))]
