"""The canonical estimator: the one segmentation the tokenizer produces, scored exactly as lm-eval's ``hf`` backend.

Reproduces lm-eval 0.4.13 ``HFLM``: ``tok_encode`` (the tokenizer's default special tokens, none when the text
starts with the prefix token's string), rolling windows with ``context_len = 1`` for ``loglikelihood_rolling``,
``_encode_pair`` (trailing whitespace of the context moves to the continuation; the continuation is the tail of
tokens(context ⊕ continuation) after len(tokens(context)) tokens) and left truncation to L + 1 tokens for
``loglikelihood``; log-softmax in the logits' dtype, each window's log-probabilities summed in that dtype as hf does.
"""

from __future__ import annotations

import torch

# logits per forward pass (512 MiB in float32)
LOGIT_BUDGET = 2**27


def windows(num_tokens: int, max_length: int) -> list[tuple[int, int, int]]:
    """lm-eval's disjoint rolling windows (context_len = 1) over ids = prefix ⊕ z, z with n tokens.

    Returns (s, e, lo): targets z_s..z_{e−1} (= ids[s+1 : e+1]) are scored from the input ids[lo : e], lo =
    max(0, e − L). Blocks are [0, L), [L, 2L), ...; a full block's first target sees only the token before it,
    the last block is read with up to L tokens of left context.
    """
    return [(s, min(num_tokens, s + max_length), max(0, min(num_tokens, s + max_length) - max_length))
            for s in range(0, num_tokens, max_length)]  # fmt: skip


def hf_encode(tokenizer, text: str, prefix_token: int) -> list[int]:
    """lm-eval's ``HFLM.tok_encode(text)`` with add_bos_token unset: tokenizer defaults, unless text starts with BOS."""
    kwargs = {"add_special_tokens": False} if text.startswith(tokenizer.decode(prefix_token)) else {}
    return tokenizer.encode(text, **kwargs)


def rolling_pieces(
    tokens: list[int], prefix_token: int, max_length: int
) -> list[tuple[list[int], list[int]]]:
    """(input ids, scored targets) of hf's disjoint rolling windows over ``tokens`` (see ``model.windows``)."""
    ids = [prefix_token, *tokens]
    return [(ids[lo:e], ids[s + 1 : e + 1]) for s, e, lo in windows(len(tokens), max_length)]


def pair_piece(tokenizer, context: str, continuation: str, prefix_token: int, max_length: int):
    """(input ids, continuation targets) of one hf ``loglikelihood`` request (its _encode_pair and truncation)."""
    if context == "":
        cont = tokenizer.encode(continuation, add_special_tokens=False)
        ctx, cont = ([prefix_token], cont) if prefix_token != cont[0] else (cont[:1], cont[1:])
    else:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = hf_encode(tokenizer, context + continuation, prefix_token)
        ctx = hf_encode(tokenizer, context, prefix_token)
        cont = whole[len(ctx) :]
    if not cont:
        raise ValueError(f"continuation {continuation!r} of context {context[-40:]!r} has no tokens")
    inp = (ctx + cont)[-(max_length + 1) :][:-1]
    return inp, cont


@torch.no_grad()
def score_pieces(model, pieces: list[tuple[list[int], list[int]]], device) -> list[tuple[float, bool]]:
    """(Σ log p(targets | input), greedy) per piece; pieces of equal input length share a forward pass (no padding)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    out: list[tuple[float, bool] | None] = [None] * len(pieces)
    by_length: dict[int, list[int]] = {}
    for i, (inp, _) in enumerate(pieces):
        by_length.setdefault(len(inp), []).append(i)
    for width, members in by_length.items():
        rows = max(1, LOGIT_BUDGET // (vocab * width))
        for b in range(0, len(members), rows):
            group = members[b : b + rows]
            inputs = torch.tensor([pieces[i][0] for i in group], device=device)
            logp = torch.log_softmax(model(inputs).logits, dim=-1)
            for row, i in enumerate(group):
                targets = torch.tensor(pieces[i][1], device=device)
                scored = logp[row, -len(targets) :]
                greedy = bool((scored.argmax(-1) == targets).all())
                out[i] = (float(scored.gather(-1, targets[:, None])[:, 0].sum()), greedy)
    return out


def loglikelihood_rolling(lm, texts: list[str]) -> list[float]:
    """hf's loglikelihood_rolling: Σ over rolling windows of tokens(text), prefix token first (0.0 without tokens)."""
    pieces, owner = [], []
    for n, text in enumerate(texts):
        for piece in rolling_pieces(
            hf_encode(lm.tokenizer, text, lm.prefix_token), lm.prefix_token, lm.max_length
        ):
            pieces.append(piece)
            owner.append(n)
    totals = [0.0] * len(texts)
    for n, (value, _) in zip(owner, score_pieces(lm.model, pieces, lm.device)):
        totals[n] += value
    return totals


def loglikelihood(lm, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
    """hf's loglikelihood: (log p(continuation tokens | context tokens), greedy) per (context, continuation)."""
    pieces = [pair_piece(lm.tokenizer, c, k, lm.prefix_token, lm.max_length) for c, k in pairs]
    return score_pieces(lm.model, pieces, lm.device)
