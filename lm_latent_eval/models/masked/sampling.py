"""``generate_until`` for a masked LM: its own sampler, which reveals one masked position per step under the order
policy and writes the token there from the network's conditional.

After the prefix's ids (revealed throughout), L positions start masked; each step draws a position
i ~ π(· | S) (``policy.py``) and a token v ~ p_θ(· | S) at i, both from the same network call, with the mask id left
out of every token distribution: the sampler whose probability of writing x is p(x) = Σ_σ p(x, σ).
"""

from __future__ import annotations

import math

import torch

from .conditionals import tie_tolerance
from .policy import order_log_probs, position_scores


def continuation_length(model, context_length: int, max_tokens: int) -> int:
    """L = ``max_tokens``, at most what the network reads after a context of ``context_length`` ids (≥ 0).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> continuation_length(SimpleNamespace(max_length=8), 5, 10), continuation_length(SimpleNamespace(max_length=None), 5, 10)
    (3, 10)
    """
    room = max_tokens if model.max_length is None else min(max_tokens, model.max_length - context_length)
    return max(0, int(room))


@torch.no_grad()
def sample_continuation(model, prefix_text: str, max_tokens: int, generator=None) -> str:
    """One draw of L = ``continuation_length`` tokens after ``prefix_text`` from the model's sampler, as text to
    append to the prefix (the decoded prefix ⊕ continuation past the decoded prefix).

    Parameters
    ----------
    model : MaskedOrderLM
        The masked LM (its network, mask id, order policy and tokenizer).
    prefix_text : str
        The context, revealed throughout.
    max_tokens : int
        L, cut to what the network reads.
    generator : torch.Generator, optional
        The random stream, on the model's device.

    Returns
    -------
    str
        The continuation ("" for L = 0).
    """
    context = model.text_ids(prefix_text).to(model.device)
    C, L = context.numel(), continuation_length(model, context.numel(), max_tokens)
    if L == 0:
        return ""
    ids = torch.cat([context, torch.full((L,), model.mask_id, device=model.device)])[None]
    revealed = torch.zeros(1, L, dtype=torch.bool, device=model.device)
    mask_index = torch.tensor([model.mask_id], device=model.device)
    for _ in range(L):
        logits = model.network_logits(ids)[:, C:]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)).index_fill(
            -1, mask_index, -math.inf
        )
        log_p = torch.log_softmax(logits.double(), -1)
        score = position_scores(model.policy, log_p, log_p.new_zeros(log_p.shape[:-1]))
        log_order = order_log_probs(
            model.policy, score, revealed, model.policy_temperature, model.policy_block, tie_tolerance(model)
        )
        i = int(torch.multinomial(log_order.exp()[0], 1, generator=generator))
        ids[0, C + i] = torch.multinomial(log_p[0, i].exp(), 1, generator=generator)[0]
        revealed[0, i] = True
    head, whole = model.detokenize(context.tolist()), model.detokenize(ids[0].tolist())
    if C and whole.startswith(head):
        return whole[len(head) :]
    return (" " if C else "") + model.detokenize(ids[0, C:].tolist())
